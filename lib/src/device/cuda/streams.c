/* SPDX-License-Identifier: MIT */
/*
 * streams.c - the cuda backend's streams, events and asynchronous copies,
 * the stream-ordered waits and stores on mapped host memory, and the
 * device's kernels (kernels.ptx): their loading and their launches.
 */
#include <pthread.h>

#include "device.h"
#include "cuda_api.h"

/* Serialises loading the kernels into a device's context. */
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;

int phx_cuda_stream_create(struct phx_device *dev, void **stream)
{
	return cu_create(dev, stream, CUstream, cuStreamCreate,
			 CU_STREAM_NON_BLOCKING);
}

void phx_cuda_stream_destroy(struct phx_device *dev, void *stream)
{
	cu_destroy(dev, stream, cuStreamDestroy_v2);
}

int phx_cuda_stream_sync(struct phx_device *dev, void *stream)
{
	return cu_call(dev, cu.cuStreamSynchronize(stream),
		       "cuStreamSynchronize");
}

void *phx_cuda_stream_default(struct phx_device *dev)
{
	(void)dev;
	return NULL; /* the legacy default stream */
}

int phx_cuda_copy_htod(struct phx_device *dev, phx_dptr_t dst, const void *src,
		       size_t len, void *stream)
{
	return cu_call(dev, cu.cuMemcpyHtoDAsync_v2(dst, src, len, stream),
		       "cuMemcpyHtoDAsync(0x%llx, %zu)",
		       (unsigned long long)dst, len);
}

int phx_cuda_copy_dtoh(struct phx_device *dev, void *dst, phx_dptr_t src,
		       size_t len, void *stream)
{
	return cu_call(dev, cu.cuMemcpyDtoHAsync_v2(dst, src, len, stream),
		       "cuMemcpyDtoHAsync(0x%llx, %zu)",
		       (unsigned long long)src, len);
}

static int copy_htod_each(struct phx_device *dev, const struct phx_htod *copies,
			  unsigned int n, void *stream)
{
	int ret = 0;

	for (unsigned int i = 0; i < n && !ret; i++)
		ret = phx_cuda_copy_htod(dev, copies[i].dst, copies[i].src,
					 copies[i].len, stream);
	return ret;
}

/* Copies per cuMemcpyBatchAsync call: its arrays live on the stack. */
#define CU_BATCH_MAX 64

/* Set when a driver refused a batch as such: copies loop from then on. */
static bool cu_batch_refused;

/*
 * The copy engine's way: one cuMemcpyBatchAsync call per CU_BATCH_MAX
 * copies, which costs the driver one submission where a loop of
 * cuMemcpyHtoDAsync costs one per copy (though still a part per copy);
 * sources in stream order (the slots were filled before).  Without the
 * call (a driver before 12.8), on the legacy default stream (which it
 * refuses) or once a driver refused the batch itself, a loop of
 * cuMemcpyHtoDAsync: a copy it would not take is then named with its own
 * error.
 */
static int copy_htod_dma(struct phx_device *dev, const struct phx_htod *copies,
			 unsigned int n, void *stream)
{
	struct phx_cu_memcpy_attrs attrs = {
		.src_access_order = PHX_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
	};
	CUdeviceptr dsts[CU_BATCH_MAX], srcs[CU_BATCH_MAX];
	size_t sizes[CU_BATCH_MAX], first = 0, fail_idx;
	unsigned int i, j, k;
	CUresult res;
	int ret;

	if (n < 2 || !stream ||
	    __atomic_load_n(&cu_batch_refused, __ATOMIC_RELAXED) ||
	    (!cu_opt.memcpy_batch_v2 && !cu_opt.memcpy_batch_v1))
		return copy_htod_each(dev, copies, n, stream);
	ret = cuda_bind(dev);
	if (ret)
		return ret;
	for (i = 0; i < n; i += k) {
		k = n - i < CU_BATCH_MAX ? n - i : CU_BATCH_MAX;
		for (j = 0; j < k; j++) {
			dsts[j] = copies[i + j].dst;
			srcs[j] = (CUdeviceptr)(uintptr_t)copies[i + j].src;
			sizes[j] = copies[i + j].len;
		}
		if (cu_opt.memcpy_batch_v2)
			res = cu_opt.memcpy_batch_v2(dsts, srcs, sizes, k,
						     &attrs, &first, 1, stream);
		else
			res = cu_opt.memcpy_batch_v1(dsts, srcs, sizes, k,
						     &attrs, &first, 1,
						     &fail_idx, stream);
		if (res == CUDA_SUCCESS)
			continue;
		if (res != CUDA_ERROR_INVALID_VALUE &&
		    res != CUDA_ERROR_NOT_SUPPORTED)
			return cu_fail(dev, res, 0,
				       "cuMemcpyBatchAsync(%u copies)", k);
		/* copies already queued are queued again: the same bytes */
		__atomic_store_n(&cu_batch_refused, true, __ATOMIC_RELAXED);
		return copy_htod_each(dev, copies + i, n - i, stream);
	}
	return 0;
}

