/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - the cuda backend: NVIDIA GPUs through the CUDA driver API.
 *
 * The driver is loaded at run time and called through the table `cu`
 * (driver.c, cuda_api.h); its streams, events and copies are in streams.c.
 *
 * Each device uses its primary context, the one the CUDA runtime and
 * frameworks such as PyTorch share, so device addresses can be exchanged
 * with them.  Every op binds that context to the calling thread first, so
 * all of them may be called from any thread.
 *
 * Memory comes from the virtual-memory API: cuMemAddressReserve for the
 * address range, cuMemCreate for each physical chunk (requested exportable
 * as a POSIX file descriptor), cuMemMap + cuMemSetAccess to back a range.
 * cuMemCreate does not clear memory, and a chunk must read as zeros before
 * anyone sees it (an imported chunk must not be cleared, so chunk_map
 * cannot do it).  buf.c clears the chunks it backs where it maps them
 * (chunk_create_uncleared, chunk_clear: a memset on a private stream per
 * chunk, one wait per commit); chunk_create, for any other use, maps
 * each new chunk at a scratch address, clears it there, waits and
 * unmaps it, which costs five more driver calls and a wait per chunk.
 *
 * Device-to-device copies use cuMemcpyAsync, which relies on unified
 * addressing (always on for 64-bit Linux) to find the devices of both
 * pointers; between two GPUs the driver copies peer to peer where the
 * hardware allows it and through host memory where it does not.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "cuda_api.h"

/* The GPU an address was allocated on (any context of the process). */
static int cuda_locate(phx_dptr_t dptr)
{
	int ordinal = -1;

	if (cu_probe(NULL) < 0)
		return -ENODEV;
	if (cu.cuPointerGetAttribute(&ordinal,
				     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				     (CUdeviceptr)dptr) != CUDA_SUCCESS ||
	    ordinal < 0)
		return -ENODEV;
	return ordinal;
}

static void *cuda_native(struct phx_device *dev)
{
	return cuda_priv(dev)->ctx;
}

/* The host NUMA node from sysfs, for drivers without HOST_NUMA_ID. */
static int cu_sysfs_numa(CUdevice cudev)
{
	char busid[32], path[96], val[16];
	ssize_t n;
	int fd, node = -1;

	if (cu.cuDeviceGetPCIBusId(busid, sizeof(busid), cudev) != CUDA_SUCCESS)
		return -1;
	for (char *p = busid; *p; p++)
		*p = tolower((unsigned char)*p);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node",
		 busid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, val, sizeof(val) - 1);
	close(fd);
	if (n > 0) {
		val[n] = '\0';
		node = atoi(val);
	}
	return node < 0 ? -1 : node;
}

static int cuda_query(int index, struct phx_device_info *info)
{
	CUdevice cudev;
	CUcontext ctx, prev;
	size_t total, free_bytes, ignored;
	CUresult res;
	int node;

	if (index < 0 || index >= cu_probe(NULL))
		return phx_err(ENODEV, "cuda: no GPU %d; see phx_device_list()",
			       index);
	res = cu.cuDeviceGet(&cudev, index);
	if (res != CUDA_SUCCESS)
		return cu_fail(NULL, res, 0, "cuDeviceGet(%d)", index);
	res = cu.cuDeviceGetName(info->model, sizeof(info->model), cudev);
	if (res != CUDA_SUCCESS)
		return cu_fail(NULL, res, 0, "cuDeviceGetName(%d)", index);
	res = cu.cuDeviceTotalMem_v2(&total, cudev);
	if (res != CUDA_SUCCESS)
		return cu_fail(NULL, res, 0, "cuDeviceTotalMem(%d)", index);
	info->capacity = total;

	/*
	 * Free memory needs a context: borrow the primary one, and leave the
	 * caller's current context as it was.
	 */
	res = cu.cuDevicePrimaryCtxRetain(&ctx, cudev);
	if (res != CUDA_SUCCESS)
		return cu_fail(NULL, res, 0, "cuDevicePrimaryCtxRetain(%d)",
			       index);
	res = cu.cuCtxPushCurrent_v2(ctx);
	if (res == CUDA_SUCCESS) {
		res = cu.cuMemGetInfo_v2(&free_bytes, &ignored);
		cu.cuCtxPopCurrent_v2(&prev);
	}
	cu.cuDevicePrimaryCtxRelease_v2(cudev);
	if (res != CUDA_SUCCESS)
		return cu_fail(NULL, res, 0, "cuMemGetInfo(gpu %d)", index);
	info->free = free_bytes;

	if (cu.cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
				    cudev) != CUDA_SUCCESS ||
	    node < 0)
		node = cu_sysfs_numa(cudev);
	info->numa_node = node;
	return 0;
}

