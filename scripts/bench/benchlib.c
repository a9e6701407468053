/* SPDX-License-Identifier: MIT */
/*
 * benchlib.c - what phx-bench and phx-kvbench share: errors and timing,
 * the CUDA driver and cuFile loaded at run time, the generated data file,
 * and the statistics of the timed runs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchlib.h"
#include "phoenix.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct bl_cuda blcu;
struct bl_cufile blcf;

void bl_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void bl_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

double bl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bl_cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

uint64_t bl_opt_size(const char *s, uint64_t min)
{
	uint64_t v;

	if (phx_parse_size(s, &v) || v < min || v % MiB)
		bl_die("bad size %s: use a multiple of 1M, at least %" PRIu64
		       "M",
		       s, min / MiB);
	return v;
}

int bl_opt_runs(const char *s)
{
	int n = atoi(s);

	return n < 1 || n > BL_MAX_RUNS ? -1 : n;
}

void *bl_dl_load(const char *const *libs, size_t nlibs, void *table,
		 const char *const *names, size_t n, const char **missing)
{
	void *lib = NULL;

	for (size_t i = 0; !lib && i < nlibs; i++)
		lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return NULL;
	*missing = NULL;
	for (size_t i = 0; i < n; i++) {
		void *sym = dlsym(lib, names[i]);

		if (!sym) {
			*missing = names[i];
			break;
		}
		memcpy((char *)table + i * sizeof(void *), &sym, sizeof(sym));
	}
	return lib;
}

/* ---- the CUDA driver ---------------------------------------------------- */

const char *bl_cuda_load(void)
{
	static const char *const lib = "libcuda.so.1";
	static const char *const names[] = {
		"cuInit",
		"cuDriverGetVersion",
		"cuGetErrorName",
		"cuDeviceGet",
		"cuDeviceGetName",
		"cuDevicePrimaryCtxRetain",
		"cuCtxSetCurrent",
		"cuCtxSynchronize",
		"cuMemAlloc_v2",
		"cuMemFree_v2",
		"cuMemAllocHost_v2",
		"cuMemFreeHost",
		"cuMemcpyHtoD_v2",
		"cuMemcpyDtoH_v2",
		"cuMemcpyHtoDAsync_v2",
		"cuMemsetD8_v2",
		"cuStreamCreate",
		"cuStreamDestroy_v2",
		"cuStreamSynchronize",
	};
	const char *missing;

	_Static_assert(ARRAY_LEN(names) == sizeof(blcu) / sizeof(void *),
		       "one name per CUDA entry point");
	if (!bl_dl_load(&lib, 1, &blcu, names, ARRAY_LEN(names), &missing))
		return dlerror();
	if (missing)
		bl_die("%s lacks %s: the driver is too old", lib, missing);
	return NULL;
}

const char *bl_cu_err(CUresult r)
{
	const char *s = NULL;

	if (blcu.cuGetErrorName && !blcu.cuGetErrorName(r, &s) && s)
		return s;
	return "unknown CUDA error";
}

/* ---- cuFile ------------------------------------------------------------- */

const char *bl_cufile_load(void)
{
	static const char *const libs[] = {
		"libcufile.so.0",
		"libcufile.so",
		"/usr/local/cuda/lib64/libcufile.so.0",
		"/usr/local/cuda/lib64/libcufile.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so",
	};
	static const char *const names[] = {
		"cuFileDriverOpen",
		"cuFileDriverClose_v2",
		"cuFileHandleRegister",
		"cuFileHandleDeregister",
		"cuFileBufRegister",
		"cuFileBufDeregister",
		"cuFileRead",
		"cuFileWrite",
		"cuFileReadAsync",
		"cuFileWriteAsync",
		"cuFileStreamRegister",
		"cuFileStreamDeregister",
		"cuFileBatchIOSetUp",
		"cuFileBatchIOSubmit",
		"cuFileBatchIOGetStatus",
		"cuFileBatchIODestroy",
	};
	static char why[160];
	const char *missing;

	_Static_assert(ARRAY_LEN(names) == sizeof(blcf) / sizeof(void *),
		       "one name per cuFile entry point");
	if (!bl_dl_load(libs, ARRAY_LEN(libs), &blcf, names, ARRAY_LEN(names),
			&missing))
		return "libcufile.so not found";
	if (missing) {
		snprintf(why, sizeof(why), "libcufile.so lacks %s", missing);
		return why;
	}
	return NULL;
}

