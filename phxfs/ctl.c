/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - phxfs's control socket: status, sharing a file's memory with
 * another process, and copying a file in or out through the transfer
 * engine.
 * One line per request, see phxfs_client.h; each connection has a thread.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "phxfs.h"
#include "phxfs_client.h"

/* Bytes per engine call of CP and CPOUT: the progress granularity. */
#define CP_STEP (256ULL << 20)

/* Most bytes of one STATUS reply: the rows past it are counted, not sent. */
#define STATUS_MAX (16U << 20)

static void send_line(struct phxfs_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Format one line into @line (PHXFS_LINE_MAX): control bytes made '?'. */
static int format_line(char *line, const char *fmt, va_list ap)
{
	int n, i;

	n = vsnprintf(line, PHXFS_LINE_MAX - 1, fmt, ap);
	if (n < 0)
		return 0;
	if (n > PHXFS_LINE_MAX - 2)
		n = PHXFS_LINE_MAX - 2;
	/*
	 * Names come escaped; this keeps free text (an error message that
	 * quotes a path) to one line too.
	 */
	for (i = 0; i < n; i++)
		if ((unsigned char)line[i] < ' ' || line[i] == 0x7f)
			line[i] = '?';
	line[n++] = '\n';
	return n;
}

static void send_line(struct phxfs_conn *c, const char *fmt, ...)
{
	char line[PHXFS_LINE_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = format_line(line, fmt, ap);
	va_end(ap);
	phxfs_conn_send(c, line, (size_t)n);
}

/* @s escaped for a line (phxfs_escape()), in @out. */
static const char *esc(const char *s, char *out, size_t len)
{
	phxfs_escape(s, strlen(s), out, len);
	return out;
}

static void send_err(struct phxfs_conn *c, int err, const char *what)
{
	send_line(c, "ERR %d %s: %s", err, what, strerror(err));
}

/*
 * Take an open reference on regular file @ino for @c's caller, who must
 * have reached it (phxfs_conn_reached() with descriptor @path_fd) and may
 * access it as @mask asks (4 read, 2 write, 0 owner only): the inode, or
 * NULL after an error line naming @what.
 */
static struct phxfs_inode *file_get(struct phxfs_conn *c,
				    unsigned long long ino, int path_fd,
				    int mask, const char *what)
{
	struct phxfs *fs = c->fs;
	struct phxfs_inode *inode;
	char msg[128];
	int err = 0;

	if (phxfs_conn_reached(c, ino, path_fd)) {
		snprintf(
			msg, sizeof(msg),
			"%s: send a descriptor of the file with the request (libphxfsctl does)",
			what);
		send_err(c, EACCES, msg);
		return NULL;
	}
	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, (fuse_ino_t)ino);
	if (!inode || !S_ISREG(inode->mode))
		err = ENOENT;
	else if (mask ? !phxfs_conn_may(c, inode, mask) :
			c->cred.uid && c->cred.uid != inode->uid)
		err = EACCES;
	else
		inode->nopen++;
	pthread_mutex_unlock(&fs->lock);
	if (!err)
		return inode;
	snprintf(msg, sizeof(msg), "%s%s", what,
		 err == ENOENT ? ": no such file in phxfs" :
		 !mask	       ? ": only the owner may map a file" :
				 "");
	send_err(c, err, msg);
	return NULL;
}

static void file_put(struct phxfs *fs, struct phxfs_inode *inode)
{
	pthread_mutex_lock(&fs->lock);
	phxfs_inode_unref(fs, inode, 0, 1);
	pthread_mutex_unlock(&fs->lock);
}

static void do_open(struct phxfs_conn *c, unsigned long long ino)
{
	struct phxfs_inode *inode = file_get(c, ino, c->fds[0], 0, "OPEN");
	int ret;

	if (!inode)
		return;
	if (phxfs_dev_ranged(inode->dev)) {
		send_err(
			c, EOPNOTSUPP,
			"OPEN: the file is a phx.ko range; mmap it through the mount instead");
		goto out;
	}
	pthread_rwlock_wrlock(&inode->io_lock);
	ret = phxfs_data_ensure(inode);
	if (ret) {
		pthread_rwlock_unlock(&inode->io_lock);
		send_line(c, "ERR %d OPEN: %s", -ret, phx_strerror_last());
		goto out;
	}
	/* the client writes the memory unseen: no read-ahead can be trusted */
	atomic_store(&inode->shared, true);
	send_line(c, "OK %s %llu", inode->dev->name,
		  (unsigned long long)atomic_load(&inode->size));
	/* the socket's send time-out bounds this one (ctlsock.c) */
	ret = c->dead ? -EPIPE : phx_buf_send(inode->buf, c->fd);
	pthread_rwlock_unlock(&inode->io_lock);
	if (ret)
		fprintf(stderr, "phxfs: sharing inode %llu: %s\n", ino,
			phx_strerror_last());
out:
	file_put(c->fs, inode);
}

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
	send_line(c, "PROGRESS %llu %llu", (unsigned long long)*done,
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

/* Steps of a copy in flight at once, so the engine never runs dry. */
#define CP_WINDOW 3

/*
 * Pull @src into @inode, which the client has just cut to at most @total
 * bytes.  The steps go through one batch, CP_WINDOW at a time: the engine
 * fills its slots from the next step while the last ones of a step are
 * still copied, as one phx_read() of the whole file would; progress is
 * reported as the steps complete, and *@done only counts the bytes of the
 * leading steps that did.
 */
static int cp_pull(struct phxfs_conn *c, struct phxfs_inode *inode, int src,
		   uint64_t total, uint64_t *done, enum phx_path *path)
{
	struct phx_io ios[CP_WINDOW];
	bool complete[CP_WINDOW] = { false };
	unsigned int first = 0, inflight = 0;
	uint64_t next = 0;
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
	if (ret)
		return ret;
	ret = phx_batch_create(inode->dev->dev, 0, 0, &b);
	if (ret)
		return ret;
	/* Shared: readers of the file need not wait for the whole copy. */
	pthread_rwlock_rdlock(&inode->io_lock);
	while (!ret && *done < total) {
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
				.len = total - next < CP_STEP ? total - next :
								CP_STEP,
			};
			complete[i] = false;
			ret = phx_batch_submit(b, &ios[i], 1);
			if (ret < 0)
				break;
			ret = 0;
			next += ios[i].len;
			inflight++;
		}
		if (!inflight)
			break;
		struct phx_io *io;
		int n = phx_batch_wait(b, 1, &io, 1, -1);

		if (n < 0) {
			ret = n;
			break;
		}
		complete[io - ios] = true;
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
			send_line(c, "PROGRESS %llu %llu",
				  (unsigned long long)*done,
				  (unsigned long long)total);
			if (c->dead)
				ret = -EPIPE;
		}
	}
	/* what is still in flight lands before the lock goes */
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
static int cp_room(struct phxfs_conn *c, struct phxfs_inode *inode,
		   uint64_t total)
{
	int ret;

	pthread_rwlock_rdlock(&inode->io_lock);
	ret = phxfs_room_for(inode, c->cred.uid, 0, total);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

static const char reserve_msg[] =
	"CP: the rest of the device is kept for root (root_reserve)";

static void do_cp(struct phxfs_conn *c, unsigned long long ino, int src)
{
	struct phxfs_inode *inode = file_get(c, ino, c->fds[1], 2, "CP");
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	char msg[512];
	int64_t total;
	int ret;

	if (!inode)
		return;
	if (c->fs->opts.writeback) {
		/* The kernel keeps the size of cached files itself there. */
		send_err(
			c, EOPNOTSUPP,
			"CP: phxfs runs with -o writeback; remount without it, or use cp");
		goto out;
	}
	if (on_this_mount(c, src)) {
		send_err(c, EXDEV, "CP: the source is on this phxfs; use cp");
		goto out;
	}
	total = fd_size(src);
	if (total < 0) {
		send_err(c, (int)-total, "CP: the source has no size");
		goto out;
	}
	ret = cp_room(c, inode, (uint64_t)total);
	if (ret) {
		send_err(c, -ret, reserve_msg);
		goto out;
	}
	if (phxfs_dev_ranged(inode->dev))
		ret = cp_pull_range(c, inode, src, (uint64_t)total, &done,
				    &path);
	else
		ret = cp_pull(c, inode, src, (uint64_t)total, &done, &path);
	/* the copy ran with the io_lock shared, beside readers */
	phxfs_data_changed(inode);
	if (!ret && phxfs_in_reserve(inode, c->cred.uid)) {
		/* it grew in chunks past what was left to users */
		ret = -ENOSPC;
		done = 0;
		snprintf(msg, sizeof(msg), "%s", reserve_msg);
	} else if (ret) {
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
	if (ret)
		send_line(c, "ERR %d %s", -ret, *msg ? msg : strerror(-ret));
	else
		send_line(c, "OK %llu %s", (unsigned long long)done,
			  phx_path_name(path));
out:
	file_put(c->fs, inode);
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
	send_line(c, "PROGRESS 0 %llu", (unsigned long long)total);
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

static void do_cp_out(struct phxfs_conn *c, unsigned long long ino, int dst)
{
	struct phxfs_inode *inode = file_get(c, ino, c->fds[1], 4, "CPOUT");
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	int ret;

	if (!inode)
		return;
	if (c->fs->opts.writeback) {
		/* The kernel may hold bytes the daemon has not seen. */
		send_err(
			c, EOPNOTSUPP,
			"CPOUT: phxfs runs with -o writeback; remount without it, or use cp");
		goto out;
	}
	if (on_this_mount(c, dst)) {
		send_err(c, EXDEV,
			 "CPOUT: the destination is on this phxfs; use cp");
		goto out;
	}
	ret = cp_push(c, inode, dst, &done, &path);
	if (ret) {
		const char *msg = phx_strerror_last();

		send_line(c, "ERR %d %s", -ret, *msg ? msg : strerror(-ret));
	} else {
		send_line(c, "OK %llu %s", (unsigned long long)done,
			  phx_path_name(path));
	}
out:
	file_put(c->fs, inode);
}

/* A reply built whole under the locks and sent after (STATUS). */
struct reply {
	char *p;
	size_t len, cap;
	unsigned int unlisted; /* FILE rows past STATUS_MAX */
	bool nomem;
};

static bool reply_add(struct reply *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Add one line; false (nothing added) past STATUS_MAX or out of memory. */
static bool reply_add(struct reply *r, const char *fmt, ...)
{
	char line[PHXFS_LINE_MAX];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	n = (size_t)format_line(line, fmt, ap);
	va_end(ap);
	if (r->len + n > STATUS_MAX)
		return false;
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64 << 10;
		char *p;

		while (cap < r->len + n)
			cap *= 2;
		p = realloc(r->p, cap);
		if (!p) {
			r->nomem = true;
			return false;
		}
		r->p = p;
		r->cap = cap;
	}
	memcpy(r->p + r->len, line, n);
	r->len += n;
	return true;
}

static void add_dev(struct reply *r, struct phxfs_dev *d)
{
	struct phx_device_info info;
	struct phx_stats st;
	uint64_t moved = 0, best = 0;
	enum phx_path path = PHX_PATH_NONE;
	unsigned int p;

	if (phx_device_info(d->dev, &info))
		return;
	phx_stats_get(d->dev, &st);
	for (p = 1; p < 5; p++) {
		moved += st.bytes[p];
		if (st.bytes[p] > best) {
			best = st.bytes[p];
			path = (enum phx_path)p;
		}
	}
	char model[4 * sizeof(info.model)];

	reply_add(r, "DEV %s %s %llu %llu %u %s %llu %llu %llu %llu %s",
		  d->name, phx_kind_name(d->kind),
		  (unsigned long long)info.capacity,
		  (unsigned long long)info.used, atomic_load(&d->files),
		  phx_path_name(path), (unsigned long long)moved,
		  (unsigned long long)atomic_load(&d->fuse_in),
		  (unsigned long long)atomic_load(&d->fuse_out),
		  (unsigned long long)d->reserve,
		  esc(info.model, model, sizeof(model)));
}

/* A FILE row; a path too long for a line is cut to ".../NAME". */
static void add_file(struct reply *r, struct phxfs_inode *inode,
		     const char *path, bool cut, const char *name)
{
	char tail[4 * PHXFS_NAME_MAX + 8] = ".../";

	if (cut)
		phxfs_escape(name, strlen(name), tail + 4, sizeof(tail) - 4);
	if (!reply_add(r, "FILE %s %llu %llu %s %s", inode->dev->name,
		       (unsigned long long)phxfs_data_size(inode),
		       (unsigned long long)phxfs_data_held(inode),
		       phxfs_path_name(atomic_load(&inode->path)),
		       cut ? tail : path))
		r->unlisted++;
}

/*
 * FILE rows for every regular file @c's caller could stat: those in the
 * directories it may search, from the root down.  Walked without
 * recursion (directories nest as deep as users make them); fs->lock held.
 */
static int add_files(struct phxfs_conn *c, struct reply *r)
{
	/* per level: the entry being walked and the path's length before it */
	struct level {
		struct phxfs_dentry *d;
		size_t len;
		bool cut;
	} *stack = NULL;
	size_t depth = 0, cap = 0, room = PHXFS_LINE_MAX - 256;
	struct phxfs_dentry *d;
	char *path = malloc(room + 1);
	bool cut = false;
	size_t len = 0;

	if (!path)
		return -ENOMEM;
	path[0] = '\0';
	d = phxfs_conn_may(c, c->fs->root, 1) ? c->fs->root->children : NULL;
	for (;;) {
		if (!d) {
			if (!depth)
				break;
			depth--;
			d = stack[depth].d->sib_next;
			len = stack[depth].len;
			cut = stack[depth].cut;
			path[len] = '\0';
			continue;
		}
		struct phxfs_inode *inode = d->inode;
		size_t n = phxfs_escape(d->name, strlen(d->name),
					path + len + 1, room - len - 1);
		bool fits = !cut && len + 1 + n < room;

		if (fits)
			path[len] = '/';
		else
			path[len] = '\0';
		if (S_ISREG(inode->mode))
			add_file(r, inode, path, !fits, d->name);
		if (!S_ISDIR(inode->mode) || !inode->children ||
		    !phxfs_conn_may(c, inode, 1)) {
			path[len] = '\0';
			d = d->sib_next;
			continue;
		}
		if (depth == cap) {
			struct level *s;

			cap = cap ? 2 * cap : 64;
			s = realloc(stack, cap * sizeof(*s));
			if (!s) {
				free(stack);
				free(path);
				return -ENOMEM;
			}
			stack = s;
		}
		stack[depth++] = (struct level){ d, len, cut };
		if (fits)
			len += 1 + n;
		cut = !fits;
		d = inode->children;
	}
	free(stack);
	free(path);
	return 0;
}

/* "@what on", or "@what off <reason>" (escaped). */
static void add_switch(struct reply *r, const char *what, bool on,
		       const char *why)
{
	char buf[4 * PHXFS_WHY_MAX]; /* escaped: up to 4 bytes each */

	if (on)
		reply_add(r, "%s on", what);
	else
		reply_add(r, "%s off %s", what, esc(why, buf, sizeof(buf)));
}

static void do_status(struct phxfs_conn *c)
{
	struct phxfs *fs = c->fs;
	struct reply r = { 0 };
	char mp[PHXFS_LINE_MAX - 8];
	unsigned int i;
	int ret;

	for (i = 0; i < fs->ndevs; i++)
		add_dev(&r, &fs->devs[i]);
	for (i = 0; i < fs->ndevs; i++)
		reply_add(&r, "REQS %s %llu %llu", fs->devs[i].name,
			  (unsigned long long)atomic_load(
				  &fs->devs[i].fuse_writes),
			  (unsigned long long)atomic_load(
				  &fs->devs[i].fuse_reads));
	for (i = 0; i < fs->ndevs; i++)
		reply_add(&r, "ROOTRESERVE %s %llu", fs->devs[i].name,
			  (unsigned long long)fs->devs[i].root_reserve);
	add_switch(&r, "PASSTHROUGH", fs->passthrough, fs->passthrough_why);
	add_switch(&r, "URING", fs->uring, fs->uring_why);
	pthread_mutex_lock(&fs->lock);
	reply_add(&r, "XATTR %llu %llu %llu",
		  (unsigned long long)fs->xattr_bytes,
		  (unsigned long long)fs->xattr_size,
		  (unsigned long long)fs->xattr_file);
	reply_add(&r, "INODES %llu %llu %llu", (unsigned long long)fs->ninodes,
		  (unsigned long long)fs->nentries,
		  (unsigned long long)fs->nr_inodes);
	ret = add_files(c, &r);
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_lock(&fs->ctl_lock);
	reply_add(&r, "CTL %u %u %u", fs->ctl_nconns, fs->opts.ctl_conns,
		  fs->opts.ctl_conns_uid);
	pthread_mutex_unlock(&fs->ctl_lock);
	if (r.unlisted)
		reply_add(&r, "UNLISTED %u", r.unlisted);
	reply_add(&r, "MOUNT %s", esc(fs->mountpoint, mp, sizeof(mp)));
	/* sent without any lock held: a client that does not read holds
	 * up nobody but itself, for ctl_timeout at most */
	if (ret || r.nomem)
		send_err(c, ENOMEM, "STATUS: the daemon is out of memory");
	else if (!phxfs_conn_send(c, r.p, r.len))
		send_line(c, "END");
	free(r.p);
}

void phxfs_ctl_serve(struct phxfs_conn *c, const char *line)
{
	unsigned long long ino;

	if (!strcmp(line, "STATUS"))
		do_status(c);
	else if (sscanf(line, "OPEN %llu", &ino) == 1)
		do_open(c, ino);
	else if (sscanf(line, "CP %llu", &ino) == 1 && c->fds[0] >= 0)
		do_cp(c, ino, c->fds[0]);
	else if (sscanf(line, "CPOUT %llu", &ino) == 1 && c->fds[0] >= 0)
		do_cp_out(c, ino, c->fds[0]);
	else
		send_err(c, EINVAL, "unknown request");
}