/* Copies per launch of the gather kernel: its parameters (kernels.ptx). */
#define CU_GATHER_MAX 64
/* The longest copy it takes: 16 bytes a thread, 1024 threads, one pass. */
#define CU_GATHER_LEN (16u << 10)
/*
 * Fewer fitting copies than this go to the copy engine: one launch costs
 * the driver about what this many copies do, and lands no sooner.
 */
#define CU_GATHER_MIN 4
/*
 * PHX_GATHER=auto gathers batches of up to this many copies, =on any:
 * fio's 4 KiB reads at queue depth 32 (rounds of up to 32 completions)
 * went faster through the kernel, at depth 128 through the copy engine
 * (docs/benchmarks.md).
 */
#define CU_GATHER_AUTO_MAX 32

/* Set when a launch of the gather kernel failed: the copy engine's way. */
static bool cu_gather_refused;

/* Whether @n copies on @stream may gather, with @fn the loaded kernel. */
static bool gather_on(const struct phx_cuda_dev *cd, CUfunction fn,
		      unsigned int n, void *stream)
{
	int mode = phx_settings()->gather;

	return fn && cd->host_ptr_ok && stream && n >= CU_GATHER_MIN &&
	       (mode > 0 || (mode < 0 && n <= CU_GATHER_AUTO_MAX)) &&
	       !__atomic_load_n(&cu_gather_refused, __ATOMIC_RELAXED);
}

/* Whether the gather kernel can take @c: short, every part 16-aligned. */
static bool gather_fits(const struct phx_htod *c)
{
	return c->len && c->len <= CU_GATHER_LEN &&
	       !((c->dst | (uintptr_t)c->src | c->len) & 15);
}

/* One launch of phx_gather for @n (at most CU_GATHER_MAX) fitting copies. */
static int gather_launch(CUfunction fn, const struct phx_htod *const *fit,
			 unsigned int n, void *stream)
{
	uint64_t dst[CU_GATHER_MAX], src[CU_GATHER_MAX];
	uint32_t len[CU_GATHER_MAX] = { 0 };
	void *params[] = { dst, src, len };
	size_t longest = 0;
	unsigned int i, threads;

	for (i = 0; i < n; i++) {
		dst[i] = fit[i]->dst;
		src[i] = (uintptr_t)fit[i]->src;
		len[i] = (uint32_t)fit[i]->len;
		if (fit[i]->len > longest)
			longest = fit[i]->len;
	}
	/* a thread per 16 bytes of the longest, whole warps */
	threads = (unsigned int)phx_align_up(longest / 16, 32);
	return cu.cuLaunchKernel(fn, n, 1, 1, threads, 1, 1, 0, stream, params,
				 NULL) == CUDA_SUCCESS ?
		       0 :
		       -EAGAIN;
}

