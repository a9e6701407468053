/* SPDX-License-Identifier: MIT */
/*
 * worker.c - the device's transfer workers, below the stream modes
 * (host.c, device.c, kernel.c, copy.c): the threads, each with its
 * engine, that serve what the modes give them; the queue of requests
 * the host and device modes hand over; the flags and control blocks a
 * device's queued transfers hold; the host memory the device reads and
 * writes.  A worker calls a mode only through its struct
 * phx_stream_mode, handed down when the pool is made.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "stream_i.h"

/* The end of a transfer's life: its flag or control block back, one less queued. */
void phx_pool_release_locked(struct phx_stream_pool *w,
			     struct phx_stream_req *r)
{
	phx_assert_held(&w->lock);
	if (r->flag && !r->keep_flag)
		w->free_flags[w->nfree_flags++] =
			(uint32_t)(r->flag - w->flags);
	if (r->ctl)
		w->free_flags[w->nfree_flags++] = r->ctl_index;
	w->outstanding--;
	pthread_cond_broadcast(&w->done);
}

/*
 * Host memory the device reads and writes: @len bytes, zeroed, at *@out,
 * and at *@daddr for the device.  On the caller's thread, before any
 * transfer of ours is queued (pinning waits for host functions on CUDA).
 */
int phx_mapped_alloc(struct phx_device *dev, size_t len, void **out,
		     uint64_t *daddr)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	int ret = 0;

	if (p == MAP_FAILED)
		return phx_err(ENOMEM, "%s: out of host memory for stream work",
			       dev->name);
	if (dev->ops->host_map)
		ret = dev->ops->host_map(dev, p, len, daddr);
	else
		*daddr = (uintptr_t)p;
	if (ret) {
		munmap(p, len);
		return ret;
	}
	*out = p;
	return 0;
}

/*
 * A mode's PHX_STREAM_FLAGS entries of @size bytes each (the device
 * mode's flags, the kernel mode's control blocks), mapped as
 * phx_mapped_alloc() maps; every one free from then on, lowest index
 * first out.  The caller holds spawn_lock.
 */
int phx_pool_map_entries(struct phx_device *dev, struct phx_stream_pool *w,
			 size_t size, void **out, uint64_t *daddr)
{
	int ret = phx_mapped_alloc(dev, PHX_STREAM_FLAGS * size, out, daddr);

	if (ret)
		return ret;
	pthread_mutex_lock(&w->lock);
	for (unsigned int i = 0; i < PHX_STREAM_FLAGS; i++)
		w->free_flags[i] = PHX_STREAM_FLAGS - 1 - i;
	w->nfree_flags = PHX_STREAM_FLAGS;
	pthread_mutex_unlock(&w->lock);
	return 0;
}

void phx_mapped_free(struct phx_device *dev, void *p, size_t len)
{
	if (!p)
		return;
	if (dev->ops->host_unmap)
		dev->ops->host_unmap(dev, p);
	munmap(p, len);
}

