/* SPDX-License-Identifier: MIT */
/*
 * cp.c - phx cp: copy files, or trees with -r, into or out of phxfs
 * through the daemon's transfer engine (CP and CPOUT requests), with a
 * progress line.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "phxfs_client.h"
#include "cli.h"

/* ---- cp ------------------------------------------------------------- */

/* One phx cp: what it copies and how far it got, for the progress line. */
struct cp_run {
	bool bar, quiet;
	bool out; /* phxfs -> elsewhere */
	double t0;
	unsigned long long total; /* bytes of all files */
	unsigned long long base; /* bytes of the files done */
	unsigned long long files;
	char path[32]; /* data path of the last file */
	int failed;
};

static void progress(unsigned long long done, unsigned long long total,
		     double t0)
{
	char d[32], t[32];
	double dt = cli_now() - t0;
	int width = 30, fill = total ? (int)(width * done / total) : width;

	fprintf(stderr, "\r[%.*s%*s] %3d%%  %s / %s  %.2f GB/s ", fill,
		"##############################", width - fill, "",
		total ? (int)(100 * done / total) : 100,
		cli_bytes(d, sizeof(d), (double)done),
		cli_bytes(t, sizeof(t), (double)total), cli_rate(done, dt));
}

/* Is @path on a phxfs mount (it answers the socket xattr)? */
static bool on_phxfs(const char *path)
{
	char sock[256];

	return getxattr(path, "user.phx.socket", sock, sizeof(sock)) >= 0 ||
	       errno == ERANGE;
}

/* Is @path, or the directory it would be created in, on phxfs? */
static bool lands_on_phxfs(const char *path)
{
	char dir[PATH_MAX];

	if (!access(path, F_OK))
		return on_phxfs(path);
	snprintf(dir, sizeof(dir), "%s", path);
	return on_phxfs(dirname(dir));
}

/*
 * Is @path's directory missing below a directory of phxfs?  Then phx cp
 * says so rather than that neither side is on phxfs.
 */
static bool dir_missing_on_phxfs(const char *path)
{
	char dir[PATH_MAX], up[PATH_MAX];
	struct stat st;

	snprintf(up, sizeof(up), "%s", path);
	snprintf(dir, sizeof(dir), "%s", dirname(up));
	if (!stat(dir, &st))
		return false;
	while (strcmp(dir, "/") && strcmp(dir, ".")) {
		snprintf(up, sizeof(up), "%s", dir);
		snprintf(dir, sizeof(dir), "%s", dirname(up));
		if (!stat(dir, &st))
			return on_phxfs(dir);
	}
	return false;
}

/*
 * Send @req ("CP <ino>" or "CPOUT <ino>") with @fd to the phxfs that holds
 * @on, show its progress, and wait for its answer.  0 or -errno.
 */
static int request(struct cp_run *r, const char *on, const char *req, int fd,
		   const char *what)
{
	char sock[256], line[PHXFS_LINE_MAX];
	unsigned long long done, total;
	int s, ret;

	if (cli_socket_of(on, sock, sizeof(sock)))
		return -EXDEV;
	s = phxfs_connect(sock);
	if (s < 0) {
		fprintf(stderr, "phx: cp: cannot reach phxfs at %s: %s\n",
			cli_quote(sock), strerror(-s));
		return s;
	}
	snprintf(line, sizeof(line), "%s\n", req);
	ret = phxfs_send_request(s, line, fd, on);
	if (ret)
		fprintf(stderr, "phx: cp: %s: cannot send the request: %s\n",
			cli_quote(what), strerror(-ret));
	while (!ret && (ret = phxfs_read_line(s, line, sizeof(line))) >= 0) {
		ret = 0;
		if (sscanf(line, "PROGRESS %llu %llu", &done, &total) == 2) {
			if (r->bar)
				progress(r->base + done, r->total, r->t0);
			continue;
		}
		if (sscanf(line, "OK %llu %31s", &done, r->path) == 2) {
			r->base += done;
			r->files++;
			break;
		}
		ret = phxfs_line_err(line);
		if (r->bar)
			fputc('\n', stderr);
		fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(what), line);
		break;
	}
	if (ret == -EPIPE)
		fprintf(stderr, "phx: cp: %s: phxfs at %s hung up\n",
			cli_quote(what), cli_quote(sock));
	else if (ret == -ETIMEDOUT)
		fprintf(stderr,
			"phx: cp: %s: phxfs at %s sent nothing for %d s; is the daemon stuck?\n",
			cli_quote(what), cli_quote(sock), PHXFS_CLIENT_TIMEOUT);
	close(s);
	return ret;
}

