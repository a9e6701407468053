/* SPDX-License-Identifier: MIT */
/*
 * main.c - phxfs: device (GPU) memory as a file system.
 *
 * Every device libphoenix finds is a top-level directory (gpu0, sim0, ...);
 * every regular file below it is one sparse device allocation that grows
 * without copying.  Contents live only in device memory: they are gone
 * when the daemon exits.  A control socket lets other processes map a
 * file's memory in place and lets `phx cp` pull a file in through the
 * transfer engine.
 *
 *   phxfs [SOURCE] MOUNTPOINT [-f] [-s] [-d] [-o OPTIONS]
 *
 *   -o reserve=SIZE   device memory left to others (default 0)
 *   -o size=SIZE      most device memory phxfs uses on each device
 *   -o kind=KIND      cuda, sim or kmod (default: PHX_DEVICE, else auto)
 *   -o blksize=SIZE   st_blksize of files, the write size of cp (4M)
 *   -o threads=N      most FUSE worker threads (16)
 *   -o max_write=SIZE largest read or write request (see request_cap())
 *   -o writeback      page-cached writes instead of direct I/O
 *   -o headroom=SIZE  room to grow of a passthrough file open for writing
 *   -o no_readahead   no read-ahead of sequential reads (readahead.c)
 *   -o root_reserve=SIZE|N%  of each device, what only root may fill (5%)
 *   -o xattr_size=SIZE, xattr_file=SIZE  stored xattrs in all, per file
 *   -o nr_inodes=N    inodes and names (hard links) in all (1M)
 *   -o ctl_timeout=S, ctl_conns=N, ctl_conns_uid=N  control socket limits
 *   -o nonempty       mount over a directory that is not empty
 *
 * On phx.ko devices files are served by the kernel (FUSE passthrough to
 * the module's range files, backing.c) where libfuse, kernel and
 * privileges allow it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "phxfs.h"
#include "phxfs_client.h"

#define PHXFS_OPT(t, p, v)                           \
	{                                            \
		t, offsetof(struct phxfs_opts, p), v \
	}

static const struct fuse_opt phxfs_opt_spec[] = {
	PHXFS_OPT("reserve=%s", reserve, 0),
	PHXFS_OPT("size=%s", size, 0),
	PHXFS_OPT("kind=%s", kind, 0),
	PHXFS_OPT("blksize=%s", blksize, 0),
	PHXFS_OPT("threads=%u", threads, 0),
	PHXFS_OPT("max_write=%s", max_write, 0),
	PHXFS_OPT("writeback", writeback, 1),
	PHXFS_OPT("headroom=%s", headroom, 0),
	PHXFS_OPT("no_readahead", no_readahead, 1),
	PHXFS_OPT("io_uring", io_uring, 1),
	PHXFS_OPT("root_reserve=%s", root_reserve, 0),
	PHXFS_OPT("xattr_size=%s", xattr_size, 0),
	PHXFS_OPT("xattr_file=%s", xattr_file, 0),
	PHXFS_OPT("nr_inodes=%s", nr_inodes, 0),
	PHXFS_OPT("ctl_timeout=%u", ctl_timeout, 0),
	PHXFS_OPT("ctl_conns=%u", ctl_conns, 0),
	PHXFS_OPT("ctl_conns_uid=%u", ctl_conns_uid, 0),
	PHXFS_OPT("nonempty", nonempty, 1),
	FUSE_OPT_END
};

/* Positional arguments: [SOURCE] MOUNTPOINT, as mount helpers pass them. */
static char *nonopts[2];
static int nnonopts;

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	if (key != FUSE_OPT_KEY_NONOPT)
		return 1;
	if (nnonopts == 2) {
		fprintf(stderr, "phxfs: too many arguments: '%s'\n", arg);
		return -1;
	}
	nonopts[nnonopts++] = strdup(arg);
	return 0;
}

