/* SPDX-License-Identifier: MIT */
/*
 * cp.c - phx cp: copy files, or trees with -r, into or out of phxfs
 * through the daemon's transfer engine (CP and CPOUT requests), with a
 * progress line.  Here the command: its arguments, which side is phxfs,
 * where the copy lands, and what it says at the end.
 *
 * Below the paths it is given, phx cp works on directory descriptors and
 * names (the *at() calls) and never follows a symbolic link: a link
 * planted in a destination tree cannot send a copy elsewhere.
 */
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

/* @dir, then "/", then @name into @out (PATH_MAX); 0 or -ENAMETOOLONG. */
static int join(char *out, const char *dir, const char *name)
{
	size_t n = strlen(dir);
	int len = snprintf(out, PATH_MAX, "%s%s%s", dir,
			   n && dir[n - 1] == '/' ? "" : "/", name);

	return len < 0 || len >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/*
 * Is @path's directory missing below a directory of phxfs?  Then phx cp
 * says so rather than that neither side is on phxfs.
 */
static bool dir_missing_on_phxfs(const char *path)
{
	char dir[PATH_MAX], name[PATH_MAX], sock[256];
	struct stat st;

	cp_split(path, dir, name);
	if (!stat(dir, &st))
		return false;
	while (strcmp(dir, "/") && strcmp(dir, ".")) {
		cp_split(dir, dir, name);
		if (!stat(dir, &st))
			return cp_phxfs_at(dir, sock, sizeof(sock)) == 1;
	}
	return false;
}

int cli_cp(int argc, char **argv)
{
	struct cp_run r = { .t0 = cli_now() };
	char dst[PATH_MAX], dir[PATH_MAX], name[PATH_MAX], via[64];
	char srcname[PATH_MAX], ssock[256], dsock[256];
	const char *src;
	int src_on, dst_on, ddir, sfd;
	bool recurse = false;
	struct stat st, sst, dst_st;
	double dt;
	char b[32];
	int opt;

	while ((opt = getopt(argc, argv, ":qr")) != -1) {
		if (opt == 'q')
			r.quiet = true;
		else if (opt == 'r')
			recurse = true;
		else
			return cli_bad_option("cp", opt);
	}
	if (argc - optind != 2)
		return cli_usage_err("cp", argc - optind < 2 ?
						   "SRC and DST are needed" :
						   "one SRC and one DST only");
	src = argv[optind];
	r.umask = umask(0);
	umask(r.umask);
	if (strlen(src) >= PATH_MAX) {
		cp_err(&r, src, ENAMETOOLONG);
		return 1;
	}
	if (strlen(argv[optind + 1]) >= PATH_MAX) {
		cp_err(&r, argv[optind + 1], ENAMETOOLONG);
		return 1;
	}
	if (stat(src, &sst)) {
		cp_err(&r, src, errno);
		return 1;
	}
	if (S_ISDIR(sst.st_mode) && !recurse) {
		fprintf(stderr,
			"phx: cp: %s is a directory; use phx cp -r to copy it\n",
			cli_quote(src));
		return 1;
	}
	if (!S_ISDIR(sst.st_mode) && !S_ISREG(sst.st_mode)) {
		fprintf(stderr,
			"phx: cp: %s is not a regular file or directory; copy it with cp\n",
			cli_quote(src));
		return 1;
	}
	src_on = cp_phxfs_at(src, ssock, sizeof(ssock));
	if (src_on < 0) {
		cp_err(&r, src, -src_on);
		return 1;
	}
	/* DST, or DST/SRC's name where DST is a directory */
	strcpy(dst, argv[optind + 1]);
	if (!stat(dst, &dst_st) && S_ISDIR(dst_st.st_mode)) {
		cp_split(src, dir, srcname);
		if (join(dst, argv[optind + 1], srcname)) {
			cp_end_bar(&r);
			fprintf(stderr, "phx: cp: %s/%s: %s\n",
				cli_quote(argv[optind + 1]), cli_quote(srcname),
				strerror(ENAMETOOLONG));
			return 1;
		}
	}
	cp_split(dst, dir, name);
	ddir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ddir < 0) {
		if (errno == ENOENT && src_on != 1 &&
		    dir_missing_on_phxfs(dst)) {
			fprintf(stderr,
				"phx: cp: %s: no such directory on phxfs; create it first (mkdir -p)\n",
				cli_quote(dir));
			return 1;
		}
		cp_err(&r, dst, errno);
		return 1;
	}
	/* where the copy lands is judged on the directory it lands in */
	dst_on = cp_phxfs_at(cp_fd_path(ddir, via, sizeof(via)), dsock,
			     sizeof(dsock));
	if (dst_on < 0 || fstat(ddir, &st)) {
		cp_err(&r, dir, dst_on < 0 ? -dst_on : errno);
		goto out;
	}
	r.ddev = st.st_dev;
	if (src_on == 1 && dst_on == 1) {
		fprintf(stderr,
			"phx: cp: %s and %s are both on phxfs; phx cp copies between phxfs and other file systems, use cp or mv within it\n",
			cli_quote(src), cli_quote(dst));
		r.failed = 1;
		goto out;
	}
	if (src_on != 1 && dst_on != 1) {
		fprintf(stderr,
			"phx: cp: neither %s nor %s is on phxfs; is phxfs mounted (phx mount)?\n",
			cli_quote(src), cli_quote(dst));
		r.failed = 1;
		goto out;
	}
	r.out = src_on == 1;
	if (!r.out && cp_phxfs_top(via)) {
		fprintf(stderr,
			"phx: cp: %s is phxfs's top level, which holds only its devices; copy into one of them (ls %s)\n",
			cli_quote(dir), cli_quote(dir));
		r.failed = 1;
		goto out;
	}
	strcpy(r.sock, r.out ? ssock : dsock);
	if (cp_catch_signals()) {
		cp_err(&r, src, errno);
		goto out;
	}
	r.bar = !r.quiet && isatty(2);
	if (S_ISDIR(sst.st_mode)) {
		sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd < 0) {
			cp_err(&r, src, errno);
			goto out;
		}
		if (r.bar)
			r.total = cp_tree_size(
				&r, openat(sfd, ".",
					   O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		strcpy(r.spath, src);
		strcpy(r.dpath, dst);
		cp_tree(&r, sfd, ddir, name);
		/* a signal between two files ends the walk there */
		if (cp_signal && !r.stopped)
			cp_stopped(
				&r, dst,
				"the files copied before it stay as they are");
	} else {
		/* O_NONBLOCK: what replaced the file may be a FIFO */
		sfd = open(src, (r.out ? O_PATH : O_RDONLY | O_NONBLOCK) |
					O_CLOEXEC);
		if (sfd < 0) {
			cp_err(&r, src, errno);
			goto out;
		}
		if (!r.out)
			fcntl(sfd, F_SETFL, 0);
		r.total = (unsigned long long)sst.st_size;
		if (r.out)
			cp_out(&r, sfd, src, ddir, name, dst, true);
		else
			cp_in(&r, sfd, src, ddir, name, dst);
		close(sfd);
	}
	if (r.bar && r.files)
		cp_progress(r.base, r.total, r.t0);
	cp_end_bar(&r);
	dt = cli_now() - r.t0;
	if (!r.quiet && r.files)
		fprintf(stderr,
			"%llu file%s, %s in %.2f s, %.2f GB/s, path %s\n",
			r.files, r.files == 1 ? "" : "s",
			cli_bytes(b, sizeof(b), (double)r.base), dt,
			cli_rate(r.base, dt), r.path);
out:
	close(ddir);
	/* a signal that came once every copy was over stopped nothing */
	if (r.stopped)
		return 128 + cp_signal;
	return r.failed ? 1 : 0;
}
