/* SPDX-License-Identifier: MIT */
/*
 * phx.c - the phx command: mount and unmount phxfs, show what it holds,
 * and copy files into device memory through the daemon's transfer engine.
 */
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
		"  cp [-q] SRC DST                    copy SRC into phxfs via the\n"
		"                                     transfer engine\n\n"
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

/* Control socket of the phxfs that holds @path, or -errno with a message. */
static int socket_of(const char *path, char *out, size_t len)
{
	int ret = phxfs_socket_of(path, out, len);

	if (ret)
		fprintf(stderr,
			"phx: %s: %s; is phxfs mounted there (phx mount)?\n",
			path,
			ret == -ENOTSUP ? "not on phxfs" : strerror(-ret));
	return ret;
}

/* ---- status --------------------------------------------------------- */

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
 * Print @n bytes of a name as ls -b does: printable characters as they
 * are, a backslash doubled, anything else (control bytes, invalid UTF-8)
 * as \xHH, so that no name can move the cursor or fake a row.
 */
static void print_name(const char *name, size_t n)
{
	const unsigned char *p = (const unsigned char *)name;
	size_t i = 0;

	while (i < n) {
		size_t k = utf8_char(p + i, n - i);

		if (p[i] == '\\') {
			fputs("\\\\", stdout);
			k = 1;
		} else if (k) {
			fwrite(p + i, 1, k, stdout);
		} else {
			printf("\\x%02x", p[i]);
			k = 1;
		}
		i += k;
	}
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
			mp);
		return 1;
	}
	if (ret) {
		fprintf(stderr, "phx: %s: cannot read phxfs's status: %s\n", mp,
			strerror(-ret));
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
	putchar('\n');
	for (i = 0; all && i < st->nfiles; i++) {
		if (!i)
			printf("\n%-8s %10s %10s  %-9s %s\n", "DEVICE", "SIZE",
			       "HELD", "PATH", "FILE");
		print_file(&st->files[i]);
	}
	printf("\nmounted at ");
	print_name(st->mountpoint, strlen(st->mountpoint));
	printf("; contents live in device memory and vanish with phxfs\n");
	phxfs_status_free(st);
	return 0;
}

/* ---- cp ------------------------------------------------------------- */

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

static int send_fd(int sock, const char *line, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)line, strlen(line) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* Ask the daemon to pull @src into file @ino, @dst_path. */
static int pull(const char *dst_path, ino_t ino, int src, bool bar, bool quiet)
{
	char sock[256], line[PHXFS_LINE_MAX], path[32], b[32];
	unsigned long long done, total;
	double t0 = now_s();
	int fd, ret;

	if (socket_of(dst_path, sock, sizeof(sock)))
		return -EXDEV;
	fd = phxfs_connect(sock);
	if (fd < 0) {
		fprintf(stderr, "phx: cannot reach phxfs at %s: %s\n", sock,
			strerror(-fd));
		return fd;
	}
	snprintf(line, sizeof(line), "CP %llu\n", (unsigned long long)ino);
	ret = send_fd(fd, line, src);
	while (!ret && (ret = phxfs_read_line(fd, line, sizeof(line))) >= 0) {
		ret = 0;
		if (sscanf(line, "PROGRESS %llu %llu", &done, &total) == 2) {
			if (bar)
				progress(done, total, t0);
			continue;
		}
		if (bar)
			fputc('\n', stderr);
		if (sscanf(line, "OK %llu %31s", &done, path) == 2) {
			double dt = now_s() - t0;

			if (!quiet)
				fprintf(stderr,
					"%s in %.2f s, %.2f GB/s, path %s\n",
					fmt_bytes(b, sizeof(b), (double)done),
					dt,
					dt > 0 ? (double)done / dt / 1e9 : 0.0,
					path);
			break;
		}
		ret = -phxfs_line_err(line);
		fprintf(stderr, "phx: cp to %s: %s\n", dst_path, line);
		break;
	}
	close(fd);
	return ret;
}

static int cmd_cp(int argc, char **argv)
{
	char dst[PATH_MAX + 256], *base;
	struct stat st;
	bool quiet = false;
	int opt, src, ret;

	while ((opt = getopt(argc, argv, "q")) != -1) {
		if (opt != 'q')
			return usage(stderr);
		quiet = true;
	}
	if (argc - optind != 2)
		return usage(stderr);
	snprintf(dst, sizeof(dst), "%s", argv[optind + 1]);
	if (!stat(dst, &st) && S_ISDIR(st.st_mode)) {
		base = basename(argv[optind]);
		snprintf(dst, sizeof(dst), "%s/%s", argv[optind + 1], base);
	}
	src = open(argv[optind], O_RDONLY | O_CLOEXEC);
	if (src < 0) {
		fprintf(stderr, "phx: cp: %s: %s\n", argv[optind],
			strerror(errno));
		return 1;
	}
	/*
	 * Create or empty DST without keeping it open: on phx.ko devices an
	 * open file pins the file's device memory in place, and the daemon
	 * may have to move it to make room for SRC.
	 */
	if (mknod(dst, S_IFREG | 0666, 0) && errno != EEXIST)
		goto out_err;
	if (stat(dst, &st))
		goto out_err;
	if (!S_ISREG(st.st_mode)) {
		errno = EISDIR;
		goto out_err;
	}
	if (truncate(dst, 0))
		goto out_err;
	ret = pull(dst, st.st_ino, src, !quiet && isatty(2), quiet);
	close(src);
	return ret ? 1 : 0;

out_err:
	fprintf(stderr, "phx: cp: %s: %s\n", dst, strerror(errno));
	close(src);
	return 1;
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

static int cmd_mount(int argc, char **argv)
{
	char opts[1024] = "", daemon[PATH_MAX + 32], sock[256];
	char *dargv[8];
	bool fg = false;
	const char *mp;
	struct statvfs sv;
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
	if (statvfs(mp, &sv) && errno == ENOTCONN) {
		if (detach(mp, true)) {
			fprintf(stderr,
				"phx: %s: cannot remove the stale mount of a dead phxfs; run umount -l %s\n",
				mp, mp);
			return 1;
		}
		fprintf(stderr,
			"phx: removed the stale mount at %s (its phxfs had died)\n",
			mp);
	}
	if (getxattr(mp, "user.phx.socket", sock, sizeof(sock)) >= 0 ||
	    errno == ERANGE) {
		printf("phx: phxfs is already mounted at %s\n", mp);
		return 0;
	}
	if (mkdir(mp, 0755) && errno != EEXIST) {
		fprintf(stderr, "phx: cannot create %s: %s\n", mp,
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
	struct statvfs sv;
	bool stale = statvfs(mp, &sv) && errno == ENOTCONN;
	int ret = detach(mp, stale);

	if (ret == -EBUSY) {
		fprintf(stderr,
			"phx: %s is busy: close the files open under it (see fuser -m %s), or phx umount again after\n",
			mp, mp);
	} else if (ret) {
		fprintf(stderr, "phx: cannot unmount %s: %s\n", mp,
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
