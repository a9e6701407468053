/* SPDX-License-Identifier: MIT */
/*
 * ctlsock.c - the control socket's connections: who is calling, how many
 * of them, reading a request and sending its reply within a time limit,
 * and the permission checks every request makes (docs/phxfs.md, "The
 * control socket").
 *
 * No client can hold the daemon up: a request must arrive, and every
 * reply be taken, within ctl_timeout seconds or the connection is
 * dropped; nothing is sent with fs->lock held; connections (one thread
 * each) are capped per uid and in all; a connection past a cap, or one
 * that comes when the daemon is out of descriptors, is told so and closed
 * at once, so the accept loop never stops.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "phxfs.h"
#include "phxfs_client.h"

/* Longest request line. */
#define REQ_MAX 512

/* Open connections of one uid; a list under ctl_lock. */
struct phxfs_ctl_user {
	struct phxfs_ctl_user *next;
	uid_t uid;
	unsigned int n;
};

static pthread_t accept_thread;
/* The requests' handler (ctl.c), set at start. */
static phxfs_ctl_serve_fn *serve;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until @fd is ready for @events or @deadline passes; 0 or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int64_t left = deadline - now_ms();
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&p, 1, (int)(left > INT_MAX ? INT_MAX : left));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int64_t timeout_ms(const struct phxfs *fs)
{
	return (int64_t)fs->opts.ctl_timeout * 1000;
}

int phxfs_conn_send(struct phxfs_conn *c, const void *buf, size_t n)
{
	int64_t deadline = now_ms() + timeout_ms(c->fs);
	const char *p = buf;
	int ret = 0;

	if (c->dead)
		return -EPIPE;
	while (n && !ret) {
		ssize_t r = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r > 0) {
			p += r;
			n -= (size_t)r;
		} else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			ret = wait_fd(c->fd, POLLOUT, deadline);
		} else {
			ret = r < 0 ? -errno : -EPIPE;
		}
	}
	if (ret)
		c->dead = true; /* a slow or gone client: drop it */
	return ret;
}

bool phxfs_conn_in_group(const struct phxfs_conn *c, gid_t gid)
{
	int i;

	if (c->cred.gid == gid)
		return true;
	for (i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

bool phxfs_conn_may(const struct phxfs_conn *c, const struct phxfs_inode *inode,
		    int mask)
{
	mode_t m = inode->mode;

	if (!c->cred.uid) /* search needs one x bit for root too */
		return mask != 1 || (m & 0111) || !S_ISREG(m);
	if (c->cred.uid == inode->uid)
		m >>= 6;
	else if (phxfs_conn_in_group(c, inode->gid))
		m >>= 3;
	return ((int)m & mask) == mask;
}

dev_t phxfs_ctl_dev(struct phxfs *fs)
{
	struct stat st;
	dev_t dev = __atomic_load_n(&fs->st_dev, __ATOMIC_RELAXED);

	/* asked of the kernel once it serves requests: by the first one */
	if (!dev && !stat(fs->mountpoint, &st)) {
		dev = st.st_dev;
		__atomic_store_n(&fs->st_dev, dev, __ATOMIC_RELAXED);
	}
	return dev;
}

int phxfs_conn_reached(struct phxfs_conn *c, unsigned long long ino, int fd)
{
	struct stat st;

	if (!c->cred.uid)
		return 0;
	if (fd < 0)
		return -EACCES;
	if (fstat(fd, &st) || !phxfs_ctl_dev(c->fs) ||
	    st.st_dev != phxfs_ctl_dev(c->fs) ||
	    (unsigned long long)st.st_ino != ino)
		return -EACCES;
	return 0;
}

/* The caller's supplementary groups at connect time (SO_PEERGROUPS). */
/* Format one line into @line (PHXFS_LINE_MAX): control bytes made '?'. */
int phxfs_conn_format(char *line, const char *fmt, va_list ap)
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

void phxfs_conn_line(struct phxfs_conn *c, const char *fmt, ...)
{
	char line[PHXFS_LINE_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = phxfs_conn_format(line, fmt, ap);
	va_end(ap);
	phxfs_conn_send(c, line, (size_t)n);
}

const char *phxfs_conn_esc(const char *s, char *out, size_t len)
{
	phxfs_escape(s, strlen(s), out, len);
	return out;
}

void phxfs_conn_err(struct phxfs_conn *c, int err, const char *what)
{
	phxfs_conn_line(c, "ERR %d %s: %s", -err, what, strerror(-err));
}

struct phxfs_inode *phxfs_conn_file_get(struct phxfs_conn *c,
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
		phxfs_conn_err(c, -EACCES, msg);
		return NULL;
	}
	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, (fuse_ino_t)ino);
	if (!inode || !S_ISREG(inode->mode))
		err = -ENOENT;
	else if (mask ? !phxfs_conn_may(c, inode, mask) :
			c->cred.uid && c->cred.uid != inode->uid)
		err = -EACCES;
	else
		inode->nopen++;
	pthread_mutex_unlock(&fs->lock);
	if (!err)
		return inode;
	snprintf(msg, sizeof(msg), "%s%s", what,
		 err == -ENOENT ? ": no such file in phxfs" :
		 !mask		? ": only the owner may map a file" :
				  "");
	phxfs_conn_err(c, err, msg);
	return NULL;
}

void phxfs_conn_file_put(struct phxfs *fs, struct phxfs_inode *inode)
{
	pthread_mutex_lock(&fs->lock);
	phxfs_inode_unref(fs, inode, 0, 1);
	pthread_mutex_unlock(&fs->lock);
}

static int peer_groups(struct phxfs_conn *c)
{
	socklen_t len = 16 * sizeof(gid_t);

	for (;;) {
		gid_t *g = realloc(c->groups, len);

		if (!g)
			return -ENOMEM;
		c->groups = g;
		if (!getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, g, &len)) {
			c->ngroups = (int)(len / sizeof(gid_t));
			return 0;
		}
		if (errno != ERANGE)
			return -errno;
	}
}

