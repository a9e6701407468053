/* SPDX-License-Identifier: MIT */
/*
 * ring.c - stream-ordered transfers in PHX_STREAM_WAIT=copy, the default
 * on CUDA and the simulated device.
 *
 * Each worker thread owns an engine whose staging slots form a ring, and
 * the ring's words in mapped host memory (struct phx_ring_words).  When a
 * transfer is queued on a stream whose values are fixed (PHX_STREAM_FIXED),
 * it gets the least busy ring, a transfer number t and the next nsegs
 * sequence numbers q there, and phx_io_enqueue() puts on the stream:
 *
 *   store reached[t % PHX_RING_XFERS] = t
 *   for each segment (q, slot = q % nslots):
 *       wait ready[slot] >= q + 1
 *       copy slot <-> buffer        (the copy engine, as for phx_read())
 *       store freed[slot] = q + 1
 *   wait done >= t
 *   store passed[t % PHX_RING_XFERS] = t
 *
 * The worker sees reached, runs the transfer through its engine with the
 * ring as the job's sink (sink.c: file I/O into or out of the slots, in
 * sequence), writes bytes_done and stores done = t; the transfer counts
 * as queued until its stream stored passed, so the words are never
 * unmapped under a stream that still reads them.  It makes no driver
 * call while a stream waits on it, and nothing runs on the GPU's SMs.
 * A worker commits only to a transfer whose stream has reached it, so
 * transfers on one ring from several streams cannot wait on each other
 * in a cycle (a stream can only wait on work queued before it).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"

/* Segments past this go to the copy kernel (cyclic sequence numbers). */
#define PHX_RING_MAX_SEGS (1u << 24)

/* Slots of a ring's first engine: small, so they pin in no time. */
#define PHX_RING_FIRST_CHUNK (64u << 10)

int phx_ring_start(struct phx_device *dev, struct async_thread *t,
		   size_t staging)
{
	size_t first = (size_t)PHX_RING_SLOTS * PHX_RING_FIRST_CHUNK;
	void *p;
	int ret;

	if (staging <= 2 * first)
		first = staging;
	ret = phx_engine_new_ring(dev, first, PHX_RING_SLOTS, &t->engine);
	if (!ret)
		ret = phx_mapped_alloc(dev, sizeof(struct phx_ring_words), &p,
				       &t->words_daddr);
	if (ret)
		return ret;
	t->words = p;
	t->grow_to = first < staging ? staging : 0;
	return 0;
}

/*
 * The grower: build each small ring's full engine, one ring at a time
 * (enqueueing avoids a ring with a full engine waiting, so that it goes
 * idle), and free the small one once its worker swapped them.  It makes
 * driver calls that may wait for streams, so no one waits for it but
 * phx_async_destroy(), after every transfer is done; a ring whose full
 * engine cannot be built keeps its small one.
 */
static void *ring_grow_main(void *arg)
{
	struct phx_async_worker *w = arg;

	for (unsigned int i = 0; i < PHX_ASYNC_WORKERS; i++) {
		struct async_thread *t = &w->threads[i];
		struct phx_engine *e = NULL;
		size_t size;

		pthread_mutex_lock(&w->lock);
		size = w->stop ? 0 : t->grow_to;
		pthread_mutex_unlock(&w->lock);
		if (!size)
			continue;
		if (phx_engine_new_ring(w->dev, size, PHX_RING_SLOTS, &e)) {
			phx_err_clear(); /* slower, not wrong */
			continue;
		}
		pthread_mutex_lock(&w->lock);
		t->grown = e;
		pthread_cond_broadcast(&w->work);
		while (t->grown && !w->stop)
			pthread_cond_wait(&w->done, &w->lock);
		e = t->grown ? t->grown : t->retired;
		t->grown = t->retired = NULL;
		t->grow_to = 0;
		pthread_mutex_unlock(&w->lock);
		phx_engine_free(e);
	}
	return NULL;
}

void phx_ring_grow_locked(struct phx_async_worker *w, struct async_thread *t)
{
	if (t->grown && !t->ring_queued) {
		/* idle: every slot free, every stream past the words */
		t->retired = t->engine;
		t->engine = t->grown;
		t->grown = NULL;
		pthread_cond_broadcast(&w->done);
	}
	if (w->grow_started || !t->grow_to)
		return;
	/* a ring served a transfer: the process's first is done */
	if (!pthread_create(&w->grower, NULL, ring_grow_main, w))
		w->grow_started = true;
}

void phx_ring_grow_stop(struct phx_async_worker *w)
{
	if (w->grow_started)
		pthread_join(w->grower, NULL);
	w->grow_started = false;
}

void phx_ring_teardown_one(struct phx_device *dev, struct async_thread *t)
{
	phx_mapped_free(dev, t->words, sizeof(*t->words));
	t->words = NULL;
}