static void usage(const char *prog)
{
	printf("usage: %s [SOURCE] MOUNTPOINT [options]\n\n"
	       "Device memory as files: one directory per device, one device\n"
	       "allocation per file.  Contents vanish when phxfs exits.\n\n"
	       "phxfs options:\n"
	       "    -o reserve=SIZE    device memory left to others (0)\n"
	       "    -o size=SIZE       most memory used on each device (all)\n"
	       "    -o kind=KIND       cuda, sim or kmod (PHX_DEVICE, else auto)\n"
	       "    -o blksize=SIZE    st_blksize of files (4M)\n"
	       "    -o threads=N       most FUSE worker threads (16)\n"
	       "    -o max_write=SIZE  largest read or write request (16M where\n"
	       "                       libfuse and fs.fuse.max_pages_limit allow)\n"
	       "    -o writeback       page-cached writes instead of direct I/O\n"
	       "    -o headroom=SIZE   growth room of passthrough files (1G)\n"
	       "    -o no_readahead    do not read ahead of sequential reads\n"
	       "    -o io_uring        take requests over io_uring where the\n"
	       "                       kernel offers it, not from /dev/fuse\n"
	       "    -o root_reserve=SIZE|N%%  of each device, what only root\n"
	       "                       may fill (5%%)\n"
	       "    -o xattr_size=SIZE stored extended attributes in all (16M)\n"
	       "    -o xattr_file=SIZE stored extended attributes per file (256K)\n"
	       "    -o nr_inodes=N     inodes and hard links in all (1M)\n"
	       "    -o ctl_timeout=S   control socket: seconds a client has to\n"
	       "                       send a request and take each reply (10)\n"
	       "    -o ctl_conns=N     control socket connections of users\n"
	       "                       other than root, in all (128)\n"
	       "    -o ctl_conns_uid=N control socket connections per user (16)\n"
	       "    -o nonempty        mount over a directory that is not empty\n\n",
	       prog);
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

/*
 * The largest request both sides take: this libfuse's limit, and the
 * kernel's fs.fuse.max_pages_limit pages (a sysctl since Linux 6.13; 256
 * pages before, and where it cannot be read).
 */
static uint64_t request_cap(void)
{
	uint64_t pages = 256, page = (uint64_t)sysconf(_SC_PAGESIZE), cap;
	char val[32];
	ssize_t n;
	int fd =
		open("/proc/sys/fs/fuse/max_pages_limit", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		n = read(fd, val, sizeof(val) - 1);
		if (n > 0) {
			val[n] = '\0';
			if (strtoull(val, NULL, 10) > 0)
				pages = strtoull(val, NULL, 10);
		}
		close(fd);
	}
	cap = pages * page;
	return cap < PHXFS_LIBFUSE_MAX_REQUEST ? cap :
						 PHXFS_LIBFUSE_MAX_REQUEST;
}

/* root_reserve=, the xattr and inode limits, the control socket's. */
static int parse_limits(struct phxfs *fs)
{
	const char *rr = fs->opts.root_reserve;
	char *end;

	fs->root_reserve_pct = PHXFS_ROOT_RESERVE_PCT;
	if (rr && rr[strlen(rr) - 1 > 0 ? strlen(rr) - 1 : 0] == '%') {
		unsigned long pct = strtoul(rr, &end, 10);

		if (end == rr || *end != '%' || end[1] || pct > 50) {
			fprintf(stderr,
				"phxfs: bad root_reserve=%s; use a size (root_reserve=1G) or 0%% to 50%%\n",
				rr);
			return -EINVAL;
		}
		fs->root_reserve_pct = (unsigned int)pct;
	} else if (rr) {
		if (phx_parse_size(rr, &fs->root_reserve)) {
			fprintf(stderr,
				"phxfs: bad root_reserve=%s; use a size (root_reserve=1G) or 0%% to 50%%\n",
				rr);
			return -EINVAL;
		}
		fs->root_reserve_pct = 0;
	}
	fs->xattr_size = PHXFS_XATTR_SIZE;
	fs->xattr_file = PHXFS_XATTR_FILE;
	if ((fs->opts.xattr_size &&
	     phx_parse_size(fs->opts.xattr_size, &fs->xattr_size)) ||
	    (fs->opts.xattr_file &&
	     phx_parse_size(fs->opts.xattr_file, &fs->xattr_file))) {
		fprintf(stderr,
			"phxfs: bad xattr_size=%s or xattr_file=%s; use e.g. xattr_size=16M,xattr_file=256K\n",
			fs->opts.xattr_size ? fs->opts.xattr_size : "",
			fs->opts.xattr_file ? fs->opts.xattr_file : "");
		return -EINVAL;
	}
	fs->nr_inodes = PHXFS_NR_INODES;
	if (fs->opts.nr_inodes &&
	    (phx_parse_size(fs->opts.nr_inodes, &fs->nr_inodes) ||
	     fs->nr_inodes < 16)) {
		fprintf(stderr,
			"phxfs: bad nr_inodes=%s; use a count of 16 or more (nr_inodes=1M)\n",
			fs->opts.nr_inodes);
		return -EINVAL;
	}
	if (!fs->opts.ctl_timeout)
		fs->opts.ctl_timeout = PHXFS_CTL_TIMEOUT;
	if (!fs->opts.ctl_conns)
		fs->opts.ctl_conns = PHXFS_CTL_CONNS;
	if (!fs->opts.ctl_conns_uid)
		fs->opts.ctl_conns_uid = PHXFS_CTL_CONNS_UID;
	/* "%u" takes "-5" as a huge count: a limit that limits nothing */
	if (fs->opts.ctl_timeout > PHXFS_CTL_TIMEOUT_MAX ||
	    fs->opts.ctl_conns > PHXFS_CTL_CONNS_MAX ||
	    fs->opts.ctl_conns_uid > PHXFS_CTL_CONNS_MAX) {
		fprintf(stderr,
			"phxfs: bad ctl_timeout=%u, ctl_conns=%u or ctl_conns_uid=%u; use 1 to %u seconds and 1 to %u connections\n",
			fs->opts.ctl_timeout, fs->opts.ctl_conns,
			fs->opts.ctl_conns_uid, PHXFS_CTL_TIMEOUT_MAX,
			PHXFS_CTL_CONNS_MAX);
		return -EINVAL;
	}
	return 0;
}

static int parse_sizes(struct phxfs *fs)
{
	uint64_t v = 4ULL << 20, cap;

	if (fs->opts.reserve &&
	    phx_parse_size(fs->opts.reserve, &fs->reserve)) {
		fprintf(stderr, "phxfs: bad reserve=%s; use e.g. reserve=1G\n",
			fs->opts.reserve);
		return -EINVAL;
	}
	if (fs->opts.blksize && (phx_parse_size(fs->opts.blksize, &v) ||
				 v < 4096 || v > (1ULL << 30))) {
		fprintf(stderr,
			"phxfs: bad blksize=%s; use a size from 4K to 1G\n",
			fs->opts.blksize);
		return -EINVAL;
	}
	if (fs->opts.size &&
	    (phx_parse_size(fs->opts.size, &fs->size) || !fs->size)) {
		fprintf(stderr, "phxfs: bad size=%s; use e.g. size=8G\n",
			fs->opts.size);
		return -EINVAL;
	}
	cap = request_cap();
	fs->max_write =
		PHXFS_DEFAULT_REQUEST < cap ? PHXFS_DEFAULT_REQUEST : cap;
	if (fs->opts.max_write &&
	    (phx_parse_size(fs->opts.max_write, &fs->max_write) ||
	     fs->max_write < 4096 || fs->max_write > (1ULL << 30))) {
		fprintf(stderr,
			"phxfs: bad max_write=%s; use a size from 4K to 1G\n",
			fs->opts.max_write);
		return -EINVAL;
	}
	if (fs->max_write > PHXFS_LIBFUSE_MAX_REQUEST) {
		fprintf(stderr,
			"phxfs: max_write=%s is more than libfuse %d.%d takes (1M); build phxfs with PHX_FUSE=3.18 for larger requests\n",
			fs->opts.max_write, FUSE_MAJOR_VERSION,
			FUSE_MINOR_VERSION);
		return -EINVAL;
	}
	if (fs->max_write > cap)
		fprintf(stderr,
			"phxfs: the kernel caps requests at %llu KiB (fs.fuse.max_pages_limit); max_write=%s is used up to that\n",
			(unsigned long long)(cap >> 10), fs->opts.max_write);
	fs->headroom = 1ULL << 30;
	if (fs->opts.headroom &&
	    phx_parse_size(fs->opts.headroom, &fs->headroom)) {
		fprintf(stderr,
			"phxfs: bad headroom=%s; use e.g. headroom=1G\n",
			fs->opts.headroom);
		return -EINVAL;
	}
	if (parse_limits(fs))
		return -EINVAL;
	/* st_blksize must be a power of two for cp and friends. */
	fs->blksize = 1ULL << (63 - __builtin_clzll(v));
	if (!fs->opts.threads)
		fs->opts.threads = 16;
	return 0;
}

/*
 * Go to the background before anything starts threads or touches a GPU
 * (neither survives fork); the parent waits for the mount and exits with
 * its outcome, so `phxfs /mnt/phx && cp ...` works.  Returns the pipe
 * to report on, or -1 in the foreground.
 */
static int background(void)
{
	int p[2];
	char status = 1;
	pid_t pid;

	if (pipe(p)) {
		perror("phxfs: pipe");
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		perror("phxfs: fork");
		exit(1);
	}
	if (pid) {
		close(p[1]);
		if (read(p[0], &status, 1) != 1)
			waitpid(pid, NULL, 0);
		_exit(status);
	}
	close(p[0]);
	setsid();
	return p[1];
}

static void report_ready(int pipe_fd)
{
	char ok = 0;
	int fd;

	if (pipe_fd < 0)
		return;
	if (chdir("/"))
		return;
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	if (write(pipe_fd, &ok, 1) != 1)
		return;
	close(pipe_fd);
}

/*
 * Refuse a mount point that is not a directory (the mount would answer
 * EIO to everything) and, unless -o nonempty, one that holds files (the
 * mount would hide them).
 */
static int check_mountpoint(struct phxfs *fs, const char *mp)
{
	char name[4 * 4096];
	struct dirent *de;
	struct stat st;
	int err = 0;
	DIR *d;

	phxfs_escape(mp, strlen(mp), name, sizeof(name));
	if (stat(mp, &st)) {
		err = errno;
	} else if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"phxfs: %s: not a directory; mount phxfs on an empty directory\n",
			name);
		return -ENOTDIR;
	}
	d = err ? NULL : opendir(mp);
	if (!d) {
		fprintf(stderr,
			"phxfs: %s: %s; mount phxfs on an empty directory\n",
			name, strerror(err ? err : errno));
		return -ENOTDIR;
	}
	while (!fs->opts.nonempty && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			closedir(d);
			fprintf(stderr,
				"phxfs: %s: not empty, the mount would hide what it holds; empty it, or mount with -o nonempty\n",
				name);
			return -ENOTEMPTY;
		}
	}
	closedir(d);
	return 0;
}

