/* SPDX-License-Identifier: MIT */
/*
 * ctl_cp.c - the control socket's copies: CP fills a phxfs file from a
 * descriptor the client sent, CPOUT writes one out to it, both through
 * the transfer engine in steps that report progress.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "phxfs.h"

/* Bytes per engine call of CPOUT and of CP into a range file. */
#define CP_STEP (256ULL << 20)

/* Size of what @fd holds (a regular file or a block device). */
static int64_t fd_size(int fd)
{
	struct stat st;
	off_t end;

	if (fstat(fd, &st))
		return -errno;
	if (S_ISREG(st.st_mode))
		return st.st_size;
	if (!S_ISBLK(st.st_mode))
		return -EINVAL;
	end = lseek(fd, 0, SEEK_END);
	return end < 0 ? -errno : end;
}

/*
 * Run one step of a copy and report progress; 0 or -errno (-EIO at EOF).
 * A range file's step names its backing file (io->buf NULL, io->buf_off
 * the offset in it), any other one its buffer.
 */
static int cp_step(struct phxfs_conn *c, struct phxfs_inode *inode,
		   struct phx_io *io, uint64_t total, uint64_t *done,
		   enum phx_path *path)
{
	int64_t n = phxfs_ranged(inode) ? phx_backing_io(inode->backing, io) :
					  phx_io_run(inode->dev->dev, io);

	if (n <= 0)
		return io->result ? (int)io->result : -EIO;
	*done += (uint64_t)io->result;
	*path = io->path;
	phxfs_conn_line(c, "PROGRESS %llu %llu", (unsigned long long)*done,
			(unsigned long long)total);
	return c->dead ? -EPIPE : 0; /* a client that stopped reading */
}

/*
 * Pull @src into a range file: the engine reads into its backing file
 * (io_uring O_DIRECT into its device pages, p2p, where it can; else
 * staged).
 */
static int cp_pull_range(struct phxfs_conn *c, struct phxfs_inode *inode,
			 int src, uint64_t total, uint64_t *done,
			 enum phx_path *path)
{
	int ret;