static void cuda_close(struct phx_device *dev)
{
	struct phx_cuda_dev *cd = cuda_priv(dev);

	if (!cd)
		return;
	cu_destroy(dev, cd->zero_stream, cuStreamDestroy_v2);
	cu_destroy(dev, cd->kernels_mod, cuModuleUnload);
	/* a child of fork() leaves the parent's context alone */
	if (!cu_forked)
		cu.cuDevicePrimaryCtxRelease_v2(cd->cudev);
	free(cd);
	dev->priv = NULL;
}

/* What this GPU's allocations are: pinned device memory, exportable. */
static void cu_alloc_prop(struct phx_cuda_dev *cd, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = cd->handle_type;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = cd->cudev;
}

static void cu_access_desc(struct phx_cuda_dev *cd, CUmemAccessDesc *desc)
{
	memset(desc, 0, sizeof(*desc));
	desc->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc->location.id = cd->cudev;
	desc->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/*
 * Who may touch this GPU's buffers: the GPU itself and every peer that
 * can, so copies between GPUs (mv across /mnt/phx/gpuN) go peer to peer.
 */
static void cu_access_list(struct phx_cuda_dev *cd)
{
	int i, can, ngpus = cu_probe(NULL);

	cu_access_desc(cd, &cd->access[0]);
	cd->naccess = 1;
	for (i = 0; i < ngpus && cd->naccess < PHX_CUDA_MAX_GPUS; i++) {
		CUdevice peer;

		if (i == cd->cudev || cu.cuDeviceGet(&peer, i) != CUDA_SUCCESS)
			continue;
		can = 0;
		if (cu.cuDeviceCanAccessPeer(&can, peer, cd->cudev) !=
			    CUDA_SUCCESS ||
		    !can)
			continue;
		cd->access[cd->naccess] = cd->access[0];
		cd->access[cd->naccess].location.id = peer;
		cd->naccess++;
	}
}

static int cuda_open(struct phx_device *dev)
{
	CUmemAllocationProp prop;
	struct phx_cuda_dev *cd;
	size_t min_gran = 0, rec_gran = 0;
	int vmm = 0, posix_fd = 0, host_ptr = 0, ret;
	CUresult res;

	if (dev->index < 0 || dev->index >= cu_probe(NULL))
		return phx_err(ENODEV, "cuda: no GPU %d; see phx_device_list()",
			       dev->index);
	if (cu_forked)
		return cu_fork_err(dev);
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return phx_err(ENOMEM, "cuda: out of host memory opening %s",
			       dev->name);
	dev->priv = cd;

	res = cu.cuDeviceGet(&cd->cudev, dev->index);
	if (res != CUDA_SUCCESS) {
		ret = cu_fail(dev, res, 0, "cuDeviceGet(%d)", dev->index);
		goto err_free;
	}
	cu.cuDeviceGetAttribute(
		&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		cd->cudev);
	if (!vmm) {
		ret = phx_err(
			EOPNOTSUPP,
			"cuda: %s does not support virtual memory management (cuMemCreate); use a newer driver or PHX_DEVICE=sim",
			dev->name);
		goto err_free;
	}
	cu.cuDeviceGetAttribute(
		&host_ptr,
		CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
		cd->cudev);
	cd->host_ptr_ok = host_ptr;
	cu.cuDeviceGetAttribute(
		&posix_fd,
		CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		cd->cudev);
	cd->handle_type = posix_fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR :
				     CU_MEM_HANDLE_TYPE_NONE;
	cu_access_list(cd);

	res = cu.cuDevicePrimaryCtxRetain(&cd->ctx, cd->cudev);
	if (res != CUDA_SUCCESS) {
		ret = cu_fail(dev, res, 0, "cuDevicePrimaryCtxRetain");
		goto err_free;
	}
	ret = cu_bind_ctx(dev, cd->ctx);
	if (ret)
		goto err_release;

	cu_alloc_prop(cd, &prop);
	res = cu.cuMemGetAllocationGranularity(
		&min_gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (res == CUDA_SUCCESS)
		res = cu.cuMemGetAllocationGranularity(
			&rec_gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (res != CUDA_SUCCESS || !min_gran) {
		ret = cu_fail(dev, res, 0, "cuMemGetAllocationGranularity");
		goto err_release;
	}
	/* Sizes must be multiples of the minimum; prefer the recommended. */
	dev->granularity =
		rec_gran && rec_gran % min_gran == 0 ? rec_gran : min_gran;

	res = cu.cuStreamCreate(&cd->zero_stream, CU_STREAM_NON_BLOCKING);
	if (res != CUDA_SUCCESS) {
		ret = cu_fail(dev, res, 0, "cuStreamCreate");
		goto err_release;
	}
	return 0;

err_release:
	cu.cuDevicePrimaryCtxRelease_v2(cd->cudev);
err_free:
	free(cd);
	dev->priv = NULL;
	return ret;
}

/* cu_fail() for @call on @size bytes; out of memory is @oom_err there. */
static int cu_fail_sized(struct phx_device *dev, CUresult res, int oom_err,
			 const char *call, uint64_t size)
{
	char sz[32];

	phx_fmt_bytes(sz, sizeof(sz), size);
	return cu_fail(dev, res, res == CUDA_ERROR_OUT_OF_MEMORY ? oom_err : 0,
		       "%s(%s)", call, sz);
}

static int cuda_va_reserve(struct phx_device *dev, uint64_t size,
			   phx_dptr_t *out)
{
	CUdeviceptr va;
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	res = cu.cuMemAddressReserve(&va, size, 0, 0, 0);
	/* Out of address space: the buffer is too large to reserve. */
	if (res != CUDA_SUCCESS)
		return cu_fail_sized(dev, res, EFBIG, "cuMemAddressReserve",
				     size);
	*out = va;
	return 0;
}

static void cuda_va_release(struct phx_device *dev, phx_dptr_t va,
			    uint64_t size)
{
	if (cuda_bind(dev) == 0)
		cu.cuMemAddressFree(va, size);
}

/* Map @chunk at a scratch address and clear it; see the file header. */
static int cu_zero_chunk(struct phx_device *dev, CUmemGenericAllocationHandle h,
			 uint64_t size)
{
	struct phx_cuda_dev *cd = cuda_priv(dev);
	CUmemAccessDesc desc;
	CUdeviceptr va;
	CUresult res;
	const char *call;

	cu_access_desc(cd, &desc);
	res = cu.cuMemAddressReserve(&va, size, 0, 0, 0);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuMemAddressReserve(scratch)");
	call = "cuMemMap(scratch)";
	res = cu.cuMemMap(va, size, 0, h, 0);
	if (res != CUDA_SUCCESS)
		goto out_free;
	call = "cuMemSetAccess(scratch)";
	res = cu.cuMemSetAccess(va, size, &desc, 1);
	if (res == CUDA_SUCCESS) {
		call = "cuMemsetD8Async(scratch)";
		res = cu.cuMemsetD8Async(va, 0, size, cd->zero_stream);
	}
	if (res == CUDA_SUCCESS) {
		call = "cuStreamSynchronize(scratch)";
		res = cu.cuStreamSynchronize(cd->zero_stream);
	}
	cu.cuMemUnmap(va, size);
out_free:
	cu.cuMemAddressFree(va, size);
	return res == CUDA_SUCCESS ? 0 : cu_fail(dev, res, 0, "%s", call);
}

static int cuda_chunk_create_uncleared(struct phx_device *dev, uint64_t size,
				       phx_chunk_t *out)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	cu_alloc_prop(cuda_priv(dev), &prop);
	res = cu.cuMemCreate(&h, size, &prop, 0);
	if (res != CUDA_SUCCESS)
		return cu_fail_sized(dev, res, 0, "cuMemCreate", size);
	*out = h;
	return 0;
}

static int cuda_chunk_create(struct phx_device *dev, uint64_t size,
			     phx_chunk_t *out)
{
	int ret = cuda_chunk_create_uncleared(dev, size, out);

	if (!ret) {
		ret = cu_zero_chunk(dev, *out, size);
		if (ret)
			cu.cuMemRelease(*out);
	}
	return ret;
}

/* Clear a mapped range on the private stream; chunk_clear_wait waits. */
static int cuda_chunk_clear(struct phx_device *dev, phx_dptr_t at,
			    uint64_t size)
{
	return cu_call(
		dev,
		cu.cuMemsetD8Async(at, 0, size, cuda_priv(dev)->zero_stream),
		"cuMemsetD8Async(new chunk)");
}

static int cuda_chunk_clear_wait(struct phx_device *dev)
{
	return cu_call(dev, cu.cuStreamSynchronize(cuda_priv(dev)->zero_stream),
		       "cuStreamSynchronize(new chunks)");
}

static void cuda_chunk_release(struct phx_device *dev, phx_chunk_t chunk,
			       uint64_t size)
{
	(void)dev;
	(void)size;
	/* Releasing a handle needs no context; a child of fork() has none. */
	if (!cu_forked)
		cu.cuMemRelease(chunk);
}

static int cuda_chunk_map_bare(struct phx_device *dev, phx_dptr_t at,
			       uint64_t size, phx_chunk_t chunk)
{
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	res = cu.cuMemMap(at, size, 0, chunk, 0);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuMemMap(0x%llx, %llu)",
			       (unsigned long long)at,
			       (unsigned long long)size);
	return 0;
}

/* One call for a range mapped from any number of chunks. */
static int cuda_range_access(struct phx_device *dev, phx_dptr_t at,
			     uint64_t size)
{
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	res = cu.cuMemSetAccess(at, size, cuda_priv(dev)->access,
				(size_t)cuda_priv(dev)->naccess);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuMemSetAccess(0x%llx, %llu)",
			       (unsigned long long)at,
			       (unsigned long long)size);
	return 0;
}