void phx_ring_teardown(struct phx_device *dev, struct phx_async_worker *w)
{
	for (unsigned int i = 0; i < PHX_ASYNC_WORKERS; i++)
		phx_ring_teardown_one(dev, &w->threads[i]);
}

/*
 * Whether @r can take the copy mode: values fixed by the stream's owner
 * and valid, a file the engine takes and, for reads, no byte past its
 * end (the stream's copies are whole segments; the copy kernel copies
 * what a short read brings).  Errors are left to the copy kernel's path,
 * which reports them through bytes_done as the API says.
 */
static bool ring_fits(struct phx_stream *stream, struct async_req *r)
{
	uint64_t len = *r->len, size;
	int64_t foff = *r->file_off, boff = *r->buf_off;

	if ((stream->flags & PHX_STREAM_FIXED) != PHX_STREAM_FIXED)
		return false;
	if (foff < 0 || boff < 0 || len > INT64_MAX ||
	    (uint64_t)foff > (uint64_t)INT64_MAX - len)
		return false;
	if (phx_fd_size(r->fd, &size)) {
		phx_err_clear(); /* the copy kernel's path reports it */
		return false;
	}
	if (r->op == PHX_OP_READ && (uint64_t)foff + len > size)
		return false;
	r->val_len = len;
	r->val_file_off = foff;
	r->val_buf_off = boff;
	return true;
}

/*
 * How busy ring @t is; one whose full engine waits to be swapped in
 * counts as busier than any other, so that it goes idle.
 */
static unsigned int ring_load(const struct async_thread *t)
{
	return t->ring_queued + (t->grown ? PHX_RING_XFERS : 0);
}

/* The least busy ring, or NULL when every one is full; w->lock held. */
static struct async_thread *ring_pick_locked(struct phx_async_worker *w)
{
	struct async_thread *best = NULL;

	for (unsigned int i = 0; i < w->nthreads; i++) {
		struct async_thread *t = &w->threads[i];

		if (t->words && (!best || ring_load(t) < ring_load(best)))
			best = t;
	}
	return best && best->ring_queued < PHX_RING_XFERS ? best : NULL;
}

#define WORD(t, f) ((t)->words_daddr + offsetof(struct phx_ring_words, f))

/* Put @r's part of the protocol (see the file header) on @stream. */
static int ring_queue_ops(struct phx_stream *stream, struct async_thread *t,
			  struct async_req *r, bool *reached, bool *passes)
{
	struct phx_device *dev = stream->dev;
	const struct phx_backend_ops *ops = dev->ops;
	struct phx_ring_words *wd = t->words;
	unsigned int x = r->t % PHX_RING_XFERS, nslots, k;
	bool pinned;
	uint64_t chunk;
	char *staging;
	int ret;

	phx_engine_ring(t->engine, &staging, &nslots, &chunk, &pinned);
	ret = ops->stream_write_value(dev, stream->native, &wd->reached[x],
				      WORD(t, reached) + x * sizeof(uint32_t),
				      r->t);
	if (ret)
		return ret;
	*reached = true;
	for (k = 0; k < r->nsegs; k++) {
		uint32_t q = r->seq + k;
		unsigned int i = q % nslots;
		uint64_t foff, len, off;
		char *slot = staging + (size_t)i * chunk;
		phx_dptr_t at;

		phx_sink_seg((uint64_t)r->val_file_off, r->val_len, chunk, k,
			     &foff, &len, &off);
		at = r->dptr + (uint64_t)r->val_buf_off +
		     (foff - (uint64_t)r->val_file_off);
		ret = ops->stream_wait_value(
			dev, stream->native, &wd->ready[i],
			WORD(t, ready) + i * sizeof(uint32_t), q + 1);
		if (!ret && r->op == PHX_OP_READ)
			ret = ops->copy_htod(dev, at, slot + off, len,
					     stream->native);
		else if (!ret)
			ret = ops->copy_dtoh(dev, slot + off, at, len,
					     stream->native);
		if (!ret)
			ret = ops->stream_write_value(
				dev, stream->native, &wd->freed[i],
				WORD(t, freed) + i * sizeof(uint32_t), q + 1);
		if (ret) {
			/* what made it onto the stream still runs */
			__atomic_store_n(&r->live, k, __ATOMIC_RELEASE);
			return ret;
		}
	}
	ret = ops->stream_wait_value(dev, stream->native, &wd->done,
				     WORD(t, done), r->t);
	if (!ret)
		ret = ops->stream_write_value(
			dev, stream->native, &wd->passed[x],
			WORD(t, passed) + x * sizeof(uint32_t), r->t);
	if (!ret)
		*passes = true;
	return ret;
}

