/* SPDX-License-Identifier: MIT */
/*
 * phx-bench.c - file <-> GPU rates of libphoenix and its peers, measured in
 * one run on one file of random bytes (scripts/bench-gpu.sh drives it).
 *
 *   phx-bench [-s SIZE] [-r RUNS] [-m BYTES] [-C] DIR
 *
 * Cases: file -> GPU with a cold page cache and a hot one, GPU -> file
 * (timed up to fsync), and the host memory each reader holds while moving
 * -m bytes (measured in a child process per peer, so peers do not see each
 * other's peaks).  Every result is checked against the generator before
 * its time counts; a run that moved wrong bytes aborts the benchmark.
 *
 * The CUDA driver and cuFile are loaded with dlopen(), so the program
 * builds without them and says so, clearly, where there is no GPU.  This
 * file parses the command line and runs the cases; phx-bench.h says where
 * the rest is.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "phx-bench.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int parse_size(const char *s, uint64_t *out)
{
	return phx_parse_size(s, out) == 0 && *out ? 0 : -1;
}

/* ---- running the cases ------------------------------------------------ */

static uint64_t dest_addr(struct bench *b, enum dest d)
{
	switch (d) {
	case TO_DBUF:
	case FROM_DBUF:
		return b->dbuf;
	case TO_PBUF:
	case FROM_PBUF:
		return phx_buf_dptr(b->pbuf);
	default:
		return 0;
	}
}

static void clear_dest(struct bench *b, const struct peer *p)
{
	uint64_t d = dest_addr(b, p->dest);

	if (p->dest == TO_DBUF || p->dest == TO_PBUF) {
		CU_CHECK(blcu.cuMemsetD8_v2(d, 0, b->size));
		CU_CHECK(blcu.cuCtxSynchronize());
	}
	if (p->dest >= FROM_HOST)
		unlink(b->out);
}

static void verify(struct bench *b, const struct peer *p)
{
	if (p->flags & REPEAT) {
		for (uint64_t off = 0; off < b->size; off += PIECE) {
			uint64_t n = piece_len(b->size, off, PIECE);

			CU_CHECK(blcu.cuMemcpyDtoH_v2(b->piece, b->dbuf + off,
						      n));
			check_host(b, p->name, b->piece, off % PINNED, n);
		}
		return;
	}
	switch (p->dest) {
	case TO_DBUF:
	case TO_PBUF:
		check_device(b, p->name, dest_addr(b, p->dest), b->size);
		break;
	case FROM_HOST:
	case FROM_DBUF:
	case FROM_PBUF:
		check_file(b, p->name, b->out);
		break;
	default:
		break; /* raw reads check blocks as they arrive */
	}
}

/*
 * One peer in one case: an optional warm-up, then b->runs timed runs,
 * each checked.  @cold drops the page cache before every run.
 */
static void measure(struct bench *b, const char *casename, const struct peer *p,
		    bool cold, bool warmup)
{
	struct result *r = new_result(casename, p);
	uint64_t where = p->dest == TO_PBUF || p->dest == FROM_PBUF ?
				 0 :
				 dest_addr(b, p->dest);

	if ((p->flags & CUFILE) && cufile_load(b)) {
		snprintf(r->note, sizeof(r->note), "n/a: %s", b->cufile_why);
		printf("  %-16s %-34s %s\n", casename, p->name, r->note);
		return;
	}
	printf("  %-16s %-34s", casename, p->name);
	fflush(stdout);
	if (!cold && p->dest < FROM_HOST)
		warm_cache(b);
	for (int i = warmup ? -1 : 0; i < b->runs; i++) {
		double t;

		clear_dest(b, p);
		if (cold)
			drop_caches(b, b->data);
		t = bl_now();
		p->run(b, where);
		t = bl_now() - t;
		verify(b, p);
		if (i >= 0) {
			r->v[r->n++] = b->size / t / 1e9;
			printf(" %6.2f", r->v[r->n - 1]);
			fflush(stdout);
		}
	}
	if (p->flags & OURS)
		snprintf(r->note, sizeof(r->note), "path %s", b->phx_path);
	printf("\n");
}

/*
 * Every peer once, with the cases it runs in: each case measures its peers
 * in the order of this table.
 */
