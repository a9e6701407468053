/* SPDX-License-Identifier: MIT */
/*
 * device.h - the interface every device backend (cuda, sim, kmod)
 * implements, and the device object the rest of libphoenix shares.
 *
 * A backend provides the CUDA virtual-memory model: reserve an address
 * range, create physical chunks, map them into the range, export a chunk
 * as a file descriptor and import it elsewhere.  Buffers (buf.c) are built
 * on that, so growth never copies and sparse buffers hold only what was
 * written.  Copies are asynchronous on backend streams and completion is
 * observed through events, which is what the transfer engine overlaps.
 *
 * Unless noted, ops return 0 or a negative errno and set the thread's
 * error message (phx_err()) on failure.
 */
#ifndef PHX_DEVICE_H
#define PHX_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base.h"

struct phx_device;

/*
 * The copy kernel (phx_feed in kernels.ptx) and its control block, shared by a
 * stream-ordered transfer's worker and the kernel on its stream: how
 * stream-ordered transfers move their bytes in PHX_STREAM_WAIT=kernel
 * (lib/src/stream/kernel.c).  The block lives in pinned host memory
 * mapped for the device.  The host side writes with release stores and
 * reads with acquire loads; the kernel uses volatile accesses and
 * system-scope fences.  Offsets are fixed by the PTX.
 */
#define PHX_FEED_SLOTS 8

/* kernels.ptx, NUL-terminated, for cuModuleLoadData (built from it). */
extern const char phx_kernels_ptx[];

struct phx_feed_ctl {
	uint32_t reached; /* kernel -> host: the stream got here */
	uint32_t done; /* host -> kernel: nchunks is final */
	uint32_t nchunks;
	uint32_t op; /* 0: slot -> buffer, 1: buffer -> slot */
	uint64_t slots; /* device address of slot 0 */
	uint64_t slot_size;
	uint32_t ready[PHX_FEED_SLOTS]; /* host -> kernel: chunk + 1 */
	uint32_t freed[PHX_FEED_SLOTS]; /* kernel -> host: chunk + 1 */
	uint64_t off[PHX_FEED_SLOTS]; /* buffer offset of each slot's chunk */
	uint32_t len[PHX_FEED_SLOTS];
	/* kernel -> host: block b is gone; the block can be reused */
	uint32_t exited[PHX_FEED_SLOTS];
};

_Static_assert(offsetof(struct phx_feed_ctl, ready) == 32, "kernels.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, freed) == 64, "kernels.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, off) == 96, "kernels.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, len) == 160, "kernels.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, exited) == 192, "kernels.ptx");

/*
 * What the kernel does, on the CPU: the stream layer hands it to the
 * simulated device (feed_launch's @play), which runs it as a stream op,
 * its blocks in turn on one thread, so the suites exercise the worker's
 * side of the protocol.  Device addresses (ctl->slots, @buf) are host
 * addresses there.
 */
typedef void phx_feed_play_fn(struct phx_feed_ctl *ctl, unsigned char *buf);

/* A physical chunk of device memory (CUmemGenericAllocationHandle etc.). */
typedef uint64_t phx_chunk_t;

/* One host -> device copy of a batch (copy_htod_batch). */
struct phx_htod {
	phx_dptr_t dst;
	const void *src;
	size_t len;
};

struct phx_backend_ops {
	/* its words: phx_kind_name(), phx_kind_prefix() */
	enum phx_device_kind kind;

	/*
	 * Number of devices, or -ENODEV with *why set to a static one-line
	 * reason.  Called once; may load drivers.
	 */
	int (*probe)(const char **why);
	/* Fill @info's model, capacity, free and numa_node for @index. */
	int (*query)(int index, struct phx_device_info *info);

	/* Open device @dev->index; store backend state in @dev->priv. */
	int (*open)(struct phx_device *dev);
	void (*close)(struct phx_device *dev);

	/*
	 * The ordinal of the device holding @dptr, or -ENODEV; may be NULL
	 * (then every address belongs to device 0).
	 */
	int (*locate)(phx_dptr_t dptr);

	/* The backend's own handle for phx_device_native(); may be NULL. */
	void *(*native)(struct phx_device *dev);

	/*
	 * Make @dev's context current in the calling thread (cuda); may be
	 * NULL.  Called at the top of each public entry point.
	 */
	int (*bind)(struct phx_device *dev);

