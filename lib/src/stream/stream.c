/* SPDX-License-Identifier: MIT */
/*
 * stream.c - device streams and stream-ordered transfers.
 *
 * phx_io_enqueue() puts a transfer on a stream: it starts when the stream
 * gets there, and work queued after it waits until it is done.  The
 * device's workers move the bytes; nothing on a stream may call the
 * driver, and a worker that calls the driver while a stream waits on it
 * can hang behind another thread's driver call that waits for the GPU.
 * The stream is held one of four ways (PHX_STREAM_WAIT):
 *
 *  - copy (the default on CUDA and sim; copy.c): for a stream whose
 *    values are fixed when queued (PHX_STREAM_FIXED), the transfer's own
 *    copy-engine copies go on the stream between waits on words of
 *    mapped host memory that a worker sets as its engine fills a ring of
 *    slots (sink.c).  No host function, no kernel, and no driver call by
 *    the worker while the stream waits.  Other transfers take the copy
 *    kernel.
 *
 *  - kernel (kernel.c): a copy kernel on the stream says when the stream
 *    reached it, and the worker feeds it through mapped host memory
 *    without calling the driver (device.h); the values are read then, as
 *    cuFile does for streams without its FIXED flags.
 *
 *  - device (device.c; the default on phx.ko, whose streams are synchronous): a
 *    host function queues the transfer and returns; the stream waits
 *    until a flag in mapped host memory turns nonzero
 *    (cuStreamWaitValue32), which the worker sets when the transfer is
 *    done; a last host function returns the flag.  The worker calls the
 *    driver while the stream waits.
 *
 *  - host (host.c): the host function waits for the worker, which CUDA
 *    documents a host function must not do (see host.c).
 *
 * Each mode is a struct phx_stream_mode (modes.c lists them); this file
 * names none of their files.  The workers that serve them are worker.c's.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stream_i.h"

/* A stream on @native, which phx_stream_destroy() destroys when @owned. */
static int stream_new(struct phx_device *dev, void *native, bool owned,
		      struct phx_stream **out)
{
	struct phx_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return phx_err(ENOMEM, "out of host memory for a stream");
	s->dev = dev;
	s->native = native;
	s->owned = owned;
	*out = s;
	return 0;
}

PHX_EXPORT int phx_stream_create(struct phx_device *dev,
				 struct phx_stream **out)
{
	void *native;
	int ret = phx_device_bind(dev);

	if (!ret)
		ret = dev->ops->stream_create(dev, &native);
	if (ret)
		return ret;
	ret = stream_new(dev, native, true, out);
	if (ret)
		dev->ops->stream_destroy(dev, native);
	return ret;
}

PHX_EXPORT int phx_stream_wrap(struct phx_device *dev, void *native,
			       struct phx_stream **out)
{
	return stream_new(dev, native ? native : dev->ops->stream_default(dev),
			  false, out);
}

PHX_EXPORT int phx_stream_set_flags(struct phx_stream *s, unsigned int flags)
{
	if (flags & ~PHX_STREAM_FIXED)
		return phx_err(EINVAL, "unknown stream flags 0x%x", flags);
	s->flags = flags;
	return 0;
}

PHX_EXPORT void *phx_stream_native(struct phx_stream *s)
{
	return s->native;
}

/*
 * Wait by polling an event recorded at the end of the stream rather than
 * with the driver's stream synchronize: while a stream-ordered transfer
 * holds the stream, its worker still needs the driver, and a thread in
 * CUDA's cuStreamSynchronize was seen to keep a lock that the worker's
 * next copy waited for (see the file header).  Each query holds the
 * driver only for a moment.
 */
