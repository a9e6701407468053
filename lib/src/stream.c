/* SPDX-License-Identifier: MIT */
/*
 * stream.c - device streams and stream-ordered transfers.
 *
 * phx_io_enqueue() places a host function on the stream.  When the stream
 * reaches it, the function hands the transfer to the device's async
 * workers and waits for it; work queued after it on the stream waits in
 * turn.  The workers exist because a stream's host function may not call
 * the CUDA driver itself, while the transfer needs it.  The transfer's
 * parameters are read only then, which is what cuFile's and LMCache's
 * callers rely on.
 */
#include <stdlib.h>
#include <string.h>

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
	bool done;		/* protected by the worker lock */
	struct async_req *next;
};

struct phx_async_worker {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct async_req *head, *tail; /* protected by lock */
	pthread_t threads[PHX_ASYNC_WORKERS];
	unsigned int nthreads, idle;
	bool stop;
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

PHX_EXPORT int phx_stream_sync(struct phx_stream *s)
{
	int ret = phx_device_bind(s->dev);

	return ret ? ret : s->dev->ops->stream_sync(s->dev, s->native);
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
	struct phx_device *dev = arg;
	struct phx_async_worker *w = dev->async;
	struct async_req *r;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		w->idle++;
		while (!w->head && !w->stop)
			pthread_cond_wait(&w->work, &w->lock);
		w->idle--;
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
			io.result = phx_err(EINVAL, "negative buffer offset %lld",
					    (long long)*r->buf_off);
		else
			phx_io_run(dev, &io);
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
		pthread_cond_init(&w->work, NULL);
		pthread_cond_init(&w->done, NULL);
		dev->async = w;
	}
	pthread_mutex_unlock(&dev->async_lock);
	*out = w;
	return 0;
}

/* Runs on the stream: hand the request over and wait for it. */
static void async_host_fn(void *arg)
{
	struct async_req *r = arg;
	struct phx_async_worker *w = r->dev->async;

	pthread_mutex_lock(&w->lock);
	if (!w->idle && w->nthreads < PHX_ASYNC_WORKERS &&
	    !pthread_create(&w->threads[w->nthreads], NULL, async_main,
			    r->dev))
		w->nthreads++;
	if (w->tail)
		w->tail->next = r;
	else
		w->head = r;
	w->tail = r;
	pthread_cond_signal(&w->work);
	if (!w->nthreads) {
		/* no thread could start: report instead of hanging the stream */
		w->head = w->tail = NULL;
		*r->bytes_done = -EAGAIN;
		r->done = true;
	}
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

PHX_EXPORT int phx_io_enqueue(struct phx_stream *stream, enum phx_op op,
			      int fd, phx_dptr_t dptr, const uint64_t *len,
			      const int64_t *file_off, const int64_t *buf_off,
			      int64_t *bytes_done)
{
	struct phx_device *dev = stream->dev;
	struct phx_async_worker *w;
	struct async_req *r;
	int ret;

	if (op != PHX_OP_READ && op != PHX_OP_WRITE)
		return phx_err(EINVAL, "unknown transfer op %d", (int)op);
	if (!len || !file_off || !buf_off || !bytes_done)
		return phx_err(EFAULT, "stream-ordered transfer: a parameter pointer is NULL");
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
		.dev = dev, .op = op, .fd = fd, .dptr = dptr, .len = len,
		.file_off = file_off, .buf_off = buf_off,
		.bytes_done = bytes_done,
	};
	ret = dev->ops->launch_host_fn(dev, stream->native, async_host_fn, r);
	if (ret)
		free(r);
	return ret;
}

void phx_async_destroy(struct phx_device *dev)
{
	struct phx_async_worker *w = dev->async;
	unsigned int i;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);
	for (i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	free(w);
	dev->async = NULL;
}