static int run_loop(struct phxfs *fs, struct fuse_cmdline_opts *cmd)
{
	struct fuse_loop_config *cfg;
	int ret;

	if (cmd->singlethread)
		return fuse_session_loop(fs->se);
	cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, 1);
	fuse_loop_cfg_set_max_threads(cfg, fs->opts.threads);
	fuse_loop_cfg_set_idle_threads(cfg, fs->opts.threads);
	ret = fuse_session_loop_mt(fs->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return ret;
}

static int add_mount_opts(struct fuse_args *args, const char *fsname)
{
	char opts[256];

	snprintf(opts, sizeof(opts),
		 "-odefault_permissions,fsname=%s,subtype=phxfs%s", fsname,
		 geteuid() ? "" : ",allow_other");
	return fuse_opt_add_arg(args, opts);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts cmd = { 0 };
	static struct phxfs fs = { .sock_fd = -1 };
	static struct fuse_lowlevel_ops ops;
	int pipe_fd = -1, ret = 1;

	if (fuse_opt_parse(&args, &fs.opts, phxfs_opt_spec, opt_proc) ||
	    (nnonopts && fuse_opt_add_arg(&args, nonopts[nnonopts - 1])) ||
	    fuse_parse_cmdline(&args, &cmd))
		goto out_args;
	if (cmd.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_args;
	}
	if (cmd.show_version) {
		printf("phxfs (libphoenix %s, FUSE %d.%d)\n", phx_version(),
		       FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
		ret = 0;
		goto out_args;
	}
	if (!cmd.mountpoint) {
		fprintf(stderr,
			"usage: %s [SOURCE] MOUNTPOINT [options]; "
			"see --help\n",
			argv[0]);
		goto out_args;
	}
	if (parse_sizes(&fs) || check_mountpoint(&fs, cmd.mountpoint) ||
	    add_mount_opts(&args, nnonopts == 2 ? nonopts[0] : "phxfs"))
		goto out_args;
	snprintf(fs.mountpoint, sizeof(fs.mountpoint), "%s", cmd.mountpoint);
	if (!cmd.foreground)
		pipe_fd = background();

	if (phxfs_table_init(&fs) || phxfs_devices_open(&fs))
		goto out_table;
	phxfs_backing_setup(&fs);
	phxfs_ops_init(&fs, &ops);
	if (phxfs_uring_args(&fs, &args))
		goto out_table;
	fs.se = fuse_session_new(&args, &ops, sizeof(ops), &fs);
	if (!fs.se)
		goto out_table;
	if (fuse_set_signal_handlers(fs.se))
		goto out_session;
	if (fuse_session_mount(fs.se, cmd.mountpoint))
		goto out_signals;
	phxfs_loop_setup(&fs);
	ret = phxfs_ctl_start(&fs);
	if (ret) {
		fprintf(stderr, "phxfs: control socket %s: %s\n", fs.sock_path,
			strerror(-ret));
		ret = 1;
		goto out_unmount;
	}
	phxfs_ra_start(&fs);
	report_ready(pipe_fd);
	ret = run_loop(&fs, &cmd) ? 1 : 0;
	phxfs_ra_stop();
	phxfs_ctl_stop(&fs);
out_unmount:
	fuse_session_unmount(fs.se);
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_session:
	fuse_session_destroy(fs.se);
out_table:
	phxfs_table_destroy(&fs);
	phxfs_backing_close(&fs);
	phxfs_devices_close(&fs);
out_args:
	free(cmd.mountpoint);
	fuse_opt_free_args(&args);
	return ret;
}
