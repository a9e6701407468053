/* SPDX-License-Identifier: MIT */
/*
 * kvbench.h - shared parts of phx-kvbench: the peers' libraries loaded at
 * run time (CUDA driver, cuFile, libphxfile), device memory that every
 * peer can use, the data file and its checks, raw io_uring, the results.
 *
 * The three modes are one file each: kvbench-kv.c (LMCache's slab
 * pattern), kvbench-small.c (small random reads), kvbench-setup.c (set-up
 * latency); kvbench-main.c parses the command line.
 */
#ifndef KVBENCH_H
#define KVBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "phoenix.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define KB_MAX_RUNS 9
#define KB_MAX_QD 256

/* ---- the CUDA driver (dlopen) ----------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

struct kb_cuda {
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree_v2)(CUdeviceptr);
	CUresult (*cuMemAllocHost_v2)(void **, size_t);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamDestroy_v2)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
};

/* ---- cuFile (dlopen; declarations after the cuFile API reference) ----- */

typedef struct {
	int err; /* CUfileOpError: 0 success */
	int cu_err;
} CUfileError_t;

typedef struct {
	int type; /* 1: CU_FILE_HANDLE_TYPE_OPAQUE_FD */
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} CUfileDescr_t;

typedef struct {
	int mode; /* CUFILE_BATCH = 1 */
	union {
		struct {
			void *devPtr_base;
			off_t file_offset;
			off_t devPtr_offset;
			size_t size;
		} batch;
	} u;
	void *fh;
	int opcode; /* CUFILE_READ 0, CUFILE_WRITE 1 */
	void *cookie;
} CUfileIOParams_t;

typedef struct {
	void *cookie;
	int status; /* CUfileStatus_t: bit flags, 16 complete, 64 failed */
	size_t ret;
} CUfileIOEvents_t;

#define KB_CUFILE_COMPLETE 16
#define KB_CUFILE_FAILED 64

struct kb_cufile {
	CUfileError_t (*cuFileDriverOpen)(void);
	CUfileError_t (*cuFileDriverClose)(void);
	CUfileError_t (*cuFileHandleRegister)(void **, CUfileDescr_t *);
	void (*cuFileHandleDeregister)(void *);
	CUfileError_t (*cuFileBufRegister)(const void *, size_t, int);
	CUfileError_t (*cuFileBufDeregister)(const void *);
	ssize_t (*cuFileRead)(void *, void *, size_t, off_t, off_t);
	ssize_t (*cuFileWrite)(void *, const void *, size_t, off_t, off_t);
	CUfileError_t (*cuFileReadAsync)(void *, void *, size_t *, off_t *,
					 off_t *, ssize_t *, CUstream);
	CUfileError_t (*cuFileWriteAsync)(void *, void *, size_t *, off_t *,
					  off_t *, ssize_t *, CUstream);
	CUfileError_t (*cuFileStreamRegister)(CUstream, unsigned int);
	CUfileError_t (*cuFileStreamDeregister)(CUstream);
	CUfileError_t (*cuFileBatchIOSetUp)(void **, unsigned int);
	CUfileError_t (*cuFileBatchIOSubmit)(void *, unsigned int,
					     CUfileIOParams_t *, unsigned int);
	CUfileError_t (*cuFileBatchIOGetStatus)(void *, unsigned int,
						unsigned int *,
						CUfileIOEvents_t *,
						struct timespec *);
	void (*cuFileBatchIODestroy)(void *);
};

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

extern struct kb_cuda kbcu;
extern struct kb_cufile kbcf;
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

void kb_die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
void kb_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double kb_now(void);
const char *kb_cu_err(CUresult r);

void kb_load_cuda(struct kb *b);
void kb_thread_ctx(void);
void kb_load_cufile(struct kb *b);
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

uint64_t kb_gen_word(uint64_t i);
void kb_fill(void *p, uint64_t file_off, uint64_t len);
int64_t kb_check(const void *p, uint64_t file_off, uint64_t len);
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
	double v[KB_MAX_RUNS];
	double p50[KB_MAX_RUNS], p99[KB_MAX_RUNS]; /* latencies, us */
	int n;
	bool limit; /* the group's limit */
	bool ours; /* the group's reference for "x us" */
	char note[80];
};

struct kb_result *kb_result(const char *group, const char *peer,
			    const char *unit, bool limit, bool ours);
double kb_median(const double *v, int n);
double kb_percentile(double *v, int n, double p);
void kb_print_table(const char *title, bool latency);
void kb_results_reset(void);

/* ---- the modes ---------------------------------------------------------- */

struct kb_opts {
	uint64_t sizes[8];
	int nsizes;
	unsigned int qds[8];
	int nqds;
	int streams[4];
	int nstreams;
	uint64_t ops;
};

void kb_mode_kv(struct kb *b, const struct kb_opts *o);
void kb_mode_small(struct kb *b, const struct kb_opts *o);
void kb_mode_setup(struct kb *b, const struct kb_opts *o);

#endif /* KVBENCH_H */
