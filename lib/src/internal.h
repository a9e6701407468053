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

/*
 * Flags that hold a stream on the device side (see device.h): the host
 * sets one and wakes whoever waits on it in the host (simulated streams).
 */
void phx_flag_set(uint32_t *flag);
void phx_flag_wait(uint32_t *flag);

/* How @dev's streams wait for transfers: 0 host, 1 device, 2 kernel. */
int phx_stream_mode(const struct phx_device *dev);

/* A new fd for what @fd has open, with open(2) @flags (O_CLOEXEC added). */
int phx_reopen(int fd, int flags);

struct phx_engine;
int phx_engine_new(struct phx_device *dev, size_t staging,
		   struct phx_engine **out);
void phx_engine_free(struct phx_engine *e);
int64_t phx_engine_io(struct phx_engine *e, struct phx_io *io);

#endif /* PHX_INTERNAL_H */
