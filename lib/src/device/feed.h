/* SPDX-License-Identifier: MIT */
/*
 * feed.h - the control block shared by a stream-ordered transfer's worker
 * and the copy kernel on its stream (lib/src/feed.ptx): how stream-ordered
 * transfers move their bytes in PHX_STREAM_WAIT=kernel (stream.c).
 *
 * The block lives in pinned host memory mapped for the device.  The host
 * side writes with release stores and reads with acquire loads; the
 * kernel uses volatile accesses and system-scope fences.  Offsets are
 * fixed by the PTX.
 */
#ifndef PHX_FEED_H
#define PHX_FEED_H

#include <stddef.h>
#include <stdint.h>

#define PHX_FEED_SLOTS 8

/* feed.ptx, NUL-terminated, for cuModuleLoadData (built from it). */
extern const char phx_feed_ptx[];

struct phx_feed_ctl {
	uint32_t reached; /* kernel -> host: the stream got here */
	uint32_t done; /* host -> kernel: nchunks is final */
	uint32_t nchunks;
	uint32_t op; /* 0: slot -> buffer, 1: buffer -> slot */
	uint64_t ring; /* device address of slot 0 */
	uint64_t slot_size;
	uint32_t ready[PHX_FEED_SLOTS]; /* host -> kernel: chunk + 1 */
	uint32_t freed[PHX_FEED_SLOTS]; /* kernel -> host: chunk + 1 */
	uint64_t off[PHX_FEED_SLOTS]; /* buffer offset of each slot's chunk */
	uint32_t len[PHX_FEED_SLOTS];
	/* kernel -> host: block b is gone; the block can be reused */
	uint32_t exited[PHX_FEED_SLOTS];
};

_Static_assert(offsetof(struct phx_feed_ctl, ready) == 32, "feed.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, freed) == 64, "feed.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, off) == 96, "feed.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, len) == 160, "feed.ptx");
_Static_assert(offsetof(struct phx_feed_ctl, exited) == 192, "feed.ptx");

/*
 * What the kernel does, on the CPU: the stream layer hands it to the
 * simulated device (feed_launch's @play), which runs it as a stream op,
 * its blocks in turn on one thread, so the suites exercise the worker's
 * side of the protocol.  Device addresses (ctl->ring, @buf) are host
 * addresses there.
 */
typedef void phx_feed_play_fn(struct phx_feed_ctl *ctl, unsigned char *buf);
phx_feed_play_fn phx_feed_emulate;

/*
 * The worker's side of a read: @n bytes of @fd at @file_off into the
 * buffer at @buf_off, through @ring (its host address; the kernel was told
 * its device address in ctl->ring).  Returns the bytes moved or -errno;
 * in both cases the kernel is told it is done, after *@bytes_done is set.
 */
int64_t phx_feed_read(struct phx_feed_ctl *ctl, unsigned char *ring, int fd,
		      uint64_t n, int64_t file_off, int64_t buf_off,
		      int64_t *bytes_done);

/*
 * The worker's side of a write: @n bytes of the buffer at @buf_off to @fd
 * at @file_off.  As phx_feed_read otherwise.
 */
int64_t phx_feed_write(struct phx_feed_ctl *ctl, unsigned char *ring, int fd,
		       uint64_t n, int64_t file_off, int64_t buf_off,
		       int64_t *bytes_done);

/* End a transfer before it moves anything: *@bytes_done = @err. */
void phx_feed_abort(struct phx_feed_ctl *ctl, int64_t err, int64_t *bytes_done);

/* Wait until every block of the kernel has left @ctl. */
void phx_feed_wait_exit(struct phx_feed_ctl *ctl);

#endif
