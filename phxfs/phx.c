/* SPDX-License-Identifier: MIT */
/*
 * phx.c - the phx command: mount and unmount phxfs, show what it holds,
 * and copy files into device memory through the daemon's transfer engine.
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

#define DEFAULT_MOUNT "/mnt/phx"

static const char *default_mount(void)
{
	const char *mp = getenv("PHX_MOUNT");

	return mp && *mp ? mp : DEFAULT_MOUNT;
}

static int usage(FILE *out)
{
	fprintf(out,
		"usage: phx COMMAND [ARGS]\n\n"
		"  mount [-f] [-o OPTS] [MOUNTPOINT]  start phxfs (default %s)\n"
		"  umount [MOUNTPOINT]                stop it; its files are lost\n"
		"  status [-a] [MOUNTPOINT]           devices, memory, files held\n"
		"  cp [-q] [-r] SRC DST               copy SRC into or out of phxfs\n"
		"                                     through the transfer engine\n\n"
		"phxfs keeps file contents in device memory only: they vanish\n"
		"when it is unmounted or killed.\n",
		DEFAULT_MOUNT);
	return out == stderr ? 2 : 0;
}

static char *fmt_bytes(char *buf, size_t len, double v)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Length of the valid UTF-8 sequence of a printable character at @s. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned int cp;

	if (s[0] < 0x80)
		return s[0] >= ' ' && s[0] != 0x7f;
	len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	if (!len || len > n || s[0] > 0xf4)
		return 0;
	cp = s[0] & (0x7f >> len);
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* overlong, surrogates, C1 controls */
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0)
		return 0;
	return len;
}

/*
 * Print @n bytes of a name to @f as ls -b does: printable characters as they
 * are, a backslash doubled, anything else (control bytes, invalid UTF-8)
 * as \xHH, so that no name can move the cursor or fake a row.
 */
static void print_name_to(FILE *f, const char *name, size_t n)
{
	const unsigned char *p = (const unsigned char *)name;
	size_t i = 0;

	while (i < n) {
		size_t k = utf8_char(p + i, n - i);

		if (p[i] == '\\') {
			fputs("\\\\", f);
			k = 1;
		} else if (k) {
			fwrite(p + i, 1, k, f);
		} else {
			fprintf(f, "\\x%02x", p[i]);
			k = 1;
		}
		i += k;
	}
}

/*
 * @path escaped for a message as phx status prints names (control bytes
 * and invalid UTF-8 as \xHH); one of four rotating buffers, so that one
 * message can quote several paths.
 */
static const char *q(const char *path)
{
	static char bufs[4][4 * PATH_MAX];
	static unsigned int next;
	char *out = bufs[next++ % 4];
	FILE *f = fmemopen(out, sizeof(bufs[0]), "w");

	if (!f)
		return "?";
	print_name_to(f, path, strlen(path));
	fclose(f);
	return out;
}

/* Control socket of the phxfs that holds @path, or -errno with a message. */
static int socket_of(const char *path, char *out, size_t len)
{
	int ret = phxfs_socket_of(path, out, len);

	if (ret)
		fprintf(stderr,
			"phx: %s: %s; is phxfs mounted there (phx mount)?\n",
			q(path),
			ret == -ENOTSUP ? "not on phxfs" : strerror(-ret));
	return ret;
}

/* ---- status --------------------------------------------------------- */

static void print_name(const char *name, size_t n)
{
	print_name_to(stdout, name, n);
}

static void print_dev(const struct phxfs_status_dev *d)
{
	char c[32], u[32], m[32];

	printf("%-8s %-5s %10s %10s %6u  %-9s %10s  ", d->name, d->kind,
	       fmt_bytes(c, sizeof(c), (double)d->capacity),
	       fmt_bytes(u, sizeof(u), (double)d->used), d->files, d->path,
	       fmt_bytes(m, sizeof(m),
			 (double)(d->moved + d->bytes_in + d->bytes_out)));
	print_name(d->model, strlen(d->model));
	putchar('\n');
}

