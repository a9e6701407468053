/* SPDX-License-Identifier: MIT */
/*
 * phoenix.h - the public API of libphoenix: the one header to include.
 *
 * libphoenix moves bytes between files and device (GPU) memory without a
 * host buffer as large as the transfer.  It knows three kinds of device:
 *
 *   cuda  NVIDIA GPUs through the CUDA driver API (loaded with dlopen).
 *   sim   a simulated device whose memory lives in host RAM, with a
 *         capacity, explicit asynchronous copies and streams, so that every
 *         feature runs where there is no GPU.
 *   kmod  device memory that the phx.ko kernel module exposes as
 *         ZONE_DEVICE pages; transfers to it are peer-to-peer.
 *
 * Conventions:
 *   - every name starts with phx_ / PHX_;
 *   - functions return 0 (or a count) on success and a negative errno on
 *     failure; nothing is reported through the global errno;
 *   - phx_strerror_last() gives a one-line, human-readable description of the
 *     last failure in the calling thread (what, where, why, what next);
 *   - objects are opaque; whoever creates one destroys it;
 *   - unless a function says otherwise it is thread-safe, and functions that
 *     move data block until the data has moved.
 *
 * Its parts live in phoenix/ beside it, each included from here only:
 *
 *   phoenix/device.h    devices, their kinds, limits
 *   phoenix/buffer.h    buffers of device memory; pinned host memory
 *   phoenix/transfer.h  transfers and batches of them; host copies
 *   phoenix/backing.h   backing files: device memory as a regular file
 *   phoenix/stream.h    streams and stream-ordered transfers
 *   phoenix/settings.h  the settings and their PHX_* overrides
 *   phoenix/stats.h     counters of transfers and engines
 */
#ifndef PHOENIX_H
#define PHOENIX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHX_VERSION_MAJOR 0
#define PHX_VERSION_MINOR 1
#define PHX_VERSION_PATCH 0

/*
 * A device address: a CUdeviceptr on cuda.  On sim and kmod it is the
 * host virtual address of the memory in this process (what
 * phx_buf_host_view() returns for a buffer's start), so memory of the
 * simulated device can be handed to host code in tests.
 */
typedef uint64_t phx_dptr_t;

struct phx_device;
struct phx_buf;
struct phx_stream;
struct phx_batch;

enum phx_device_kind {
	PHX_DEVICE_NONE = 0,
	PHX_DEVICE_CUDA = 1,
	PHX_DEVICE_SIM = 2,
	PHX_DEVICE_KMOD = 3,
};

/* The data path that moved (the bulk of) a transfer's bytes. */
enum phx_path {
	PHX_PATH_NONE = 0, /* nothing moved (length 0, or EOF) */
	PHX_PATH_STAGED = 1, /* O_DIRECT io_uring into pinned staging */
	PHX_PATH_BUFFERED = 2, /* page-cache io_uring into pinned staging */
	PHX_PATH_P2P = 3, /* straight between disk and device memory */
	PHX_PATH_MEMCPY = 4, /* host memory <-> device copy, no file */
	/*
	 * phxfs: the kernel serves the file from its backing file (FUSE
	 * passthrough); these bytes never pass through the library.
	 */
	PHX_PATH_PASSTHROUGH = 5,
	PHX_PATH_COUNT
};

/* ---- library -------------------------------------------------------- */

/**
 * phx_version() - the library version as "MAJOR.MINOR.PATCH".
 */
const char *phx_version(void);

/**
 * phx_strerror_last() - describe the last failure of the calling thread.
 *
 * Returns a one-line message owned by the library, valid until the next
 * libphoenix call in this thread.  Never NULL ("" when nothing failed).
 */
const char *phx_strerror_last(void);

/**
 * phx_path_name() - "staged", "buffered", "p2p", "memcpy", "passthrough"
 * or "none".
 */
const char *phx_path_name(enum phx_path path);

#include "phoenix/device.h"
#include "phoenix/buffer.h"
#include "phoenix/transfer.h"
#include "phoenix/backing.h"
#include "phoenix/stream.h"
#include "phoenix/settings.h"
#include "phoenix/stats.h"

#ifdef __cplusplus
}
#endif

#endif /* PHOENIX_H */
