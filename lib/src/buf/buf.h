/* SPDX-License-Identifier: MIT */
/*
 * buf.h - buffers (lib/src/buf): reserved device address space, chunks
 * mapped on demand, growth, sharing between processes; what the engine
 * above needs of a buffer's insides.
 */
#ifndef PHX_BUF_H
#define PHX_BUF_H

#include "device.h"

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

/* What sharing (share.c) uses of the buffer itself (buf.c). */
void phx_buf_destroy(struct phx_buf *buf);
uint64_t phx_buf_gran(const struct phx_buf *buf);
int phx_buf_new(struct phx_device *dev, uint64_t reserved, unsigned int flags,
		bool imported, struct phx_buf **out);
int phx_chunk_carve(struct phx_buf *buf, unsigned int *i, uint64_t from,
		    uint64_t to);
unsigned int phx_chunk_find(const struct phx_buf *buf, uint64_t off);
uint64_t phx_max_chunk_of(uint64_t gran);

#endif /* PHX_BUF_H */