	/*
	 * Address-space reservation.  Sizes passed to va_reserve and
	 * chunk_create are multiples of dev->granularity (set by open()).
	 */
	int (*va_reserve)(struct phx_device *dev, uint64_t size,
			  phx_dptr_t *out);
	void (*va_release)(struct phx_device *dev, phx_dptr_t va,
			   uint64_t size);

	/* Physical chunks; created memory is zero-filled. */
	int (*chunk_create)(struct phx_device *dev, uint64_t size,
			    phx_chunk_t *out);
	/*
	 * Optional, all three or none: a chunk whose memory is not cleared
	 * (cheaper where clearing needs a mapping of its own: cuda), which
	 * the buffer layer clears where it maps it.  chunk_clear queues the
	 * clearing of a mapped range, chunk_clear_wait waits until all it
	 * queued is done; nothing else touches the range before that.
	 */
	int (*chunk_create_uncleared)(struct phx_device *dev, uint64_t size,
				      phx_chunk_t *out);
	int (*chunk_clear)(struct phx_device *dev, phx_dptr_t at,
			   uint64_t size);
	int (*chunk_clear_wait)(struct phx_device *dev);
	void (*chunk_release)(struct phx_device *dev, phx_chunk_t chunk,
			      uint64_t size);
	int (*chunk_map)(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			 phx_chunk_t chunk);
	void (*chunk_unmap)(struct phx_device *dev, phx_dptr_t at,
			    uint64_t size);
	/*
	 * For a buffer of many chunks mapped at once (a shared one being
	 * received): map @chunk at @at without making it accessible, then
	 * make a whole mapped range of such chunks accessible in one call
	 * (cuda: cuMemSetAccess takes a range).  Both or neither; without
	 * them chunk_map does both, chunk by chunk.
	 */
	int (*chunk_map_bare)(struct phx_device *dev, phx_dptr_t at,
			      uint64_t size, phx_chunk_t chunk);
	int (*range_access)(struct phx_device *dev, phx_dptr_t at,
			    uint64_t size);
	/* A new fd for @chunk that another process can import. */
	int (*chunk_export)(struct phx_device *dev, phx_chunk_t chunk,
			    uint64_t size, int *fd);
	/* Take ownership of @fd's memory (the fd is not closed). */
	int (*chunk_import)(struct phx_device *dev, int fd, uint64_t size,
			    phx_chunk_t *out);

	/*
	 * Host address through which the mapped range at @va can be read
	 * and written by the CPU and by the kernel's O_DIRECT I/O (sim: its
	 * backing; kmod: ZONE_DEVICE mapping), or NULL (cuda).
	 */
	void *(*host_addr)(struct phx_device *dev, phx_dptr_t va);
	/* True when host_addr memory is device memory that the block layer
	 * can DMA to (kmod): the engine then takes the p2p path. */
	bool p2p;

	/*
	 * Backing files (backing.c): a new regular file in *@fd whose bytes
	 * are device memory, size 0, room for @capacity bytes (a page
	 * multiple).  NULL where the device has none (cuda).
	 */
	int (*backing_alloc)(struct phx_device *dev, uint64_t capacity,
			     int *fd);
	/*
	 * The capacity of backing file @fd and whether a process maps it
	 * now; NULL where only the library's count of it is known.
	 */
	int (*backing_query)(struct phx_device *dev, int fd, uint64_t *capacity,
			     bool *mapped);
	/* Give back the capacity past the size; NULL: nothing to give. */
	int (*backing_trim)(struct phx_device *dev, int fd);

	/*
	 * Copies between the device and host memory are fast only when the
	 * host memory is pinned (cuda; sim behaves alike): copies from other
	 * host memory go through an engine's pinned staging.
	 */
	bool pinned_copies;

	/* Pin host memory for DMA by the device (cuMemHostRegister). */
	int (*host_register)(struct phx_device *dev, void *p, size_t len);
	void (*host_unregister)(struct phx_device *dev, void *p);