/* CUfileOpError's names, by code - 5000 (the cuFile API reference). */
static const char *const cufile_errs[] = {
	[1] = "CU_FILE_DRIVER_NOT_INITIALIZED",
	[2] = "CU_FILE_DRIVER_INVALID_PROPS",
	[3] = "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
	[4] = "CU_FILE_DRIVER_VERSION_MISMATCH",
	[5] = "CU_FILE_DRIVER_VERSION_READ_ERROR",
	[6] = "CU_FILE_DRIVER_CLOSING",
	[7] = "CU_FILE_PLATFORM_NOT_SUPPORTED",
	[8] = "CU_FILE_IO_NOT_SUPPORTED",
	[9] = "CU_FILE_DEVICE_NOT_SUPPORTED",
	[10] = "CU_FILE_NVFS_DRIVER_ERROR",
	[11] = "CU_FILE_CUDA_DRIVER_ERROR",
	[12] = "CU_FILE_CUDA_POINTER_INVALID",
	[13] = "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
	[14] = "CU_FILE_CUDA_POINTER_RANGE_ERROR",
	[15] = "CU_FILE_CUDA_CONTEXT_MISMATCH",
	[16] = "CU_FILE_INVALID_MAPPING_SIZE",
	[17] = "CU_FILE_INVALID_MAPPING_RANGE",
	[18] = "CU_FILE_INVALID_FILE_TYPE",
	[19] = "CU_FILE_INVALID_FILE_OPEN_FLAG",
	[20] = "CU_FILE_DIO_NOT_SET",
	[22] = "CU_FILE_INVALID_VALUE",
	[23] = "CU_FILE_MEMORY_ALREADY_REGISTERED",
	[24] = "CU_FILE_MEMORY_NOT_REGISTERED",
	[25] = "CU_FILE_PERMISSION_DENIED",
	[26] = "CU_FILE_DRIVER_ALREADY_OPEN",
	[27] = "CU_FILE_HANDLE_NOT_REGISTERED",
	[28] = "CU_FILE_HANDLE_ALREADY_REGISTERED",
	[29] = "CU_FILE_DEVICE_NOT_FOUND",
	[30] = "CU_FILE_INTERNAL_ERROR",
	[31] = "CU_FILE_GETNEWFD_FAILED",
	[33] = "CU_FILE_NVFS_SETUP_ERROR",
	[34] = "CU_FILE_IO_DISABLED",
	[35] = "CU_FILE_BATCH_SUBMIT_FAILED",
	[36] = "CU_FILE_GPU_MEMORY_PINNING_FAILED",
	[37] = "CU_FILE_BATCH_FULL",
	[38] = "CU_FILE_ASYNC_NOT_SUPPORTED",
	[39] = "CU_FILE_INTERNAL_BATCH_SETUP_ERROR",
	[40] = "CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR",
	[41] = "CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR",
	[42] = "CU_FILE_INTERNAL_BATCH_CANCEL_ERROR",
	[43] = "CU_FILE_NOMEM_ERROR",
	[44] = "CU_FILE_IO_ERROR",
	[45] = "CU_FILE_INTERNAL_BUF_REGISTER_ERROR",
	[46] = "CU_FILE_HASH_OPR_ERROR",
	[47] = "CU_FILE_INVALID_CONTEXT_ERROR",
	[48] = "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR",
	[49] = "CU_FILE_BATCH_NOCOMPAT_ERROR",
	[50] = "CU_FILE_IO_MAX_ERROR",
};

static const char *cufile_err_name(int err)
{
	if (err >= 5000 && err - 5000 < (int)ARRAY_LEN(cufile_errs) &&
	    cufile_errs[err - 5000])
		return cufile_errs[err - 5000];
	return "an unknown cuFile error";
}