/* Keep the first descriptors of @msg in c->fds; close every other one. */
static void take_fds(struct phxfs_conn *c, struct msghdr *msg)
{
	struct cmsghdr *cm;

	for (cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		size_t n, i;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
			       sizeof(fd));
			if (c->fds[0] < 0)
				c->fds[0] = fd;
			else if (c->fds[1] < 0)
				c->fds[1] = fd;
			else
				close(fd);
		}
	}
}

/*
 * Read the request line, with the descriptors sent along, within the
 * time limit; 0, -EPIPE, -ETIMEDOUT or -EMSGSIZE.  The kernel itself
 * drops what does not fit the control buffer (MSG_CTRUNC).
 */
static int recv_request(struct phxfs_conn *c, char *line, size_t len)
{
	int64_t deadline = now_ms() + timeout_ms(c->fs);
	size_t n = 0;

	for (;;) {
		char cbuf[CMSG_SPACE(8 * sizeof(int))];
		struct iovec iov = { line + n, len - 1 - n };
		struct msghdr msg = { .msg_iov = &iov,
				      .msg_iovlen = 1,
				      .msg_control = cbuf,
				      .msg_controllen = sizeof(cbuf) };
		char *nl;
		ssize_t r;
		int ret;

		if (n + 1 >= len)
			return -EMSGSIZE;
		r = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			ret = wait_fd(c->fd, POLLIN, deadline);
			if (ret)
				return ret;
			continue;
		}
		if (r <= 0)
			return -EPIPE;
		take_fds(c, &msg);
		nl = memchr(line + n, '\n', (size_t)r);
		n += (size_t)r;
		if (nl) {
			*nl = '\0';
			return 0;
		}
	}
}

/*
 * Count a connection of @uid in, or -EAGAIN past a cap; ctl_lock held.
 * Root's are not capped (a loader opening many files at once is root's
 * own business) and do not count: no user can lock root out.
 */
static int conn_admit(struct phxfs *fs, uid_t uid)
{
	struct phxfs_ctl_user *u;

	if (!uid)
		return 0;
	for (u = fs->ctl_users; u && u->uid != uid; u = u->next)
		;
	if (fs->ctl_nconns >= fs->opts.ctl_conns)
		return -EAGAIN;
	if (u && u->n >= fs->opts.ctl_conns_uid)
		return -EAGAIN;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return -ENOMEM;
		u->uid = uid;
		u->next = fs->ctl_users;
		fs->ctl_users = u;
	}
	u->n++;
	fs->ctl_nconns++;
	return 0;
}

static void conn_leave(struct phxfs *fs, uid_t uid)
{
	struct phxfs_ctl_user **p, *u;

	if (!uid)
		return;
	pthread_mutex_lock(&fs->ctl_lock);
	for (p = &fs->ctl_users; *p && (*p)->uid != uid; p = &(*p)->next)
		;
	u = *p;
	if (u && !--u->n) {
		*p = u->next;
		free(u);
	}
	fs->ctl_nconns--;
	pthread_mutex_unlock(&fs->ctl_lock);
}

/* One line to a connection turned away; it is not waited for. */
static void refuse(int fd, int err, const char *why)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "ERR %d %s\n", err, why);

	if (send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		return;
}

void phxfs_conn_fds_close(struct phxfs_conn *c)
{
	for (unsigned int i = 0; i < 2; i++) {
		if (c->fds[i] >= 0)
			close(c->fds[i]);
		c->fds[i] = -1;
	}
}

/*
 * Close what @c holds, in an order its client can rely on: the
 * descriptors it sent, then its place under the caps, then the
 * connection itself, so that a client that saw the end of it may connect
 * again at once and finds nothing of its own left in the daemon.
 */
static void conn_free(struct phxfs_conn *c, bool admitted)
{
	phxfs_conn_fds_close(c);
	if (admitted)
		conn_leave(c->fs, c->cred.uid);
	close(c->fd);
	free(c->groups);
	free(c);
}