static void print_file(const struct phxfs_status_file *f)
{
	char s[32], h[32];

	printf("%-8s %10s %10s  %-9s ", f->device,
	       fmt_bytes(s, sizeof(s), (double)f->size),
	       fmt_bytes(h, sizeof(h), (double)f->held), f->path);
	print_name(f->name, f->name_len);
	putchar('\n');
}

/* What users may take: xattrs, inodes, root's reserve, the socket. */
static void print_limits(const struct phxfs_status *st)
{
	char a[32], b[32], c[32];
	unsigned int i;

	if (!st->nr_inodes)
		return; /* an older daemon */
	printf("\nlimits: xattrs %s of %s (%s per file), inodes %llu and names %llu of %llu, control connections %u of %u (%u per user)\n",
	       fmt_bytes(a, sizeof(a), (double)st->xattr_bytes),
	       fmt_bytes(b, sizeof(b), (double)st->xattr_size),
	       fmt_bytes(c, sizeof(c), (double)st->xattr_file),
	       (unsigned long long)st->inodes, (unsigned long long)st->names,
	       (unsigned long long)st->nr_inodes, st->ctl_conns,
	       st->ctl_conns_max, st->ctl_conns_uid);
	for (i = 0; st->root_reserve && i < st->ndevs; i++)
		printf("%-8s keeps %s for root (root_reserve)\n",
		       st->devs[i].name,
		       fmt_bytes(a, sizeof(a), (double)st->root_reserve[i]));
}

static int cmd_status(int argc, char **argv)
{
	struct phxfs_status *st;
	bool all = false;
	const char *mp;
	unsigned int i;
	int opt, ret;

	while ((opt = getopt(argc, argv, "a")) != -1) {
		if (opt != 'a')
			return usage(stderr);
		all = true;
	}
	mp = optind < argc ? argv[optind] : default_mount();
	ret = phxfs_status_get(mp, &st);
	if (ret == -ENOTSUP) {
		fprintf(stderr,
			"phx: %s: not on phxfs; is phxfs mounted there (phx mount)?\n",
			q(mp));
		return 1;
	}
	if (ret) {
		fprintf(stderr, "phx: %s: cannot read phxfs's status: %s\n",
			q(mp), strerror(-ret));
		return 1;
	}
	printf("%-8s %-5s %10s %10s %6s  %-9s %10s  %s\n", "DEVICE", "KIND",
	       "CAPACITY", "USED", "FILES", "PATH", "MOVED", "MODEL");
	for (i = 0; i < st->ndevs; i++)
		print_dev(&st->devs[i]);
	for (i = 0; i < st->ndevs; i++)
		printf("%-8s daemon served %llu WRITE and %llu READ requests\n",
		       st->devs[i].name,
		       (unsigned long long)st->devs[i].write_requests,
		       (unsigned long long)st->devs[i].read_requests);
	printf("\nFUSE passthrough (the kernel serves phx.ko files): %s",
	       st->passthrough ? "on" : "off ");
	if (!st->passthrough)
		print_name(st->passthrough_why, strlen(st->passthrough_why));
	printf("\nFUSE over io_uring (requests served on the caller's CPU): %s",
	       st->uring ? "on" : "off ");
	if (!st->uring)
		print_name(st->uring_why, strlen(st->uring_why));
	putchar('\n');
	print_limits(st);
	for (i = 0; all && i < st->nfiles; i++) {
		if (!i)
			printf("\n%-8s %10s %10s  %-9s %s\n", "DEVICE", "SIZE",
			       "HELD", "PATH", "FILE");
		print_file(&st->files[i]);
	}
	if (all && st->unlisted)
		printf("... and %u more files not listed: the reply is capped at 16 MiB\n",
		       st->unlisted);
	printf("\nmounted at ");
	print_name(st->mountpoint, strlen(st->mountpoint));
	printf("; contents live in device memory and vanish with phxfs\n");
	phxfs_status_free(st);
	return 0;
}

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
	double dt = now_s() - t0;
	int width = 30, fill = total ? (int)(width * done / total) : width;

	fprintf(stderr, "\r[%.*s%*s] %3d%%  %s / %s  %.2f GB/s ", fill,
		"##############################", width - fill, "",
		total ? (int)(100 * done / total) : 100,
		fmt_bytes(d, sizeof(d), (double)done),
		fmt_bytes(t, sizeof(t), (double)total),
		dt > 0 ? (double)done / dt / 1e9 : 0.0);
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

	if (socket_of(on, sock, sizeof(sock)))
		return -EXDEV;
	s = phxfs_connect(sock);
	if (s < 0) {
		fprintf(stderr, "phx: cp: cannot reach phxfs at %s: %s\n",
			q(sock), strerror(-s));
		return s;
	}
	snprintf(line, sizeof(line), "%s\n", req);
	ret = phxfs_send_request(s, line, fd, on);
	if (ret)
		fprintf(stderr, "phx: cp: %s: cannot send the request: %s\n",
			q(what), strerror(-ret));
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
		ret = -phxfs_line_err(line);
		if (r->bar)
			fputc('\n', stderr);
		fprintf(stderr, "phx: cp: %s: %s\n", q(what), line);
		break;
	}
	if (ret == -EPIPE)
		fprintf(stderr, "phx: cp: %s: phxfs at %s hung up\n", q(what),
			q(sock));
	else if (ret == -ETIMEDOUT)
		fprintf(stderr,
			"phx: cp: %s: phxfs at %s sent nothing for %d s; is the daemon stuck?\n",
			q(what), q(sock), PHXFS_CLIENT_TIMEOUT);
	close(s);
	return ret;
}