/* One window of @w (at most CU_GATHER_MAX) copies; see below. */
static int gather_window(struct phx_device *dev, CUfunction fn,
			 const struct phx_htod *copies, unsigned int w,
			 void *stream)
{
	const struct phx_htod *fit[CU_GATHER_MAX];
	struct phx_htod rest[CU_GATHER_MAX];
	unsigned int k, nfit = 0, nrest = 0;

	for (k = 0; k < w; k++) {
		if (gather_fits(&copies[k]))
			fit[nfit++] = &copies[k];
		else
			rest[nrest++] = copies[k];
	}
	if (nfit < CU_GATHER_MIN)
		return copy_htod_dma(dev, copies, w, stream);
	if (gather_launch(fn, fit, nfit, stream)) {
		/* nothing of the window is queued: all of it another way */
		__atomic_store_n(&cu_gather_refused, true, __ATOMIC_RELAXED);
		return copy_htod_dma(dev, copies, w, stream);
	}
	return nrest ? copy_htod_dma(dev, rest, nrest, stream) : 0;
}

/*
 * Small copies out of registered host memory cost the copy engine's way
 * a driver call part each, and land one after another; the gather kernel
 * (once kernels_load loaded it, where the device reads registered memory
 * at its host address) takes up to CU_GATHER_MAX of them in one launch
 * and moves them at once, each block reading its source across PCIe.
 * Each window of CU_GATHER_MAX copies (gather_window): those that fit
 * the kernel go in one launch where there are CU_GATHER_MIN of them, the
 * others (and all, where the kernel is not there, PHX_GATHER=off, or the
 * batch is longer than CU_GATHER_AUTO_MAX under auto) the copy engine's
 * way.  A launch needs a free multiprocessor where a copy
 * needs a copy engine: on a GPU that kernels of the application fill,
 * the copy engine's way may land sooner.
 */
int phx_cuda_copy_htod_batch(struct phx_device *dev,
			     const struct phx_htod *copies, unsigned int n,
			     void *stream)
{
	struct phx_cuda_dev *cd = cuda_priv(dev);
	CUfunction fn = __atomic_load_n(&cd->gather_fn, __ATOMIC_ACQUIRE);
	unsigned int i, w;
	int ret;

	if (!gather_on(cd, fn, n, stream))
		return copy_htod_dma(dev, copies, n, stream);
	/* the launch needs the context; the copy engine's way binds too */
	for (i = 0, ret = cuda_bind(dev); i < n && !ret; i += w) {
		w = (unsigned int)phx_min(n - i, CU_GATHER_MAX);
		ret = gather_window(dev, fn, copies + i, w, stream);
	}
	return ret;
}

int phx_cuda_copy_dtod(struct phx_device *dev, phx_dptr_t dst, phx_dptr_t src,
		       size_t len, void *stream)
{
	/* Unified addressing finds both devices; see the file header. */
	return cu_call(dev, cu.cuMemcpyAsync(dst, src, len, stream),
		       "cuMemcpyAsync(0x%llx, 0x%llx, %zu)",
		       (unsigned long long)dst, (unsigned long long)src, len);
}

int phx_cuda_memset_d8(struct phx_device *dev, phx_dptr_t dst, uint8_t value,
		       size_t len, void *stream)
{
	return cu_call(dev, cu.cuMemsetD8Async(dst, value, len, stream),
		       "cuMemsetD8Async(0x%llx, %zu)", (unsigned long long)dst,
		       len);
}

int phx_cuda_event_create(struct phx_device *dev, void **event)
{
	return cu_create(dev, event, CUevent, cuEventCreate,
			 CU_EVENT_DISABLE_TIMING);
}

void phx_cuda_event_destroy(struct phx_device *dev, void *event)
{
	cu_destroy(dev, event, cuEventDestroy_v2);
}

int phx_cuda_event_record(struct phx_device *dev, void *event, void *stream)
{
	return cu_call(dev, cu.cuEventRecord(event, stream), "cuEventRecord");
}

int phx_cuda_event_query(struct phx_device *dev, void *event)
{
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	res = cu.cuEventQuery(event);
	if (res == CUDA_SUCCESS)
		return 0;
	if (res == CUDA_ERROR_NOT_READY)
		return -EAGAIN;
	return cu_fail(dev, res, 0, "cuEventQuery");
}

int phx_cuda_event_sync(struct phx_device *dev, void *event)
{
	return cu_call(dev, cu.cuEventSynchronize(event), "cuEventSynchronize");
}

