/* SPDX-License-Identifier: MIT */
/*
 * phoenix/stream.h - streams and stream-ordered transfers
 * (phx_io_enqueue()).
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/stream.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_STREAM_H)
#define PHOENIX_STREAM_H

/**
 * phx_stream_create() - a device stream (an ordered queue of work).
 */
int phx_stream_create(struct phx_device *dev, struct phx_stream **out);

/**
 * phx_stream_wrap() - use a stream created elsewhere (a CUstream on cuda,
 * e.g. torch.cuda.current_stream().cuda_stream; a phx_stream_native() on
 * sim).  NULL means the device's default stream.  Destroying the wrapper
 * does not destroy the native stream.
 */
int phx_stream_wrap(struct phx_device *dev, void *native,
		    struct phx_stream **out);

/**
 * phx_stream_native() - the backend's handle for @stream (CUstream on cuda).
 */
void *phx_stream_native(struct phx_stream *stream);

/**
 * phx_stream_sync() - wait until all work queued on @stream is done.
 */
int phx_stream_sync(struct phx_stream *stream);

/**
 * phx_stream_destroy() - free @stream.
 *
 * A stream from phx_stream_create() is synchronized and destroyed; a
 * wrapper from phx_stream_wrap() is only freed, without touching the
 * native stream (which its owner may have destroyed already).
 */
void phx_stream_destroy(struct phx_stream *stream);

/*
 * What a stream's owner promises about the parameters of its transfers
 * (phx_stream_set_flags(); the values of cuFileStreamRegister()'s flags):
 * the value behind each pointer is final when phx_io_enqueue() is called.
 */
#define PHX_STREAM_FIXED_BUF_OFFSET 0x1u
#define PHX_STREAM_FIXED_FILE_OFFSET 0x2u
#define PHX_STREAM_FIXED_SIZE 0x4u
#define PHX_STREAM_FIXED                                              \
	(PHX_STREAM_FIXED_BUF_OFFSET | PHX_STREAM_FIXED_FILE_OFFSET | \
	 PHX_STREAM_FIXED_SIZE)

/**
 * phx_stream_set_flags() - set @stream's PHX_STREAM_FIXED_* flags.
 *
 * With all three (PHX_STREAM_FIXED), phx_io_enqueue() reads the values
 * when it is called and queues the transfer's copies on the stream
 * itself: the copy engine moves the bytes, at phx_read()'s speed.
 * Without them the values are read when the stream gets there, which
 * only the copy kernel can follow (slower; see phx_io_enqueue()).
 * With them a read may go to the file before the stream gets there, once
 * the stream-ordered writes queued before it are in the file; a value
 * changed after queueing fails the transfer with -EINVAL, the buffer
 * holding the bytes of the values as queued, or zeros.
 * Returns 0, or -EINVAL for unknown flags.
 */
int phx_stream_set_flags(struct phx_stream *stream, unsigned int flags);

/**
 * phx_io_enqueue() - a stream-ordered transfer.
 * @stream: the transfer starts when @stream reaches this point, and work
 *	    queued after it waits until it is done.
 * @op: PHX_OP_READ or PHX_OP_WRITE.
 * @dptr: device address of the buffer base.
 * @len, @file_off, @buf_off: read when the stream reaches the transfer,
 *	    as cuFileReadAsync does, or now on a stream with
 *	    PHX_STREAM_FIXED (phx_stream_set_flags()).
 * @bytes_done: written with the bytes moved or a negative errno when the
 *	    transfer completes.
 *
 * All pointers must stay valid, @fd open, and the memory at @dptr
 * allocated, until then: freeing or resizing its buffer first is
 * undefined (phx_buf_free() and phx_buf_resize() do not wait for
 * streams; phx_stream_sync() before them).  Returns 0 when
 * queued.  Blocks while the driver's queue for @stream is full (CUDA
 * takes about a thousand operations on a stream), as any launch on that
 * stream would.
 *
 * How the stream is held while a worker thread moves the bytes
 * (PHX_STREAM_WAIT): "copy" (the default on CUDA and the simulated
 * device), the transfer's copies are queued on the stream between waits
 * on words of mapped host memory (cuStreamWaitValue32) that the worker
 * sets as it reads the file into, or writes it from, a ring of pinned
 * slots; the worker makes no driver call while the stream waits, and no
 * kernel occupies the GPU.  This needs the values fixed (above); other
 * transfers, and reads past the end of the file as it is when queued,
 * take the copy kernel.  "kernel", a copy kernel on the stream announces
 * that the stream reached it and copies the bytes the worker stages in
 * mapped host memory (slower: the kernel's loads cross PCIe).  "device",
 * a host function hands the transfer over and the stream waits on a
 * flag (the default on phx.ko devices); "host", a host function waits
 * for the worker.  On CUDA host and device can hang while another thread
 * is in a driver call that waits for the GPU (README, "Known problems").
 * At most 4096 transfers (1024 per ring in copy mode) can be queued on
 * a device at once; past that, -EBUSY.
 */
int phx_io_enqueue(struct phx_stream *stream, enum phx_op op, int fd,
		   phx_dptr_t dptr, const uint64_t *len,
		   const int64_t *file_off, const int64_t *buf_off,
		   int64_t *bytes_done);

#endif /* PHOENIX_STREAM_H */