	/* A new stream of the device. */
	int (*stream_create)(struct phx_device *dev, void **stream);
	/*
	 * A stream whose work is always waited for by the thread that
	 * queued it, with stream_sync before anything else uses the stream
	 * (the synchronous copies' pool): the backend may leave that work
	 * for the sync to carry out.  NULL: stream_create (cuda, whose copy
	 * engines start on their own).
	 */
	int (*stream_create_waited)(struct phx_device *dev, void **stream);
	void (*stream_destroy)(struct phx_device *dev, void *stream);
	int (*stream_sync)(struct phx_device *dev, void *stream);
	/* Default stream handle for wrap(NULL). */
	void *(*stream_default)(struct phx_device *dev);

	int (*copy_htod)(struct phx_device *dev, phx_dptr_t dst,
			 const void *src, size_t len, void *stream);
	int (*copy_dtoh)(struct phx_device *dev, void *dst, phx_dptr_t src,
			 size_t len, void *stream);
	/*
	 * @n host -> device copies queued on @stream at once, as one piece of
	 * the stream's work: what comes after them on the stream waits for
	 * all of them, among themselves they run in any order (so no two may
	 * overlap).  What many small copies cost in calls and stream ops
	 * then counts once (cuda: small ones in one launch of the gather
	 * kernel once kernels_load has run, the others cuMemcpyBatchAsync
	 * where the driver has it; sim: one op of its stream's thread).
	 * @src is host memory pinned with host_register.
	 */
	int (*copy_htod_batch)(struct phx_device *dev,
			       const struct phx_htod *copies, unsigned int n,
			       void *stream);
	/* @dst may be on another device of the same backend. */
	int (*copy_dtod)(struct phx_device *dev, phx_dptr_t dst, phx_dptr_t src,
			 size_t len, void *stream);
	int (*memset_d8)(struct phx_device *dev, phx_dptr_t dst, uint8_t value,
			 size_t len, void *stream);

	/* Events mark a point in a stream. */
	int (*event_create)(struct phx_device *dev, void **event);
	void (*event_destroy)(struct phx_device *dev, void *event);
	int (*event_record)(struct phx_device *dev, void *event, void *stream);
	/* 0 when reached, -EAGAIN when not yet, other -errno on failure. */
	int (*event_query)(struct phx_device *dev, void *event);
	int (*event_sync)(struct phx_device *dev, void *event);

	/*
	 * Run @fn(@arg) when @stream reaches this point; work queued after
	 * waits for it to return.  @fn must not call the backend.
	 */
	int (*launch_host_fn)(struct phx_device *dev, void *stream,
			      void (*fn)(void *), void *arg);

	/*
	 * Host memory the device reads and writes (stream flags, the copy
	 * kernel's control blocks and rings): pin and map [@p, @p + @len),
	 * its device address in *@daddr.  NULL where the device uses host
	 * addresses as they are.
	 */
	int (*host_map)(struct phx_device *dev, void *p, size_t len,
			uint64_t *daddr);
	void (*host_unmap)(struct phx_device *dev, void *p);

	/*
	 * Stream-ordered waits and signals on 32-bit words of host_map
	 * memory (@word on the host, @daddr on the device), which is how a
	 * held stream and the host thread serving it talk without a driver
	 * call on the host's side.  stream_wait_value: @stream waits until
	 * (int32_t)(*@word - @value) >= 0 (cyclic, so sequence numbers may
	 * wrap); the host stores with phx_word_store().  stream_write_value:
	 * @stream stores @value once the work queued before it is done
	 * (NULL where the device has no such op).
	 */
	int (*stream_wait_value)(struct phx_device *dev, void *stream,
				 uint32_t *word, uint64_t daddr,
				 uint32_t value);
	int (*stream_write_value)(struct phx_device *dev, void *stream,
				  uint32_t *word, uint64_t daddr,
				  uint32_t value);
	/* What PHX_STREAM_WAIT=auto means here. */
	enum phx_stream_wait stream_wait_auto;

	/*
	 * PHX_STREAM_WAIT=kernel (above): put the copy kernel on @stream
	 * for the control block @ctl (at @ctl_daddr on the device) and the
	 * buffer at @buf.  A device without a GPU runs @play(@ctl, @buf) on
	 * the stream instead, the kernel's part played on the host (the
	 * stream layer passes it down; backends know nothing of streams).
	 */
	int (*feed_launch)(struct phx_device *dev, void *stream,
			   struct phx_feed_ctl *ctl, uint64_t ctl_daddr,
			   phx_dptr_t buf, phx_feed_play_fn *play);
	/*
	 * Load the device's kernels (kernels.ptx) now, where loading can
	 * wait for the GPU: loading waits for what the device has queued,
	 * so it must not run while a stream of ours waits on the host.  The
	 * stream layer calls it when a device opens in kernel or copy mode,
	 * before any stream-ordered transfer is queued; a batch when it is
	 * created (its small copies gather in one launch once the kernels
	 * are there).  NULL where nothing needs loading.
	 */
	int (*kernels_load)(struct phx_device *dev);
};

