/* SPDX-License-Identifier: MIT */
/* client.c - libphxfsctl: the one client of phxfs's control socket. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "phxfs_client.h"

int phxfs_connect(const char *sock_path)
{
	struct timeval tv = { .tv_sec = PHXFS_CLIENT_TIMEOUT };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(sock_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a daemon that stopped answering fails the call, not hangs it */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

int phxfs_socket_of(const char *path, char *out, size_t len)
{
	ssize_t n = getxattr(path, "user.phx.socket", out, len - 1);

	if (n < 0)
		return errno == ENODATA ? -ENOTSUP : -errno;
	out[n] = '\0';
	return 0;
}

int phxfs_read_line(int fd, char *line, size_t len)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = read(fd, line + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -ETIMEDOUT;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		if (line[n] == '\n')
			break;
		if (++n + 1 >= len)
			return -EMSGSIZE;
	}
	line[n] = '\0';
	return (int)n;
}

int phxfs_line_err(char *line)
{
	int err = 0, pos = 0;

	if (sscanf(line, "ERR %d %n", &err, &pos) < 1 || err <= 0)
		return -EPROTO;
	memmove(line, line + pos, strlen(line + pos) + 1);
	return -err;
}

static bool plain(unsigned char c)
{
	return c > ' ' && c < 0x7f && c != '\\';
}

