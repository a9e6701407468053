/* SPDX-License-Identifier: MIT */
/*
 * stream.c - device streams and stream-ordered transfers.
 *
 * phx_io_enqueue() places a host function on the stream.  When the stream
 * reaches it, the function hands the transfer to the device's async
 * workers and waits for it; work queued after it on the stream waits in
 * turn.  The transfer's parameters are read only then, which is what
 * cuFile's and LMCache's callers rely on.
 *
 * A host function may not call the driver, hence the workers.  And while
 * one runs, the driver refuses its exclusive lock to everyone: on CUDA 13
 * cuMemHostRegister() waits until the host function returns.  So a worker
 * must never pin memory or make streams while it serves a host function:
 * each worker owns an engine (pinned staging, streams, events), built on
 * the caller's thread inside phx_io_enqueue(), before anything is queued,
 * and during a transfer it only copies and waits for events.
 *
 * Even so, the worker's copies can wait on the driver: a thread inside
 * cuStreamSynchronize() on the held stream was seen (CUDA 13) to keep a
 * lock that the worker's cuMemcpyHtoDAsync() needed, and neither moved.
 * phx_stream_sync() therefore polls an event.  A caller that synchronizes
 * the stream with the driver directly can still hang this way; the cure
 * is a host function that never waits (docs/architecture.md).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define PHX_ASYNC_WORKERS 4

struct phx_stream {
	struct phx_device *dev;
	void *native;
	bool owned;
};

struct async_req {
	struct phx_device *dev;
	enum phx_op op;
	int fd;
	phx_dptr_t dptr;
	const uint64_t *len;
	const int64_t *file_off;
	const int64_t *buf_off;
	int64_t *bytes_done;
	bool done; /* protected by the worker lock */
	struct async_req *next;
};

struct async_thread {
	struct phx_async_worker *w;
	struct phx_engine *engine;
	pthread_t thread;
};

struct phx_async_worker {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct async_req *head, *tail; /* protected by lock */
	/* queued on a stream, host function not returned; protected by lock */
	unsigned int outstanding;
	unsigned int nthreads; /* protected by lock */
	bool stop;
	/* serialises starting threads; never taken by a host function */
	pthread_mutex_t spawn_lock;
	struct async_thread threads[PHX_ASYNC_WORKERS];
};

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

PHX_EXPORT void *phx_stream_native(struct phx_stream *s)
{
	return s->native;
}

/* Between polls: spin briefly, then yield, then sleep up to 50 us. */
static void poll_backoff(unsigned int n)
{
	struct timespec ts = { 0, 0 };

	if (n < 64)
		return;
	if (n < 256) {
		sched_yield();
		return;
	}
	ts.tv_nsec = n < 1024 ? 5000 : 50000;
	nanosleep(&ts, NULL);
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
		poll_backoff(n);
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

/* ---- async workers -------------------------------------------------- */

static void *async_main(void *arg)
{
	struct async_thread *t = arg;
	struct phx_async_worker *w = t->w;
	struct async_req *r;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->work, &w->lock);
		if (!w->head)
			break;
		r = w->head;
		w->head = r->next;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);

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

		pthread_mutex_lock(&w->lock);
		r->done = true;
		pthread_cond_broadcast(&w->done);
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

	/* The workers share one engine's worth of staging between them. */
	staging = phx_max(s->staging_size / PHX_ASYNC_WORKERS, s->chunk_size);
	ret = phx_engine_new(dev, staging, &t->engine);
	if (ret)
		return ret;
	t->w = w;
	ret = pthread_create(&t->thread, NULL, async_main, t);
	if (ret) {
		phx_engine_free(t->engine);
		t->engine = NULL;
		return phx_err(ret, "%s: cannot start a transfer thread: %s",
			       dev->name, strerror(ret));
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
 * Count one more queued transfer, and start a worker for it while there
 * are fewer workers than transfers waiting.  Fails only when no worker at
 * all could be started.
 */
static int async_reserve(struct phx_device *dev, struct phx_async_worker *w)
{
	unsigned int n;
	bool more;
	int ret = 0;

	pthread_mutex_lock(&w->spawn_lock);
	pthread_mutex_lock(&w->lock);
	w->outstanding++;
	n = w->nthreads;
	more = w->outstanding > n && n < PHX_ASYNC_WORKERS;
	pthread_mutex_unlock(&w->lock);
	if (more) {
		ret = async_spawn(dev, w, n);
		if (ret && n)
			ret = 0; /* the others will serve it */
	}
	pthread_mutex_unlock(&w->spawn_lock);
	if (ret)
		async_unreserve(w);
	return ret;
}

/* Runs on the stream: hand the request over and wait for it. */
static void async_host_fn(void *arg)
{
	struct async_req *r = arg;
	struct phx_async_worker *w = r->dev->async;

	pthread_mutex_lock(&w->lock);
	if (w->tail)
		w->tail->next = r;
	else
		w->head = r;
	w->tail = r;
	pthread_cond_signal(&w->work);
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	/* the last use of @w: phx_async_destroy() waits for this */
	w->outstanding--;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

PHX_EXPORT int phx_io_enqueue(struct phx_stream *stream, enum phx_op op, int fd,
			      phx_dptr_t dptr, const uint64_t *len,
			      const int64_t *file_off, const int64_t *buf_off,
			      int64_t *bytes_done)
{
	struct phx_device *dev = stream->dev;
	struct phx_async_worker *w = NULL;
	struct async_req *r;
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
	ret = dev->ops->launch_host_fn(dev, stream->native, async_host_fn, r);
	if (ret) {
		async_unreserve(w);
		free(r);
	}
	return ret;
}

void phx_async_destroy(struct phx_device *dev)
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
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < w->nthreads; i++) {
		pthread_join(w->threads[i].thread, NULL);
		phx_engine_free(w->threads[i].engine);
	}
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->spawn_lock);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	free(w);
	dev->async = NULL;
}
