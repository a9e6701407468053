/* SPDX-License-Identifier: MIT */
/*
 * host.c - PHX_STREAM_WAIT=host: a host function on the stream hands the
 * transfer to a worker and waits for it.  CUDA documents that a host
 * function must not wait for other CUDA work, and on CUDA 13 it goes
 * wrong: while it waits, cuMemHostRegister() in any thread waits for it
 * (so each worker's engine - pinned staging, streams, events - is built
 * on the caller's thread before anything is queued), and a thread inside
 * cuStreamSynchronize() on the held stream was seen to keep a lock that
 * the worker's next copy needed.  phx_stream_sync() polls an event for
 * that reason.
 */
#include <stdlib.h>

#include "stream_i.h"

/* "host" mode, on the stream: hand the request over and wait for it. */
static void host_fn(void *arg)
{
	struct phx_stream_req *r = arg;
	struct phx_stream_pool *w = r->dev->streams;

	pthread_mutex_lock(&w->lock);
	phx_pool_queue_locked(w, r);
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	/* the last use of @w: phx_pool_destroy() waits for this */
	phx_pool_release_locked(w, r);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

static int host_enqueue(struct phx_stream *stream, struct phx_stream_pool *w,
			struct phx_stream_req *r)
{
	struct phx_device *dev = stream->dev;
	int ret = dev->ops->launch_host_fn(dev, stream->native, host_fn, r);

	if (ret)
		phx_pool_unreserve(w, r);
	return ret;
}

const struct phx_stream_mode phx_stream_host = {
	.enqueue = host_enqueue,
	.run = phx_pool_serve,
};
