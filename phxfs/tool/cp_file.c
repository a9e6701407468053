/* SPDX-License-Identifier: MIT */
/*
 * cp_file.c - phx cp of one file: into phxfs (CP) or out of it (CPOUT),
 * with the checks on source and destination before the daemon takes the
 * copy, and the clean-up after one that failed or was stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cp.h"

/*
 * Does @fd, a regular file, read what its size says?  procfs and sysfs
 * files give a size (0, or a page) that has nothing to do with what they
 * read, and a copy sized by it would be empty or cut.  0 or a message.
 */
static int check_size(struct cp_run *r, int fd, const struct stat *st,
		      const char *path)
{
	char probe[2];
	off_t at = st->st_size ? st->st_size - 1 : 0;
	ssize_t n = pread(fd, probe, sizeof(probe), at);

	if (n < 0)
		return cp_err(r, path, errno);
	if (n == (st->st_size ? 1 : 0))
		return 0;
	cp_end_bar(r);
	fprintf(stderr,
		"phx: cp: %s: its size (%lld bytes) is not what it reads (a procfs or sysfs file?); copy it with cp\n",
		cli_quote(path), (long long)st->st_size);
	r->failed = 1;
	return -EINVAL;
}

int cp_in(struct cp_run *r, int sfd, const char *spath, int ddir,
	  const char *name, const char *dpath)
{
	struct stat sst, st;
	bool created;
	char req[64];
	int pfd, ret;

	if (fstat(sfd, &sst))
		return cp_err(r, spath, errno);
	if (!S_ISREG(sst.st_mode)) {
		cp_say(r, spath,
		       "not a regular file or directory; skipped (copy it with cp)");
		return -EINVAL;
	}
	ret = check_size(r, sfd, &sst, spath);
	if (ret)
		return ret;
	/*
	 * Make DST without keeping it open: on phx.ko devices an open file
	 * pins the file's device memory in place, and the daemon may have
	 * to move it to make room for SRC.  The daemon overwrites every byte
	 * of an existing file, so the device memory it keeps is reused, not
	 * freed and allocated again.
	 */
	created = !mknodat(ddir, name, S_IFREG | (sst.st_mode & 0777), 0);
	if (!created && errno != EEXIST)
		return cp_err(r, dpath, errno);
	pfd = openat(ddir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return cp_err(r, dpath, errno);
	if (fstat(pfd, &st)) {
		ret = cp_err(r, dpath, errno);
		goto out;
	}
	ret = -EINVAL;
	if (S_ISLNK(st.st_mode)) {
		cp_say(r, dpath,
		       "a symbolic link; phx cp does not follow links into phxfs");
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = cp_err(r, dpath, EISDIR);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		cp_say(r, dpath, "not a regular file; remove it first");
		goto out;
	}
	if (st.st_dev != r->ddev) {
		cp_say(r, dpath, "not on phxfs (something is mounted there)");
		goto out;
	}
	snprintf(req, sizeof(req), "CP %llu", (unsigned long long)st.st_ino);
	ret = cp_request(r, req, sfd, pfd, dpath);
	if (!ret)
		goto out;
	r->failed = 1;
	if (ret == -ENOTCONN) {
		/* said: the daemon died, and the file with it */
	} else if (created) {
		/* nothing half-made stays behind holding device memory */
		if (!unlinkat(ddir, name, 0)) {
			if (ret == -EINTR)
				cp_stopped(r, dpath,
					   "the partial copy was removed");
		} else {
			cp_end_bar(r);
			fprintf(stderr,
				"phx: cp: %s: the failed copy could not be removed: %s; remove it with rm\n",
				cli_quote(dpath), strerror(errno));
		}
	} else if (ret == -EINTR) {
		cp_stopped(
			r, dpath,
			"it was being overwritten in place and may hold only part of the source");
	} else if (!fstat(pfd, &sst) && sst.st_size != st.st_size) {
		cp_end_bar(r);
		fprintf(stderr,
			"phx: cp: %s was overwritten in place and now holds only the first %llu bytes of %s; its old contents are gone\n",
			cli_quote(dpath), (unsigned long long)sst.st_size,
			cli_quote(spath));
	}
out:
	close(pfd);
	return ret;
}

int cp_out(struct cp_run *r, int spfd, const char *spath, int ddir,
	   const char *name, const char *dpath, bool follow)
{
	char tmp[80], req[64], via[PATH_MAX], dir[PATH_MAX], base[PATH_MAX];
	char sock[256];
	struct stat sst, st;
	mode_t mode;
	int fd, ret, tdir;

	if (fstat(spfd, &sst))
		return cp_err(r, spath, errno);
	if (!S_ISREG(sst.st_mode))
		return cp_err(r, spath, S_ISDIR(sst.st_mode) ? EISDIR : EINVAL);
	if (fstatat(ddir, name, &st, AT_SYMLINK_NOFOLLOW)) {
		if (errno != ENOENT)
			return cp_err(r, dpath, errno);
		mode = sst.st_mode & 0777 & ~r->umask;
	} else if (S_ISLNK(st.st_mode) && follow) {
		/* where the link leads: the copy replaces that file */
		snprintf(via, sizeof(via), "/proc/self/fd/%d/%s", ddir, name);
		if (!realpath(via, dir)) {
			if (errno != ENOENT)
				return cp_err(r, dpath, errno);
			cp_say(r, dpath,
			       "a symbolic link to nothing; not written through");
			return -ENOENT;
		}
		cp_split(dir, dir, base);
		tdir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (tdir < 0)
			return cp_err(r, dir, errno);
		if (cp_phxfs_at(cp_fd_path(tdir, via, sizeof(via)), sock,
				sizeof(sock)) == 1) {
			close(tdir);
			cp_say(r, dpath,
			       "a symbolic link into phxfs; phx cp copies between phxfs and other file systems");
			return -EXDEV;
		}
		ret = cp_out(r, spfd, spath, tdir, base, dpath, false);
		close(tdir);
		return ret;
	} else if (S_ISLNK(st.st_mode)) {
		cp_say(r, dpath,
		       "a symbolic link; phx cp -r does not write through links");
		return -EINVAL;
	} else if (S_ISDIR(st.st_mode)) {
		return cp_err(r, dpath, EISDIR);
	} else if (!S_ISREG(st.st_mode)) {
		cp_say(r, dpath, "not a regular file; remove it first");
		return -EINVAL;
	} else {
		mode = st.st_mode & 0777;
	}
	/* a short name of its own: DST's name may take all of NAME_MAX */
	snprintf(via, sizeof(via), "/proc/self/fd/%d/.phx-cp-XXXXXX", ddir);
	fd = mkostemp(via, O_CLOEXEC);
	if (fd < 0)
		return cp_err(r, dpath, errno);
	snprintf(tmp, sizeof(tmp), "%s", strrchr(via, '/') + 1);
	if (fchmod(fd, mode)) {
		ret = cp_err(r, dpath, errno);
		goto out;
	}
	snprintf(req, sizeof(req), "CPOUT %llu",
		 (unsigned long long)sst.st_ino);
	ret = cp_request(r, req, fd, spfd, dpath);
	if (!ret && renameat(ddir, tmp, ddir, name))
		ret = cp_err(r, dpath, errno);
out:
	close(fd);
	if (ret) {
		r->failed = 1;
		unlinkat(ddir, tmp, 0);
		if (ret == -EINTR)
			cp_stopped(
				r, dpath,
				"the partial copy was removed; the destination is as it was");
	}
	return ret;
}