static int cp_err(const char *path, int err)
{
	fprintf(stderr, "phx: cp: %s: %s\n", q(path), strerror(err));
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
				q(dst), strerror(errno));
	} else if (ret && !stat(dst, &sst) && sst.st_size != st.st_size) {
		fprintf(stderr,
			"phx: cp: %s was overwritten in place and now holds only the first %llu bytes of %s; its old contents are gone\n",
			q(dst), (unsigned long long)sst.st_size, q(src));
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
				q(s));
		}
	}
	closedir(d);
}

static int cmd_cp(int argc, char **argv)
{
	struct cp_run r = { .t0 = now_s() };
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
			return usage(stderr);
	}
	if (argc - optind != 2)
		return usage(stderr);
	src = argv[optind];
	if (stat(src, &st)) {
		cp_err(src, errno);
		return 1;
	}
	if (S_ISDIR(st.st_mode) && !recurse) {
		fprintf(stderr,
			"phx: cp: %s is a directory; use phx cp -r to copy it\n",
			q(src));
		return 1;
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"phx: cp: %s is not a regular file or directory; copy it with cp\n",
			q(src));
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
			q(src), q(dst));
		return 1;
	}
	if (!src_on && dir_missing_on_phxfs(dst)) {
		snprintf(srcbuf, sizeof(srcbuf), "%s", dst);
		fprintf(stderr,
			"phx: cp: %s: no such directory on phxfs; create it first (mkdir -p)\n",
			q(dirname(srcbuf)));
		return 1;
	}
	if (!src_on && !dst_on) {
		fprintf(stderr,
			"phx: cp: neither %s nor %s is on phxfs; is phxfs mounted (phx mount)?\n",
			q(src), q(dst));
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
	dt = now_s() - r.t0;
	if (!r.quiet && r.files)
		fprintf(stderr,
			"%llu file%s, %s in %.2f s, %.2f GB/s, path %s\n",
			r.files, r.files == 1 ? "" : "s",
			fmt_bytes(b, sizeof(b), (double)r.base), dt,
			dt > 0 ? (double)r.base / dt / 1e9 : 0.0, r.path);
	return r.failed ? 1 : 0;
}

/* ---- mount / umount ------------------------------------------------- */