/* A free flag (or control block) index, or -EBUSY when all are in use. */
int phx_pool_take(struct phx_device *dev, struct phx_stream_pool *w,
		  unsigned int *index)
{
	pthread_mutex_lock(&w->lock);
	if (!w->nfree_flags) {
		pthread_mutex_unlock(&w->lock);
		return phx_err(
			EBUSY,
			"%s: %d stream-ordered transfers already queued; wait for some to finish",
			dev->name, PHX_STREAM_FLAGS);
	}
	*index = w->free_flags[--w->nfree_flags];
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* Each mode's turn, the copy mode's first; whether anything moved. */
static bool pool_poll_locked(struct phx_stream_thread *t,
			     struct phx_stream_req **claimed)
{
	const struct phx_stream_mode *const *modes = t->w->modes;
	bool moved = false;

	phx_assert_held(&t->w->lock);

	*claimed = NULL;
	for (unsigned int m = PHX_STREAM_MODES; m-- > 0 && !*claimed;)
		if (modes[m]->poll_locked)
			moved |= modes[m]->poll_locked(t, claimed);
	return moved;
}

/* Whether a mode waits for streams to get somewhere: poll, not sleep. */
static bool pool_waiting_locked(const struct phx_stream_thread *t)
{
	const struct phx_stream_mode *const *modes = t->w->modes;

	phx_assert_held(&t->w->lock);

	for (unsigned int m = 0; m < PHX_STREAM_MODES; m++)
		if (modes[m]->waiting_locked && modes[m]->waiting_locked(t))
			return true;
	return false;
}

/*
 * A worker: serves the transfers its modes have for it (its ring's in
 * copy mode, reached ones in kernel mode, queued ones in the others),
 * whichever its stream got to first; it never commits to another mode's transfer its
 * stream has not reached, so no transfer waits for a thread busy on
 * another one.
 */
static void *pool_main(void *arg)
{
	struct phx_stream_thread *t = arg;
	struct phx_stream_pool *w = t->w;
	struct phx_stream_req *r;
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
				phx_queue_pop(w->head, w->tail);
				break;
			}
			moved = pool_poll_locked(t, &r);
			if (r)
				break;
			if (moved) {
				polls = 0;
				continue;
			}
			if (w->head || w->stop)
				continue;
			if (!pool_waiting_locked(t)) {
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

		r->mode->run(t, r);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int phx_stream_range_check(uint64_t len, int64_t file_off, int64_t buf_off)
{
	if (file_off < 0 || buf_off < 0 || len > INT64_MAX ||
	    (uint64_t)file_off > INT64_MAX - len ||
	    (uint64_t)buf_off > INT64_MAX - len)
		return phx_err(
			EINVAL,
			"stream-ordered transfer of %llu bytes at file offset %lld, buffer offset %lld: invalid range",
			(unsigned long long)len, (long long)file_off,
			(long long)buf_off);
	return 0;
}

/*
 * Serve @r on @t's engine, the values read now, and let its stream go on
 * (the host and device modes, whose requests come through the queue).
 */
void phx_pool_serve(struct phx_stream_thread *t, struct phx_stream_req *r)
{
	struct phx_stream_pool *w = t->w;
	struct phx_io io = {
		.op = r->op,
		.fd = r->fd,
		.file_off = *r->file_off,
		.dptr = r->dptr + (uint64_t)*r->buf_off,
		.len = *r->len,
	};

	io.result = phx_stream_range_check(io.len, io.file_off, *r->buf_off);
	if (!io.result)
		phx_engine_io(t->engine, &io);
	*r->bytes_done = io.result;
	/* the stream may move on now */
	if (r->flag)
		phx_word_store(r->flag, 1);

	pthread_mutex_lock(&w->lock);
	r->done = true;
	pthread_cond_broadcast(&w->done);
	if (r->orphan) {
		phx_pool_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
		return;
	}
	pthread_mutex_unlock(&w->lock);
}

int phx_pool_create(struct phx_device *dev,
		    const struct phx_stream_mode *const *modes,
		    enum phx_stream_wait mode)
{
	struct phx_stream_pool *w = calloc(1, sizeof(*w));

	if (!w)
		return phx_err(ENOMEM, "%s: out of host memory for its streams",
			       dev->name);
	pthread_mutex_init(&w->lock, NULL);
	pthread_mutex_init(&w->spawn_lock, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->done, NULL);
	w->dev = dev;
	w->modes = modes;
	w->mode = mode;
	dev->streams = w;
	return 0;
}

/* Start one more worker with its own engine (on the caller's thread). */
static int pool_spawn(struct phx_device *dev, struct phx_stream_pool *w,
		      unsigned int index)
{
	const struct phx_settings *s = phx_settings();
	const struct phx_stream_mode *m = w->modes[w->mode];
	struct phx_stream_thread *t = &w->threads[index];
	size_t staging;
	int ret;

	/*
	 * The workers share one engine's worth of staging between them (in
	 * copy mode the rings do: the mode says what its workers need).
	 */
	if (m->thread_start) {
		ret = m->thread_start(dev, t, index);
	} else {
		staging = phx_max(s->staging_size / PHX_STREAM_WORKERS,
				  s->chunk_size);
		ret = phx_engine_new(dev, staging, &t->engine);
	}
	t->w = w;
	if (!ret) {
		ret = pthread_create(&t->thread, NULL, pool_main, t);
		if (ret)
			ret = phx_err(ret,
				      "%s: cannot start a transfer thread: %s",
				      dev->name, strerror(ret));
	}
	if (ret) {
		if (m->thread_undo)
			m->thread_undo(dev, t);
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

void phx_pool_unreserve(struct phx_stream_pool *w, struct phx_stream_req *r)
{
	pthread_mutex_lock(&w->lock);
	w->outstanding--;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

/*
 * Count one more queued transfer.  The first one starts every worker, so
 * that building their engines (which pins staging memory, and on CUDA
 * waits for host functions) never happens while transfers of ours are
 * queued on a stream: a driver call that waits for the stream then could
 * block the very copies the stream is waiting for.  For the same reason
 * it waits for the device's set-up thread first (its pinning and first
 * engine; the copy kernel is loaded before the open returns, see
 * phx_stream_device_open()).  Fails only when no worker at all
 * could be started.
 */
int phx_pool_reserve(struct phx_device *dev, struct phx_stream_pool *w)
{
	unsigned int i, started;
	int ret = 0;

	pthread_mutex_lock(&w->spawn_lock);
	pthread_mutex_lock(&w->lock);
	started = w->nthreads; /* only changed under spawn_lock */
	pthread_mutex_unlock(&w->lock);
	if (!started && phx_device_prepare(dev))
		phx_err_clear(); /* the workers pin their own staging */
	for (i = started; !started && i < PHX_STREAM_WORKERS; i++) {
		ret = pool_spawn(dev, w, i);
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
void phx_pool_queue_locked(struct phx_stream_pool *w, struct phx_stream_req *r)
{
	phx_assert_held(&w->lock);
	phx_queue_push(w->head, w->tail, r);
	pthread_cond_signal(&w->work);
}

void phx_pool_destroy(struct phx_device *dev)
{
	struct phx_stream_pool *w = dev->streams;
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
	for (i = 0; i < PHX_STREAM_MODES; i++)
		if (w->modes[i]->stop)
			w->modes[i]->stop(w);
	for (i = 0; i < w->nthreads; i++)
		if (w->threads[i].engine)
			phx_engine_destroy(w->threads[i].engine);
	for (i = 0; i < PHX_STREAM_MODES; i++)
		if (w->modes[i]->teardown)
			w->modes[i]->teardown(dev, w);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->spawn_lock);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	free(w);
	dev->streams = NULL;
}