const char *bl_cufile_err(CUfileError_t e, int errnum, char *buf, size_t n)
{
	int len = snprintf(
		buf, n, "%s (%d), CUDA %s (%d)",
		e.err ? cufile_err_name(e.err) : "CU_FILE_SUCCESS", e.err,
		e.cu_err ? bl_cu_err(e.cu_err) : "CUDA_SUCCESS", e.cu_err);

	if (errnum && len >= 0 && (size_t)len < n)
		snprintf(buf + len, n - len, ", errno %d (%s)", errnum,
			 strerror(errnum));
	return buf;
}

const char *bl_cufile_ret(ssize_t ret, int errnum, char *buf, size_t n)
{
	if (ret == -1)
		snprintf(buf, n, "-1, errno %d (%s)", errnum, strerror(errnum));
	else if (ret <= -5000)
		snprintf(buf, n, "%zd: %s", ret, cufile_err_name((int)-ret));
	else if (ret < 0)
		snprintf(buf, n, "%zd: %s", ret, strerror((int)-ret));
	else
		snprintf(buf, n, "a short count, %zd bytes", ret);
	return buf;
}

/* ---- the data file ------------------------------------------------------ */

int64_t bl_check(const void *p, uint64_t file_off, uint64_t len)
{
	const uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		if (w[i] != bl_gen_word(file_off / 8 + i))
			return (int64_t)(file_off + i * 8);
	return -1;
}

/* Spot checks; every benchmark run checks what it moved anyway. */
static bool file_ok(const char *path, uint64_t size)
{
	uint64_t probe[512];
	struct stat st;
	int fd = open(path, O_RDONLY);
	bool ok;

	if (fd < 0)
		return false;
	ok = !fstat(fd, &st) && (uint64_t)st.st_size == size;
	for (int i = 0; ok && i < 16; i++) {
		uint64_t off = (size - sizeof(probe)) / 15 * i & ~4095ULL;

		ok = pread(fd, probe, sizeof(probe), off) == sizeof(probe) &&
		     bl_check(probe, off, sizeof(probe)) < 0;
	}
	close(fd);
	return ok;
}

void bl_make_file(const char *path, uint64_t size, void *buf, uint64_t buf_size,
		  bl_fill_fn *fill, void *arg)
{
	double t0 = bl_now();
	int fd;

	if (file_ok(path, size))
		return;
	bl_note("creating %s (%" PRIu64 " MiB of generated bytes)...", path,
		size / MiB);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		bl_die("cannot create %s: %s; pass a writable directory", path,
		       strerror(errno));
	for (uint64_t off = 0; off < size; off += buf_size) {
		uint64_t n = size - off < buf_size ? size - off : buf_size;

		fill(arg, buf, off, n);
		if (pwrite(fd, buf, n, off) != (ssize_t)n)
			bl_die("writing %s failed: %s (disk full?)", path,
			       strerror(errno));
	}
	if (fsync(fd) || close(fd))
		bl_die("writing %s failed: %s", path, strerror(errno));
	bl_note("created in %.1f s", bl_now() - t0);
}

/* ---- the timed runs ----------------------------------------------------- */

static int cmp_double(const void *a, const void *c)
{
	double x = *(const double *)a, y = *(const double *)c;

	return x < y ? -1 : x > y;
}

double bl_median(const double *v, int n)
{
	double s[BL_MAX_RUNS];

	if (!n)
		return NAN;
	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

double bl_percentile(double *v, int n, double p)
{
	int i;

	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (int)ceil(p * n) - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

void bl_date(char *buf, size_t size)
{
	time_t t = time(NULL);

	strftime(buf, size, "%Y-%m-%d %H:%M %Z", localtime(&t));
}

const char *bl_stream_wait(void)
{
	static const char *const waits[] = { "auto", "host", "device",
					     "kernel" };
	struct phx_settings set;

	phx_settings_get(&set);
	return waits[set.stream_wait + 1];
}
