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
#include <mntent.h>
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

static const char *default_mount(void)
{
	const char *mp = getenv("PHX_MOUNT");

	return mp && *mp ? mp : DEFAULT_MOUNT;
}

/* ---- status --------------------------------------------------------- */

static void print_name(const char *name, size_t n)
{
	cli_print_name(stdout, name, n);
}

static void print_dev(const struct phxfs_status_dev *d)
{
	char c[32], u[32], m[32];

	printf("%-8s %-5s %10s %10s %6u  %-9s %10s  ", d->name, d->kind,
	       cli_bytes(c, sizeof(c), (double)d->capacity),
	       cli_bytes(u, sizeof(u), (double)d->used), d->files, d->path,
	       cli_bytes(m, sizeof(m),
			 (double)(d->moved + d->bytes_in + d->bytes_out)));
	print_name(d->model, strlen(d->model));
	putchar('\n');
}

static void print_file(const struct phxfs_status_file *f)
{
	char s[32], h[32];

	printf("%-8s %10s %10s  %-9s ", f->device,
	       cli_bytes(s, sizeof(s), (double)f->size),
	       cli_bytes(h, sizeof(h), (double)f->held), f->path);
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
	       cli_bytes(a, sizeof(a), (double)st->xattr_bytes),
	       cli_bytes(b, sizeof(b), (double)st->xattr_size),
	       cli_bytes(c, sizeof(c), (double)st->xattr_file),
	       (unsigned long long)st->inodes, (unsigned long long)st->names,
	       (unsigned long long)st->nr_inodes, st->ctl_conns,
	       st->ctl_conns_max, st->ctl_conns_uid);
	for (i = 0; st->root_reserve && i < st->ndevs; i++)
		printf("%-8s keeps %s for root (root_reserve)\n",
		       st->devs[i].name,
		       cli_bytes(a, sizeof(a), (double)st->root_reserve[i]));
}

