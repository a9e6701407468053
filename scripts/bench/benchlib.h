/* SPDX-License-Identifier: MIT */
/*
 * benchlib.h - what the GPU benchmarks (phx-bench, phx-kvbench) share:
 * errors and timing, the CUDA driver and cuFile loaded at run time, the
 * generated data file, and the statistics of the timed runs.
 */
#ifndef BENCHLIB_H
#define BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define BL_MAX_RUNS 9 /* timed runs per peer at the most */

/* Print "program: message" to stderr and exit(1). */
void bl_die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
/* Print a line to stdout at once. */
void bl_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Seconds on the monotonic clock. */
double bl_now(void);
/* User and system CPU seconds of the whole process so far (all threads). */
double bl_cpu_seconds(void);

/* -s SIZE: a multiple of 1 MiB, at least @min; dies with why otherwise. */
uint64_t bl_opt_size(const char *s, uint64_t min);
/* -r RUNS: 1 to BL_MAX_RUNS, or -1. */
int bl_opt_runs(const char *s);

/* ---- the CUDA driver (dlopen) ----------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

struct bl_cuda {
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorName)(CUresult, const char **);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree_v2)(CUdeviceptr);
	CUresult (*cuMemAllocHost_v2)(void **, size_t);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t,
					 CUstream);
	CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamDestroy_v2)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
};

extern struct bl_cuda blcu;

/*
 * Load libcuda.so.1 into blcu.  Returns NULL, or dlerror()'s words when
 * the library does not load; dies when the driver lacks an entry point.
 */
const char *bl_cuda_load(void);
/* The name of CUDA error @r. */
const char *bl_cu_err(CUresult r);

#define CU_CHECK(call)                                                 \
	do {                                                           \
		CUresult r_ = (call);                                  \
		if (r_)                                                \
			bl_die("%s failed: %s", #call, bl_cu_err(r_)); \
	} while (0)

/* ---- cuFile (dlopen; declarations after the cuFile API reference) ----- */

typedef struct {
	int err; /* CUfileOpError: 0 success */
	int cu_err; /* CUresult */
} CUfileError_t;

#define CU_FILE_HANDLE_TYPE_OPAQUE_FD 1

typedef struct {
	int type; /* CU_FILE_HANDLE_TYPE_OPAQUE_FD */
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

/* The layouts of cufile.h (CUDA 12 and 13), checked against it. */
_Static_assert(sizeof(CUfileError_t) == 8, "CUfileError_t: two ints, in rax");
_Static_assert(sizeof(CUfileDescr_t) == 24 &&
		       offsetof(CUfileDescr_t, handle) == 8 &&
		       offsetof(CUfileDescr_t, fs_ops) == 16,
	       "CUfileDescr_t layout");
_Static_assert(sizeof(CUfileIOParams_t) == 64 &&
		       offsetof(CUfileIOParams_t, u) == 8 &&
		       offsetof(CUfileIOParams_t, fh) == 40 &&
		       offsetof(CUfileIOParams_t, opcode) == 48 &&
		       offsetof(CUfileIOParams_t, cookie) == 56,
	       "CUfileIOParams_t layout");
_Static_assert(sizeof(CUfileIOEvents_t) == 24 &&
		       offsetof(CUfileIOEvents_t, status) == 8 &&
		       offsetof(CUfileIOEvents_t, ret) == 16,
	       "CUfileIOEvents_t layout");

#define BL_CUFILE_COMPLETE 16
#define BL_CUFILE_FAILED 64

struct bl_cufile {
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

extern struct bl_cufile blcf;

/* Load libcufile into blcf.  Returns NULL, or why it could not. */
const char *bl_cufile_load(void);

/*
 * Words for cuFile's error @e, "CU_FILE_DRIVER_NOT_INITIALIZED (5001),
 * CUDA CUDA_SUCCESS", and, when @errnum is not 0, errno's: into @buf.
 */
const char *bl_cufile_err(CUfileError_t e, int errnum, char *buf, size_t n);
/*
 * Words for what cuFileRead/Write returned: -1 with errno, a negative
 * CUfileOpError, a negative errno, or a short count; into @buf.
 */
const char *bl_cufile_ret(ssize_t ret, int errnum, char *buf, size_t n);

/*
 * Open the first of the @nlibs libraries @libs that loads and resolve
 * its @n names @names into the function-pointer table at @table.
 * Returns the library, with *@missing NULL or the first name it lacks;
 * NULL when none loads (dlerror() says why the last did not).
 */
void *bl_dl_load(const char *const *libs, size_t nlibs, void *table,
		 const char *const *names, size_t n, const char **missing);

/* ---- the data file ------------------------------------------------------ */

#define BL_SEED 0x9e3779b97f4a7c15ULL

/* The 8 bytes at file offset 8 * @i: any range can be made and checked. */
static inline uint64_t bl_gen_word(uint64_t i)
{
	uint64_t z = i * BL_SEED + BL_SEED;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* -1, or the file offset of the first word at @p that is not the file's. */
int64_t bl_check(const void *p, uint64_t file_off, uint64_t len);

/* Fills @len bytes at @p as the file's bytes at @file_off. */
typedef void bl_fill_fn(void *arg, void *p, uint64_t file_off, uint64_t len);

/*
 * Create @path with @size generated bytes unless it already holds them,
 * writing through @buf (@buf_size bytes, a multiple of 4096) filled by
 * @fill.
 */
void bl_make_file(const char *path, uint64_t size, void *buf, uint64_t buf_size,
		  bl_fill_fn *fill, void *arg);

/* ---- the timed runs ----------------------------------------------------- */

/* The median of @n values (at most BL_MAX_RUNS); NAN when @n is 0. */
double bl_median(const double *v, int n);
/* The @p quantile (0..1) of @v; sorts @v. */
double bl_percentile(double *v, int n, double p);
/* The header line's parts: now as "%Y-%m-%d %H:%M %Z", PHX_STREAM_WAIT. */
void bl_date(char *buf, size_t size);
const char *bl_stream_wait(void);

#endif /* BENCHLIB_H */
