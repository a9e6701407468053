/* SPDX-License-Identifier: MIT */
/*
 * phx-cpubench.c - the transfer engine against the raw disk, on any
 * machine: the simulated device stands in for the GPU, so what is measured
 * is the engine's own cost (staging, pipelining, page-cache handling)
 * relative to the best the disk does into plain host memory in the same
 * run.  Absolute figures mean little on a small VM; the ratios are the
 * point.  GPU figures come from phx-bench on a GPU machine.
 *
 * usage: phx-cpubench [-s SIZE] [-r RUNS] DIR   (root, to drop caches)
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "phoenix.h"

#define BLOCK (4u << 20)
#define QD 16
#define MAX_RUNS 9

static uint64_t size = 1ULL << 30;
static int runs = 3;
static char path[4096], out_path[4096];

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "phx-cpubench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void drop_caches(int fd)
{
	int d = open("/proc/sys/vm/drop_caches", O_WRONLY);

	fsync(fd);
	if (d >= 0) {
		sync();
		if (write(d, "3\n", 2) != 2)
			perror("drop_caches");
		close(d);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void make_file(void)
{
	struct stat st;
	uint64_t off, s = 0x9e3779b97f4a7c15ULL;
	uint64_t *buf;
	int fd;

	if (!stat(path, &st) && (uint64_t)st.st_size == size)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("cannot create %s", path);
	buf = malloc(BLOCK);
	for (off = 0; off < size; off += BLOCK) {
		for (size_t i = 0; i < BLOCK / 8; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			buf[i] = s | 0x0101010101010101ULL;
		}
		if (pwrite(fd, buf, BLOCK, (off_t)off) != BLOCK)
			die("writing %s", path);
	}
	fsync(fd);
	close(fd);
	free(buf);
}

/* io_uring with QD requests of BLOCK bytes in flight, into a host ring. */
static double raw_uring(bool do_write, bool direct)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	char *mem;
	uint64_t next = 0, done = 0;
	int fd, inflight = 0, flags = direct ? O_DIRECT : 0;
	double t0;

	fd = do_write ? open(out_path, O_WRONLY | O_CREAT | flags, 0644) :
			open(path, O_RDONLY | flags);
	if (fd < 0)
		die("open %s", do_write ? out_path : path);
	if (!do_write)
		drop_caches(fd);
	if (posix_memalign((void **)&mem, 4096, (size_t)QD * BLOCK))
		die("%s", "out of memory");
	memset(mem, 0x5a, (size_t)QD * BLOCK);
	io_uring_queue_init(QD * 2, &ring, 0);
	t0 = now();
	while (done < size) {
		while (inflight < QD && next < size) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			char *p = mem + (size_t)((next / BLOCK) % QD) * BLOCK;

			if (do_write)
				io_uring_prep_write(sqe, fd, p, BLOCK, next);
			else
				io_uring_prep_read(sqe, fd, p, BLOCK, next);
			next += BLOCK;
			inflight++;
		}
		io_uring_submit(&ring);
		if (io_uring_wait_cqe(&ring, &cqe) || cqe->res != (int)BLOCK)
			die("%s", "raw I/O failed");
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
		done += BLOCK;
	}
	if (do_write)
		fsync(fd);
	t0 = now() - t0;
	io_uring_queue_exit(&ring);
	close(fd);
	free(mem);
	return (double)size / t0 / 1e9;
}

/* One thread, plain pread into host memory: the hot-cache peer. */
static double raw_pread_hot(void)
{
	char *mem = malloc(BLOCK);
	int fd = open(path, O_RDONLY);
	double t0;

	for (uint64_t off = 0; off < size; off += BLOCK) /* warm */
		if (pread(fd, mem, BLOCK, (off_t)off) != BLOCK)
			die("%s", "pread");
	t0 = now();
	for (uint64_t off = 0; off < size; off += BLOCK)
		if (pread(fd, mem, BLOCK, (off_t)off) != BLOCK)
			die("%s", "pread");
	t0 = now() - t0;
	close(fd);
	free(mem);
	return (double)size / t0 / 1e9;
}

static double phx_case(struct phx_buf *buf, bool do_write, bool cold,
		       enum phx_path *path_out)
{
	struct phx_io io = { .buf = buf, .len = size };
	double t0;
	int fd;