int phx_cuda_launch_host_fn(struct phx_device *dev, void *stream,
			    void (*fn)(void *), void *arg)
{
	return cu_call(dev, cu.cuLaunchHostFunc(stream, fn, arg),
		       "cuLaunchHostFunc");
}

/* Pinned host memory the device reads and writes at *@daddr. */
int phx_cuda_host_map(struct phx_device *dev, void *p, size_t len,
		      uint64_t *daddr)
{
	unsigned int flags =
		CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
	CUdeviceptr d;
	CUresult res;
	int ret = cu_call(dev, cu.cuMemHostRegister_v2(p, len, flags),
			  "cuMemHostRegister(mapped)");

	if (ret)
		return ret;
	res = cu.cuMemHostGetDevicePointer_v2(&d, p, 0);
	if (res != CUDA_SUCCESS) {
		cu.cuMemHostUnregister(p);
		return cu_fail(dev, res, 0, "cuMemHostGetDevicePointer");
	}
	*daddr = d;
	return 0;
}

void phx_cuda_host_unmap(struct phx_device *dev, void *p)
{
	if (cuda_bind(dev) == 0)
		cu.cuMemHostUnregister(p);
}

int phx_cuda_stream_wait_value(struct phx_device *dev, void *stream,
			       uint32_t *word, uint64_t daddr, uint32_t value)
{
	(void)word;
	return cu_call(dev,
		       cu.cuStreamWaitValue32_v2(stream, daddr, value,
						 CU_STREAM_WAIT_VALUE_GEQ),
		       "cuStreamWaitValue32");
}

int phx_cuda_stream_write_value(struct phx_device *dev, void *stream,
				uint32_t *word, uint64_t daddr, uint32_t value)
{
	(void)word;
	/* the default flag orders the store after the work before it */
	return cu_call(
		dev,
		cu.cuStreamWriteValue32_v2(stream, daddr, value,
					   CU_STREAM_WRITE_VALUE_DEFAULT),
		"cuStreamWriteValue32");
}

/* Load the kernels (kernels.ptx) into @dev's context, once. */
int phx_cuda_kernels_load(struct phx_device *dev)
{
	struct phx_cuda_dev *cd = cuda_priv(dev);
	CUresult res = CUDA_SUCCESS;
	CUfunction feed, gather;
	CUmodule mod;

	if (__atomic_load_n(&cd->gather_fn, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&kernels_lock);
	if (!cd->gather_fn) {
		res = cu.cuModuleLoadData(&mod, phx_kernels_ptx);
		if (res == CUDA_SUCCESS) {
			res = cu.cuModuleGetFunction(&feed, mod, "phx_feed");
			if (res == CUDA_SUCCESS)
				res = cu.cuModuleGetFunction(&gather, mod,
							     "phx_gather");
			if (res == CUDA_SUCCESS) {
				cd->kernels_mod = mod;
				cd->feed_fn = feed;
				__atomic_store_n(&cd->gather_fn, gather,
						 __ATOMIC_RELEASE);
			} else {
				cu.cuModuleUnload(mod);
			}
		}
	}
	pthread_mutex_unlock(&kernels_lock);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "loading the device's kernels");
	return 0;
}

/* Put the copy kernel on @stream: one block per slot. */
int phx_cuda_feed_launch(struct phx_device *dev, void *stream,
			 struct phx_feed_ctl *ctl, uint64_t ctl_daddr,
			 phx_dptr_t buf, phx_feed_play_fn *play)
{
	struct phx_cuda_dev *cd = cuda_priv(dev);
	CUdeviceptr c = ctl_daddr, b = buf;
	void *params[] = { &c, &b };
	CUresult res;
	int ret = cuda_bind(dev);

	(void)ctl;
	if (!ret)
		ret = phx_cuda_kernels_load(dev);
	if (ret)
		return ret;
	res = cu.cuLaunchKernel(cd->feed_fn, PHX_FEED_SLOTS, 1, 1, 256, 1, 1, 0,
				stream, params, NULL);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuLaunchKernel(copy kernel)");
	return 0;
}
