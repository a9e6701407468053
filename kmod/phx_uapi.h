/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * phx_uapi.h - the ioctl interface of phx.ko, shared with userspace.
 *
 * Each device whose memory phx.ko manages appears as /dev/phxN.  An
 * allocation (or an imported dma-buf) is handed back as a new file
 * descriptor: a regular file whose size is the allocation's, that can be
 * mmap()ed (MAP_SHARED; the device's pages are inserted, nothing is
 * copied), read and written with pread/pwrite, and whose last close frees
 * the memory.  O_DIRECT I/O between a disk and such a mapping is done by
 * the disk controller's DMA straight into device memory.
 */
#ifndef PHX_UAPI_H
#define PHX_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PHX_IOC_MAGIC 0xb7

/* Where the pages of a device come from. */
enum phx_provider {
	PHX_PROVIDER_BAR = 1,	 /* a PCI BAR the module owns (ivshmem, ...) */
	PHX_PROVIDER_NVIDIA = 2, /* GPU memory imported as dma-buf */
};

/**
 * struct phx_ioc_info - PHX_IOC_INFO: describe the device.
 * @provider: enum phx_provider.
 * @page_size: allocation granularity in bytes.
 * @size: bytes of device memory the module manages.
 * @free: bytes not allocated now.
 * @bus_addr: bus address of the first byte (what a DMA master sees).
 * @pci_name: the PCI device, "0000:00:03.0".
 */
struct phx_ioc_info {
	__u32 provider;
	__u32 page_size;
	__u64 size;
	__u64 free;
	__u64 bus_addr;
	char pci_name[32];
};

/* PHX_IOC_ALLOC flags */
#define PHX_ALLOC_FIXED (1U << 0)   /* at @offset, not wherever it fits */
#define PHX_ALLOC_NOCLEAR (1U << 1) /* keep the device's bytes (root only) */
#define PHX_ALLOC_GROW (1U << 2)    /* file size starts at 0, see below */

/**
 * struct phx_ioc_alloc - PHX_IOC_ALLOC: allocate device memory.
 * @size: in: bytes, a multiple of the page size, not 0.
 * @offset: in with PHX_ALLOC_FIXED, else out: offset in device memory.
 * @flags: in: PHX_ALLOC_*.
 * @fd: out: the new file descriptor (O_RDWR | O_CLOEXEC).
 * @reserved: must be 0.
 *
 * Memory is cleared before it is handed out unless PHX_ALLOC_NOCLEAR.
 *
 * With PHX_ALLOC_GROW the file behaves like an ordinary file inside the
 * allocation: its size starts at 0, writes past the end extend it,
 * ftruncate() sets it, reads stop at it and mappings fault (SIGBUS) past
 * it; the allocation is its capacity.  Writes past the capacity are short
 * or fail with EFBIG, as do ftruncate() and fallocate() past it, and
 * PHX_IOC_TRIM gives the capacity beyond the size back.  This is the kind
 * of file a FUSE file system hands to the kernel as a passthrough backing
 * file.  Without it the size is the allocation's and cannot change.
 *
 * Errors: EINVAL (size 0 or not a page multiple, misaligned offset,
 * unknown flags), ERANGE (the range passes the end of device memory),
 * ENOSPC (no room), EBUSY (a fixed range overlaps an allocation),
 * EPERM (NOCLEAR without CAP_SYS_ADMIN), ENODEV (device gone).
 */
struct phx_ioc_alloc {
	__u64 size;
	__u64 offset;
	__u32 flags;
	__s32 fd;
	__u64 reserved[2];
};

/**
 * struct phx_ioc_import - PHX_IOC_IMPORT: map a dma-buf's device memory.
 * @dmabuf_fd: in: a dma-buf exported by the GPU driver, e.g. from
 *	cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD).
 * @fd: out: the new file descriptor, as for PHX_IOC_ALLOC.
 * @size: out: bytes covered by the dma-buf.
 * @offset: out: offset of the first byte in the GPU's BAR.
 * @reserved: must be 0.
 *
 * Only devices of provider PHX_PROVIDER_NVIDIA accept it.
 */
struct phx_ioc_import {
	__s32 dmabuf_fd;
	__s32 fd;
	__u64 size;
	__u64 offset;
	__u64 reserved[2];
};

/**
 * struct phx_ioc_range - PHX_IOC_RANGE: describe an allocation's file.
 * @size: bytes of device memory it holds (the capacity of a GROW file).
 * @offset: offset in device memory (of the first page for imports).
 * @bus_addr: bus address of the first byte.
 * @contiguous: 1 when the range is one contiguous run of device memory.
 * @flags: PHX_RANGE_*.
 *
 * Issued on the file that PHX_IOC_ALLOC or PHX_IOC_IMPORT returned.
 */
struct phx_ioc_range {
	__u64 size;
	__u64 offset;
	__u64 bus_addr;
	__u32 contiguous;
	__u32 flags;
};

/* struct phx_ioc_range flags */
#define PHX_RANGE_GROW (1U << 0)   /* allocated with PHX_ALLOC_GROW */
#define PHX_RANGE_MAPPED (1U << 1) /* some process maps the file now */

#define PHX_IOC_INFO _IOR(PHX_IOC_MAGIC, 0, struct phx_ioc_info)
#define PHX_IOC_ALLOC _IOWR(PHX_IOC_MAGIC, 1, struct phx_ioc_alloc)
#define PHX_IOC_IMPORT _IOWR(PHX_IOC_MAGIC, 2, struct phx_ioc_import)
#define PHX_IOC_RANGE _IOR(PHX_IOC_MAGIC, 3, struct phx_ioc_range)
/*
 * PHX_IOC_TRIM, on a PHX_ALLOC_GROW file: give back the pages past the
 * file's size (one page is kept).  EBUSY while I/O pins one of them,
 * EINVAL on other files, EBADF on a descriptor not open for writing,
 * EOPNOTSUPP where the allocator cannot split an allocation (P2PDMA
 * kernels).
 */
#define PHX_IOC_TRIM _IO(PHX_IOC_MAGIC, 4)

#endif /* PHX_UAPI_H */