static int cuda_chunk_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			  phx_chunk_t chunk)
{
	int ret = cuda_chunk_map_bare(dev, at, size, chunk);

	if (!ret) {
		ret = cuda_range_access(dev, at, size);
		if (ret)
			cu.cuMemUnmap(at, size);
	}
	return ret;
}

static void cuda_chunk_unmap(struct phx_device *dev, phx_dptr_t at,
			     uint64_t size)
{
	if (cuda_bind(dev) == 0)
		cu.cuMemUnmap(at, size);
}

static int cuda_chunk_export(struct phx_device *dev, phx_chunk_t chunk,
			     uint64_t size, int *fd)
{
	CUresult res;
	int ret = cuda_bind(dev);

	(void)size;
	if (ret)
		return ret;
	if (cuda_priv(dev)->handle_type !=
	    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return phx_err(
			EOPNOTSUPP,
			"cuda: %s cannot export memory as a file descriptor (driver lacks POSIX handles); share within one process instead",
			dev->name);
	res = cu.cuMemExportToShareableHandle(
		fd, chunk, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (res != CUDA_SUCCESS)
		return cu_fail(dev, res, 0, "cuMemExportToShareableHandle");
	return 0;
}

static int cuda_chunk_import(struct phx_device *dev, int fd, uint64_t size,
			     phx_chunk_t *out)
{
	CUmemGenericAllocationHandle h;
	int ret;

	(void)size;
	ret = cu_call(dev,
		      cu.cuMemImportFromShareableHandle(
			      &h, (void *)(uintptr_t)fd,
			      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		      "cuMemImportFromShareableHandle(fd %d)", fd);
	if (!ret)
		*out = h;
	return ret;
}

static void *cuda_host_addr(struct phx_device *dev, phx_dptr_t va)
{
	(void)dev;
	(void)va;
	return NULL;
}

static int cuda_host_register(struct phx_device *dev, void *p, size_t len)
{
	CUresult res;
	int ret = cuda_bind(dev);

	if (ret)
		return ret;
	/* mapped: the gather kernel reads the engine's slots in place */
	res = cu.cuMemHostRegister_v2(p, len,
				      CU_MEMHOSTREGISTER_PORTABLE |
					      CU_MEMHOSTREGISTER_DEVICEMAP);
	/* Failing to pin is a host memory problem. */
	if (res != CUDA_SUCCESS)
		return cu_fail_sized(dev, res, ENOMEM, "cuMemHostRegister",
				     len);
	return 0;
}

static void cuda_host_unregister(struct phx_device *dev, void *p)
{
	if (cuda_bind(dev) == 0)
		cu.cuMemHostUnregister(p);
}

const struct phx_backend_ops phx_cuda_ops = {
	.kind = PHX_DEVICE_CUDA,
	.probe = cu_probe,
	.query = cuda_query,
	.open = cuda_open,
	.close = cuda_close,
	.locate = cuda_locate,
	.native = cuda_native,
	.bind = cuda_bind,
	.va_reserve = cuda_va_reserve,
	.va_release = cuda_va_release,
	.chunk_create = cuda_chunk_create,
	.chunk_create_uncleared = cuda_chunk_create_uncleared,
	.chunk_clear = cuda_chunk_clear,
	.chunk_clear_wait = cuda_chunk_clear_wait,
	.chunk_release = cuda_chunk_release,
	.chunk_map = cuda_chunk_map,
	.chunk_map_bare = cuda_chunk_map_bare,
	.range_access = cuda_range_access,
	.chunk_unmap = cuda_chunk_unmap,
	.chunk_export = cuda_chunk_export,
	.chunk_import = cuda_chunk_import,
	.host_addr = cuda_host_addr,
	.p2p = false,
	.pinned_copies = true,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.stream_create = phx_cuda_stream_create,
	.stream_destroy = phx_cuda_stream_destroy,
	.stream_sync = phx_cuda_stream_sync,
	.stream_default = phx_cuda_stream_default,
	.copy_htod = phx_cuda_copy_htod,
	.copy_dtoh = phx_cuda_copy_dtoh,
	.copy_htod_batch = phx_cuda_copy_htod_batch,
	.copy_dtod = phx_cuda_copy_dtod,
	.memset_d8 = phx_cuda_memset_d8,
	.event_create = phx_cuda_event_create,
	.event_destroy = phx_cuda_event_destroy,
	.event_record = phx_cuda_event_record,
	.event_query = phx_cuda_event_query,
	.event_sync = phx_cuda_event_sync,
	.launch_host_fn = phx_cuda_launch_host_fn,
	.stream_wait_value = phx_cuda_stream_wait_value,
	.stream_write_value = phx_cuda_stream_write_value,
	.stream_wait_auto = PHX_STREAM_WAIT_COPY,
	.host_map = phx_cuda_host_map,
	.host_unmap = phx_cuda_host_unmap,
	.feed_launch = phx_cuda_feed_launch,
	.kernels_load = phx_cuda_kernels_load,
};
