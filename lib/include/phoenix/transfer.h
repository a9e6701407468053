/* SPDX-License-Identifier: MIT */
/*
 * phoenix/transfer.h - transfers between files and buffers, one at a
 * time or many at once in a batch, and copies between host memory and
 * buffers.
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/transfer.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_TRANSFER_H)
#define PHOENIX_TRANSFER_H

/* ---- transfers ------------------------------------------------------ */

enum phx_op {
	PHX_OP_READ = 0, /* file -> device */
	PHX_OP_WRITE = 1, /* device -> file */
};

/*
 * One transfer.  The destination is @buf + @buf_off when @buf is set,
 * otherwise the raw device address @dptr on @dev (memory libphoenix did
 * not allocate, e.g. a framework's tensor).
 */
struct phx_io {
	enum phx_op op;
	int fd; /* any readable/writable fd, O_DIRECT or not */
	int64_t file_off; /* >= 0, any alignment */
	struct phx_buf *buf; /* or NULL and @dptr */
	uint64_t buf_off; /* offset in @buf */
	phx_dptr_t dptr; /* used when @buf is NULL */
	uint64_t len; /* bytes */
	/* filled in on completion */
	int64_t result; /* bytes moved or negative errno */
	enum phx_path path; /* data path that moved the bulk of them */
	void *user_data; /* untouched */
};

/**
 * phx_io_run() - perform one transfer synchronously.
 * @dev: the device of the destination.
 * @io: the transfer; result and path are filled in.
 *
 * Reads are short only at end of file (result < len); writes extend the
 * file.  Host memory used is bounded by the staging settings, whatever
 * the length.  Returns io->result.
 */
int64_t phx_io_run(struct phx_device *dev, struct phx_io *io);

/**
 * phx_read() - read @len bytes of @fd at @file_off into @buf at @buf_off.
 *
 * Blocks.  Returns the bytes read (short only at EOF) or a negative errno:
 * -EBADF (fd not open for reading), -ERANGE (range outside the buffer),
 * -ENOSPC (a sparse buffer could not be backed), -EIO.
 */
int64_t phx_read(struct phx_buf *buf, uint64_t buf_off, int fd,
		 int64_t file_off, uint64_t len);

/**
 * phx_write() - write @len bytes of @buf at @buf_off to @fd at @file_off.
 *
 * Blocks.  Returns the bytes written or a negative errno: -EINVAL for a
 * descriptor open with O_APPEND, whose writes would land at the end of
 * the file instead of @file_off (as for every write the library makes:
 * batches, stream-ordered transfers).
 */
int64_t phx_write(struct phx_buf *buf, uint64_t buf_off, int fd,
		  int64_t file_off, uint64_t len);

/**
 * phx_memcpy_to_buf() - copy host memory into a buffer (commits as needed).
 *
 * Blocks until the copy is done.  @src may be any host memory: memory
 * pinned with phx_host_register() is copied by the device directly, other
 * memory through the pinned staging of one of the device's engines.
 */
int phx_memcpy_to_buf(struct phx_buf *buf, uint64_t off, const void *src,
		      uint64_t len);

/**
 * phx_memcpy_from_buf() - copy part of a buffer into host memory.
 *
 * Never-committed ranges of sparse buffers read as zeros.  Blocks.  Host
 * memory is used as by phx_memcpy_to_buf().
 */
int phx_memcpy_from_buf(void *dst, struct phx_buf *buf, uint64_t off,
			uint64_t len);

/**
 * phx_memcpy_buf() - device-to-device copy between two buffers.
 *
 * The buffers may be on different devices of the same kind (a peer copy
 * on cuda).  Blocks.  Holds both buffers' locks for the copy, taken in
 * address order, so copies between two buffers in opposite directions
 * on two threads cannot deadlock.  Ranges of one buffer may overlap: the
 * result is memmove()'s (the copy runs back to front when the destination
 * is the later range, in pieces no longer than the distance between the
 * ranges, so a shift by a few bytes takes many device copies).
 */
int phx_memcpy_buf(struct phx_buf *dst, uint64_t dst_off, struct phx_buf *src,
		   uint64_t src_off, uint64_t len);

/* ---- batches -------------------------------------------------------- */

enum phx_batch_flags {
	/* wait by spinning on completions instead of sleeping */
	PHX_BATCH_POLL = 1 << 0,
};

/**
 * phx_batch_create() - a context for submitting many transfers at once.
 * @dev: device of all destinations.
 * @depth: most requests in flight (0: PHX_QUEUE_DEPTH).  The staging
 *	   memory (PHX_STAGING_SIZE) is split among them, so a deep batch
 *	   of small reads costs no more host memory than a shallow one.
 * @flags: enum phx_batch_flags.
 *
 * A batch is used by one thread at a time.  It borrows one of the device's
 * pooled engines for its life (built only if none is idle) and gives it
 * back when destroyed; it never waits for one.  Returns 0, -EINVAL
 * (unknown @flags) or a negative errno.
 */
int phx_batch_create(struct phx_device *dev, unsigned int depth,
		     unsigned int flags, struct phx_batch **out);

/**
 * phx_batch_submit() - start @n transfers, and those queued before.
 *
 * The array must stay valid, and each entry's fd open, until the entry
 * completed (phx_batch_wait() returns it).  @n may be 0 (@ios NULL): it
 * starts what phx_batch_queue() queued.  Transfers complete soonest when
 * the thread that started them waits for them.  Returns @n or a negative
 * errno if nothing was started (-EINVAL: @ios NULL with @n not 0).
 */
int phx_batch_submit(struct phx_batch *batch, struct phx_io *ios,
		     unsigned int n);

/**
 * phx_batch_queue() - queue @n transfers, to start with the others queued
 * at the next phx_batch_submit() or phx_batch_wait() on the batch.
 *
 * For entries that come one at a time (a completed one's successor, fio's
 * queue hook): what is queued between two of those calls goes to the
 * kernel in one system call.  The entries are checked now; one that
 * cannot run completes with its error, as in phx_batch_submit().  Same
 * rules for the array and the fds.  Returns @n or a negative errno if
 * nothing was queued.
 */
int phx_batch_queue(struct phx_batch *batch, struct phx_io *ios,
		    unsigned int n);

/**
 * phx_batch_wait() - drive the batch until @min entries have completed.
 * @done: array receiving pointers to completed entries (may be NULL).
 * @max: capacity of @done.
 * @timeout_ms: -1 waits for ever, 0 drives the batch one round without
 *	waiting and collects what is done (a caller with other work between
 *	its waits keeps the transfers moving that way).
 *
 * It starts what phx_batch_queue() queued first.  Each completed entry
 * has result and path set; a failed entry does not stop the others.
 * Returns the number of entries completed by this call (at most @max when
 * @done is set), or a negative errno.
 */
int phx_batch_wait(struct phx_batch *batch, unsigned int min,
		   struct phx_io **done, unsigned int max, int timeout_ms);

/**
 * phx_batch_destroy() - wait for what is in flight and free the batch.
 */
void phx_batch_destroy(struct phx_batch *batch);

#endif /* PHOENIX_TRANSFER_H */
