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
 *  - copy (the default on CUDA and sim; ring.c): for a stream whose
 *    values are fixed when queued (PHX_STREAM_FIXED), the transfer's own
 *    copy-engine copies go on the stream between waits on words of
 *    mapped host memory that a worker sets as its engine fills a ring of
 *    slots (sink.c).  No host function, no kernel, and no driver call by
 *    the worker while the stream waits.  Other transfers take the copy
 *    kernel.
 *
 *  - kernel (feed.c): a copy kernel on the stream says when the stream
 *    reached it, and the worker feeds it through mapped host memory
 *    without calling the driver (feed.h); the values are read then, as
 *    cuFile does for streams without its FIXED flags.
 *
 *  - device (the default on phx.ko, whose streams are synchronous): a
 *    host function queues the transfer and returns; the stream waits
 *    until a flag in mapped host memory turns nonzero
 *    (cuStreamWaitValue32), which the worker sets when the transfer is
 *    done; a last host function returns the flag.  The worker calls the
 *    driver while the stream waits.
 *
 *  - host: the host function waits for the worker.  CUDA documents that a
 *    host function must not wait for other CUDA work, and on CUDA 13 it
 *    goes wrong: while it waits, cuMemHostRegister() in any thread waits
 *    for it (so each worker's engine - pinned staging, streams, events -
 *    is built on the caller's thread before anything is queued), and a
 *    thread inside cuStreamSynchronize() on the held stream was seen to
 *    keep a lock that the worker's next copy needed.  phx_stream_sync()
 *    polls an event for that reason.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stream_i.h"

PHX_EXPORT int phx_stream_create(struct phx_device *dev,
				 struct phx_stream **out)
{
	struct phx_stream *s;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	s = calloc(1, sizeof(*s));
	if (!s)
		return phx_err(ENOMEM, "out of host memory for a stream");
	ret = dev->ops->stream_create(dev, &s->native);
	if (ret) {
		free(s);
		return ret;
	}
	s->dev = dev;
	s->owned = true;
	*out = s;
	return 0;
}

PHX_EXPORT int phx_stream_wrap(struct phx_device *dev, void *native,
			       struct phx_stream **out)
{
	struct phx_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return phx_err(ENOMEM, "out of host memory for a stream");
	s->dev = dev;
	s->native = native ? native : dev->ops->stream_default(dev);
	*out = s;
	return 0;
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

/* ---- the device's transfer workers --------------------------------- */

/*
 * A worker: serves its ring's transfers (copy mode, ring.c) and any
 * device's queued or reached transfers of the other modes, whichever its
 * stream got to first; it never commits to another mode's transfer its
 * stream has not reached, so no transfer waits for a thread busy on
 * another one.
 */
static void *async_main(void *arg)
{
	struct async_thread *t = arg;
	struct phx_async_worker *w = t->w;
	struct async_req *r;
	unsigned int polls = 0;
	bool moved;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phx-stream");
	pthread_mutex_lock(&w->lock);
	for (;;) {
		r = NULL;
		while (!w->stop) {
			if (w->head) {
				r = w->head;
				w->head = r->next;
				if (!w->head)
					w->tail = NULL;
				break;
			}
			moved = false;
			if (t->ring_passing)
				phx_ring_reap_locked(t);
			if (t->words && phx_ring_busy_locked(t))
				moved = phx_ring_pump_locked(t);
			if (t->words)
				phx_ring_grow_locked(w, t);
			r = phx_feed_claim_locked(w);
			if (r)
				break;
			if (moved) {
				polls = 0;
				continue;
			}
			if (w->head || w->stop)
				continue;
			if (!w->feed_head && !phx_ring_busy_locked(t) &&
			    !t->ring_passing) {
				pthread_cond_wait(&w->work, &w->lock);
				continue;
			}
			/* waiting for streams to get somewhere: look again soon */
			pthread_mutex_unlock(&w->lock);
			phx_poll_backoff(polls++);
			pthread_mutex_lock(&w->lock);
		}
		if (!r)
			break;
		polls = 0;
		pthread_mutex_unlock(&w->lock);

		if (r->ctl) {
			phx_feed_run(t, r);
			pthread_mutex_lock(&w->lock);
			continue;
		}
		struct phx_io io = {
			.op = r->op,
			.fd = r->fd,
			.file_off = *r->file_off,
			.dptr = r->dptr + (uint64_t)*r->buf_off,
			.len = *r->len,
		};
		if (*r->buf_off < 0)
			io.result =
				phx_err(EINVAL, "negative buffer offset %lld",
					(long long)*r->buf_off);
		else
			phx_engine_io(t->engine, &io);
		*r->bytes_done = io.result;
		/* the stream may move on now */
		if (r->flag)
			phx_word_store(r->flag, 1);

		pthread_mutex_lock(&w->lock);
		r->done = true;
		pthread_cond_broadcast(&w->done);
		if (r->orphan) {
			phx_async_release_locked(w, r);
			pthread_mutex_unlock(&w->lock);
			free(r);
			pthread_mutex_lock(&w->lock);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static int async_get(struct phx_device *dev, struct phx_async_worker **out)
{
	struct phx_async_worker *w;

	pthread_mutex_lock(&dev->async_lock);
	w = dev->async;
	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w) {
			pthread_mutex_unlock(&dev->async_lock);
			return phx_err(ENOMEM, "out of host memory");
		}
		pthread_mutex_init(&w->lock, NULL);
		pthread_mutex_init(&w->spawn_lock, NULL);
		pthread_cond_init(&w->work, NULL);
		pthread_cond_init(&w->done, NULL);
		w->dev = dev;
		dev->async = w;
	}
	pthread_mutex_unlock(&dev->async_lock);
	*out = w;
	return 0;
}

/* Start one more worker with its own engine (on the caller's thread). */
static int async_spawn(struct phx_device *dev, struct phx_async_worker *w,
		       unsigned int index)
{
	const struct phx_settings *s = phx_settings();
	struct async_thread *t = &w->threads[index];
	size_t staging;
	int ret;

	/*
	 * The workers share one engine's worth of staging between them: in
	 * copy mode the rings do; the other workers serve the copy kernel,
	 * which has rings of its own, and need none.
	 */
	if (phx_stream_mode(dev) != PHX_STREAM_WAIT_COPY) {
		staging = phx_max(s->staging_size / PHX_ASYNC_WORKERS,
				  s->chunk_size);
		ret = phx_engine_new(dev, staging, &t->engine);
	} else if (index < s->stream_rings) {
		/* slots of 64 KiB at least, whatever PHX_STAGING_SIZE says */
		staging = phx_max(s->staging_size / s->stream_rings,
				  PHX_RING_SLOTS * (64u << 10));
		ret = phx_ring_start(dev, t, staging);
	} else {
		ret = 0;
	}
	t->w = w;
	if (!ret) {
		ret = pthread_create(&t->thread, NULL, async_main, t);
		if (ret)
			ret = phx_err(ret,
				      "%s: cannot start a transfer thread: %s",
				      dev->name, strerror(ret));
	}
	if (ret) {
		phx_ring_teardown_one(dev, t);
		if (t->engine)
			phx_engine_destroy(t->engine);
		t->engine = NULL;
		return ret;
	}
	pthread_mutex_lock(&w->lock);
	w->nthreads++;
	pthread_mutex_unlock(&w->lock);
	return 0;
}

static void async_unreserve(struct phx_async_worker *w)
{
	pthread_mutex_lock(&w->lock);
	w->outstanding--;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
}

/*
 * Count one more queued transfer.  The first one starts every worker, so
 * that building their engines (which pins staging memory, and on CUDA
 * waits for host functions) never happens while transfers of ours are
 * queued on a stream: a driver call that waits for the stream then could
 * block the very copies the stream is waiting for.  Fails only when no
 * worker at all could be started.
 */
static int async_reserve(struct phx_device *dev, struct phx_async_worker *w)
{
	unsigned int i, started;
	int ret = 0;

	pthread_mutex_lock(&w->spawn_lock);
	pthread_mutex_lock(&w->lock);
	started = w->nthreads; /* only changed under spawn_lock */
	pthread_mutex_unlock(&w->lock);
	for (i = started; !started && i < PHX_ASYNC_WORKERS; i++) {
		ret = async_spawn(dev, w, i);
		if (ret)
			break;
	}
	if (i && ret) {
		ret = 0; /* the workers that started serve everything */
		phx_err_clear();
	}
	if (!ret) {
		pthread_mutex_lock(&w->lock);
		w->outstanding++;
		pthread_mutex_unlock(&w->lock);
	}
	pthread_mutex_unlock(&w->spawn_lock);
	return ret;
}

/* Hand @r to the workers; the caller holds w->lock. */
static void async_queue_locked(struct phx_async_worker *w, struct async_req *r)
{
	if (w->tail)
		w->tail->next = r;
	else
		w->head = r;
	w->tail = r;
	pthread_cond_signal(&w->work);
}

/* "device" mode, on the stream: hand the request over and return. */
static void async_start_fn(void *arg)
{
	struct async_req *r = arg;
	struct phx_async_worker *w = r->dev->async;

	pthread_mutex_lock(&w->lock);
	async_queue_locked(w, r);
	pthread_mutex_unlock(&w->lock);
}

/*
 * "device" mode, on the stream after the flag: the transfer is done; wait
 * only for the worker's last few instructions after it set the flag.
 */
static void async_release_fn(void *arg)
{
	struct async_req *r = arg;
	struct phx_async_worker *w = r->dev->async;

	pthread_mutex_lock(&w->lock);
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	phx_async_release_locked(w, r);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

/* "host" mode, on the stream: hand the request over and wait for it. */
static void async_host_fn(void *arg)
{
	struct async_req *r = arg;
	struct phx_async_worker *w = r->dev->async;

	pthread_mutex_lock(&w->lock);
	async_queue_locked(w, r);
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	/* the last use of @w: phx_stream_device_close() waits for this */
	phx_async_release_locked(w, r);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

/* "device" mode: the flags, made and mapped once (on the caller's thread). */
static int async_flags(struct phx_device *dev, struct phx_async_worker *w)
{
	void *flags;
	int ret = 0;

	pthread_mutex_lock(&w->spawn_lock);
	if (w->flags)
		goto out;
	ret = phx_mapped_alloc(dev, PHX_ASYNC_FLAGS * sizeof(uint32_t), &flags,
			       &w->flags_daddr);
	if (ret)
		goto out;
	pthread_mutex_lock(&w->lock);
	phx_async_free_all_locked(w);
	w->flags = flags;
	pthread_mutex_unlock(&w->lock);
out:
	pthread_mutex_unlock(&w->spawn_lock);
	return ret;
}

/* A cleared flag for @r, or -EBUSY when every one is in use. */
static int async_flag_get(struct phx_device *dev, struct phx_async_worker *w,
			  struct async_req *r)
{
	unsigned int i = 0;
	int ret = phx_async_take(dev, w, &i);

	if (ret)
		return ret;
	r->flag = &w->flags[i];
	*r->flag = 0;
	return 0;
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

void phx_stream_device_open(struct phx_device *dev)
{
	/* A failure is reported by the first launch, which tries again. */
	enum phx_stream_wait mode = phx_stream_mode(dev);

	if ((mode == PHX_STREAM_WAIT_KERNEL || mode == PHX_STREAM_WAIT_COPY) &&
	    dev->ops->feed_load && dev->ops->feed_load(dev))
		phx_err_clear();
}

/*
 * "device" mode: queue start, wait and release on the stream.  Once the
 * start is queued the transfer will run; if what follows cannot be queued
 * the worker returns the flag itself, and a failed wait is reported (the
 * transfer is then not ordered before later work).
 */
static int enqueue_on_device(struct phx_stream *stream,
			     struct phx_async_worker *w, struct async_req *r)
{
	struct phx_device *dev = stream->dev;
	int ret, wait;

	ret = dev->ops->launch_host_fn(dev, stream->native, async_start_fn, r);
	if (ret) {
		pthread_mutex_lock(&w->lock);
		phx_async_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
		return ret;
	}
	wait = dev->ops->stream_wait_value(
		dev, stream->native, r->flag,
		w->flags_daddr +
			(uint64_t)(r->flag - w->flags) * sizeof(*r->flag),
		1);
	ret = wait ? wait :
		     dev->ops->launch_host_fn(dev, stream->native,
					      async_release_fn, r);
	if (!ret)
		return 0;
	pthread_mutex_lock(&w->lock);
	r->orphan = true;
	/* one flag of PHX_ASYNC_FLAGS lost, on a path that should not run */
	r->keep_flag = !wait;
	if (r->done) {
		phx_async_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
	} else {
		pthread_mutex_unlock(&w->lock);
	}
	if (!wait)
		phx_err_clear(); /* ordered and done; only the cleanup moved */
	return wait;
}

PHX_EXPORT int phx_io_enqueue(struct phx_stream *stream, enum phx_op op, int fd,
			      phx_dptr_t dptr, const uint64_t *len,
			      const int64_t *file_off, const int64_t *buf_off,
			      int64_t *bytes_done)
{
	struct phx_device *dev = stream->dev;
	struct phx_async_worker *w = NULL;
	struct async_req *r;
	enum phx_stream_wait mode;
	int ret;

	if (op != PHX_OP_READ && op != PHX_OP_WRITE)
		return phx_err(EINVAL, "unknown transfer op %d", (int)op);
	if (!len || !file_off || !buf_off || !bytes_done)
		return phx_err(
			EFAULT,
			"stream-ordered transfer: a parameter pointer is NULL");
	ret = async_get(dev, &w);
	if (ret)
		return ret;
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return phx_err(ENOMEM, "out of host memory");
	*r = (struct async_req){
		.dev = dev,
		.op = op,
		.fd = fd,
		.dptr = dptr,
		.len = len,
		.file_off = file_off,
		.buf_off = buf_off,
		.bytes_done = bytes_done,
	};
	ret = async_reserve(dev, w);
	if (ret) {
		free(r);
		return ret;
	}
	mode = phx_stream_mode(dev);
	if (mode == PHX_STREAM_WAIT_COPY) {
		ret = phx_ring_enqueue(stream, w, r);
		if (ret <= 0)
			return ret; /* queued, or failed: @r is the ring's either way */
		mode = PHX_STREAM_WAIT_KERNEL; /* values read later */
	}
	if (mode == PHX_STREAM_WAIT_KERNEL) {
		ret = phx_feed_setup(dev, w);
		if (!ret)
			ret = phx_feed_enqueue(stream, w, r);
		if (ret) {
			async_unreserve(w);
			free(r);
		}
		return ret;
	}
	if (mode == PHX_STREAM_WAIT_DEVICE) {
		ret = async_flags(dev, w);
		if (!ret)
			ret = async_flag_get(dev, w, r);
		if (ret) {
			async_unreserve(w);
			free(r);
			return ret;
		}
		return enqueue_on_device(stream, w, r);
	}
	ret = dev->ops->launch_host_fn(dev, stream->native, async_host_fn, r);
	if (ret) {
		async_unreserve(w);
		free(r);
	}
	return ret;
}

void phx_stream_device_close(struct phx_device *dev)
{
	struct phx_async_worker *w = dev->async;
	unsigned int i;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	/* Transfers still queued on streams: let their streams reach them. */
	while (w->outstanding)
		pthread_cond_wait(&w->done, &w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->work);
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i].thread, NULL);
	phx_ring_grow_stop(w);
	for (i = 0; i < w->nthreads; i++)
		if (w->threads[i].engine)
			phx_engine_destroy(w->threads[i].engine);
	phx_feed_teardown(dev, w, w->ctls);
	phx_ring_teardown(dev, w);
	phx_mapped_free(dev, w->flags, PHX_ASYNC_FLAGS * sizeof(uint32_t));
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->spawn_lock);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	free(w);
	dev->async = NULL;
}