	fd = do_write ? open(out_path, O_WRONLY | O_CREAT, 0644) :
			open(path, O_RDONLY);
	if (fd < 0)
		die("open %s", path);
	if (!do_write && cold)
		drop_caches(fd);
	io.op = do_write ? PHX_OP_WRITE : PHX_OP_READ;
	io.fd = fd;
	t0 = now();
	if (phx_io_run(phx_buf_device(buf), &io) != (int64_t)size)
		die("libphoenix: %s", phx_strerror_last());
	if (do_write)
		fsync(fd);
	t0 = now() - t0;
	close(fd);
	*path_out = io.path;
	return (double)size / t0 / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct row {
	const char *kase, *peer;
	double gbps[MAX_RUNS];
	const char *path;
};

static double median(struct row *r)
{
	double v[MAX_RUNS];

	memcpy(v, r->gbps, sizeof(v));
	qsort(v, (size_t)runs, sizeof(double), cmp_double);
	return v[runs / 2];
}

/*
 * Per-call cost: small hot reads, synchronous and each through a new
 * batch, against pread() of the same bytes.  Prints microseconds a call
 * and the engines the device built meanwhile (the pool should build
 * none after the first call).
 */
static void per_call(struct phx_device *dev, struct phx_buf *buf)
{
	enum { CALLS = 2000, BATCHES = 200, SMALL = 4096 };
	struct phx_engine_stats st0, st1;
	char small[SMALL];
	double t, raw, sync, batch;
	int fd = open(path, O_RDONLY), i;

	if (fd < 0)
		die("cannot open %s", path);
	t = now();
	for (i = 0; i < CALLS; i++)
		if (pread(fd, small, SMALL, (off_t)i * SMALL) != SMALL)
			die("pread of %s failed", path);
	raw = (now() - t) / CALLS * 1e6;
	phx_engine_stats_get(dev, &st0);
	t = now();
	for (i = 0; i < CALLS; i++)
		if (phx_read(buf, 0, fd, (int64_t)i * SMALL, SMALL) != SMALL)
			die("libphoenix: %s", phx_strerror_last());
	sync = (now() - t) / CALLS * 1e6;
	t = now();
	for (i = 0; i < BATCHES; i++) {
		struct phx_io io = { .op = PHX_OP_READ,
				     .fd = fd,
				     .file_off = (int64_t)i * SMALL,
				     .buf = buf,
				     .len = SMALL };
		struct phx_batch *b;

		if (phx_batch_create(dev, 0, 0, &b) ||
		    phx_batch_submit(b, &io, 1) != 1 ||
		    phx_batch_wait(b, 1, NULL, 0, -1) != 1 ||
		    io.result != SMALL)
			die("libphoenix: %s", phx_strerror_last());
		phx_batch_destroy(b);
	}
	batch = (now() - t) / BATCHES * 1e6;
	phx_engine_stats_get(dev, &st1);
	close(fd);
	printf("\n%-34s %10s\n", "per call, 4 KiB hot", "us/call");
	printf("%-34s %10.1f\n", "raw pread (peer)", raw);
	printf("%-34s %10.1f\n", "phx_read", sync);
	printf("%-34s %10.1f\n", "batch create+submit+wait+destroy", batch);
	printf("(engines built during %d calls and %d batches: %llu)\n", CALLS,
	       BATCHES, (unsigned long long)(st1.built - st0.built));
}

int main(int argc, char **argv)
{
	struct phx_device *dev;
	struct phx_buf *buf;
	struct row rows[6] = {
		{ .kase = "file->dev cold",
		  .peer = "raw O_DIRECT io_uring (limit)" },
		{ .kase = "file->dev cold", .peer = "libphoenix" },
		{ .kase = "file->dev hot",
		  .peer = "raw pread, 1 thread (limit)" },
		{ .kase = "file->dev hot", .peer = "libphoenix" },
		{ .kase = "dev->file",
		  .peer = "raw O_DIRECT io_uring (limit)" },
		{ .kase = "dev->file", .peer = "libphoenix" },
	};
	enum phx_path p;
	struct rusage ru;
	int opt, i;

	while ((opt = getopt(argc, argv, "s:r:")) != -1) {
		if (opt == 's') {
			if (phx_parse_size(optarg, &size) || size < BLOCK)
				die("bad size %s", optarg);
			size -= size % BLOCK;
		} else if (opt == 'r') {
			runs = atoi(optarg);
			if (runs < 1 || runs > MAX_RUNS)
				die("runs must be 1..9, not %s", optarg);
		} else {
			die("%s",
			    "usage: phx-cpubench [-s SIZE] [-r RUNS] DIR");
		}
	}
	if (optind != argc - 1)
		die("%s", "usage: phx-cpubench [-s SIZE] [-r RUNS] DIR");
	snprintf(path, sizeof(path), "%s/phx-cpubench.dat", argv[optind]);
	snprintf(out_path, sizeof(out_path), "%s/phx-cpubench.out",
		 argv[optind]);
	setenv("PHX_DEVICE", "sim", 0);
	make_file();
	if (phx_device_open(NULL, &dev) || phx_buf_alloc(dev, size, 0, &buf))
		die("libphoenix: %s", phx_strerror_last());

	for (i = 0; i < runs; i++) {
		rows[0].gbps[i] = raw_uring(false, true);
		rows[1].gbps[i] = phx_case(buf, false, true, &p);
		rows[1].path = phx_path_name(p);
		rows[2].gbps[i] = raw_pread_hot();
		rows[3].gbps[i] = phx_case(buf, false, false, &p);
		rows[3].path = phx_path_name(p);
		unlink(out_path);
		rows[4].gbps[i] = raw_uring(true, true);
		unlink(out_path);
		rows[5].gbps[i] = phx_case(buf, true, false, &p);
		rows[5].path = phx_path_name(p);
		unlink(out_path);
	}
	getrusage(RUSAGE_SELF, &ru);

	printf("\n%-16s %-32s %8s %9s  %s\n", "case", "peer", "GB/s",
	       "vs limit", "path");
	for (i = 0; i < 6; i++) {
		double lim = median(&rows[i & ~1]);

		printf("%-16s %-32s %8.2f %8.2fx  %s\n", rows[i].kase,
		       rows[i].peer, median(&rows[i]), median(&rows[i]) / lim,
		       rows[i].path ? rows[i].path : "-");
	}
	printf("(%s file, median of %d, simulated device, libphoenix %s, peak RSS %ld MiB incl. the %llu MiB device buffer)\n",
	       argv[optind], runs, phx_version(), ru.ru_maxrss / 1024,
	       (unsigned long long)(size >> 20));
	per_call(dev, buf);
	phx_buf_free(buf);
	phx_device_close(dev);
	unlink(path);
	return 0;
}