int phx_ring_enqueue(struct phx_stream *stream, struct phx_async_worker *w,
		     struct async_req *r)
{
	struct phx_device *dev = stream->dev;
	struct async_thread *t;
	uint64_t chunk = 0, nsegs;
	unsigned int nslots;
	bool pinned = false, reached = false, passes = false;
	char *staging;
	int ret;

	if (!ring_fits(stream, r))
		return 1;
	pthread_mutex_lock(&w->lock);
	t = ring_pick_locked(w);
	if (t)
		phx_engine_ring(t->engine, &staging, &nslots, &chunk, &pinned);
	nsegs = t ? phx_sink_nsegs((uint64_t)r->val_file_off, r->val_len,
				   chunk) :
		    0;
	if (t && (!pinned || nsegs > PHX_RING_MAX_SEGS)) {
		/* unpinned staging cannot be copied in stream order */
		pthread_mutex_unlock(&w->lock);
		return 1;
	}
	if (!t) {
		phx_async_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
		return phx_err(
			EBUSY,
			"%s: %d stream-ordered transfers already queued on every ring; wait for some to finish",
			dev->name, PHX_RING_XFERS);
	}
	if (++t->ring_t == 0) /* reached[] starts zeroed: never number 0 */
		t->ring_t = 1;
	r->ring = true;
	r->queuing = true;
	r->t = t->ring_t;
	r->seq = t->ring_seq;
	r->nsegs = (unsigned int)nsegs;
	r->live = r->nsegs;
	t->ring_seq += r->nsegs;
	r->next = NULL;
	if (t->ring_tail)
		t->ring_tail->next = r;
	else
		t->ring_head = r;
	t->ring_tail = r;
	t->ring_queued++;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);

	/* from here on the worker owns @r; it waits for queuing to end */
	ret = ring_queue_ops(stream, t, r, &reached, &passes);
	pthread_mutex_lock(&w->lock);
	r->passes = passes;
	if (ret) {
		r->queue_err = ret;
		r->skip = !reached; /* nothing of it is on the stream */
	}
	r->queuing = false;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

struct async_req *phx_ring_claim_locked(struct async_thread *t)
{
	struct async_req *r = t->ring_head;

	if (!r)
		return NULL;
	if (!r->skip &&
	    __atomic_load_n(&t->words->reached[r->t % PHX_RING_XFERS],
			    __ATOMIC_ACQUIRE) != r->t)
		return NULL;
	t->ring_head = r->next;
	if (!t->ring_head)
		t->ring_tail = NULL;
	return r;
}

void phx_ring_run(struct async_thread *t, struct async_req *r)
{
	struct phx_async_worker *w = t->w;
	int64_t res = 0;
	bool skip;

	pthread_mutex_lock(&w->lock);
	skip = r->skip;
	pthread_mutex_unlock(&w->lock);
	if (!skip) {
		struct phx_io io = {
			.op = r->op,
			.fd = r->fd,
			.file_off = r->val_file_off,
			.dptr = r->dptr + (uint64_t)r->val_buf_off,
			.len = r->val_len,
		};
		struct phx_sink sink = {
			.ready = t->words->ready,
			.freed = t->words->freed,
			.seq = r->seq,
			.live = &r->live,
		};

		/* a promise broken: the copies on the stream are the old ones */
		if (*r->len != r->val_len || *r->file_off != r->val_file_off ||
		    *r->buf_off != r->val_buf_off) {
			res = phx_err(
				EINVAL,
				"%s: a stream-ordered transfer's size or offsets changed after it was queued on a stream with fixed values",
				r->dev->name);
			phx_engine_drain_sink(t->engine, &io, &sink);
		} else {
			res = phx_engine_io_sink(t->engine, &io, &sink);
		}
	}
	pthread_mutex_lock(&w->lock);
	while (r->queuing)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
	*r->bytes_done = r->queue_err ? r->queue_err : res;
	/* the stream may move on now */
	if (!skip)
		phx_word_store(&t->words->done, r->t);
	pthread_mutex_lock(&w->lock);
	if (r->passes) {
		/* retired once its stream stored passed[] (reap) */
		r->next = t->ring_passing;
		t->ring_passing = r;
		r = NULL;
	} else {
		t->ring_queued--;
		phx_async_release_locked(w, r);
	}
	pthread_mutex_unlock(&w->lock);
	free(r);
}

void phx_ring_reap_locked(struct async_thread *t)
{
	struct async_req **pp = &t->ring_passing, *r;

	while ((r = *pp)) {
		if (__atomic_load_n(&t->words->passed[r->t % PHX_RING_XFERS],
				    __ATOMIC_ACQUIRE) != r->t) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		t->ring_queued--;
		phx_async_release_locked(t->w, r);
		free(r);
	}
}
