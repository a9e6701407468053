/* SPDX-License-Identifier: MIT */
/*
 * phoenix/buffer.h - buffers of device memory (allocated, grown, sparse,
 * shared with another process) and pinned host memory for copies.
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/buffer.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_BUFFER_H)
#define PHOENIX_BUFFER_H

enum phx_buf_flags {
	/*
	 * Device memory is committed only where data is written (by a
	 * transfer, a copy or phx_buf_commit()); reads of never-written
	 * ranges return zeros.  Without it the whole size is committed.
	 */
	PHX_BUF_SPARSE = 1 << 0,
};

/**
 * phx_buf_alloc() - allocate device memory.
 * @dev: device.
 * @size: bytes (0 allowed: an empty buffer that can grow).
 * @flags: enum phx_buf_flags.
 * @out: receives the buffer.
 *
 * Memory is reserved in address space for growth and backed in chunks,
 * so phx_buf_resize() never copies.  Returns 0, -EINVAL (unknown
 * @flags), -ENOSPC (device out of
 * memory or over the limit), -EFBIG (size beyond what can be reserved),
 * -ENOMEM (host memory) or -EIO (driver failure).
 */
int phx_buf_alloc(struct phx_device *dev, uint64_t size, unsigned int flags,
		  struct phx_buf **out);

/**
 * phx_buf_free() - release a buffer and its device memory.
 *
 * The buffer must not be in use by an unfinished transfer, including
 * one queued on a stream (phx_io_enqueue()) that the stream has not
 * completed: phx_buf_free() does not wait for streams, so synchronize
 * them first (phx_stream_sync()).  Memory shared with other processes (phx_buf_send()) stays alive until they
 * free their imported buffers too.
 */
void phx_buf_free(struct phx_buf *buf);

/**
 * phx_buf_resize() - grow or shrink a buffer, keeping its contents.
 * @size: new size in bytes.
 *
 * Bytes beyond the old size read as zeros.  Growing may move the buffer
 * to a new device address (the old one becomes invalid) but never copies
 * data.  Not safe against concurrent transfers on the same buffer,
 * queued stream transfers included (synchronize their streams first).
 * Returns 0, -ENOSPC or -EFBIG.
 */
int phx_buf_resize(struct phx_buf *buf, uint64_t size);

/**
 * phx_buf_commit() - make sure [off, off + len) is backed by device memory.
 *
 * Needed before writing a sparse buffer through its device address from
 * outside libphoenix (a kernel, another library).  Returns 0, -ENOSPC or
 * -ERANGE.
 */
int phx_buf_commit(struct phx_buf *buf, uint64_t off, uint64_t len);

/**
 * phx_buf_size() - the buffer's size in bytes.
 */
uint64_t phx_buf_size(const struct phx_buf *buf);

/**
 * phx_buf_committed() - bytes of device memory the buffer holds now.
 */
uint64_t phx_buf_committed(const struct phx_buf *buf);

/**
 * phx_buf_next_data() - the first backed range at or after @off.
 *
 * Sets *@data_off (>= @off) and *@data_len to the first run of backed
 * bytes that ends after @off, clipped to the buffer's size; the bytes
 * between @off and *@data_off are a hole (they read as zeros and hold no
 * memory).  A hole thus runs from @off to *@data_off, and the next one
 * starts at *@data_off + *@data_len.  Backing follows the device's
 * granularity, so backed bytes may lie around what was written.
 * Returns 0, or -ENXIO when @off is at or past the end or only hole lies
 * after it (as lseek(SEEK_DATA) does).
 */
int phx_buf_next_data(struct phx_buf *buf, uint64_t off, uint64_t *data_off,
		      uint64_t *data_len);

/**
 * phx_buf_dptr() - the buffer's device address.
 *
 * Valid until the buffer is resized or freed.  Where the device is not
 * host-addressable (cuda) it must not be dereferenced on the host.
 */
phx_dptr_t phx_buf_dptr(const struct phx_buf *buf);

/**
 * phx_buf_host_view() - a host pointer to the buffer's memory, if any.
 *
 * sim and kmod buffers are host-addressable (sim through its backing
 * memory, kmod through the module's mapping); cuda returns NULL.  Like
 * phx_buf_dptr() it is invalidated by resize and free.  Never-committed
 * ranges of a sparse sim buffer read as zeros and fault when written:
 * phx_buf_commit() them first.
 */
void *phx_buf_host_view(struct phx_buf *buf);

/**
 * phx_host_register() - pin host memory for fast copies to and from @dev.
 * @p: start of the range (page aligned is best).
 * @len: bytes.
 *
 * Copies from pinned memory run at the bus's speed; pageable memory is
 * staged by the driver at a fraction of it.  A no-op on sim and kmod.
 * Returns 0, -ENOMEM (cannot pin: memlock limit) or -EEXIST.
 */
int phx_host_register(struct phx_device *dev, void *p, size_t len);

/**
 * phx_host_unregister() - undo phx_host_register() before freeing @p.
 */
void phx_host_unregister(struct phx_device *dev, void *p);

/**
 * phx_host_alloc() - pinned host memory for copies to and from @dev.
 * @len: bytes (rounded up to pages).
 *
 * Given back with phx_host_free(), a buffer stays pinned in a pool of the
 * device and the next phx_host_alloc() of the same size takes it, so a
 * program copying through a few buffers (a FUSE server's replies) pins
 * nothing per copy.  At most 64 MiB per device are pinned this way at
 * once: past that -EBUSY (use other memory).  Where pinning is refused
 * (memlock limit) the memory comes unpinned: copies are staged, still
 * right.  Returns 0, -EINVAL (0 bytes), -EBUSY or -ENOMEM.
 */
int phx_host_alloc(struct phx_device *dev, size_t len, void **out);

/**
 * phx_host_free() - give back @p from phx_host_alloc(@len).
 */
void phx_host_free(struct phx_device *dev, void *p, size_t len);

/**
 * phx_buf_device() - the device a buffer lives on (no new reference).
 */
struct phx_device *phx_buf_device(const struct phx_buf *buf);

/**
 * phx_buf_send() - share a buffer with another process.
 * @sock: a connected AF_UNIX stream socket.
 *
 * Sends the buffer's size, layout and memory handles (file descriptors
 * over SCM_RIGHTS).  The receiver calls phx_buf_recv().  Blocks until
 * everything is sent.  Returns 0 or a negative errno.
 */
int phx_buf_send(struct phx_buf *buf, int sock);

/**
 * phx_buf_recv() - open a buffer that another process sent.
 * @dev: the same device the sender's buffer is on (by name).
 * @sock: the socket the sender used.
 * @out: receives an imported buffer that maps the same memory.
 *
 * The imported buffer reads and writes the sender's memory in place; it
 * cannot be resized, and freeing it releases only this mapping.
 */
int phx_buf_recv(struct phx_device *dev, int sock, struct phx_buf **out);

#endif /* PHOENIX_BUFFER_H */