static int cp_err(const char *path, int err)
{
	fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(path), strerror(err));
	return -err;
}

/* Copy @src from elsewhere into the phxfs file @dst. */
static int cp_in(struct cp_run *r, const char *src, const char *dst)
{
	char req[64];
	struct stat st;
	struct stat sst;
	bool created = false;
	int fd, ret;

	fd = open(src, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cp_err(src, errno);
	if (fstat(fd, &sst)) {
		ret = cp_err(src, errno);
		goto out;
	}
	/*
	 * Create DST without keeping it open: on phx.ko devices an open
	 * file pins the file's device memory in place, and the daemon may
	 * have to move it to make room for SRC.  An existing DST is cut to
	 * at most SRC's size as the caller (the kernel checks the caller
	 * may write it, and clears set-user-ID bits); the daemon overwrites
	 * every byte, so the device memory it keeps is reused, not freed
	 * and allocated again.
	 */
	created = !mknod(dst, S_IFREG | 0666, 0);
	if ((!created && errno != EEXIST) || stat(dst, &st)) {
		ret = cp_err(dst, errno);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = cp_err(dst, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
		goto out;
	}
	if (!S_ISREG(sst.st_mode) || sst.st_size < st.st_size)
		st.st_size = S_ISREG(sst.st_mode) ? sst.st_size : 0;
	if (truncate(dst, st.st_size)) {
		ret = cp_err(dst, errno);
		goto out;
	}
	snprintf(req, sizeof(req), "CP %llu", (unsigned long long)st.st_ino);
	ret = request(r, dst, req, fd, dst);
	if (ret && created) {
		/* nothing half-made stays behind holding device memory */
		if (unlink(dst))
			fprintf(stderr,
				"phx: cp: %s: the failed copy could not be removed: %s; remove it with rm\n",
				cli_quote(dst), strerror(errno));
	} else if (ret && !stat(dst, &sst) && sst.st_size != st.st_size) {
		fprintf(stderr,
			"phx: cp: %s was overwritten in place and now holds only the first %llu bytes of %s; its old contents are gone\n",
			cli_quote(dst), (unsigned long long)sst.st_size,
			cli_quote(src));
	}
out:
	close(fd);
	return ret;
}

/*
 * Copy the phxfs file @src out to @dst: the daemon writes a temporary
 * file next to @dst, which replaces @dst only once complete.
 */
static int cp_out(struct cp_run *r, const char *src, const char *dst)
{
	char tmp[PATH_MAX], req[64];
	struct stat st;
	mode_t mask;
	int fd, ret;

	if (stat(src, &st))
		return cp_err(src, errno);
	if (!S_ISREG(st.st_mode))
		return cp_err(src, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
	if (snprintf(tmp, sizeof(tmp), "%s.phx-XXXXXX", dst) >=
	    (int)sizeof(tmp))
		return cp_err(dst, ENAMETOOLONG);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return cp_err(dst, errno);
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask)) {
		ret = cp_err(dst, errno);
		goto out;
	}
	snprintf(req, sizeof(req), "CPOUT %llu", (unsigned long long)st.st_ino);
	ret = request(r, src, req, fd, src);
	if (!ret && rename(tmp, dst))
		ret = cp_err(dst, errno);
out:
	close(fd);
	if (ret)
		unlink(tmp);
	return ret;
}

static int cp_file(struct cp_run *r, const char *src, const char *dst)
{
	int ret = r->out ? cp_out(r, src, dst) : cp_in(r, src, dst);

	if (ret)
		r->failed = 1;
	return ret;
}

/* Bytes of the regular files under @path. */
static unsigned long long tree_size(const char *path)
{
	char sub[PATH_MAX];
	unsigned long long n = 0;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (lstat(path, &st))
		return 0;
	if (S_ISREG(st.st_mode))
		return (unsigned long long)st.st_size;
	if (!S_ISDIR(st.st_mode) || !(d = opendir(path)))
		return 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		n += tree_size(sub);
	}
	closedir(d);
	return n;
}

/* Copy directory @src to @dst, creating it; the rest goes on after a
 * file fails, and r->failed says so. */