size_t phxfs_escape(const void *in, size_t n, char *out, size_t len)
{
	const unsigned char *p = in;
	size_t need = 0, i;

	for (i = 0; i < n; i++) {
		char esc[5];
		size_t k = plain(p[i]) ? 1 : 4;

		if (k == 1)
			esc[0] = (char)p[i];
		else
			snprintf(esc, sizeof(esc), "\\x%02x", p[i]);
		if (need + k < len)
			memcpy(out + need, esc, k);
		need += k;
	}
	if (len)
		out[need < len ? need : len - 1] = '\0';
	return need;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long phxfs_unescape(const char *in, char *out, size_t len)
{
	size_t n = 0;

	while (*in) {
		int c = (unsigned char)*in++;

		if (c == '\\') {
			int hi, lo;

			if (*in != 'x')
				return -EPROTO;
			hi = hexval(in[1]);
			lo = hi < 0 ? -1 : hexval(in[2]);
			if (lo < 0)
				return -EPROTO;
			c = hi << 4 | lo;
			in += 3;
		} else if (!plain((unsigned char)c)) {
			return -EPROTO;
		}
		if (n + 1 >= len)
			return -ENAMETOOLONG;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	return (long)n;
}

int phxfs_send_request(int sock, const char *line, int fd, const char *path)
{
	char cbuf[CMSG_SPACE(2 * sizeof(int))] = { 0 };
	struct iovec iov = { (void *)line, strlen(line) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[2], n = 0, ret;

	if (fd >= 0)
		fds[n++] = fd;
	/* opened by the caller: the kernel checks the path to it */
	if (path) {
		fds[n] = open(path, O_PATH | O_CLOEXEC);
		if (fds[n] < 0)
			return -errno;
		n++;
	}
	if (n) {
		struct cmsghdr *cm;

		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	}
	ret = sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 ? -errno : 0;
	if (path)
		close(fds[n - 1]);
	return ret;
}

/* Connect to the daemon of the mount holding @path and send @req. */
static int request(const char *path, const char *req)
{
	char sock[256];
	size_t len = strlen(req);
	int fd = phxfs_socket_of(path, sock, sizeof(sock));

	if (fd)
		return fd;
	fd = phxfs_connect(sock);
	if (fd < 0)
		return fd;
	if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

int phxfs_open_handle(const char *path, char *device, size_t device_len,
		      uint64_t *size, char *why, size_t why_len)
{
	char handle[256], line[PHXFS_LINE_MAX], name[32], *ino;
	unsigned long long sz;
	ssize_t n;
	int fd, ret;

	snprintf(why, why_len, "%s", "");
	n = getxattr(path, "user.phx.handle", handle, sizeof(handle) - 1);
	if (n < 0) {
		ret = errno == ENODATA ? -ENOTSUP : -errno;
		snprintf(why, why_len, "%s: %s", path,
			 ret == -ENOTSUP ? "not a file on a phxfs mount" :
			 ret == -EACCES	 ? "only the file's owner may open it" :
					   strerror(-ret));
		return ret;
	}
	handle[n] = '\0';
	ino = strrchr(handle, ' ');
	if (!ino) {
		snprintf(why, why_len, "%s: unexpected user.phx.handle", path);
		return -EPROTO;
	}
	*ino++ = '\0';
	fd = phxfs_connect(handle);
	if (fd < 0) {
		snprintf(
			why, why_len,
			"%s: phxfs control socket %s: %s; is the daemon running?",
			path, handle, strerror(-fd));
		return fd;
	}
	snprintf(line, sizeof(line), "OPEN %s\n", ino);
	ret = phxfs_send_request(fd, line, -1, path);
	if (!ret)
		ret = phxfs_read_line(fd, line, sizeof(line));
	if (ret < 0) {
		snprintf(why, why_len, "%s: phxfs control socket: %s", path,
			 strerror(-ret));
		goto out_close;
	}
	if (sscanf(line, "OK %31s %llu", name, &sz) != 2) {
		ret = phxfs_line_err(line);
		snprintf(why, why_len, "%s: phxfs: %s", path, line);
		goto out_close;
	}
	snprintf(device, device_len, "%s", name);
	*size = sz;
	return fd;

out_close:
	close(fd);
	return ret;
}

static void *grow(void *arr, unsigned int n, size_t elem)
{
	/* doubling: room for element n */
	if (n & (n - 1) || !n)
		return n ? arr : malloc(elem);
	return realloc(arr, 2 * (size_t)n * elem);
}

static int parse_dev(struct phxfs_status *st, const char *line)
{
	struct phxfs_status_dev *d,
		*devs = grow(st->devs, st->ndevs, sizeof(*devs));
	unsigned long long v[8];
	char model[128 * 4];

	if (!devs)
		return -ENOMEM;
	st->devs = devs;
	d = memset(&devs[st->ndevs], 0, sizeof(*d));
	if (sscanf(line,
		   "DEV %31s %15s %llu %llu %u %15s %llu %llu %llu %llu %511s",
		   d->name, d->kind, &v[0], &v[1], &d->files, d->path, &v[2],
		   &v[3], &v[4], &v[5], model) != 11 ||
	    phxfs_unescape(model, d->model, sizeof(d->model)) < 0)
		return -EPROTO;
	d->capacity = v[0];
	d->used = v[1];
	d->moved = v[2];
	d->bytes_in = v[3];
	d->bytes_out = v[4];
	d->reserve = v[5];
	st->ndevs++;
	return 0;
}

static int parse_reqs(struct phxfs_status *st, const char *line)
{
	unsigned long long w, r;
	char name[32];
	unsigned int i;

	if (sscanf(line, "REQS %31s %llu %llu", name, &w, &r) != 3)
		return -EPROTO;
	for (i = 0; i < st->ndevs; i++) {
		if (!strcmp(st->devs[i].name, name)) {
			st->devs[i].write_requests = w;
			st->devs[i].read_requests = r;
		}
	}
	return 0;
}

static int parse_file(struct phxfs_status *st, const char *line)
{
	struct phxfs_status_file *f,
		*files = grow(st->files, st->nfiles, sizeof(*files));
	unsigned long long size, held;
	int pos = 0;
	long n;

	if (!files)
		return -ENOMEM;
	st->files = files;
	f = memset(&files[st->nfiles], 0, sizeof(*f));
	if (sscanf(line, "FILE %31s %llu %llu %15s %n", f->device, &size, &held,
		   f->path, &pos) < 4 ||
	    !pos)
		return -EPROTO;
	f->size = size;
	f->held = held;
	f->name = malloc(strlen(line + pos) + 1);
	if (!f->name)
		return -ENOMEM;
	n = phxfs_unescape(line + pos, f->name, strlen(line + pos) + 1);
	if (n < 0) {
		free(f->name);
		return (int)n;
	}
	f->name_len = (size_t)n;
	st->nfiles++;
	return 0;
}

/*
 * "@what on" or "@what off <escaped reason>": 1 when @line is neither,
 * else 0, or -EPROTO for a reason that does not unescape.
 */
static int parse_switch(const char *line, const char *what, bool *on, char *why,
			size_t why_len)
{
	size_t n = strlen(what);

	if (strncmp(line, what, n) || line[n] != ' ')
		return 1;
	if (!strcmp(line + n + 1, "on")) {
		*on = true;
		return 0;
	}
	if (strncmp(line + n + 1, "off ", 4))
		return 1;
	return phxfs_unescape(line + n + 5, why, why_len) < 0 ? -EPROTO : 0;
}

/* ROOTRESERVE <device> <bytes>, after the DEV lines. */
static int parse_root_reserve(struct phxfs_status *st, const char *line)
{
	unsigned long long v;
	char name[32];
	unsigned int i;

	if (sscanf(line, "ROOTRESERVE %31s %llu", name, &v) != 2)
		return -EPROTO;
	if (!st->root_reserve) {
		st->root_reserve = calloc(st->ndevs + 1, sizeof(uint64_t));
		if (!st->root_reserve)
			return -ENOMEM;
	}
	for (i = 0; i < st->ndevs; i++)
		if (!strcmp(st->devs[i].name, name))
			st->root_reserve[i] = v;
	return 0;
}

/* The three numbers of a line (@fmt) into @v0..@v2; -EPROTO if not. */
static int parse_three(const char *line, const char *fmt, uint64_t *v0,
		       uint64_t *v1, uint64_t *v2)
{
	unsigned long long a, b, c;

	if (sscanf(line, fmt, &a, &b, &c) != 3)
		return -EPROTO;
	*v0 = a;
	*v1 = b;
	*v2 = c;
	return 0;
}

/* The limits' lines: XATTR, INODES, CTL, UNLISTED; 1 for another line. */
static int parse_limits(struct phxfs_status *st, const char *line)
{
	if (!strncmp(line, "XATTR ", 6))
		return parse_three(line, "XATTR %llu %llu %llu",
				   &st->xattr_bytes, &st->xattr_size,
				   &st->xattr_file);
	if (!strncmp(line, "INODES ", 7))
		return parse_three(line, "INODES %llu %llu %llu", &st->inodes,
				   &st->names, &st->nr_inodes);
	if (!strncmp(line, "CTL ", 4))
		return sscanf(line, "CTL %u %u %u", &st->ctl_conns,
			      &st->ctl_conns_max, &st->ctl_conns_uid) == 3 ?
			       0 :
			       -EPROTO;
	if (!strncmp(line, "UNLISTED ", 9))
		return sscanf(line, "UNLISTED %u", &st->unlisted) == 1 ?
			       0 :
			       -EPROTO;
	if (!strncmp(line, "ROOTRESERVE ", 12))
		return parse_root_reserve(st, line);
	return 1;
}

static int parse_line(struct phxfs_status *st, const char *line)
{
	int ret;

	if (!strncmp(line, "DEV ", 4))
		return parse_dev(st, line);
	if (!strncmp(line, "REQS ", 5))
		return parse_reqs(st, line);
	if (!strncmp(line, "FILE ", 5))
		return parse_file(st, line);
	ret = parse_limits(st, line);
	if (ret <= 0)
		return ret;
	ret = parse_switch(line, "PASSTHROUGH", &st->passthrough,
			   st->passthrough_why, sizeof(st->passthrough_why));
	if (ret <= 0)
		return ret;
	ret = parse_switch(line, "URING", &st->uring, st->uring_why,
			   sizeof(st->uring_why));
	if (ret <= 0)
		return ret;
	if (!strncmp(line, "MOUNT ", 6))
		return phxfs_unescape(line + 6, st->mountpoint,
				      sizeof(st->mountpoint)) < 0 ?
			       -EPROTO :
			       0;
	return 0; /* a line of a newer daemon */
}

int phxfs_status_get(const char *path, struct phxfs_status **out)
{
	char line[PHXFS_LINE_MAX];
	struct phxfs_status *st = calloc(1, sizeof(*st));
	int fd, ret;

	if (!st)
		return -ENOMEM;
	fd = request(path, "STATUS\n");
	if (fd < 0) {
		free(st);
		return fd;
	}
	while ((ret = phxfs_read_line(fd, line, sizeof(line))) >= 0) {
		if (!strcmp(line, "END"))
			break;
		if (!strncmp(line, "ERR ", 4)) {
			ret = phxfs_line_err(line);
			break;
		}
		ret = parse_line(st, line);
		if (ret)
			break;
	}
	close(fd);
	if (ret < 0) {
		phxfs_status_free(st);
		return ret;
	}
	*out = st;
	return 0;
}

void phxfs_status_free(struct phxfs_status *st)
{
	unsigned int i;

	if (!st)
		return;
	for (i = 0; i < st->nfiles; i++)
		free(st->files[i].name);
	free(st->files);
	free(st->devs);
	free(st->root_reserve);
	free(st);
}
