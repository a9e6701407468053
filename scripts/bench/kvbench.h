/* SPDX-License-Identifier: MIT */
/*
 * kvbench.h - shared parts of phx-kvbench: libphxfile loaded at run time,
 * cuFile batch runs, device memory that every peer can use, the data file
 * and its checks, raw io_uring, the results (what phx-bench shares too is
 * in benchlib.h).
 *
 * The three modes are one file each: kvbench-kv.c (LMCache's slab
 * pattern), kvbench-small.c (small random reads), kvbench-setup.c (set-up
 * latency); kvbench-main.c parses the command line.
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "benchlib.h"
#include "phoenix.h"

#define KB_MAX_QD 256
#define KV_MAX_STREAMS 16 /* kv: streams at the most */

/* ---- libphxfile (dlopen: the library LMCache loads) ------------------- */

struct kb_phxfile {
	int (*DriverOpen)(void);
	int (*DriverClose)(void);
	int (*BufRegister)(const void *, size_t);
	int (*BufDeregister)(const void *);
	int (*HandleRegister)(void **, int);
	int (*HandleDeregister)(void *);
	int (*StreamRegister)(void *);
	int (*StreamDeregister)(void *);
	int (*ReadAsync)(void *, void *, size_t *, int64_t *, int64_t *,
			 int64_t *, void *);
	int (*WriteAsync)(void *, void *, size_t *, int64_t *, int64_t *,
			  int64_t *, void *);
};

extern struct kb_phxfile kbpf;

/* ---- the run ------------------------------------------------------------ */

struct kb {
	const char *dir;
	char path[4096]; /* the data file (the slab) */
	uint64_t size; /* its size */
	int runs;
	bool cuda; /* a CUDA device: cuFile and CUDA peers run */
	bool root; /* drop_caches is writable */
	const char *cufile_why; /* NULL when cuFile loaded and opened */
	const char *phxfile_why; /* NULL when libphxfile loaded */
	const char *phxfile_path;
	char gpu[64];
	struct phx_device *dev; /* libphoenix's device (sim or cuda) */
	void *host; /* KB_HOST bytes of pinned host memory */
};

#define KB_HOST (256 * MiB)

/* Device memory every peer can address (cuMemAlloc, or a sim buffer). */
struct kb_dmem {
	phx_dptr_t dptr;
	uint64_t size;
	struct phx_buf *buf; /* sim only */
};

void kb_load_cuda(struct kb *b);
void kb_thread_ctx(void);
void kb_load_cufile(struct kb *b);
/* cuFile's error @e and errno in words (one buffer: the main thread's). */
const char *kb_cferr(CUfileError_t e);
/* Request @p of a cuFile batch: @size bytes, @opcode 0 read, 1 write. */
void kb_batch_param(CUfileIOParams_t *p, void *fh, void *base, off_t dev_off,
		    off_t file_off, size_t size, int opcode);
/*
 * Requests 0 to @n - 1 through the cuFile batch @batch, at most @qd (up
 * to KB_MAX_QD) in flight: @fill makes request i's parameters (all but
 * the cookie) when it may start, @done checks i's event when it has
 * completed.  Returns the elapsed time, or -1 with the failing call in
 * @note.
 */
double kb_batch_run(void *batch, unsigned int qd, int n,
		    void (*fill)(void *ctx, int i, CUfileIOParams_t *p),
		    void (*done)(void *ctx, int i, const CUfileIOEvents_t *ev),
		    void *ctx, char *note, size_t size);
void kb_load_phxfile(struct kb *b, const char *argv0);

void kb_dmem_alloc(struct kb *b, struct kb_dmem *m, uint64_t size);
void kb_dmem_free(struct kb *b, struct kb_dmem *m);
void kb_dmem_to_host(struct kb *b, void *dst, const struct kb_dmem *m,
		     uint64_t off, uint64_t len);
void kb_dmem_zero(struct kb *b, struct kb_dmem *m);
void kb_dmem_from_host(struct kb *b, struct kb_dmem *m, uint64_t off,
		       const void *src, uint64_t len);
void *kb_stream_new(struct kb *b);
void kb_stream_free(struct kb *b, void *native);

void kb_fill(void *p, uint64_t file_off, uint64_t len);
int64_t kb_find_bad_dmem(struct kb *b, const struct kb_dmem *m, uint64_t off,
			 uint64_t file_off, uint64_t len);
void kb_check_dmem(struct kb *b, const char *what, const struct kb_dmem *m,
		   uint64_t off, uint64_t file_off, uint64_t len);
void kb_make_file(struct kb *b);
void kb_cold(struct kb *b);
void kb_warm(struct kb *b, const uint64_t *offs, int n, uint64_t len);

/* One request of a raw io_uring run: @len bytes at @off to/from slot. */
struct kb_req {
	uint64_t off;
	uint64_t len;
};

/*
 * Read (or write) @n requests through io_uring at queue depth @qd, each
 * into (from) a free slot of @slot bytes in @host, or with @per_req at
 * @host + i * @slot.  @lat, if set, receives each request's latency in
 * seconds, @slot_of each request's slot.  Returns the elapsed time.
 */
double kb_uring(int fd, bool write, const struct kb_req *reqs, int n,
		unsigned int qd, void *host, uint64_t slot, bool per_req,
		double *lat, int *slot_of);

/* ---- results ------------------------------------------------------------ */

struct kb_result {
	char group[48]; /* "kv read 4M, 1 stream, hot" */
	char peer[40]; /* "phxFile async" */
	const char *unit; /* "GB/s", "IOPS", "us" */
	double v[BL_MAX_RUNS];
	double p50[BL_MAX_RUNS], p99[BL_MAX_RUNS]; /* latencies, us */
	double cpu[BL_MAX_RUNS]; /* the process's CPU time per operation, us */
	int n;
	bool limit; /* the group's limit */
	bool ours; /* the group's reference for "x us" */
	char note[160];
};

struct kb_result *kb_result(const char *group, const char *peer,
			    const char *unit, bool limit, bool ours);
void kb_print_table(const char *title, bool latency);
void kb_results_reset(void);

/* ---- the modes ---------------------------------------------------------- */

struct kb_opts {
	uint64_t sizes[8];
	int nsizes;
	int qds[8];
	int nqds;
	int streams[4];
	int nstreams;
	uint64_t ops;
};

void kb_mode_kv(struct kb *b, const struct kb_opts *o);
void kb_mode_small(struct kb *b, const struct kb_opts *o);
void kb_mode_setup(struct kb *b, const struct kb_opts *o);

#endif /* KVBENCH_H */