static const struct peer peers[] = {
	{ "pinned cuMemcpyHtoDAsync", peer_pinned_copy, TO_DBUF, HOT,
	  LIMIT | REPEAT },
	{ "buffered read (page cache)", peer_raw_buffered, TO_HOST, HOT, 0 },
	{ "raw O_DIRECT io_uring QD32 4M", peer_raw_direct, TO_HOST, COLD,
	  LIMIT },
	{ "raw buffered read", peer_raw_buffered, TO_HOST, COLD, LIMIT },
	{ "cuFile cuFileRead", peer_cufile_read, TO_DBUF, HOT | COLD, CUFILE },
	{ "pread + cuMemcpyHtoD (pageable)", peer_pread_pageable, TO_DBUF,
	  HOT | COLD, 0 },
	{ "pread pinned + cuMemcpyHtoD", peer_pread_pinned, TO_DBUF, HOT | COLD,
	  0 },
	{ "libphoenix phx_read", peer_phx_read, TO_PBUF, HOT | COLD, OURS },
	{ "libphoenix phx_io_enqueue (stream)", peer_phx_enqueue, TO_PBUF,
	  HOT | COLD, 0 },
	{ "libphoenix phx_io_enqueue (stream, late values)",
	  peer_phx_enqueue_late, TO_PBUF, HOT, 0 },
	{ "raw O_DIRECT io_uring QD32 4M", peer_raw_direct_write, FROM_HOST, WR,
	  LIMIT },
	{ "raw buffered write", peer_raw_buffered_write, FROM_HOST, WR, LIMIT },
	{ "cuFile cuFileWrite", peer_cufile_write, FROM_DBUF, WR, CUFILE },
	{ "cuMemcpyDtoH + pwrite", peer_copy_pwrite, FROM_DBUF, WR, 0 },
	{ "libphoenix phx_write", peer_phx_write, FROM_PBUF, WR, OURS },
	{ "libphoenix phx_io_enqueue write (stream)", peer_phx_enqueue_write,
	  FROM_PBUF, WR, 0 },
};

/* The peers of case @which (HOT, COLD or WR), one after the other. */
static void measure_case(struct bench *b, const char *casename,
			 unsigned int which, bool cold, bool warmup)
{
	for (size_t i = 0; i < ARRAY_LEN(peers); i++)
		if (peers[i].cases & which)
			measure(b, casename, &peers[i], cold, warmup);
}

/* ---- setup ------------------------------------------------------------ */

