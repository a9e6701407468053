/* SPDX-License-Identifier: MIT */
/*
 * phxfs_client.h - the client of phxfs's control socket (libphxfsctl):
 * open a phxfs file's device memory in place from any process, read what
 * the daemon holds, and the protocol's line and escaping rules.  Link
 * with -lphxfsctl (and -lphoenix for phxfs_open_buf()).
 *
 * The protocol (docs/phxfs.md): connect to the AF_UNIX stream socket whose
 * path the xattr user.phx.socket names, send one line, read lines back.
 *
 *   OPEN <ino>\n + pfd      -> "OK <device> <size>\n", then
 *                              phx_buf_send()'s stream (receive it with
 *                              phx_buf_recv())
 *   CP <ino>\n + fd, pfd    -> "PROGRESS <done> <total>\n"...,
 *                              "OK <bytes> <path>\n"
 *   CPOUT <ino>\n + fd, pfd -> the same, writing the file into fd
 *   STATUS\n                -> "DEV ...", "FILE ..." and other lines,
 *                              then "END\n"
 *
 * pfd, sent with the request (SCM_RIGHTS) after the data descriptor fd,
 * is an O_PATH descriptor of the phxfs file that the caller opened
 * itself: the kernel checked that the caller may reach it, and the
 * daemon checks that it names <ino>.  Callers other than root must send
 * it (phxfs_send_request() does).  A request must arrive, and each reply
 * line be read, within the mount's ctl_timeout.
 *
 * Any failure is one line "ERR <errno> <message>\n".  Names, paths and
 * other free text inside a line are escaped (phxfs_escape()): a space,
 * a control byte, a backslash or any byte past 0x7e is written \xHH, so
 * no name can end a line or add a field.  The xattr user.phx.handle of a
 * file ("<socket> <ino>") is readable by its owner.
 */
#ifndef PHXFS_CLIENT_H
#define PHXFS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "phoenix.h"

#define PHXFS_LINE_MAX 8192
/* Seconds a client waits for each line of an answer. */
#define PHXFS_CLIENT_TIMEOUT 60

/*
 * Connect to the control socket at @sock_path; returns an fd or -errno.
 * Reads and writes on it fail after PHXFS_CLIENT_TIMEOUT seconds.
 */
int phxfs_connect(const char *sock_path);

/*
 * Send request @line on @sock with descriptor @fd (-1: none) and an
 * O_PATH descriptor of @path (NULL: none), which is opened here and
 * closed once sent.  0 or -errno.
 */
int phxfs_send_request(int sock, const char *line, int fd, const char *path);

/*
 * The control socket of the phxfs mount that holds @path (any file or
 * directory on it) into @out; 0, -ENOTSUP when @path is not on phxfs, or
 * another -errno.
 */
int phxfs_socket_of(const char *path, char *out, size_t len);

/*
 * Read one '\n'-terminated line byte by byte, so that nothing after it
 * (phx_buf_send()'s stream) is consumed.  Returns its length or -errno
 * (-EPIPE at end of stream, -EMSGSIZE for a line longer than @len - 1,
 * -ETIMEDOUT when the daemon sent nothing for PHXFS_CLIENT_TIMEOUT s).
 */
int phxfs_read_line(int fd, char *line, size_t len);

/* -errno of an "ERR <errno> <message>" line (message left in @line);
 * -EPROTO for a line that is not one. */
int phxfs_line_err(char *line);

/*
 * Escape @n bytes of @in into @out (NUL-terminated).  Returns the length
 * the escaped text needs; it was cut short when that is >= @len.
 */
size_t phxfs_escape(const void *in, size_t n, char *out, size_t len);

/*
 * Undo phxfs_escape(): @in up to its NUL into @out (NUL-terminated, may
 * hold NUL bytes).  Returns the length or -EPROTO for a bad escape,
 * -ENAMETOOLONG when @out is too small.
 */
long phxfs_unescape(const char *in, char *out, size_t len);

/*
 * Ask the daemon to share the memory of the phxfs file at @path (owned by
 * the caller).  Returns a connected socket positioned at phx_buf_send()'s
 * stream (give it to phx_buf_recv(), then close it) with the device's
 * name in @device and the file's size in @size, or -errno with a one-line
 * reason in @why.
 */
int phxfs_open_handle(const char *path, char *device, size_t device_len,
		      uint64_t *size, char *why, size_t why_len);

/* One device of STATUS. */
struct phxfs_status_dev {
	char name[32], kind[16], path[16], model[128];
	uint64_t capacity, used, moved, bytes_in, bytes_out, reserve;
	uint64_t write_requests, read_requests;
	unsigned int files;
};

/* One file of STATUS: @name is its path below the mount, raw bytes. */
struct phxfs_status_file {
	char device[32], path[16];
	uint64_t size, held;
	size_t name_len;
	char *name;
};

struct phxfs_status {
	unsigned int ndevs, nfiles;
	struct phxfs_status_dev *devs;
	struct phxfs_status_file *files;
	bool passthrough;
	char passthrough_why[256];
	char mountpoint[4096];
	/* FUSE over io_uring: requests served on the CPU that made them */
	bool uring;
	char uring_why[256];
	/* stored extended attributes: bytes in all, limits in all, per file */
	uint64_t xattr_bytes, xattr_size, xattr_file;
	/* inodes, names in directories, and nr_inodes that caps both */
	uint64_t inodes, names, nr_inodes;
	/* control socket: connections of users other than root, caps */
	unsigned int ctl_conns, ctl_conns_max, ctl_conns_uid;
	/* files not in @files: past the reply's size bound */
	unsigned int unlisted;
	/* per device, as @devs: bytes only root may fill (root_reserve) */
	uint64_t *root_reserve;
};

/*
 * Read the STATUS of the phxfs mount that holds @path.  Returns 0 with
 * *@out to free with phxfs_status_free(), or -errno.
 */
int phxfs_status_get(const char *path, struct phxfs_status **out);
void phxfs_status_free(struct phxfs_status *st);

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
	char name[32], why[256];
	uint64_t size;
	int fd, ret;

	fd = phxfs_open_handle(path, name, sizeof(name), &size, why,
			       sizeof(why));
	if (fd < 0)
		return fd;
	ret = phx_device_open(name, dev);
	if (!ret) {
		ret = phx_buf_recv(*dev, fd, buf);
		if (ret)
			phx_device_close(*dev);
	}
	close(fd);
	return ret;
}

#endif /* PHXFS_CLIENT_H */
