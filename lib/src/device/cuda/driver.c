/* SPDX-License-Identifier: MIT */
/*
 * driver.c - loading the CUDA driver, naming its errors, binding contexts.
 *
 * libcuda.so.1 is loaded with dlopen() at the first probe, so libphoenix
 * has no link-time dependency on the driver and runs (on sim) where there
 * is none.  The non-"_ptsz" variants are resolved, so stream handle NULL
 * is the legacy default stream, as in a program built with nvcc's
 * defaults.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "cuda_api.h"

struct phx_cu_api cu;
struct phx_cu_optional cu_opt;

/* Result of loading the driver, set once under cu_once. */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_ndev; /* devices, or -ENODEV */
static const char *cu_why; /* static reason when unusable */
static char cu_why_buf[128]; /* storage for reasons with a detail */
bool cu_forked;

const char *cu_name(CUresult res)
{
	const char *name = NULL;

	if (cu.cuGetErrorName &&
	    cu.cuGetErrorName(res, &name) == CUDA_SUCCESS && name)
		return name;
	return "unknown CUDA error";
}

int cu_errno(CUresult res)
{
	switch (res) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return ENOSPC;
	case CUDA_ERROR_INVALID_VALUE:
		return EINVAL;
	case CUDA_ERROR_NOT_READY:
		return EAGAIN;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return EOPNOTSUPP;
	case CUDA_ERROR_NOT_PERMITTED:
		return EPERM;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return EEXIST;
	default:
		return EIO;
	}
}

static const char *cu_hint(int err)
{
	switch (err) {
	case ENOSPC:
		return "free device memory or ask for less";
	case ENOMEM:
		return "free host memory or raise the locked-memory limit";
	case EINVAL:
		return "an address or size is wrong: please report it";
	case EOPNOTSUPP:
		return "this GPU or driver lacks the feature; use PHX_DEVICE=sim";
	default:
		return "check nvidia-smi and the kernel log";
	}
}

int cu_fail(struct phx_device *dev, CUresult res, int err, const char *fmt, ...)
{
	char call[96];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(call, sizeof(call), fmt, ap);
	va_end(ap);
	if (!err)
		err = cu_errno(res);
	return phx_err(err, "cuda: %s on %s failed: %s; %s", call,
		       dev ? dev->name : "the GPU", cu_name(res), cu_hint(err));
}

static void cu_atfork_child(void)
{
	cu_forked = true;
}

static void cu_load(void)
{
	void *lib;
	CUresult res;
	int n;

	cu_ndev = -ENODEV;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		cu_why = "libcuda.so.1 not found";
		return;
	}
#define CU_RESOLVE(sym)                                                  \
	cu.sym = (__typeof__(cu.sym))dlsym(lib, #sym);                   \
	if (!cu.sym) {                                                   \
		cu_why = "libcuda.so.1 lacks " #sym " (driver too old)"; \
		goto fail;                                               \
	}
	CU_SYMBOLS(CU_RESOLVE)
#undef CU_RESOLVE
	/* The batched copy of CUDA 13, else of 12.8, else none (a loop). */
	cu_opt.memcpy_batch_v2 =
		(phx_cu_batch_v2_fn *)dlsym(lib, "cuMemcpyBatchAsync_v2");
	if (!cu_opt.memcpy_batch_v2)
		cu_opt.memcpy_batch_v1 =
			(phx_cu_batch_v1_fn *)dlsym(lib, "cuMemcpyBatchAsync");

	res = cu.cuInit(0);
	if (res == CUDA_ERROR_NO_DEVICE) {
		cu_why = "no CUDA device";
		goto fail;
	}
	if (res != CUDA_SUCCESS) {
		snprintf(cu_why_buf, sizeof(cu_why_buf), "cuInit failed: %s",
			 cu_name(res));
		cu_why = cu_why_buf;
		goto fail;
	}
	res = cu.cuDeviceGetCount(&n);
	if (res != CUDA_SUCCESS || n <= 0) {
		cu_why = "no CUDA device";
		goto fail;
	}
	cu_ndev = n;
	pthread_atfork(NULL, NULL, cu_atfork_child);
	return;
fail:
	/* The library stays loaded: cuInit may have started driver threads. */
	memset(&cu, 0, sizeof(cu));
	memset(&cu_opt, 0, sizeof(cu_opt));
}

int cu_probe(const char **why)
{
	pthread_once(&cu_once, cu_load);
	if (cu_ndev < 0 && why)
		*why = cu_why;
	return cu_ndev;
}

/* The driver does not survive fork(): say so instead of its error code. */
int cu_fork_err(struct phx_device *dev)
{
	return phx_err(
		ENODEV,
		"cuda: %s cannot be used in this process: it was forked after CUDA started in its parent; open devices after fork(), or exec a new program",
		dev ? dev->name : "the GPU");
}

/* Make @ctx current in this thread unless it already is. */
int cu_bind_ctx(struct phx_device *dev, CUcontext ctx)
{
	CUcontext cur = NULL;
	CUresult res;

	if (cu_forked)
		return cu_fork_err(dev);
	if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
		return 0;
	res = cu.cuCtxSetCurrent(ctx);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuCtxSetCurrent");
	return 0;
}
