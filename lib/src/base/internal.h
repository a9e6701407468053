/* SPDX-License-Identifier: MIT */
/* internal.h - helpers shared by the files of libphoenix. */
#ifndef PHX_INTERNAL_H
#define PHX_INTERNAL_H

#include <errno.h>
#include <stdint.h>

#include "phoenix.h"
#include "device.h"

#define PHX_EXPORT __attribute__((visibility("default")))

#define phx_min(a, b) ((a) < (b) ? (a) : (b))
#define phx_max(a, b) ((a) > (b) ? (a) : (b))
#define phx_align_down(x, a) ((x) / (a) * (a))
#define phx_align_up(x, a) (((x) + (a)-1) / (a) * (a))

/*
 * Record a one-line message for phx_strerror_last() and return -@err
 * (@err is a positive errno), so call sites read
 * "return phx_err(ENOSPC, "...", ...);".
 */
int phx_err(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear the thread's last message (successful public calls). */
void phx_err_clear(void);

/* The settings in force; parsed once from the environment. */
const struct phx_settings *phx_settings(void);

/* Human-readable byte count into @buf ("64 MiB"); returns @buf. */
char *phx_fmt_bytes(char *buf, size_t len, uint64_t bytes);

/* Buffer internals needed by the engine. */
struct phx_buf_chunk {
	phx_chunk_t handle;
	uint64_t off; /* offset in the buffer */
	uint64_t size; /* bytes */
	bool mapped; /* backed and mapped at dptr + off */
};

struct phx_buf {
	struct phx_device *dev;
	pthread_mutex_t lock; /* protects everything below */
	uint64_t size;
	uint64_t reserved; /* bytes of address space at dptr */
	phx_dptr_t dptr;
	unsigned int flags;
	bool imported; /* memory owned by another process */
	struct phx_buf_chunk *chunks;
	unsigned int nchunks; /* chunks covering [0, reserved) */
	uint64_t committed;
};

/* -ERANGE with a message unless [off, off + len) lies inside @buf. */
int phx_buf_check_range(const struct phx_buf *buf, uint64_t off, uint64_t len);

/* Back [off, off + len) of @buf with device memory, zero-filled. */
int phx_buf_commit_locked(struct phx_buf *buf, uint64_t off, uint64_t len);

/* Queue zeroing of the backed parts of [from, from + len) on @stream. */
int phx_buf_zero_locked(struct phx_buf *buf, uint64_t from, uint64_t len,
			void *stream);

/*
 * Copy [off, off + len) of @buf to host memory on @stream, writing zeros
 * for ranges never committed.  Caller holds no lock.
 */
int phx_buf_copy_out(struct phx_buf *buf, uint64_t off, void *dst, uint64_t len,
		     void *stream);

/* The chunk holding offset @off (< reserved) of @buf; caller holds lock. */
const struct phx_buf_chunk *phx_buf_chunk_at(const struct phx_buf *buf,
					     uint64_t off);

/* Chunk layout: the chunk index holding offset @off, and its extent. */
unsigned int phx_chunk_index(uint64_t gran, uint64_t max_chunk, uint64_t off);
void phx_chunk_extent(uint64_t gran, uint64_t max_chunk, unsigned int idx,
		      uint64_t *off, uint64_t *size);

/* Device teardown: the engine pool, what host copies keep. */
void phx_engine_pool_destroy(struct phx_device *dev);
void phx_hostcopy_release(struct phx_device *dev);
void phx_async_destroy(struct phx_device *dev);

/* How @dev's streams wait for transfers (never _AUTO). */
enum phx_stream_wait phx_stream_mode(const struct phx_device *dev);

/*
 * A device has just opened: load what its streams need before any
 * stream can be held (the copy kernel; loading waits for the GPU).
 */
void phx_stream_device_open(struct phx_device *dev);

/* A new fd for what @fd has open, with open(2) @flags (O_CLOEXEC added). */
int phx_reopen(int fd, int flags);

/* The bytes behind @fd, a regular file or a block device (fdcache.c). */
int phx_fd_size(int fd, uint64_t *size);

struct phx_engine;
int phx_engine_new(struct phx_device *dev, size_t staging,
		   struct phx_engine **out);
void phx_engine_free(struct phx_engine *e);
int64_t phx_engine_io(struct phx_engine *e, struct phx_io *io);

/*
 * A stream-ordered consumer of an engine's slots (sink.c): the stream
 * the transfer is queued on copies each slot itself (the copies were
 * queued with the transfer), and the two sides hand the slots over
 * through words of mapped host memory.  Segment k of the job uses ring
 * sequence number q = seq + k and slot q % nslots; the engine stores
 * ready[slot] = q + 1 when the slot holds segment k's bytes (reads) or
 * may take them (writes), and the stream stores freed[slot] = q + 1 once
 * it has copied them out (reads) or in (writes).
 */
struct phx_sink {
	uint32_t *ready;
	uint32_t *freed;
	uint32_t seq;
	/*
	 * Segments whose copies are on the stream: the rest are not waited
	 * for.  Lowered (atomically) if queueing fails part of the way.
	 */
	const unsigned int *live;
};

/* An engine whose @staging bytes are cut into @nslots slots, for a sink. */
int phx_engine_new_ring(struct phx_device *dev, size_t staging,
			unsigned int nslots, struct phx_engine **out);
/* Its slots: slot i is @chunk bytes at @staging + i * @chunk, pinned or not. */
void phx_engine_ring(const struct phx_engine *e, char **staging,
		     unsigned int *nslots, uint64_t *chunk, bool *pinned);
/*
 * Queue @io on @e, its bytes moved by @sink's stream, after the jobs
 * queued before it (their segments take the ring's slots first); with
 * @err, or when it cannot move, it only hands its slots to the stream
 * and finishes with that error.  -EAGAIN: not now (every file slot of
 * the engine is busy), again once a job finished.
 */
int phx_engine_sink_queue(struct phx_engine *e, struct phx_io *io,
			  struct phx_sink *sink, int err);
/*
 * One step of @e's pipeline; with @block, it waits for something to
 * happen first.  Then a transfer that finished (result set), or NULL.
 */
int phx_engine_step(struct phx_engine *e, bool block);
bool phx_engine_busy(const struct phx_engine *e);
struct phx_io *phx_engine_reap(struct phx_engine *e);

/*
 * How a stream-ordered transfer of @len bytes at @file_off is cut for a
 * sink with slots of @chunk bytes: segments end on chunk-aligned file
 * offsets; segment k covers [*foff, *foff + *len) of the file and sits
 * at @slot_off in its slot (so O_DIRECT can read the 4 KiB-aligned
 * superset into the slot's start).  The stream side queues one copy per
 * segment from this, the engine moves them by it.
 */
uint64_t phx_sink_nsegs(uint64_t file_off, uint64_t len, uint64_t chunk);
void phx_sink_seg(uint64_t file_off, uint64_t len, uint64_t chunk,
		  unsigned int k, uint64_t *foff, uint64_t *seg_len,
		  uint64_t *slot_off);

#endif /* PHX_INTERNAL_H */