/* Run @argv and wait; returns its exit status, or -1. */
static int run(char *const argv[])
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (!pid) {
		execvp(argv[0], argv);
		fprintf(stderr, "phx: cannot run %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int detach(const char *mp, bool lazy)
{
	char *lazy_argv[] = { "fusermount3", "-u", "-z", (char *)mp, NULL };
	char *plain_argv[] = { "fusermount3", "-u", (char *)mp, NULL };

	if (!geteuid())
		return umount2(mp, lazy ? MNT_DETACH : 0) ? -errno : 0;
	return run(lazy ? lazy_argv : plain_argv) ? -EIO : 0;
}

/* The phxfs next to this phx (build tree, or PREFIX/bin and PREFIX/sbin). */
static void daemon_path(char *out, size_t len)
{
	static const char *const rel[] = { "phxfs", "../sbin/phxfs" };
	char self[PATH_MAX], cand[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	unsigned int i;

	snprintf(out, len, "phxfs");
	if (n <= 0)
		return;
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	for (i = 0; i < 2; i++) {
		snprintf(cand, sizeof(cand), "%s/%s", self, rel[i]);
		if (!access(cand, X_OK)) {
			snprintf(out, len, "%s", cand);
			return;
		}
	}
}

/*
 * Is @mp the mount of a phxfs that died?  Its calls fail with ENOTCONN,
 * or over io_uring with ECANCELED while the kernel tears its queues down.
 */
static bool daemon_dead(const char *mp)
{
	struct statvfs sv;

	return statvfs(mp, &sv) && (errno == ENOTCONN || errno == ECANCELED);
}

static int cmd_mount(int argc, char **argv)
{
	char opts[1024] = "", daemon[PATH_MAX + 32], sock[256];
	char *dargv[8];
	bool fg = false;
	const char *mp;
	int opt, n = 0;

	while ((opt = getopt(argc, argv, "fo:")) != -1) {
		if (opt == 'f') {
			fg = true;
		} else if (opt == 'o') {
			size_t l = strlen(opts);

			snprintf(opts + l, sizeof(opts) - l, "%s%s",
				 l ? "," : "", optarg);
		} else {
			return usage(stderr);
		}
	}
	mp = optind < argc ? argv[optind] : default_mount();
	/* statfs always reaches the daemon: attributes may be cached. */
	if (daemon_dead(mp)) {
		if (detach(mp, true)) {
			fprintf(stderr,
				"phx: %s: cannot remove the stale mount of a dead phxfs; run umount -l %s\n",
				q(mp), q(mp));
			return 1;
		}
		fprintf(stderr,
			"phx: removed the stale mount at %s (its phxfs had died)\n",
			q(mp));
	}
	if (getxattr(mp, "user.phx.socket", sock, sizeof(sock)) >= 0 ||
	    errno == ERANGE) {
		printf("phx: phxfs is already mounted at %s\n", q(mp));
		return 0;
	}
	if (mkdir(mp, 0755) && errno != EEXIST) {
		fprintf(stderr, "phx: cannot create %s: %s\n", q(mp),
			strerror(errno));
		return 1;
	}
	daemon_path(daemon, sizeof(daemon));
	dargv[n++] = daemon;
	dargv[n++] = (char *)mp;
	if (fg)
		dargv[n++] = "-f";
	if (*opts) {
		dargv[n++] = "-o";
		dargv[n++] = opts;
	}
	dargv[n] = NULL;
	if (fg) {
		execvp(daemon, dargv);
		fprintf(stderr, "phx: cannot run %s: %s\n", daemon,
			strerror(errno));
		return 1;
	}
	return run(dargv) ? 1 : 0;
}

static int cmd_umount(int argc, char **argv)
{
	const char *mp = argc > 1 ? argv[1] : default_mount();
	bool stale = daemon_dead(mp);
	int ret = detach(mp, stale);

	if (ret == -EBUSY) {
		fprintf(stderr,
			"phx: %s is busy: close the files open under it (see fuser -m %s), or phx umount again after\n",
			q(mp), q(mp));
	} else if (ret) {
		fprintf(stderr, "phx: cannot unmount %s: %s\n", q(mp),
			strerror(-ret));
	}
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage(stderr);
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help"))
		return usage(stdout);
	if (!strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "cp"))
		return cmd_cp(argc - 1, argv + 1);
	if (!strcmp(argv[1], "mount"))
		return cmd_mount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount") || !strcmp(argv[1], "unmount"))
		return cmd_umount(argc - 1, argv + 1);
	fprintf(stderr, "phx: unknown command '%s'\n", argv[1]);
	return usage(stderr);
}