PHX_EXPORT int phx_stream_sync(struct phx_stream *s)
{
	struct phx_device *dev = s->dev;
	void *ev = NULL;
	unsigned int n;
	int ret = phx_device_bind(dev);

	if (ret)
		return ret;
	if (dev->ops->event_create(dev, &ev))
		return dev->ops->stream_sync(dev, s->native);
	ret = dev->ops->event_record(dev, ev, s->native);
	for (n = 0; !ret; n++) {
		ret = dev->ops->event_query(dev, ev);
		if (ret != -EAGAIN)
			break;
		ret = 0;
		phx_poll_backoff(n);
	}
	dev->ops->event_destroy(dev, ev);
	return ret;
}

PHX_EXPORT void phx_stream_destroy(struct phx_stream *s)
{
	if (!s)
		return;
	/* A wrapper leaves the native stream alone: it may be gone already. */
	if (s->owned) {
		phx_stream_sync(s);
		s->dev->ops->stream_destroy(s->dev, s->native);
	}
	free(s);
}

enum phx_stream_wait phx_stream_mode(const struct phx_device *dev)
{
	enum phx_stream_wait mode = phx_settings()->stream_wait;

	if (mode == PHX_STREAM_WAIT_AUTO)
		mode = dev->ops->stream_wait_auto;
	/* the copy mode gives late-bound transfers to the copy kernel */
	if (mode == PHX_STREAM_WAIT_COPY &&
	    (!dev->ops->stream_write_value || !dev->ops->feed_launch))
		mode = PHX_STREAM_WAIT_DEVICE;
	if (mode == PHX_STREAM_WAIT_DEVICE && !dev->ops->stream_wait_value)
		return PHX_STREAM_WAIT_HOST;
	return mode;
}

int phx_stream_device_open(struct phx_device *dev)
{
	enum phx_stream_wait mode = phx_stream_mode(dev);
	int ret = phx_pool_create(dev, phx_stream_modes, mode);

	if (ret)
		return ret;
	/*
	 * Now, not on the device's set-up thread: loading a kernel waits
	 * for the GPU to finish what is queued, so a load still running
	 * when a caller's stream waits on the host (a flag the caller sets
	 * once our enqueue returns) would hold up the first stream-ordered
	 * transfer for ever.  A failure is reported by the first launch,
	 * which tries again.
	 */
	if ((mode == PHX_STREAM_WAIT_KERNEL || mode == PHX_STREAM_WAIT_COPY) &&
	    dev->ops->kernels_load && dev->ops->kernels_load(dev))
		phx_err_clear();
	return 0;
}

PHX_EXPORT int phx_io_enqueue(struct phx_stream *stream, enum phx_op op, int fd,
			      phx_dptr_t dptr, const uint64_t *len,
			      const int64_t *file_off, const int64_t *buf_off,
			      int64_t *bytes_done)
{
	struct phx_device *dev = stream->dev;
	struct phx_stream_pool *w = dev->streams;
	struct phx_stream_req *r;
	const struct phx_stream_mode *mode;
	int ret;

	if (op != PHX_OP_READ && op != PHX_OP_WRITE)
		return phx_err(EINVAL, "unknown transfer op %d", (int)op);
	if (!len || !file_off || !buf_off || !bytes_done)
		return phx_err(
			EFAULT,
			"stream-ordered transfer: a parameter pointer is NULL");
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return phx_err(ENOMEM, "out of host memory");
	*r = (struct phx_stream_req){
		.dev = dev,
		.op = op,
		.fd = fd,
		.dptr = dptr,
		.len = len,
		.file_off = file_off,
		.buf_off = buf_off,
		.bytes_done = bytes_done,
	};
	ret = phx_pool_reserve(dev, w);
	if (ret) {
		free(r);
		return ret;
	}
	mode = phx_stream_modes[w->mode];
	r->mode = mode;
	ret = mode->enqueue(stream, w, r);
	if (ret == 1) {
		/* not this mode's: its fallback queues it, @r untouched */
		mode = phx_stream_modes[mode->fallback];
		r->mode = mode;
		ret = mode->enqueue(stream, w, r);
	}
	return ret;
}

void phx_stream_device_close(struct phx_device *dev)
{
	phx_pool_destroy(dev);
}
