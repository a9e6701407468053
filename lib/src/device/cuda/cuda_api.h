/* SPDX-License-Identifier: MIT */
/*
 * cuda_api.h - the CUDA driver API as libphoenix uses it.
 *
 * Built against <cuda.h> when the toolkit is present (PHX_HAVE_CUDA_H);
 * otherwise the subset of it that the cuda backend needs is declared here
 * with the driver's ABI.  The driver itself is loaded at run time
 * (driver.c): every entry point is called through the table `cu`,
 * filled by dlsym() with the versioned symbol names, since cuda.h turns
 * the plain names into those with macros and dlsym() does not see macros.
 */
#ifndef PHX_CUDA_API_H
#define PHX_CUDA_API_H

#include <stdbool.h>

#include "device.h"

#ifdef PHX_HAVE_CUDA_H
#include <cuda.h>
#else
/*
 * The subset of cuda.h this file uses, with the driver's ABI (CUDA 11.2
 * and later).  Prototypes only serve __typeof__ below; nothing links them.
 */
typedef enum cudaError_enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
} CUresult;

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *userData);

typedef enum CUdevice_attribute_enum {
	CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
	CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID = 134,
} CUdevice_attribute;

typedef enum CUmemAllocationHandleType_enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
} CUmemAllocationHandleType;

typedef enum CUmemAccess_flags_enum {
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
} CUmemAccess_flags;

typedef enum CUmemLocationType_enum {
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
} CUmemLocationType;

typedef enum CUmemAllocationType_enum {
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
} CUmemAllocationType;

typedef enum CUmemAllocationGranularity_flags_enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTREGISTER_PORTABLE 0x01

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuGetErrorName(CUresult error, const char **str);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev);
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev,
			       CUdevice peerDev);
typedef enum CUpointer_attribute_enum {
	CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
} CUpointer_attribute;
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
			       CUdeviceptr ptr);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemGetAllocationGranularity(size_t *granularity,
				       const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
			     CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
		  CUmemGenericAllocationHandle handle,
		  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
			const CUmemAccessDesc *desc, size_t count);
CUresult cuMemExportToShareableHandle(void *shareableHandle,
				      CUmemGenericAllocationHandle handle,
				      CUmemAllocationHandleType handleType,
				      unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
					void *osHandle,
					CUmemAllocationHandleType shHandleType);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuStreamCreate(CUstream *phStream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
			      size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
			      size_t ByteCount, CUstream hStream);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
		       CUstream hStream);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
			 CUstream hStream);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
typedef unsigned int cuuint32_t;
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p,
				      unsigned int Flags);
CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr,
				cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr,
				 cuuint32_t value, unsigned int flags);
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
			     const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
			unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes,
			CUstream hStream, void **kernelParams, void **extra);
#endif /* PHX_HAVE_CUDA_H */

/* Every driver entry point used, by its exported (versioned) name. */
#define CU_SYMBOLS(X)                     \
	X(cuInit)                         \
	X(cuDriverGetVersion)             \
	X(cuGetErrorName)                 \
	X(cuDeviceGetCount)               \
	X(cuDeviceGet)                    \
	X(cuDeviceGetName)                \
	X(cuDeviceTotalMem_v2)            \
	X(cuDeviceGetAttribute)           \
	X(cuDeviceGetPCIBusId)            \
	X(cuDeviceCanAccessPeer)          \
	X(cuPointerGetAttribute)          \
	X(cuDevicePrimaryCtxRetain)       \
	X(cuDevicePrimaryCtxRelease_v2)   \
	X(cuCtxGetCurrent)                \
	X(cuCtxSetCurrent)                \
	X(cuCtxPushCurrent_v2)            \
	X(cuCtxPopCurrent_v2)             \
	X(cuMemGetInfo_v2)                \
	X(cuMemGetAllocationGranularity)  \
	X(cuMemAddressReserve)            \
	X(cuMemAddressFree)               \
	X(cuMemCreate)                    \
	X(cuMemRelease)                   \
	X(cuMemMap)                       \
	X(cuMemUnmap)                     \
	X(cuMemSetAccess)                 \
	X(cuMemExportToShareableHandle)   \
	X(cuMemImportFromShareableHandle) \
	X(cuMemHostRegister_v2)           \
	X(cuMemHostUnregister)            \
	X(cuStreamCreate)                 \
	X(cuStreamDestroy_v2)             \
	X(cuStreamSynchronize)            \
	X(cuMemcpyHtoDAsync_v2)           \
	X(cuMemcpyDtoHAsync_v2)           \
	X(cuMemcpyAsync)                  \
	X(cuMemsetD8Async)                \
	X(cuEventCreate)                  \
	X(cuEventDestroy_v2)              \
	X(cuEventRecord)                  \
	X(cuEventQuery)                   \
	X(cuEventSynchronize)             \
	X(cuLaunchHostFunc)               \
	X(cuMemHostGetDevicePointer_v2)   \
	X(cuStreamWaitValue32_v2)         \
	X(cuStreamWriteValue32_v2)        \
	X(cuModuleLoadData)               \
	X(cuModuleUnload)                 \
	X(cuModuleGetFunction)            \
	X(cuLaunchKernel)

