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

static pthread_t accept_thread;

struct conn {
	struct phxfs *fs;
	int fd;
	struct ucred cred;
};

static void send_line(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void send_line(int fd, const char *fmt, ...)
{
	char line[PHXFS_LINE_MAX];
	va_list ap;
	int n, i;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	/*
	 * Names come escaped; this keeps free text (an error message that
	 * quotes a path) to one line too.
	 */
	for (i = 0; i < n; i++)
		if ((unsigned char)line[i] < ' ' || line[i] == 0x7f)
			line[i] = '?';
	line[n++] = '\n';
	if (send(fd, line, (size_t)n, MSG_NOSIGNAL) < 0)
		return;
}

/* @s escaped for a line (phxfs_escape()), in @out. */
static const char *esc(const char *s, char *out, size_t len)
{
	phxfs_escape(s, strlen(s), out, len);
	return out;
}

static void send_err(int fd, int err, const char *what)
{
	send_line(fd, "ERR %d %s: %s", err, what, strerror(err));
}

/* Take an open reference on regular file @ino, or NULL. */
static struct phxfs_inode *file_get(struct phxfs *fs, unsigned long long ino)
{
	struct phxfs_inode *inode;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, (fuse_ino_t)ino);
	if (inode && S_ISREG(inode->mode))
		inode->nopen++;
	else
		inode = NULL;
	pthread_mutex_unlock(&fs->lock);
	return inode;
}

static void file_put(struct phxfs *fs, struct phxfs_inode *inode)
{
	pthread_mutex_lock(&fs->lock);
	phxfs_inode_unref(fs, inode, 0, 1);
	pthread_mutex_unlock(&fs->lock);
}

/* May @cred write @inode?  Supplementary groups are not known here. */
static bool may_write(struct phxfs_inode *inode, const struct ucred *cred)
{
	if (!cred->uid)
		return true;
	if (cred->uid == inode->uid)
		return inode->mode & S_IWUSR;
	if (cred->gid == inode->gid)
		return inode->mode & S_IWGRP;
	return inode->mode & S_IWOTH;
}

static bool may_read(struct phxfs_inode *inode, const struct ucred *cred)
{
	if (!cred->uid)
		return true;
	if (cred->uid == inode->uid)
		return inode->mode & S_IRUSR;
	if (cred->gid == inode->gid)
		return inode->mode & S_IRGRP;
	return inode->mode & S_IROTH;
}

static void do_open(struct conn *c, unsigned long long ino)
{
	struct phxfs_inode *inode = file_get(c->fs, ino);
	int ret;

	if (!inode) {
		send_err(c->fd, ENOENT, "OPEN");
		return;
	}
	if (c->cred.uid && c->cred.uid != inode->uid) {
		send_err(c->fd, EACCES, "OPEN: only the owner may map a file");
		goto out;
	}
	if (phxfs_dev_ranged(inode->dev)) {
		send_err(
			c->fd, EOPNOTSUPP,
			"OPEN: the file is a phx.ko range; mmap it through the mount instead");
		goto out;
	}
	pthread_rwlock_wrlock(&inode->io_lock);
	ret = phxfs_data_ensure(inode);
	if (ret) {
		pthread_rwlock_unlock(&inode->io_lock);
		send_line(c->fd, "ERR %d OPEN: %s", -ret, phx_strerror_last());
		goto out;
	}
	/* the client writes the memory unseen: no read-ahead can be trusted */
	atomic_store(&inode->shared, true);
	send_line(c->fd, "OK %s %llu", inode->dev->name,
		  (unsigned long long)atomic_load(&inode->size));
	ret = phx_buf_send(inode->buf, c->fd);
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
static int cp_step(struct conn *c, struct phxfs_inode *inode, struct phx_io *io,
		   uint64_t total, uint64_t *done, enum phx_path *path)
{
	int64_t n = phxfs_ranged(inode) ? phx_backing_io(inode->backing, io) :
					  phx_io_run(inode->dev->dev, io);

	if (n <= 0)
		return io->result ? (int)io->result : -EIO;
	*done += (uint64_t)io->result;
	*path = io->path;
	send_line(c->fd, "PROGRESS %llu %llu", (unsigned long long)*done,
		  (unsigned long long)total);
	return 0;
}

/*
 * Pull @src into a range file: the engine reads into its backing file
 * (io_uring O_DIRECT into its device pages, p2p, where it can; else
 * staged).
 */
static int cp_pull_range(struct conn *c, struct phxfs_inode *inode, int src,
			 uint64_t total, uint64_t *done, enum phx_path *path)
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
static int cp_pull(struct conn *c, struct phxfs_inode *inode, int src,
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
			send_line(c->fd, "PROGRESS %llu %llu",
				  (unsigned long long)*done,
				  (unsigned long long)total);
		}
	}
	/* what is still in flight lands before the lock goes */
	phx_batch_destroy(b);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