void cuda_init(struct bench *b)
{
	const char *why = "";
	CUcontext ctx;
	CUdevice dev;
	const char *err = bl_cuda_load();
	CUresult r;

	if (err)
		bl_die("no GPU here: libcuda.so.1 not found (%s); run scripts/bench-gpu.sh on a machine with an NVIDIA GPU and driver",
		       err);
	r = blcu.cuInit(0);
	if (r)
		bl_die("no usable GPU: cuInit failed: %s", bl_cu_err(r));
	CU_CHECK(blcu.cuDeviceGet(&dev, 0));
	CU_CHECK(blcu.cuDeviceGetName(b->gpu, sizeof(b->gpu), dev));
	CU_CHECK(blcu.cuDriverGetVersion(&b->driver));
	/* The primary context: the one libphoenix uses too. */
	CU_CHECK(blcu.cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(blcu.cuCtxSetCurrent(ctx));
	CU_CHECK(blcu.cuStreamCreate(&b->stream, 1 /* non-blocking */));
	CU_CHECK(blcu.cuMemAllocHost_v2(&b->pinned, PINNED));

	if (phx_default_kind(&why) != PHX_DEVICE_CUDA)
		bl_die("libphoenix would not use the GPU (%s); unset PHX_DEVICE or fix the driver",
		       why ? why : "?");
	if (phx_device_open("gpu0", &b->pdev))
		bl_die("phx_device_open(gpu0): %s", phx_strerror_last());
	CU_CHECK(blcu.cuCtxSetCurrent(ctx));
}

static void usage(void)
{
	fprintf(stderr,
		"usage: phx-bench [-s SIZE] [-r RUNS] [-m BYTES] [-C] DIR\n"
		"  -s SIZE   size of the random file (default 4G)\n"
		"  -r RUNS   timed runs per peer (default 3, at most %d)\n"
		"  -m BYTES  bytes moved while host memory is measured (default 16G)\n"
		"  -C        skip the cold-cache case\n"
		"  DIR       a directory on the disk to measure (not tmpfs)\n",
		BL_MAX_RUNS);
	exit(2);
}

static void print_versions(struct bench *b)
{
	struct utsname u;
	char date[64];

	uname(&u);
	bl_date(date, sizeof(date));
	printf("phx-bench: %s, libphoenix %s, %s, CUDA driver %d.%d, kernel %s, %d threads\n",
	       date, phx_version(), b->gpu, b->driver / 1000,
	       b->driver % 1000 / 10, u.release, b->nthreads);
	printf("stream-ordered reads: PHX_STREAM_WAIT=%s\n", bl_stream_wait());
	printf("file %s: %" PRIu64 " MiB; %d timed runs per peer; cold = %s\n",
	       b->data, b->size / MiB, b->runs,
	       !b->cold	  ? "skipped" :
	       b->drop_ok ? "drop_caches" :
			    "fadvise(DONTNEED) (not root)");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mem-child", required_argument, NULL, 'M' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench bench = {
		.size = 4 * GiB, .runs = 3, .mem_total = 16 * GiB, .cold = true
	};
	struct bench *b = &bench;
	const char *mem_child_peer = NULL;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "s:r:m:C", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			b->size = bl_opt_size(optarg, MiB);
			break;
		case 'r':
			b->runs = bl_opt_runs(optarg);
			if (b->runs < 0)
				usage();
			break;
		case 'm':
			if (parse_size(optarg, &b->mem_total))
				bl_die("bad size %s", optarg);
			break;
		case 'C':
			b->cold = false;
			break;
		case 'M':
			mem_child_peer = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	b->dir = argv[optind];
	b->nthreads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
	if (b->mem_total < b->size)
		b->mem_total = b->size;
	snprintf(b->data, sizeof(b->data), "%s/phx-bench.dat", b->dir);
	snprintf(b->out, sizeof(b->out), "%s/phx-bench.out", b->dir);
	b->drop_ok = access("/proc/sys/vm/drop_caches", W_OK) == 0;
	b->piece = aligned_alloc(4096, PIECE);
	b->direct = aligned_alloc(4096, URING_QD * URING_BS);
	if (!b->piece || !b->direct)
		bl_die("out of host memory");

	if (mem_child_peer)
		return mem_child(b, mem_child_peer);

	/* Fail here, before creating gigabytes, when there is no GPU. */
	cuda_init(b);
	print_versions(b);
	make_data_file(b);
	CU_CHECK(blcu.cuMemAlloc_v2(&b->dbuf, b->size));
	if (phx_buf_alloc(b->pdev, b->size, 0, &b->pbuf))
		bl_die("phx_buf_alloc(%" PRIu64 " MiB): %s", b->size / MiB,
		       phx_strerror_last());
	/* The pinned copy peer sends the file's first bytes everywhere. */
	fill_expected(b, b->pinned, 0, PINNED);

	printf("\nper-run GB/s:\n");
	measure_case(b, "file->GPU hot", HOT, false, true);
	if (b->cold)
		measure_case(b, "file->GPU cold", COLD, true, false);

	b->image = aligned_alloc(4096, b->size);
	if (!b->image)
		bl_die("out of host memory for the %" PRIu64 " MiB write image",
		       b->size / MiB);
	fill_expected(b, b->image, 0, b->size);
	/* The read cases left the file's bytes in both GPU buffers. */
	check_device(b, "GPU buffer before writes", b->dbuf, b->size);
	check_device(b, "libphoenix buffer before writes",
		     phx_buf_dptr(b->pbuf), b->size);
	measure_case(b, "GPU->file", WR, false, true);
	unlink(b->out);
	free(b->image);

	measure_mem(b, argv[0], "libphoenix", true);
	measure_mem(b, argv[0], "cuFile", false);
	measure_mem(b, argv[0], "pread pinned + copy", false);

	print_table();
	return 0;
}
