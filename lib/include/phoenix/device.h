/* SPDX-License-Identifier: MIT */
/*
 * phoenix/device.h - devices: the kinds and the words that name them,
 * listing, opening and closing devices, their limits.
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/device.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_DEVICE_H)
#define PHOENIX_DEVICE_H

/* ---- device kinds --------------------------------------------------- */

/**
 * phx_default_kind() - the device kind that phx_device_open(NULL) picks.
 * @why: if not NULL, receives a static string explaining the choice
 *	 ("PHX_DEVICE=sim", "no usable CUDA driver: libcuda.so.1 not found").
 *
 * PHX_DEVICE=cuda|sim|kmod forces a kind; otherwise cuda when a GPU is
 * usable, else sim.  Thread-safe; probes the CUDA driver once.
 */
enum phx_device_kind phx_default_kind(const char **why);

/**
 * phx_kind_name() - "cuda", "sim", "kmod" or "none".
 */
const char *phx_kind_name(enum phx_device_kind kind);

/**
 * phx_kind_parse() - the device kind a word names.
 * @name: "cuda" (or "gpu"), "sim", "kmod" (or "phx"); "auto", "" and
 *	  NULL give PHX_DEVICE_NONE, the default kind.
 *
 * The one parser of kind names (PHX_DEVICE, device names, command
 * lines).  Returns 0 or -EINVAL with a message.
 */
int phx_kind_parse(const char *name, enum phx_device_kind *out);

/* ---- devices -------------------------------------------------------- */

struct phx_device_info {
	char name[16]; /* "gpu0", "sim0", "phx0": phxfs's dir */
	enum phx_device_kind kind; /* backend */
	int index; /* ordinal within the backend */
	char model[64]; /* "NVIDIA H200", "simulated" */
	uint64_t capacity; /* bytes of device memory */
	uint64_t used; /* bytes held by libphoenix buffers */
	uint64_t free; /* bytes the device reports free */
	int numa_node; /* host NUMA node closest to it, or -1 */
};

/**
 * phx_device_list() - enumerate the devices of one kind.
 * @kind: PHX_DEVICE_NONE means the default kind (phx_default_kind()).
 * @infos: array to fill, may be NULL when @max is 0.
 * @max: capacity of @infos.
 *
 * Returns the number of devices of that kind (which may exceed @max), or
 * -ENODEV when the backend is unusable (no driver, no GPU, no module).
 * The number of simulated devices is PHX_SIM_DEVICES (default 1).
 */
int phx_device_list(enum phx_device_kind kind, struct phx_device_info *infos,
		    int max);

/**
 * phx_device_open() - open a device by name.
 * @name: "gpu0", "sim1", "phx0", "cuda:0", "sim:1", or NULL / "" for
 *	  device 0 of the default kind.
 * @out: receives the device.
 *
 * Devices are reference counted: opening the same device twice returns
 * the same object with its count raised; each open needs a close.
 * The first open starts pinning the device's staging (PHX_STAGING_SIZE of
 * host memory, registered with the device) on a thread of its own, so
 * that the process's first transfer finds it ready; a transfer that
 * comes earlier waits only for the rest of that work.
 * Returns 0, -ENODEV (no such device or backend unusable) or -EINVAL.
 */
int phx_device_open(const char *name, struct phx_device **out);

/**
 * phx_device_prepare() - wait until @dev's staging is ready.
 *
 * Blocks until the staging that phx_device_open() started pinning is
 * pinned and the first transfer engine built out of it, with its reader
 * threads (PHX_HOT_READERS) made (it returns at
 * once after that, and in a child of fork(), which does not use its
 * parent's).  For a caller that wants the set-up done
 * before its first transfer (or timed apart from it); transfers never
 * need it.  Returns 0, or -ENOMEM or the device's error when the staging
 * could not be made: transfers then pin staging of their own, as they
 * would without it, and the message says so.
 */
int phx_device_prepare(struct phx_device *dev);

/**
 * phx_device_open_dptr() - open the device that holds address @dptr.
 * @kind: PHX_DEVICE_NONE for the default kind.
 *
 * For memory libphoenix did not allocate (a framework's tensor), so a
 * transfer can go to the right GPU.  Returns 0 with a new reference,
 * -ENODEV when no device of that kind holds @dptr.
 */
int phx_device_open_dptr(enum phx_device_kind kind, phx_dptr_t dptr,
			 struct phx_device **out);

/**
 * phx_device_close() - drop a reference taken by phx_device_open().
 *
 * The last close releases the device; all its buffers, streams and batches
 * must have been freed by then.  It first waits for stream-ordered
 * transfers (phx_io_enqueue()) still queued on any stream: their streams
 * must still get to them.
 */
void phx_device_close(struct phx_device *dev);

/**
 * phx_device_info() - current description of @dev (capacity and use).
 */
int phx_device_info(struct phx_device *dev, struct phx_device_info *info);

/**
 * phx_device_kind() - the backend of @dev.
 */
enum phx_device_kind phx_device_kind(const struct phx_device *dev);

/**
 * phx_device_native() - the backend's own handle for @dev.
 *
 * cuda: the CUcontext (primary context) as a pointer; sim/kmod: NULL.
 */
void *phx_device_native(struct phx_device *dev);

/**
 * phx_device_set_limit() - cap the bytes libphoenix may hold on @dev.
 * @limit: bytes; 0 means the device's capacity.
 *
 * Allocations and growth that would pass the cap fail with -ENOSPC.
 * phxfs uses it for its reserve.
 */
int phx_device_set_limit(struct phx_device *dev, uint64_t limit);

#endif /* PHOENIX_DEVICE_H */