static void cp_tree(struct cp_run *r, const char *src, const char *dst)
{
	char s[PATH_MAX], t[PATH_MAX];
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (mkdir(dst, 0777) && errno != EEXIST) {
		r->failed = 1;
		cp_err(dst, errno);
		return;
	}
	d = opendir(src);
	if (!d) {
		r->failed = 1;
		cp_err(src, errno);
		return;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(s, sizeof(s), "%s/%s", src, de->d_name) >=
			    (int)sizeof(s) ||
		    snprintf(t, sizeof(t), "%s/%s", dst, de->d_name) >=
			    (int)sizeof(t)) {
			r->failed = 1;
			cp_err(s, ENAMETOOLONG);
			continue;
		}
		if (lstat(s, &st)) {
			r->failed = 1;
			cp_err(s, errno);
		} else if (S_ISDIR(st.st_mode)) {
			cp_tree(r, s, t);
		} else if (S_ISREG(st.st_mode)) {
			cp_file(r, s, t);
		} else {
			r->failed = 1;
			fprintf(stderr,
				"phx: cp: %s: not a regular file or directory; skipped (copy it with cp)\n",
				cli_quote(s));
		}
	}
	closedir(d);
}

int cli_cp(int argc, char **argv)
{
	struct cp_run r = { .t0 = cli_now() };
	char dst[PATH_MAX], srcbuf[PATH_MAX], b[32];
	const char *src;
	bool recurse = false, src_on, dst_on;
	struct stat st;
	double dt;
	int opt;

	while ((opt = getopt(argc, argv, "qr")) != -1) {
		if (opt == 'q')
			r.quiet = true;
		else if (opt == 'r')
			recurse = true;
		else
			return cli_usage(stderr);
	}
	if (argc - optind != 2)
		return cli_usage(stderr);
	src = argv[optind];
	if (stat(src, &st)) {
		cp_err(src, errno);
		return 1;
	}
	if (S_ISDIR(st.st_mode) && !recurse) {
		fprintf(stderr,
			"phx: cp: %s is a directory; use phx cp -r to copy it\n",
			cli_quote(src));
		return 1;
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"phx: cp: %s is not a regular file or directory; copy it with cp\n",
			cli_quote(src));
		return 1;
	}
	snprintf(dst, sizeof(dst), "%s", argv[optind + 1]);
	if (!stat(dst, &st) && S_ISDIR(st.st_mode)) {
		snprintf(srcbuf, sizeof(srcbuf), "%s", src);
		if (snprintf(dst, sizeof(dst), "%s/%s", argv[optind + 1],
			     basename(srcbuf)) >= (int)sizeof(dst)) {
			cp_err(argv[optind + 1], ENAMETOOLONG);
			return 1;
		}
	}
	src_on = on_phxfs(src);
	dst_on = lands_on_phxfs(dst);
	if (src_on && dst_on) {
		fprintf(stderr,
			"phx: cp: %s and %s are both on phxfs; phx cp copies between phxfs and other file systems, use cp or mv within it\n",
			cli_quote(src), cli_quote(dst));
		return 1;
	}
	if (!src_on && dir_missing_on_phxfs(dst)) {
		snprintf(srcbuf, sizeof(srcbuf), "%s", dst);
		fprintf(stderr,
			"phx: cp: %s: no such directory on phxfs; create it first (mkdir -p)\n",
			cli_quote(dirname(srcbuf)));
		return 1;
	}
	if (!src_on && !dst_on) {
		fprintf(stderr,
			"phx: cp: neither %s nor %s is on phxfs; is phxfs mounted (phx mount)?\n",
			cli_quote(src), cli_quote(dst));
		return 1;
	}
	r.out = src_on;
	r.total = tree_size(src);
	r.bar = !r.quiet && isatty(2);
	if (recurse && !stat(src, &st) && S_ISDIR(st.st_mode))
		cp_tree(&r, src, dst);
	else
		cp_file(&r, src, dst);
	if (r.bar && r.files)
		progress(r.base, r.total, r.t0);
	if (r.bar)
		fputc('\n', stderr);
	dt = cli_now() - r.t0;
	if (!r.quiet && r.files)
		fprintf(stderr,
			"%llu file%s, %s in %.2f s, %.2f GB/s, path %s\n",
			r.files, r.files == 1 ? "" : "s",
			cli_bytes(b, sizeof(b), (double)r.base), dt,
			cli_rate(r.base, dt), r.path);
	return r.failed ? 1 : 0;
}
