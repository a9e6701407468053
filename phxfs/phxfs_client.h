/* SPDX-License-Identifier: MIT */
/*
 * phxfs_client.h - open a phxfs file's device memory in place, from any
 * process, through the daemon's control socket.  Header only: include it
 * and link libphoenix.
 *
 * The protocol (docs/phxfs.md): connect to the AF_UNIX stream socket whose
 * path the xattr user.phx.socket names, send one line, read lines back.
 *
 *   OPEN <ino>\n      -> "OK <device> <size>\n", then phx_buf_send()'s
 *                        stream (receive it with phx_buf_recv())
 *   CP <ino>\n + fd   -> "PROGRESS <done> <total>\n"..., "OK <bytes> <path>\n"
 *   CPOUT <ino>\n + fd -> the same, writing the file into fd
 *   STATUS\n          -> "DEV ..." and "FILE ..." lines, then "END\n"
 *
 * Any failure is one line "ERR <errno> <message>\n".  The xattr
 * user.phx.handle of a file ("<socket> <ino>") is readable by its owner.
 */
#ifndef PHXFS_CLIENT_H
#define PHXFS_CLIENT_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "phoenix.h"

#define PHXFS_LINE_MAX 4352

/* Connect to the control socket at @path; returns an fd or -errno. */
static inline int phxfs_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

/*
 * Read one '\n'-terminated line byte by byte, so that nothing after it
 * (phx_buf_send()'s stream) is consumed.  Returns its length or -errno.
 */
static inline int phxfs_read_line(int fd, char *line, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(fd, line + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	return (int)n;
}

/* errno of an "ERR <errno> <message>" line (message left in @line). */
static inline int phxfs_line_err(char *line)
{
	int err = 0, pos = 0;

	if (sscanf(line, "ERR %d %n", &err, &pos) < 1 || err <= 0)
		return EPROTO;
	memmove(line, line + pos, strlen(line + pos) + 1);
	return err;
}

/**
 * phxfs_open_buf() - map the memory of the phxfs file at @path.
 * @path: a regular file under a phxfs mount, owned by the caller.
 * @dev: receives the device (close with phx_device_close()).
 * @buf: receives an imported buffer (free with phx_buf_free()).
 *
 * The buffer reads and writes the file's bytes in place.  It has the size
 * the file had when it was opened and cannot grow.  Returns 0 or -errno.
 */
static inline int phxfs_open_buf(const char *path, struct phx_device **dev,
				 struct phx_buf **buf)
{
	char handle[256], line[PHXFS_LINE_MAX], name[32], *sp;
	unsigned long long size;
	ssize_t n;
	int fd, ret;

	n = getxattr(path, "user.phx.handle", handle, sizeof(handle) - 1);
	if (n < 0)
		return -errno;
	handle[n] = '\0';
	sp = strrchr(handle, ' ');
	if (!sp)
		return -EPROTO;
	*sp++ = '\0';
	fd = phxfs_connect(handle);
	if (fd < 0)
		return fd;
	snprintf(line, sizeof(line), "OPEN %s\n", sp);
	ret = write(fd, line, strlen(line)) < 0 ? -errno : 0;
	if (!ret)
		ret = phxfs_read_line(fd, line, sizeof(line));
	if (ret < 0)
		goto out;
	if (sscanf(line, "OK %31s %llu", name, &size) != 2) {
		ret = -phxfs_line_err(line);
		goto out;
	}
	ret = phx_device_open(name, dev);
	if (ret)
		goto out;
	ret = phx_buf_recv(*dev, fd, buf);
	if (ret)
		phx_device_close(*dev);
out:
	close(fd);
	return ret < 0 ? ret : 0;
}

#endif /* PHXFS_CLIENT_H */
