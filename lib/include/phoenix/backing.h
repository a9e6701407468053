/* SPDX-License-Identifier: MIT */
/*
 * phoenix/backing.h - backing files: device memory handed out as a
 * growable regular file (what FUSE passthrough serves).
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/backing.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_BACKING_H)
#define PHOENIX_BACKING_H

/*
 * A backing file is device memory handed out as a regular file, the kind
 * FUSE passthrough accepts: its size starts at 0 and follows writes and
 * ftruncate() up to its capacity, the device memory it holds; mmap() of
 * it maps device memory.  phx.ko devices give them (the module's growable
 * ranges, whose O_DIRECT I/O is DMA into device memory); the simulated
 * device gives a memfd, whose capacity only these calls enforce; cuda
 * devices have none (-EOPNOTSUPP).  Capacity counts against the device's
 * memory and limit like a buffer's.  A backing file is used by one thread
 * at a time.
 */
struct phx_backing;

struct phx_backing_info {
	uint64_t size; /* bytes of the file now */
	uint64_t capacity; /* bytes of device memory it holds */
	int mapped; /* 1 while a process maps it (phx.ko only) */
};

/**
 * phx_backing_alloc() - a new, empty backing file on @dev.
 * @capacity: bytes of device memory to hold (rounded up to a page).
 * @out: receives it.
 *
 * Returns 0, -EOPNOTSUPP (not a phx.ko or simulated device), -ENOSPC.
 */
int phx_backing_alloc(struct phx_device *dev, uint64_t capacity,
		      struct phx_backing **out);

/**
 * phx_backing_free() - close the library's descriptor of @bk.
 *
 * The memory is freed once no other descriptor (a FUSE passthrough open,
 * a dup) and no mapping holds the file any more.
 */
void phx_backing_free(struct phx_backing *bk);

/**
 * phx_backing_fd() - the file descriptor of @bk, owned by the library.
 *
 * Its number stays the same for the life of @bk, across
 * phx_backing_reserve(), so it may be fstat()ed without a lock.  Hand it
 * to fuse_passthrough_open(); do not close it.
 */
int phx_backing_fd(const struct phx_backing *bk);

/**
 * phx_backing_info() - size, capacity and whether @bk is mapped.
 */
int phx_backing_info(struct phx_backing *bk, struct phx_backing_info *out);

/**
 * phx_backing_reserve() - make room for @capacity bytes.
 *
 * A no-op when the capacity is already there.  Otherwise the bytes move
 * to a larger allocation (through the engine) that takes over the same
 * descriptor number; descriptors the kernel holds (passthrough opens)
 * keep the old memory, so call it only when none is open.  Returns 0,
 * -EBUSY (the file is mapped), -ENOSPC.
 */
int phx_backing_reserve(struct phx_backing *bk, uint64_t capacity);

/**
 * phx_backing_trim() - give the capacity past the size back to the device.
 *
 * Returns 0; on phx.ko the room stays while I/O still pins it.
 */
int phx_backing_trim(struct phx_backing *bk);

/**
 * phx_backing_read() - copy [@off, @off + @len) of @bk to host memory.
 *
 * Blocks.  Returns the bytes copied (short only at the file's end) or a
 * negative errno.
 */
int64_t phx_backing_read(struct phx_backing *bk, uint64_t off, void *dst,
			 uint64_t len);

/**
 * phx_backing_write() - copy host memory into @bk at @off, extending it.
 *
 * Blocks.  Returns 0, -EFBIG (past the capacity: phx_backing_reserve()
 * first) or a negative errno.
 */
int phx_backing_write(struct phx_backing *bk, uint64_t off, const void *src,
		      uint64_t len);

/**
 * phx_backing_io() - a transfer between a file and a backing file.
 * @io: @buf must be NULL; @buf_off is the offset in @bk; @op, @fd,
 *	@file_off and @len as for phx_io_run().  Reads (file -> @bk) extend
 *	@bk to @buf_off + @len first (within its capacity), once the range
 *	and @fd are checked; a read that fails or comes short leaves @bk
 *	grown only by the bytes read.  Writes must lie inside it.
 *
 * On phx.ko devices aligned ranges take the p2p path.  Blocks.  Returns
 * io->result.
 */
int64_t phx_backing_io(struct phx_backing *bk, struct phx_io *io);

#endif /* PHOENIX_BACKING_H */