struct phx_cu_api {
#define CU_MEMBER(sym) __typeof__(sym) *sym;
	CU_SYMBOLS(CU_MEMBER)
#undef CU_MEMBER
};

/* The driver's entry points; all NULL unless cu_probe() found a GPU. */
extern struct phx_cu_api cu;

/*
 * Entry points a driver may lack, looked up when it is loaded and used
 * only where found: cuMemcpyBatchAsync, whose exported names carry two
 * ABIs.  CUDA 12.8 exports it as "cuMemcpyBatchAsync" with a failIdx
 * argument before the stream; CUDA 13.0 adds "cuMemcpyBatchAsync_v2"
 * without it (its cuda.h maps the plain name to _v2) and keeps the 12.8
 * one.  The types are declared here with the driver's ABI, whatever
 * cuda.h is built against: CUmemcpyAttributes is { CUmemcpySrcAccessOrder
 * srcAccessOrder; CUmemLocation srcLocHint, dstLocHint; unsigned int
 * flags; }.
 */
#define PHX_CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1

struct phx_cu_memcpy_attrs {
	int src_access_order;
	CUmemLocation src_loc_hint, dst_loc_hint;
	unsigned int flags;
};

_Static_assert(sizeof(struct phx_cu_memcpy_attrs) == 24,
	       "CUmemcpyAttributes is 24 bytes");
#if defined(CUDA_VERSION) && CUDA_VERSION >= 12080
_Static_assert(sizeof(struct phx_cu_memcpy_attrs) == sizeof(CUmemcpyAttributes),
	       "CUmemcpyAttributes");
#endif

/* CUDA 13.0: cuMemcpyBatchAsync_v2 */
typedef CUresult phx_cu_batch_v2_fn(CUdeviceptr *dsts, CUdeviceptr *srcs,
				    size_t *sizes, size_t count,
				    struct phx_cu_memcpy_attrs *attrs,
				    size_t *attrs_idxs, size_t num_attrs,
				    CUstream stream);
/* CUDA 12.8: cuMemcpyBatchAsync */
typedef CUresult phx_cu_batch_v1_fn(CUdeviceptr *dsts, CUdeviceptr *srcs,
				    size_t *sizes, size_t count,
				    struct phx_cu_memcpy_attrs *attrs,
				    size_t *attrs_idxs, size_t num_attrs,
				    size_t *fail_idx, CUstream stream);

struct phx_cu_optional {
	phx_cu_batch_v2_fn *memcpy_batch_v2;
	phx_cu_batch_v1_fn *memcpy_batch_v1; /* only without _v2 */
};

extern struct phx_cu_optional cu_opt;
/* Set in a child forked after the driver started: it cannot be used. */
extern bool cu_forked;

/* Load the driver once; the number of GPUs or -ENODEV (*why: reason). */
int cu_probe(const char **why);
/* The driver's name for @res ("CUDA_ERROR_OUT_OF_MEMORY"). */
const char *cu_name(CUresult res);
/* The errno matching @res. */
int cu_errno(CUresult res);
/*
 * Record "cuda: <call> on <dev> failed: <CUDA error>; <hint>" and return
 * the negative errno: @err, or the one matching @res when @err is 0.
 */
