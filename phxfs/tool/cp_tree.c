/* SPDX-License-Identifier: MIT */
/*
 * cp_tree.c - phx cp -r: copy a tree, directory by directory, into or out
 * of phxfs, and measure it first for the progress bar.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cp.h"

unsigned long long cp_tree_size(struct cp_run *r, int dir)
{
	unsigned long long n = 0;
	struct dirent *de;
	struct stat st;
	DIR *d = fdopendir(dir);

	if (!d) {
		close(dir);
		return 0;
	}
	while ((de = readdir(d))) {
		int sub;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISREG(st.st_mode))
			n += (unsigned long long)st.st_size;
		if (!S_ISDIR(st.st_mode) || st.st_dev == r->ddev)
			continue;
		sub = openat(dirfd(d), de->d_name,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0)
			n += cp_tree_size(r, sub);
	}
	closedir(d);
	return n;
}

/* One entry @name of source directory @sdir, into destination @ddir. */
static void cp_entry(struct cp_run *r, int sdir, const char *name, int ddir);

/* Add @name to the path in @buf (PATH_MAX); its old length, or -1. */
static int path_push(struct cp_run *r, char *buf, const char *name)
{
	size_t len = strlen(buf), n = strlen(name);
	bool slash = !len || buf[len - 1] != '/';

	if (len + slash + n >= PATH_MAX) {
		cp_end_bar(r);
		fprintf(stderr, "phx: cp: %s/%s: %s\n", cli_quote(buf),
			cli_quote(name), strerror(ENAMETOOLONG));
		r->failed = 1;
		return -1;
	}
	if (slash)
		buf[len] = '/';
	memcpy(buf + len + slash, name, n + 1);
	return (int)len;
}

void cp_tree(struct cp_run *r, int sfd, int ddir, const char *name)
{
	mode_t want = 0, made = 0;
	struct dirent *de;
	struct stat st;
	bool created;
	int dfd;
	DIR *d;

	if (fstat(sfd, &st)) {
		cp_err(r, r->spath, errno);
		close(sfd);
		return;
	}
	want = st.st_mode & 0777 & ~r->umask;
	made = (st.st_mode & 0777) | S_IWUSR | S_IXUSR;
	created = !mkdirat(ddir, name, made);
	if (!created && errno != EEXIST) {
		cp_err(r, r->dpath, errno);
		close(sfd);
		return;
	}
	dfd = openat(ddir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st)) {
		struct stat lst;

		if ((errno == ELOOP || errno == ENOTDIR) &&
		    !fstatat(ddir, name, &lst, AT_SYMLINK_NOFOLLOW))
			cp_say(r, r->dpath,
			       S_ISLNK(lst.st_mode) ?
				       "a symbolic link; phx cp -r does not follow links in the destination" :
				       "not a directory");
		else
			cp_err(r, r->dpath, errno);
		if (dfd >= 0)
			close(dfd);
		close(sfd);
		return;
	}
	if (!r->out && st.st_dev != r->ddev) {
		cp_say(r, r->dpath,
		       "not on phxfs (something is mounted there)");
		close(dfd);
		close(sfd);
		return;
	}
	d = fdopendir(sfd);
	if (!d) {
		cp_err(r, r->spath, errno);
		close(sfd);
		close(dfd);
		return;
	}
	while (!cp_signal && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cp_entry(r, dirfd(d), de->d_name, dfd);
	}
	closedir(d);
	if (created && (made & ~r->umask) != want) {
		char via[64];

		if (chmod(cp_fd_path(dfd, via, sizeof(via)), want))
			cp_err(r, r->dpath, errno);
	}
	close(dfd);
}

static void cp_entry(struct cp_run *r, int sdir, const char *name, int ddir)
{
	int slen = path_push(r, r->spath, name), dlen, fd;
	struct stat st;

	if (slen < 0)
		return;
	dlen = path_push(r, r->dpath, name);
	if (dlen < 0)
		goto out_s;
	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW)) {
		cp_err(r, r->spath, errno);
	} else if (S_ISDIR(st.st_mode) && st.st_dev == r->ddev) {
		/* phxfs mounted in the tree copied into it: it never ends */
		cp_say(r, r->spath,
		       "on the file system copied into; not copied into itself");
	} else if (S_ISDIR(st.st_mode)) {
		fd = openat(sdir, name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			cp_err(r, r->spath, errno);
		else
			cp_tree(r, fd, ddir, name);
	} else if (S_ISREG(st.st_mode)) {
		/* O_NONBLOCK: what replaced the file may be a FIFO */
		fd = openat(sdir, name,
			    (r->out ? O_PATH : O_RDONLY | O_NONBLOCK) |
				    O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			cp_err(r, r->spath, errno);
		} else if (r->out) {
			cp_out(r, fd, r->spath, ddir, name, r->dpath, false);
			close(fd);
		} else {
			/* the daemon reads it: plain blocking reads */
			fcntl(fd, F_SETFL, 0);
			cp_in(r, fd, r->spath, ddir, name, r->dpath);
			close(fd);
		}
	} else {
		cp_say(r, r->spath,
		       "not a regular file or directory; skipped (copy it with cp)");
	}
	r->dpath[dlen] = '\0';
out_s:
	r->spath[slen] = '\0';
}
