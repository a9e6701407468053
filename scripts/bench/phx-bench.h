/* SPDX-License-Identifier: MIT */
/*
 * phx-bench.h - what the files of phx-bench share: the run's state, the
 * peers and their results.  phx-bench.c parses the command line and runs
 * the cases; phx-bench-data.c makes and checks the random file;
 * phx-bench-disk.c, phx-bench-copy.c, phx-bench-cufile.c and
 * phx-bench-phx.c are the peers; phx-bench-report.c the table and
 * phx-bench-mem.c the host memory case.
 */
#ifndef PHX_BENCH_H
#define PHX_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "benchlib.h"
#include "phoenix.h"

#define PIECE (64 * MiB) /* host buffer of the naive peers */
#define PINNED (256 * MiB) /* pinned buffer: copies and checks */
#define URING_BS (4 * MiB) /* raw disk block */
#define URING_QD 32 /* raw disk queue depth */
#define CUFILE_IO (1 * GiB) /* bytes per cuFileRead/cuFileWrite */

/* ---- state ------------------------------------------------------------ */

struct bench {
	const char *dir;
	char data[4096]; /* the random file */
	char out[4096]; /* GPU -> file target */
	uint64_t size;
	int runs;
	uint64_t mem_total;
	bool cold;
	bool drop_ok; /* /proc/sys/vm/drop_caches is writable */
	int nthreads;

	CUdeviceptr dbuf; /* peers' destination */
	void *pinned; /* PINNED bytes */
	void *piece; /* PIECE pageable bytes */
	void *direct; /* URING_QD * URING_BS, aligned */
	void *image; /* the file's bytes in host memory (writes) */
	CUstream stream;

	struct phx_device *pdev;
	struct phx_buf *pbuf;
	const char *phx_path; /* data path of the last libphoenix run */

	const char *cufile_why; /* NULL when cuFile works */
	bool cufile_loaded;
	char gpu[64];
	int driver;
};

enum dest { TO_HOST, TO_DBUF, TO_PBUF, FROM_HOST, FROM_DBUF, FROM_PBUF };

/* One peer: moves the file's bytes to or from @where (enum dest). */
typedef void peer_fn(struct bench *b, uint64_t where);

/* The cases a peer runs in (struct peer's cases). */
enum { HOT = 1, COLD = 2, WR = 4 };

/* What a peer is (struct peer's flags). */
enum {
	LIMIT = 1, /* the case's limit (or one candidate) */
	CUFILE = 2, /* needs cuFile */
	OURS = 4, /* libphoenix's figure, the x phx column */
	REPEAT = 8, /* the first PINNED bytes of the file, over and over */
};

struct peer {
	const char *name;
	peer_fn *run;
	enum dest dest;
	unsigned int cases;
	unsigned int flags;
};

struct result {
	const char *casename;
	const char *peer;
	double v[BL_MAX_RUNS];
	int n;
	bool limit; /* the case's limit (or one candidate) */
	bool ours;
	const char *unit; /* "GB/s" or "MiB" */
	char note[96];
};

/* The bytes of the piece at @off of @size, at most @max. */
static inline uint64_t piece_len(uint64_t size, uint64_t off, uint64_t max)
{
	return size - off < max ? size - off : max;
}

/* phx-bench.c */
void cuda_init(struct bench *b);

/* phx-bench-data.c: the random file, the checks, the page cache */
void fill_expected(struct bench *b, void *p, uint64_t off, uint64_t len);
void make_data_file(struct bench *b);
void check_host(struct bench *b, const char *what, const void *p, uint64_t off,
		uint64_t len);
void check_device(struct bench *b, const char *what, CUdeviceptr d,
		  uint64_t len);
void check_file(struct bench *b, const char *what, const char *path);
void check_block(const void *p, uint64_t off, const char *what);
void drop_caches(struct bench *b, const char *path);
void warm_cache(struct bench *b);
int open_or_die(const char *what, const char *path, int flags);
void fsync_or_die(int fd, const char *what);

/* phx-bench-disk.c: the disk's own rates, file <-> host */
peer_fn peer_raw_direct, peer_raw_buffered, peer_raw_direct_write,
	peer_raw_buffered_write;

/* phx-bench-copy.c: host buffers and CUDA copies */
peer_fn peer_pread_pageable, peer_pread_pinned, peer_pinned_copy,
	peer_copy_pwrite;

/* phx-bench-cufile.c */
const char *cufile_load(struct bench *b);
peer_fn peer_cufile_read, peer_cufile_write;

/* phx-bench-phx.c: libphoenix */
peer_fn peer_phx_read, peer_phx_write, peer_phx_enqueue, peer_phx_enqueue_late,
	peer_phx_enqueue_write;

/* phx-bench-report.c: the results and their table */
struct result *new_result(const char *casename, const struct peer *p);
void print_table(void);

/* phx-bench-mem.c: host memory while moving mem_total bytes */
int mem_child(struct bench *b, const char *peer);
void measure_mem(struct bench *b, const char *argv0, const char *peer,
		 bool ours);

#endif