static void do_cp(struct conn *c, unsigned long long ino, int src)
{
	struct phxfs_inode *inode = file_get(c->fs, ino);
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	char msg[512];
	int64_t total;
	int ret;

	if (!inode) {
		send_err(c->fd, ENOENT, "CP: no such file in phxfs");
		return;
	}
	if (c->fs->opts.writeback) {
		/* The kernel keeps the size of cached files itself there. */
		send_err(
			c->fd, EOPNOTSUPP,
			"CP: phxfs runs with -o writeback; remount without it, or use cp");
		goto out;
	}
	if (!may_write(inode, &c->cred)) {
		send_err(c->fd, EACCES, "CP");
		goto out;
	}
	total = fd_size(src);
	if (total < 0) {
		send_err(c->fd, (int)-total, "CP: the source has no size");
		goto out;
	}
	if (phxfs_dev_ranged(inode->dev))
		ret = cp_pull_range(c, inode, src, (uint64_t)total, &done,
				    &path);
	else
		ret = cp_pull(c, inode, src, (uint64_t)total, &done, &path);
	/* the copy ran with the io_lock shared, beside readers */
	phxfs_data_changed(inode);
	if (ret) {
		/* Keep what arrived; the rest was never there. */
		snprintf(msg, sizeof(msg), "%s", phx_strerror_last());
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
		send_line(c->fd, "ERR %d %s", -ret,
			  *msg ? msg : strerror(-ret));
	else
		send_line(c->fd, "OK %llu %s", (unsigned long long)done,
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
static int cp_push(struct conn *c, struct phxfs_inode *inode, int dst,
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
	send_line(c->fd, "PROGRESS 0 %llu", (unsigned long long)total);
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

static void do_cp_out(struct conn *c, unsigned long long ino, int dst)
{
	struct phxfs_inode *inode = file_get(c->fs, ino);
	enum phx_path path = PHX_PATH_NONE;
	uint64_t done = 0;
	int ret;

	if (!inode) {
		send_err(c->fd, ENOENT, "CPOUT: no such file in phxfs");
		return;
	}
	if (c->fs->opts.writeback) {
		/* The kernel may hold bytes the daemon has not seen. */
		send_err(
			c->fd, EOPNOTSUPP,
			"CPOUT: phxfs runs with -o writeback; remount without it, or use cp");
		goto out;
	}
	if (!may_read(inode, &c->cred)) {
		send_err(c->fd, EACCES, "CPOUT");
		goto out;
	}
	ret = cp_push(c, inode, dst, &done, &path);
	if (ret) {
		const char *msg = phx_strerror_last();

		send_line(c->fd, "ERR %d %s", -ret,
			  *msg ? msg : strerror(-ret));
	} else {
		send_line(c->fd, "OK %llu %s", (unsigned long long)done,
			  phx_path_name(path));
	}
out:
	file_put(c->fs, inode);
}

static void send_dev(struct conn *c, struct phxfs_dev *d)
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

	send_line(c->fd, "DEV %s %s %llu %llu %u %s %llu %llu %llu %llu %s",
		  d->name, phx_kind_name(d->kind),
		  (unsigned long long)info.capacity,
		  (unsigned long long)info.used, atomic_load(&d->files),
		  phx_path_name(path), (unsigned long long)moved,
		  (unsigned long long)atomic_load(&d->fuse_in),
		  (unsigned long long)atomic_load(&d->fuse_out),
		  (unsigned long long)d->reserve,
		  esc(info.model, model, sizeof(model)));
}

/*
 * "FILE" lines for every regular file below @dir, whose escaped path is
 * @path; fs->lock held.  Paths longer than a line holds are left out.
 */
static void send_files(struct conn *c, struct phxfs_inode *dir, char *path,
		       size_t len)
{
	struct phxfs_dentry *d;
	size_t n = strlen(path);

	for (d = dir->children; d; d = d->sib_next) {
		struct phxfs_inode *inode = d->inode;

		path[n] = '/';
		if (phxfs_escape(d->name, strlen(d->name), path + n + 1,
				 len - n - 1) >= len - n - 1) {
			path[n] = '\0';
			continue;
		}
		if (S_ISDIR(inode->mode)) {
			send_files(c, inode, path, len);
		} else if (S_ISREG(inode->mode)) {
			send_line(c->fd, "FILE %s %llu %llu %s %s",
				  inode->dev->name,
				  (unsigned long long)phxfs_data_size(inode),
				  (unsigned long long)phxfs_data_held(inode),
				  phxfs_path_name(atomic_load(&inode->path)),
				  path);
		}
		path[n] = '\0';
	}
}

/* "@what on", or "@what off <reason>" (escaped). */
static void send_switch(int fd, const char *what, bool on, const char *why)
{
	char buf[4 * PHXFS_WHY_MAX]; /* escaped: up to 4 bytes each */

	if (on)
		send_line(fd, "%s on", what);
	else
		send_line(fd, "%s off %s", what, esc(why, buf, sizeof(buf)));
}

static void do_status(struct conn *c)
{
	char path[PHXFS_LINE_MAX - 128] = "";
	char mp[PHXFS_LINE_MAX - 8];
	unsigned int i;

	for (i = 0; i < c->fs->ndevs; i++)
		send_dev(c, &c->fs->devs[i]);
	for (i = 0; i < c->fs->ndevs; i++)
		send_line(c->fd, "REQS %s %llu %llu", c->fs->devs[i].name,
			  (unsigned long long)atomic_load(
				  &c->fs->devs[i].fuse_writes),
			  (unsigned long long)atomic_load(
				  &c->fs->devs[i].fuse_reads));
	send_switch(c->fd, "PASSTHROUGH", c->fs->passthrough,
		    c->fs->passthrough_why);
	send_switch(c->fd, "URING", c->fs->uring, c->fs->uring_why);
	pthread_mutex_lock(&c->fs->lock);
	send_files(c, c->fs->root, path, sizeof(path));
	pthread_mutex_unlock(&c->fs->lock);
	send_line(c->fd, "MOUNT %s", esc(c->fs->mountpoint, mp, sizeof(mp)));
	send_line(c->fd, "END");
}

/* Read the request line and at most one descriptor sent with it. */
static int recv_request(int fd, char *line, size_t len, int *passed)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	size_t n = 0;

	*passed = -1;
	while (n + 1 < len) {
		struct iovec iov = { line + n, 1 };
		struct msghdr msg = { .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = cbuf,
				      .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;
		ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		cm = CMSG_FIRSTHDR(&msg);
		if (cm && cm->cmsg_type == SCM_RIGHTS && *passed < 0)
			memcpy(passed, CMSG_DATA(cm), sizeof(int));
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	char line[512];
	unsigned long long ino;
	int passed;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phxfs-ctl");
	if (recv_request(c->fd, line, sizeof(line), &passed))
		goto out;
	if (!strcmp(line, "STATUS"))
		do_status(c);
	else if (sscanf(line, "OPEN %llu", &ino) == 1)
		do_open(c, ino);
	else if (sscanf(line, "CP %llu", &ino) == 1 && passed >= 0)
		do_cp(c, ino, passed);
	else if (sscanf(line, "CPOUT %llu", &ino) == 1 && passed >= 0)
		do_cp_out(c, ino, passed);
	else
		send_err(c->fd, EINVAL, "unknown request");
out:
	if (passed >= 0)
		close(passed);
	close(c->fd);
	free(c);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct phxfs *fs = arg;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phxfs-ctl");
	for (;;) {
		struct conn *c;
		socklen_t sl = sizeof(c->cred);
		pthread_t t;
		int fd = accept4(fs->sock_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break; /* shut down */
		}
		c = calloc(1, sizeof(*c));
		if (!c ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &sl)) {
			free(c);
			close(fd);
			continue;
		}
		c->fs = fs;
		c->fd = fd;
		if (pthread_create(&t, NULL, conn_main, c)) {
			free(c);
			close(fd);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

/* Where the socket goes: /run/phxfs for root, the runtime dir otherwise. */
static int sock_path(struct phxfs *fs)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char dir[64];
	int n;

	if (!geteuid())
		snprintf(dir, sizeof(dir), "/run/phxfs");
	else if (rt && *rt && strlen(rt) < 40)
		snprintf(dir, sizeof(dir), "%s/phxfs", rt);
	else
		snprintf(dir, sizeof(dir), "/tmp/phxfs-%u",
			 (unsigned int)geteuid());
	if (mkdir(dir, 0755) && errno != EEXIST)
		return -errno;
	n = snprintf(fs->sock_path, sizeof(fs->sock_path), "%s/%d.sock", dir,
		     (int)getpid());
	return n >= (int)sizeof(fs->sock_path) ? -ENAMETOOLONG : 0;
}

/*
 * Sockets are named after the daemon's pid; one killed with SIGKILL could
 * not remove its own.  Remove those whose daemon is gone.
 */
static void sweep_stale_sockets(const char *dir)
{
	struct dirent *de;
	char path[PATH_MAX];
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);

		if (pid <= 0 || strcmp(end, ".sock"))
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

int phxfs_ctl_start(struct phxfs *fs)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	int ret;

	ret = sock_path(fs);
	if (ret)
		return ret;
	snprintf(dir, sizeof(dir), "%s", fs->sock_path);
	if (strrchr(dir, '/'))
		*strrchr(dir, '/') = '\0';
	sweep_stale_sockets(dir);
	strcpy(sa.sun_path, fs->sock_path);
	unlink(fs->sock_path);
	fs->sock_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fs->sock_fd < 0)
		return -errno;
	if (bind(fs->sock_fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(fs->sock_path, 0666) || listen(fs->sock_fd, 64)) {
		ret = -errno;
		goto out_close;
	}
	ret = -pthread_create(&accept_thread, NULL, accept_main, fs);
	if (ret)
		goto out_close;
	return 0;

out_close:
	close(fs->sock_fd);
	unlink(fs->sock_path);
	fs->sock_fd = -1;
	return ret;
}

void phxfs_ctl_stop(struct phxfs *fs)
{
	if (fs->sock_fd < 0)
		return;
	shutdown(fs->sock_fd, SHUT_RDWR);
	pthread_join(accept_thread, NULL);
	close(fs->sock_fd);
	unlink(fs->sock_path);
	fs->sock_fd = -1;
}