struct phx_engine_pool;
struct phx_hostcopy;
struct phx_staging;
struct phx_stream_pool;

struct phx_device {
	const struct phx_backend_ops *ops;
	int index;
	char name[16];
	int refs; /* protected by the registry lock */
	void *priv; /* backend state */
	uint64_t granularity; /* chunk size unit; set by ops->open() */
	int numa_node; /* host node nearest the device, or -1 */
	uint64_t capacity; /* bytes */
	uint64_t limit; /* 0: capacity */
	atomic_uint_fast64_t used; /* committed by our buffers */
	atomic_uint_fast64_t pinned; /* staging memory pinned now */
	atomic_uint_fast64_t bytes[PHX_PATH_COUNT]; /* by enum phx_path */
	atomic_uint_fast64_t ios, errors;

	atomic_uint_fast64_t staging; /* staging memory of all engines */
	atomic_uint_fast64_t engines_built;
	atomic_uint_fast64_t threaded_reads; /* engine/readers.c */
	/* the set-up's run, and transfers' waits for it (engine/staging.c) */
	atomic_uint_fast64_t setup_ns, setup_wait_ns;

	/*
	 * Each layer's own state, private to the file that owns it and made
	 * when the device opens: the engine pool (engine/transfer.c), the
	 * staging made ready for its engines (engine/staging.c), what host
	 * copies keep (engine/hostcopy.c), the stream-ordered transfers'
	 * workers (stream/worker.c).
	 */
	struct phx_engine_pool *engines;
	struct phx_staging *staging_block;
	struct phx_hostcopy *hostcopy;
	struct phx_stream_pool *streams;
};

/* Backends. */
extern const struct phx_backend_ops phx_sim_ops;
extern const struct phx_backend_ops phx_cuda_ops;
extern const struct phx_backend_ops phx_kmod_ops;

/* Chunk ops of backends whose memory is a mapped fd (fdmem.c). */
int phx_fdmem_reserve(struct phx_device *dev, uint64_t size, phx_dptr_t *out);
void phx_fdmem_release(struct phx_device *dev, phx_chunk_t chunk,
		       uint64_t size);
int phx_fdmem_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
		  phx_chunk_t chunk, int flags);
void phx_fdmem_unmap(struct phx_device *dev, phx_dptr_t at, uint64_t size);
int phx_fdmem_export(struct phx_device *dev, phx_chunk_t chunk, uint64_t size,
		     int *fd);
int phx_fdmem_dup(struct phx_device *dev, int fd, phx_chunk_t *out);

/*
 * Words that hold streams (stream_wait_value): store @v with release
 * semantics and wake host threads waiting on @word; wait until @word
 * reaches @v cyclically; whether it has.
 */
void phx_word_store(uint32_t *word, uint32_t v);
void phx_word_wait(uint32_t *word, uint32_t v);
bool phx_word_reached(const uint32_t *word, uint32_t v);

/*
 * host_addr, host_register and host_unregister of backends whose memory
 * is mapped at its device address and needs no pinned host memory.
 */
void *phx_host_addr_mapped(struct phx_device *dev, phx_dptr_t va);
int phx_host_register_none(struct phx_device *dev, void *p, size_t len);
void phx_host_unregister_none(struct phx_device *dev, void *p);

/* Between polls: spin briefly, then yield, then sleep up to 50 us. */
void phx_poll_backoff(unsigned int n);

/* Device memory accounting against capacity and limit; -ENOSPC if over. */
int phx_device_charge(struct phx_device *dev, uint64_t bytes);
void phx_device_uncharge(struct phx_device *dev, uint64_t bytes);

/* Bind @dev's context to this thread (no-op for backends without one). */
static inline int phx_device_bind(struct phx_device *dev)
{
	return dev->ops->bind ? dev->ops->bind(dev) : 0;
}

#endif /* PHX_DEVICE_H */
