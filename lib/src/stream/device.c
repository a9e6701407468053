/* SPDX-License-Identifier: MIT */
/*
 * device.c - PHX_STREAM_WAIT=device (the default on phx.ko, whose streams
 * are synchronous): a host function queues the transfer and returns; the
 * stream waits until a flag in mapped host memory turns nonzero
 * (cuStreamWaitValue32), which the worker sets when the transfer is
 * done; a last host function returns the flag.  The worker calls the
 * driver while the stream waits.
 */
#include <stdlib.h>

#include "stream_i.h"

/* "device" mode, on the stream: hand the request over and return. */
static void device_start_fn(void *arg)
{
	struct phx_stream_req *r = arg;
	struct phx_stream_pool *w = r->dev->streams;

	pthread_mutex_lock(&w->lock);
	phx_pool_queue_locked(w, r);
	pthread_mutex_unlock(&w->lock);
}

/*
 * "device" mode, on the stream after the flag: the transfer is done; wait
 * only for the worker's last few instructions after it set the flag.
 */
static void device_release_fn(void *arg)
{
	struct phx_stream_req *r = arg;
	struct phx_stream_pool *w = r->dev->streams;

	pthread_mutex_lock(&w->lock);
	while (!r->done)
		pthread_cond_wait(&w->done, &w->lock);
	phx_pool_release_locked(w, r);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

/* "device" mode: the flags, made and mapped once (on the caller's thread). */
static int device_flags(struct phx_device *dev, struct phx_stream_pool *w)
{
	void *flags;
	int ret = 0;

	pthread_mutex_lock(&w->spawn_lock);
	if (!w->flags) {
		ret = phx_pool_map_entries(dev, w, sizeof(*w->flags), &flags,
					   &w->flags_daddr);
		if (!ret)
			w->flags = flags;
	}
	pthread_mutex_unlock(&w->spawn_lock);
	return ret;
}

/* A cleared flag for @r, or -EBUSY when every one is in use. */
static int device_flag_get(struct phx_device *dev, struct phx_stream_pool *w,
			   struct phx_stream_req *r)
{
	unsigned int i = 0;
	int ret = phx_pool_take(dev, w, &i);

	if (ret)
		return ret;
	r->flag = &w->flags[i];
	*r->flag = 0;
	return 0;
}

/*
 * "device" mode: queue start, wait and release on the stream.  Once the
 * start is queued the transfer will run; if what follows cannot be queued
 * the worker returns the flag itself, and a failed wait is reported (the
 * transfer is then not ordered before later work).
 */
static int device_queue(struct phx_stream *stream, struct phx_stream_pool *w,
			struct phx_stream_req *r)
{
	struct phx_device *dev = stream->dev;
	int ret, wait;

	ret = dev->ops->launch_host_fn(dev, stream->native, device_start_fn, r);
	if (ret) {
		pthread_mutex_lock(&w->lock);
		phx_pool_release_locked(w, r);
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
					      device_release_fn, r);
	if (!ret)
		return 0;
	pthread_mutex_lock(&w->lock);
	r->orphan = true;
	/* one flag of PHX_STREAM_FLAGS lost, on a path that should not run */
	r->keep_flag = !wait;
	if (r->done) {
		phx_pool_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
	} else {
		pthread_mutex_unlock(&w->lock);
	}
	if (!wait)
		phx_err_clear(); /* ordered and done; only the cleanup moved */
	return wait;
}

static int device_enqueue(struct phx_stream *stream, struct phx_stream_pool *w,
			  struct phx_stream_req *r)
{
	struct phx_device *dev = stream->dev;
	int ret = device_flags(dev, w);

	if (!ret)
		ret = device_flag_get(dev, w, r);
	if (ret) {
		phx_pool_unreserve(w, r);
		return ret;
	}
	return device_queue(stream, w, r);
}

static void device_teardown(struct phx_device *dev, struct phx_stream_pool *w)
{
	phx_mapped_free(dev, w->flags, PHX_STREAM_FLAGS * sizeof(uint32_t));
}

const struct phx_stream_mode phx_stream_device = {
	.enqueue = device_enqueue,
	.run = phx_pool_serve,
	.teardown = device_teardown,
};
