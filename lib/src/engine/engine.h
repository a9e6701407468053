/* SPDX-License-Identifier: MIT */
/*
 * engine.h - what the transfer engine (lib/src/engine) offers the layers
 * above it: engines of their own for the stream layer's workers, the
 * stream sink's side of an engine, the files' helpers, and the device's
 * teardown of the engine pool and host copies.  The public transfer API
 * (phx_io_run, phx_read, phx_memcpy_*, backing files) is in phoenix.h.
 */
#ifndef PHX_ENGINE_H
#define PHX_ENGINE_H

#include "buf.h"

/*
 * The engine layer's state of a device (its engine pool, what host copies
 * keep): made when the device opens, destroyed when it closes.
 */
int phx_engine_device_open(struct phx_device *dev);
void phx_engine_device_close(struct phx_device *dev);

/*
 * A new fd for what @fd has open, with open(2) @flags (O_CLOEXEC added);
 * -1 with errno EBADF where @flags' access mode is more than @fd's (an
 * O_PATH @fd allows none).
 */
int phx_reopen(int fd, int flags);

/* The bytes behind @fd, a regular file or a block device . */
int phx_fd_size(int fd, uint64_t *size);

struct phx_engine;
int phx_engine_new(struct phx_device *dev, size_t staging,
		   struct phx_engine **out);
void phx_engine_destroy(struct phx_engine *e);
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
int phx_engine_new_sink(struct phx_device *dev, size_t staging,
			unsigned int nslots, struct phx_engine **out);
/* Its slots: slot i is @chunk bytes at @staging + i * @chunk, pinned or not. */
void phx_engine_slots(const struct phx_engine *e, char **staging,
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

#endif /* PHX_ENGINE_H */