static int cmd_status(int argc, char **argv)
{
	struct phxfs_status *st;
	bool all = false;
	const char *mp;
	unsigned int i;
	int opt, ret;

	while ((opt = getopt(argc, argv, ":a")) != -1) {
		if (opt != 'a')
			return cli_bad_option("status", opt);
		all = true;
	}
	if (argc - optind > 1)
		return cli_usage_err("status", "one mount point at most");
	mp = optind < argc ? argv[optind] : default_mount();
	ret = phxfs_status_get(mp, &st);
	if (ret == -ENOTSUP) {
		fprintf(stderr,
			"phx: %s: not on phxfs; is phxfs mounted there (phx mount)?\n",
			cli_quote(mp));
		return 1;
	}
	if (ret) {
		fprintf(stderr, "phx: %s: cannot read phxfs's status: %s\n",
			cli_quote(mp), strerror(-ret));
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
		printf("... and %u more files not listed: the walk stops where its reply reaches 16 MiB or a directory on its way was removed\n",
		       st->unlisted);
	printf("\nmounted at ");
	print_name(st->mountpoint, strlen(st->mountpoint));
	printf("; contents live in device memory and vanish with phxfs\n");
	phxfs_status_free(st);
	return 0;
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

/* Is @mp the mount of a FUSE daemon (phxfs or another) that died? */
static bool daemon_dead(const char *mp)
{
	struct statvfs sv;

	return statvfs(mp, &sv) && cli_dead_mount_err(errno);
}

/*
 * @path made absolute and free of links, into @out (PATH_MAX): where the
 * kernel's table of mounts names it.  The mount point of a dead daemon
 * cannot be looked at (ENOTCONN), so its directory is resolved and its
 * name appended.  0 or -errno.
 */
static int mount_point_path(const char *path, char *out)
{
	char dir[PATH_MAX], name[PATH_MAX], where[PATH_MAX];
	size_t len;

	if (realpath(path, out))
		return 0;
	if (!cli_dead_mount_err(errno))
		return -errno;
	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(name, sizeof(name), "%s", path);
	if (!realpath(dirname(dir), where))
		return -errno;
	len = strlen(where);
	if (snprintf(out, PATH_MAX, "%s%s%s", where,
		     len && where[len - 1] == '/' ? "" : "/",
		     basename(name)) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * The type of the file system on top at @mp ("fuse.phxfs" for phxfs,
 * its daemon alive or not), from the kernel's table of mounts, into
 * @type; "" where nothing is mounted at @mp.  0 or -errno.
 */
static int mount_type_at(const char *mp, char *type, size_t len)
{
	char path[PATH_MAX];
	struct mntent *m;
	FILE *f;
	int ret = mount_point_path(mp, path);

	type[0] = '\0';
	if (ret)
		return ret;
	f = setmntent("/proc/self/mounts", "r");
	if (!f)
		return -errno;
	/* the last entry for a directory is the one on top */
	while ((m = getmntent(f)))
		if (!strcmp(m->mnt_dir, path))
			snprintf(type, len, "%s", m->mnt_type);
	endmntent(f);
	return 0;
}

#define PHXFS_MOUNT_TYPE "fuse.phxfs"

static int cmd_mount(int argc, char **argv)
{
	char opts[1024] = "", daemon[PATH_MAX + 32], sock[256];
	char *dargv[8];
	bool fg = false;
	const char *mp;
	int opt, n = 0;

	while ((opt = getopt(argc, argv, ":fo:")) != -1) {
		if (opt == 'f') {
			fg = true;
		} else if (opt == 'o') {
			size_t l = strlen(opts);
			int len = snprintf(opts + l, sizeof(opts) - l, "%s%s",
					   l ? "," : "", optarg);

			/* never mount with options cut short */
			if (len < 0 || (size_t)len >= sizeof(opts) - l) {
				fprintf(stderr,
					"phx mount: the options (-o) are longer than %zu bytes\n",
					sizeof(opts) - 1);
				return 2;
			}
		} else {
			return cli_bad_option("mount", opt);
		}
	}
	if (argc - optind > 1)
		return cli_usage_err("mount", "one mount point at most");
	mp = optind < argc ? argv[optind] : default_mount();
	/* statfs always reaches the daemon: attributes may be cached. */
	if (daemon_dead(mp)) {
		char type[64];

		/* another file system's dead daemon is not ours to remove */
		if (!mount_type_at(mp, type, sizeof(type)) &&
		    strcmp(type, PHXFS_MOUNT_TYPE)) {
			fprintf(stderr,
				"phx: %s: the daemon of the %s mounted there died; unmount it first (umount -l %s)\n",
				cli_quote(mp),
				type[0] ? cli_quote(type) : "file system",
				cli_quote(mp));
			return 1;
		}
		if (detach(mp, true)) {
			fprintf(stderr,
				"phx: %s: cannot remove the stale mount of a dead phxfs; run umount -l %s\n",
				cli_quote(mp), cli_quote(mp));
			return 1;
		}
		fprintf(stderr,
			"phx: removed the stale mount at %s (its phxfs had died)\n",
			cli_quote(mp));
	}
	if (getxattr(mp, "user.phx.socket", sock, sizeof(sock)) >= 0 ||
	    errno == ERANGE) {
		char type[64];

		if (!mount_type_at(mp, type, sizeof(type)) &&
		    !strcmp(type, PHXFS_MOUNT_TYPE)) {
			printf("phx: phxfs is already mounted at %s\n",
			       cli_quote(mp));
			return 0;
		}
		fprintf(stderr,
			"phx: %s: inside a mounted phxfs, not its mount point; mount phxfs on a directory outside it\n",
			cli_quote(mp));
		return 1;
	}
	if (mkdir(mp, 0755) && errno != EEXIST) {
		fprintf(stderr, "phx: cannot create %s: %s\n", cli_quote(mp),
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
	const char *mp;
	char type[64];
	bool stale;
	int ret, opt;

	while ((opt = getopt(argc, argv, ":")) != -1)
		return cli_bad_option("umount", opt);
	if (argc - optind > 1)
		return cli_usage_err("umount", "one mount point at most");
	mp = optind < argc ? argv[optind] : default_mount();

	/* phx umount takes down phxfs only, never what else is mounted */
	ret = mount_type_at(mp, type, sizeof(type));
	if (ret || strcmp(type, PHXFS_MOUNT_TYPE)) {
		char why[160];

		if (ret)
			snprintf(why, sizeof(why), "%s", strerror(-ret));
		else if (!type[0])
			snprintf(why, sizeof(why), "no phxfs is mounted there");
		else /* quoted: a FUSE subtype is the mounting user's choice */
			snprintf(
				why, sizeof(why),
				"not phxfs but %s; phx umount leaves it mounted",
				cli_quote(type));
		fprintf(stderr, "phx: %s: %s\n", cli_quote(mp), why);
		return 1;
	}
	stale = daemon_dead(mp);
	ret = detach(mp, stale);
	if (ret == -EBUSY) {
		fprintf(stderr,
			"phx: %s is busy: close the files open under it (see fuser -m %s), or phx umount again after\n",
			cli_quote(mp), cli_quote(mp));
	} else if (ret) {
		fprintf(stderr, "phx: cannot unmount %s: %s\n", cli_quote(mp),
			strerror(-ret));
	}
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_err(NULL, "a command is needed");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help"))
		return cli_usage(stdout);
	if (!strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (!strcmp(argv[1], "cp"))
		return cli_cp(argc - 1, argv + 1);
	if (!strcmp(argv[1], "mount"))
		return cmd_mount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount") || !strcmp(argv[1], "unmount"))
		return cmd_umount(argc - 1, argv + 1);
	fprintf(stderr, "phx: unknown command %s; phx --help lists them\n",
		cli_quote(argv[1]));
	return 2;
}