int cu_fail(struct phx_device *dev, CUresult res, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The driver does not survive fork(): the error that says so. */
int cu_fork_err(struct phx_device *dev);
/* Make @ctx current in this thread unless it already is (driver.c). */
int cu_bind_ctx(struct phx_device *dev, CUcontext ctx);

/* ---- the backend's state, shared by cuda.c and streams.c ------------ */

#define PHX_CUDA_MAX_GPUS 64

struct phx_cuda_dev {
	CUdevice cudev;
	CUcontext ctx; /* retained primary context */
	CUstream zero_stream; /* clears new chunks */
	CUmemAllocationHandleType handle_type; /* NONE if not exportable */
	/* this GPU, then every GPU that can reach its memory as a peer */
	CUmemAccessDesc access[PHX_CUDA_MAX_GPUS];
	int naccess;
	/*
	 * The device's kernels (kernels.ptx), loaded before they are needed
	 * (kernels_load): loading a module waits for the GPU to finish what
	 * is queued, which at the first launch can be a stream held for the
	 * transfer being queued.  gather_fn is set once both are.
	 */
	CUmodule kernels_mod;
	CUfunction feed_fn;
	CUfunction gather_fn;
	/* registered host memory is at its own address on the device */
	bool host_ptr_ok;
};

static inline struct phx_cuda_dev *cuda_priv(struct phx_device *dev)
{
	return dev->priv;
}

static inline int cuda_bind(struct phx_device *dev)
{
	return cu_bind_ctx(dev, cuda_priv(dev)->ctx);
}

/*
 * Bind @dev's context and make the driver call @call; its failure becomes
 * the library's error, the call named by the printf-style rest.
 */
#define cu_call(dev, call, ...)                                                \
	({                                                                     \
		int cu_ret_ = cuda_bind(dev);                                  \
		CUresult cu_res_;                                              \
                                                                               \
		if (!cu_ret_) {                                                \
			cu_res_ = (call);                                      \
			if (cu_res_ != CUDA_SUCCESS)                           \
				cu_ret_ =                                      \
					cu_fail(dev, cu_res_, 0, __VA_ARGS__); \
		}                                                              \
		cu_ret_;                                                       \
	})

/*
 * Make a driver object of type @type through @create(&obj, @flags) in
 * @dev's context (cu_call(), the call named by @create) and hand it back,
 * opaque, in *@out.
 */
#define cu_create(dev, out, type, create, flags)                           \
	({                                                                 \
		type cu_obj_;                                              \
		int cu_err_ =                                              \
			cu_call(dev, cu.create(&cu_obj_, flags), #create); \
                                                                           \
		if (!cu_err_)                                              \
			*(out) = cu_obj_;                                  \
		cu_err_;                                                   \
	})

/* Driver object @obj (NULL: none) to @destroy where @dev's context binds. */
#define cu_destroy(dev, obj, destroy)             \
	do {                                      \
		if ((obj) && cuda_bind(dev) == 0) \
			cu.destroy(obj);          \
	} while (0)

/* ---- streams, events, copies, the copy kernel (streams.c) ---------- */

int phx_cuda_stream_create(struct phx_device *dev, void **stream);
void phx_cuda_stream_destroy(struct phx_device *dev, void *stream);
int phx_cuda_stream_sync(struct phx_device *dev, void *stream);
void *phx_cuda_stream_default(struct phx_device *dev);
int phx_cuda_copy_htod(struct phx_device *dev, phx_dptr_t dst, const void *src,
		       size_t len, void *stream);
int phx_cuda_copy_dtoh(struct phx_device *dev, void *dst, phx_dptr_t src,
		       size_t len, void *stream);
int phx_cuda_copy_htod_batch(struct phx_device *dev,
			     const struct phx_htod *copies, unsigned int n,
			     void *stream);
int phx_cuda_copy_dtod(struct phx_device *dev, phx_dptr_t dst, phx_dptr_t src,
		       size_t len, void *stream);
int phx_cuda_memset_d8(struct phx_device *dev, phx_dptr_t dst, uint8_t value,
		       size_t len, void *stream);
int phx_cuda_event_create(struct phx_device *dev, void **event);
void phx_cuda_event_destroy(struct phx_device *dev, void *event);
int phx_cuda_event_record(struct phx_device *dev, void *event, void *stream);
int phx_cuda_event_query(struct phx_device *dev, void *event);
int phx_cuda_event_sync(struct phx_device *dev, void *event);
int phx_cuda_launch_host_fn(struct phx_device *dev, void *stream,
			    void (*fn)(void *), void *arg);
int phx_cuda_host_map(struct phx_device *dev, void *p, size_t len,
		      uint64_t *daddr);
void phx_cuda_host_unmap(struct phx_device *dev, void *p);
int phx_cuda_stream_wait_value(struct phx_device *dev, void *stream,
			       uint32_t *word, uint64_t daddr, uint32_t value);
int phx_cuda_stream_write_value(struct phx_device *dev, void *stream,
				uint32_t *word, uint64_t daddr, uint32_t value);
int phx_cuda_kernels_load(struct phx_device *dev);
int phx_cuda_feed_launch(struct phx_device *dev, void *stream,
			 struct phx_feed_ctl *ctl, uint64_t ctl_daddr,
			 phx_dptr_t buf, phx_feed_play_fn *play);

#endif /* PHX_CUDA_API_H */