static void *conn_main(void *arg)
{
	struct phxfs_conn *c = arg;
	char line[REQ_MAX];
	int ret;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phxfs-ctl");
	ret = recv_request(c, line, sizeof(line));
	if (!ret)
		serve(c, line);
	else if (ret == -EMSGSIZE)
		refuse(c->fd, EINVAL, "request line too long");
	else if (ret == -ETIMEDOUT)
		refuse(c->fd, ETIMEDOUT, "no request within ctl_timeout");
	conn_free(c, true);
	return NULL;
}

/* Start a thread for connection @fd, or tell it why not and close it. */
static void conn_start(struct phxfs *fs, int fd)
{
	struct timeval tv = { .tv_sec = fs->opts.ctl_timeout };
	struct phxfs_conn *c = calloc(1, sizeof(*c));
	socklen_t sl = sizeof(c->cred);
	char why[128];
	pthread_t t;
	int ret;

	if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &sl)) {
		free(c);
		close(fd);
		return;
	}
	c->fs = fs;
	c->fd = fd;
	c->fds[0] = c->fds[1] = -1;
	/* without allow_other only the mounting user reaches the files */
	if (geteuid() && c->cred.uid != geteuid()) {
		refuse(fd, EACCES,
		       "this phxfs serves only the user who mounted it");
		conn_free(c, false);
		return;
	}
	/* a backstop: every send and receive waits at most this long */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&fs->ctl_lock);
	ret = conn_admit(fs, c->cred.uid);
	pthread_mutex_unlock(&fs->ctl_lock);
	if (ret) {
		snprintf(
			why, sizeof(why),
			"too many control connections (%u of uid %u, %u in all); close some and retry",
			fs->opts.ctl_conns_uid, (unsigned int)c->cred.uid,
			fs->opts.ctl_conns);
		refuse(fd, -ret, why);
		conn_free(c, false);
		return;
	}
	ret = peer_groups(c);
	if (!ret)
		ret = -pthread_create(&t, NULL, conn_main, c);
	if (ret) {
		refuse(fd, -ret, "cannot serve the connection now; retry");
		conn_free(c, true);
		return;
	}
	pthread_detach(t);
}

/*
 * Out of descriptors: give up the spare one to take the waiting
 * connection and close it (its client sees the end instead of hanging),
 * then take the spare back.  Logged once.
 */
static void out_of_fds(struct phxfs *fs, int err)
{
	static bool logged;
	int fd;

	if (!logged) {
		fprintf(stderr,
			"phxfs: control socket: out of descriptors (%s); refusing connections until some close\n",
			strerror(err));
		logged = true;
	}
	if (fs->ctl_spare_fd >= 0) {
		close(fs->ctl_spare_fd);
		fs->ctl_spare_fd = -1;
	}
	fd = accept4(fs->sock_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		refuse(fd, err, "phxfs is out of descriptors; retry later");
		close(fd);
	} else if (errno == EMFILE || errno == ENFILE) {
		/* not even one: let connections close for a moment */
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	fs->ctl_spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void *accept_main(void *arg)
{
	struct phxfs *fs = arg;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phxfs-ctl");
	while (!__atomic_load_n(&fs->ctl_stopping, __ATOMIC_ACQUIRE)) {
		/*
		 * Wait first, accept after: a blocked accept4() would take
		 * its descriptor before a connection comes, and one taken
		 * when the daemon runs short would not be given back.
		 */
		struct pollfd p = { .fd = fs->sock_fd, .events = POLLIN };
		int fd;

		if (poll(&p, 1, -1) < 0)
			continue;
		fd = accept4(fs->sock_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			conn_start(fs, fd);
		else if (errno == EMFILE || errno == ENFILE)
			out_of_fds(fs, errno);
		else if (errno == EINVAL)
			break; /* shut down */
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

int phxfs_ctlsock_start(struct phxfs *fs, phxfs_ctl_serve_fn *serve_fn)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	int ret;

	serve = serve_fn;
	pthread_mutex_init(&fs->ctl_lock, NULL);
	ret = sock_path(fs);
	if (ret)
		return ret;
	snprintf(dir, sizeof(dir), "%s", fs->sock_path);
	if (strrchr(dir, '/'))
		*strrchr(dir, '/') = '\0';
	sweep_stale_sockets(dir);
	strcpy(sa.sun_path, fs->sock_path);
	unlink(fs->sock_path);
	fs->ctl_spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	fs->sock_fd =
		socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fs->sock_fd < 0)
		return -errno;
	/* anyone may connect; each request checks what its caller may do */
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

void phxfs_ctlsock_stop(struct phxfs *fs)
{
	if (fs->sock_fd < 0)
		return;
	__atomic_store_n(&fs->ctl_stopping, true, __ATOMIC_RELEASE);
	shutdown(fs->sock_fd, SHUT_RDWR);
	pthread_join(accept_thread, NULL);
	close(fs->sock_fd);
	unlink(fs->sock_path);
	fs->sock_fd = -1;
	if (fs->ctl_spare_fd >= 0)
		close(fs->ctl_spare_fd);
}