	pthread_rwlock_wrlock(&inode->io_lock);
	ret = phxfs_range_set_size(inode, total);
	/* Shared from here: readers of the file need not wait. */
	pthread_rwlock_unlock(&inode->io_lock);
	pthread_rwlock_rdlock(&inode->io_lock);
	while (!ret && *done < total) {
		struct phx_io io = {
			.op = PHX_OP_READ,
			.fd = src,
			.file_off = (int64_t)*done,
			.buf_off = *done,
			.len = total - *done < CP_STEP ? total - *done :
							 CP_STEP,
		};

		if (!phxfs_ranged(inode)) {
			ret = -ESTALE; /* its memory went away under us */
			break;
		}
		ret = cp_step(c, inode, &io, total, done, path);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

/*
 * CP's steps, and how many are in flight at once (2 GiB), so the engine
 * never runs dry.  They are queued together: a read the page cache
 * serves runs them in one go on the engine's reader threads, as one
 * phx_read() of the window would, where steps started one at a time
 * would each start and drain those threads.
 */
#define CP_PULL_STEP (32ULL << 20)
#define CP_WINDOW 64
/* Bytes of the file's memory backed at a time (whole steps). */
#define CP_BACK_PIECE (64ULL << 20)

/*
 * A new file's device memory, backed on a thread of its own while the
 * engine fills what is backed already: the allocation runs beside the
 * transfers instead of before them.  @backed only grows; the copy queues
 * steps up to it.
 */
struct cp_backer {
	struct phx_buf *buf;
	uint64_t total;
	pthread_mutex_t lock; /* protects @backed, @err, @msg; @more */
	pthread_cond_t more; /* @backed grew, or @err is set */
	uint64_t backed;
	int err; /* why backing stopped, negative errno */
	char msg[256]; /* and the library's message, from the thread */
	atomic_bool stop; /* the copy ended: back no more */
	pthread_t thread;
	bool started;
};

static void *cp_backer_main(void *arg)
{
	struct cp_backer *bk = arg;
	uint64_t off = bk->backed;

	while (off < bk->total && !atomic_load(&bk->stop)) {
		uint64_t n = bk->total - off < CP_BACK_PIECE ? bk->total - off :
							       CP_BACK_PIECE;
		int ret = phx_buf_commit(bk->buf, off, n);

		pthread_mutex_lock(&bk->lock);
		if (ret) {
			bk->err = ret;
			snprintf(bk->msg, sizeof(bk->msg), "%s",
				 phx_strerror_last());
		} else {
			bk->backed = off += n;
		}
		pthread_cond_signal(&bk->more);
		pthread_mutex_unlock(&bk->lock);
		if (ret)
			break;
	}
	return NULL;
}

/*
 * Back the first piece of @buf's @total bytes here, the rest on the
 * backer's thread; a file backed already needs no thread.  0 (stop it
 * with cp_backer_stop()) or -errno.
 */
static int cp_backer_start(struct cp_backer *bk, struct phx_buf *buf,
			   uint64_t total)
{
	uint64_t first = total < CP_BACK_PIECE ? total : CP_BACK_PIECE;
	int ret;

	*bk = (struct cp_backer){ .buf = buf, .total = total };
	pthread_mutex_init(&bk->lock, NULL);
	pthread_cond_init(&bk->more, NULL);
	atomic_init(&bk->stop, false);
	if (phx_buf_committed(buf) >= total) {
		bk->backed = total;
		return 0;
	}
	ret = phx_buf_commit(buf, 0, first);
	if (ret) {
		pthread_cond_destroy(&bk->more);
		pthread_mutex_destroy(&bk->lock);
		return ret;
	}
	bk->backed = first;
	if (first < total) {
		/* without a thread the copy backs what it queues itself */
		bk->started =
			!pthread_create(&bk->thread, NULL, cp_backer_main, bk);
		if (!bk->started)
			bk->backed = total;
	}
	return 0;
}

/*
 * How far @buf is backed; with @wait_past, wait until past it (or the
 * backing failed).  0 or the backer's error, its message in @msg.
 */
static int cp_backed(struct cp_backer *bk, uint64_t wait_past, uint64_t *backed,
		     char *msg, size_t msglen)
{
	int err;

	pthread_mutex_lock(&bk->lock);
	while (wait_past != UINT64_MAX && bk->backed <= wait_past && !bk->err)
		pthread_cond_wait(&bk->more, &bk->lock);
	*backed = bk->backed;
	err = bk->err;
	if (err)
		snprintf(msg, msglen, "%s", bk->msg);
	pthread_mutex_unlock(&bk->lock);
	return err;
}

static void cp_backer_stop(struct cp_backer *bk)
{
	atomic_store(&bk->stop, true);
	if (bk->started)
		pthread_join(bk->thread, NULL);
	pthread_cond_destroy(&bk->more);
	pthread_mutex_destroy(&bk->lock);
}

/*
 * Pull @src into @inode, which the client has just cut to at most @total
 * bytes.  The steps go through one batch, up to CP_WINDOW at a time, and
 * every step the window has room for is queued before the engine runs
 * again, so that it works on all of them at once (for a cached file, as
 * one phx_read() of the whole window).  Progress is reported as the
 * steps complete, and *@done only counts the bytes of the leading steps
 * that did.  A step is queued once the file's memory under it is backed
 * (struct cp_backer), so the engine starts on a new file's first piece
 * while the rest is allocated.  @msg: why the backing failed, if it did.
 */
static int cp_pull(struct phxfs_conn *c, struct phxfs_inode *inode, int src,
		   uint64_t total, uint64_t *done, enum phx_path *path,
		   char *msg, size_t msglen)
{
	struct phx_io ios[CP_WINDOW], *ended[CP_WINDOW];
	bool complete[CP_WINDOW] = { false };
	unsigned int first = 0, inflight = 0;
	uint64_t next = 0, backed = 0;
	struct cp_backer bk;
	struct phx_batch *b;
	int ret;

	pthread_rwlock_wrlock(&inode->io_lock);
	/*
	 * The client left what the file had, up to @total: every byte of it
	 * is overwritten below.  A phx.ko range is emptied first all the
	 * same when it must grow, so that growing moves nothing.
	 */
	ret = 0;
	if (phxfs_dev_ranged(inode->dev) && phxfs_data_size(inode) < total)
		ret = phxfs_data_resize(inode, 0);
	if (!ret)
		ret = phxfs_data_resize(inode, total);
	pthread_rwlock_unlock(&inode->io_lock);
	if (ret || !total)
		return ret; /* an empty source: an empty file, no memory */
	ret = phx_batch_create(inode->dev->dev, 0, 0, &b);
	if (ret)
		return ret;
	/* Shared: readers of the file need not wait for the whole copy. */
	pthread_rwlock_rdlock(&inode->io_lock);
	if (!inode->buf || atomic_load(&inode->size) < total) {
		pthread_rwlock_unlock(&inode->io_lock);
		phx_batch_destroy(b);
		return -ESTALE; /* truncated before we got here */
	}
	ret = cp_backer_start(&bk, inode->buf, total);
	if (ret) {
		pthread_rwlock_unlock(&inode->io_lock);
		phx_batch_destroy(b);
		return ret;
	}
	while (!ret && *done < total) {
		/*
		 * Nothing to run: wait for memory to put the next step in.
		 * Should backing fail, what was backed is still copied and
		 * counts before the copy stops.
		 */
		int berr = cp_backed(&bk, inflight ? UINT64_MAX : next, &backed,
				     msg, msglen);

		while (inflight < CP_WINDOW && next < total) {
			unsigned int i = (first + inflight) % CP_WINDOW;

			if (!inode->buf || atomic_load(&inode->size) < total) {
				ret = -ESTALE; /* truncated under us */
				break;
			}
			ios[i] = (struct phx_io){
				.op = PHX_OP_READ,
				.fd = src,
				.file_off = (int64_t)next,
				.buf = inode->buf,
				.buf_off = next,
				.len = total - next < CP_PULL_STEP ?
					       total - next :
					       CP_PULL_STEP,
			};
			if (next + ios[i].len > backed)
				break;
			complete[i] = false;
			/* started with the others by the wait below */
			ret = phx_batch_queue(b, &ios[i], 1);
			if (ret < 0)
				break;
			ret = 0;
			next += ios[i].len;
			inflight++;
		}
		if (ret)
			break;
		if (!inflight) {
			ret = berr; /* 0: memory for the next step came */
			continue;
		}
		int n = phx_batch_wait(b, 1, ended, CP_WINDOW, -1);

		if (n < 0) {
			ret = n;
			break;
		}
		for (int k = 0; k < n; k++)
			complete[ended[k] - ios] = true;
		/* the leading steps that completed count, in order */
		while (inflight && complete[first] && !ret) {
			struct phx_io *f = &ios[first];

			if (f->result != (int64_t)f->len) {
				ret = f->result < 0 ? (int)f->result : -EIO;
				break;
			}
			*done += f->len;
			*path = f->path;
			complete[first] = false;
			first = (first + 1) % CP_WINDOW;
			inflight--;
			phxfs_conn_line(c, "PROGRESS %llu %llu",
					(unsigned long long)*done,
					(unsigned long long)total);
			if (c->dead)
				ret = -EPIPE;
		}
	}
	/* what is still in flight lands before the lock goes */
	cp_backer_stop(&bk);
	phx_batch_destroy(b);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

/* Is @fd a file of this mount?  A copy within it would wait on itself. */
static bool on_this_mount(struct phxfs_conn *c, int fd)
{
	struct stat st;

	return !fstat(fd, &st) && st.st_dev == phxfs_ctl_dev(c->fs);
}

/*
 * Bytes a copy of @total bytes into @inode would take beyond what the
 * file holds: -ENOSPC for a caller other than root when that dips into
 * the device's root reserve.
 */
/*
 * Is copy @what (CP, CPOUT) with the other end @fd (its @role) refused?
 * Not under -o writeback, and not within this mount: it would wait on
 * itself.  The error line is sent.
 */
static bool cp_refused(struct phxfs_conn *c, const char *what, int fd,
		       const char *role)
{
	char msg[128];

	if (c->fs->opts.writeback)
		snprintf(
			msg, sizeof(msg),
			"%s: phxfs runs with -o writeback; remount without it, or use cp",
			what);
	else if (on_this_mount(c, fd))
		snprintf(msg, sizeof(msg),
			 "%s: the %s is on this phxfs; use cp", what, role);
	else
		return false;
	phxfs_conn_err(c, c->fs->opts.writeback ? -EOPNOTSUPP : -EXDEV, msg);
	return true;
}

static int cp_room(struct phxfs_conn *c, struct phxfs_inode *inode,
		   uint64_t total)
{
	int ret;

	pthread_rwlock_rdlock(&inode->io_lock);
	ret = phxfs_room_for(inode, c->cred.uid, 0, total);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

static bool conn_in_group(const void *c, gid_t gid)
{
	return phxfs_conn_in_group(c, gid);
}

/*
 * The copy into @inode is accepted: from here on the file is written as
 * by a write of the caller's, which the client has not made (it leaves
 * an existing file alone until the daemon takes the copy): its times,
 * and the privileges a write takes (phxfs_kill_priv()).
 */
static void cp_writes(struct phxfs_conn *c, struct phxfs_inode *inode)
{
	pthread_mutex_lock(&c->fs->lock);
	phxfs_touch(&inode->mtime);
	inode->ctime = inode->mtime;
	phxfs_kill_priv_as(c->fs, inode, c->cred.uid, conn_in_group, c);
	pthread_mutex_unlock(&c->fs->lock);
}

static const char reserve_msg[] =
	"CP: the rest of the device is kept for root (root_reserve)";

/*
 * Answer a copy of @done bytes by @path that ended with @ret (@msg: why
 * it failed, or empty).  @inode and the descriptors the client sent go
 * first: a client that removes the file once `phx cp` returns finds its
 * memory given back at once, as its own descriptor leaves it.
 */
static void cp_answer(struct phxfs_conn *c, struct phxfs_inode *inode, int ret,
		      const char *msg, uint64_t done, enum phx_path path)
{
	phxfs_conn_file_put(c->fs, inode);
	phxfs_conn_fds_close(c);
	if (ret)
		phxfs_conn_line(c, "ERR %d %s", -ret,
				*msg ? msg : strerror(-ret));
	else
		phxfs_conn_line(c, "OK %llu %s", (unsigned long long)done,
				phx_path_name(path));
}

void phxfs_ctl_cp(struct phxfs_conn *c, unsigned long long ino, int src)
{
	struct phxfs_inode *inode =
		phxfs_conn_file_get(c, ino, c->fds[1], 2, "CP");
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	char msg[512] = "";
	int64_t total;
	int ret;

	if (!inode)
		return;
	/* with writeback the kernel keeps the size of cached files itself */
	if (cp_refused(c, "CP", src, "source"))
		goto out;
	total = fd_size(src);
	if (total < 0) {
		phxfs_conn_err(c, (int)total, "CP: the source has no size");
		goto out;
	}
	ret = cp_room(c, inode, (uint64_t)total);
	if (ret) {
		phxfs_conn_err(c, ret, reserve_msg);
		goto out;
	}
	cp_writes(c, inode);
	if (phxfs_dev_ranged(inode->dev))
		ret = cp_pull_range(c, inode, src, (uint64_t)total, &done,
				    &path);
	else
		ret = cp_pull(c, inode, src, (uint64_t)total, &done, &path, msg,
			      sizeof(msg));
	/* the copy ran with the io_lock shared, beside readers */
	phxfs_data_changed(inode);
	if (!ret && phxfs_in_reserve(inode, c->cred.uid)) {
		/* it grew in chunks past what was left to users */
		ret = -ENOSPC;
		done = 0;
		snprintf(msg, sizeof(msg), "%s", reserve_msg);
	} else if (ret && !*msg) {
		snprintf(msg, sizeof(msg), "%s", phx_strerror_last());
	}
	if (ret) {
		/* Keep what arrived; the rest was never there. */
		pthread_rwlock_wrlock(&inode->io_lock);
		phxfs_data_resize(inode, done);
		pthread_rwlock_unlock(&inode->io_lock);
	} else {
		atomic_store(&inode->path, path);
	}
	/*
	 * The kernel's cached size and pages go before the client hears the
	 * copy is over: the kernel handles the notification within the
	 * write that carries it, so a stat() once `phx cp` returns sees the
	 * new size.
	 */
	fuse_lowlevel_notify_inval_inode(c->fs->se, inode->ino, 0, 0);
	cp_answer(c, inode, ret, msg, done, path);
	return;
out:
	phxfs_conn_file_put(c->fs, inode);
}

/*
 * Where the next bytes to push from @inode lie: the data run at or after
 * *@done (holes are skipped and count as done) and its length, or 0 when
 * only hole is left.  A range file is all data.
 */
static uint64_t next_run(struct phxfs_inode *inode, uint64_t total,
			 uint64_t *done)
{
	uint64_t off, len;

	if (phxfs_ranged(inode))
		return total - *done;
	if (phx_buf_next_data(inode->buf, *done, &off, &len) || off >= total)
		return 0;
	*done = off;
	return len < total - off ? len : total - off;
}

/*
 * Push @inode's bytes into @dst through the engine (device -> file, as
 * phx_write() moves them); a range file's from its backing file.  Only
 * the data runs are written, in steps of up to CP_STEP: the holes stay
 * holes in @dst (a new file), which gets the size at the end.
 * Shared io_lock: readers go on, writers wait for the copy.
 */
static int cp_push(struct phxfs_conn *c, struct phxfs_inode *inode, int dst,
		   uint64_t *done, enum phx_path *path)
{
	bool ranged;
	uint64_t total;
	int ret = 0;

	pthread_rwlock_rdlock(&inode->io_lock);
	total = phxfs_data_size(inode);
	ranged = phxfs_ranged(inode);
	/*
	 * Sized first: O_DIRECT writes inside the file are taken in
	 * parallel, where each write past its end waits for the one before
	 * (ext4 extends a file one write at a time).  Only the data runs are
	 * written: the holes stay holes in the copy.
	 */
	if (ftruncate(dst, (off_t)total))
		ret = -errno;
	phxfs_conn_line(c, "PROGRESS 0 %llu", (unsigned long long)total);
	while (!ret && *done < total && (ranged || inode->buf)) {
		struct phx_io io = {
			.op = PHX_OP_WRITE,
			.fd = dst,
			.buf = ranged ? NULL : inode->buf,
		};
		uint64_t run = next_run(inode, total, done);

		if (!run)
			break;
		io.file_off = (int64_t)*done;
		io.buf_off = *done;
		io.len = run < CP_STEP ? run : CP_STEP;
		ret = cp_step(c, inode, &io, total, done, path);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	if (!ret)
		*done = total;
	return ret;
}

void phxfs_ctl_cp_out(struct phxfs_conn *c, unsigned long long ino, int dst)
{
	struct phxfs_inode *inode =
		phxfs_conn_file_get(c, ino, c->fds[1], 4, "CPOUT");
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	char msg[512];
	int ret;

	if (!inode)
		return;
	/* with writeback the kernel may hold bytes the daemon has not seen */
	if (cp_refused(c, "CPOUT", dst, "destination"))
		goto out;
	ret = cp_push(c, inode, dst, &done, &path);
	/*
	 * What went wrong is writing the client's file (the device's memory
	 * is only read): its errno says it, not the library's message,
	 * which names the daemon's descriptor of it.
	 */
	snprintf(msg, sizeof(msg), "%s", ret ? strerror(-ret) : "");
	cp_answer(c, inode, ret, msg, done, path);
	return;
out:
	phxfs_conn_file_put(c->fs, inode);
}
