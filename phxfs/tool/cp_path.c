/* SPDX-License-Identifier: MIT */
/*
 * cp_path.c - how phx cp finds its way among paths: the path of a
 * descriptor, whether a path is on phxfs, a path's directory and name.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#include "cp.h"

const char *cp_fd_path(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/self/fd/%d", fd);
	return buf;
}

int cp_phxfs_at(const char *path, char *sock, size_t len)
{
	ssize_t n = getxattr(path, "user.phx.socket", sock, len - 1);

	if (n >= 0) {
		sock[n] = '\0';
		return 1;
	}
	if (errno == EACCES || errno == EPERM || errno == ENOENT ||
	    errno == ENOTDIR || errno == ENAMETOOLONG || errno == ELOOP)
		return -errno;
	return 0;
}

bool cp_phxfs_top(const char *path)
{
	char name[64];

	/* every directory below the top level is a device's */
	return getxattr(path, "user.phx.device", name, sizeof(name)) < 0 &&
	       errno == ENODATA;
}

void cp_split(const char *path, char *dir, char *name)
{
	char a[PATH_MAX], b[PATH_MAX];

	strcpy(a, path);
	strcpy(b, path);
	strcpy(dir, dirname(a));
	strcpy(name, basename(b));
}
