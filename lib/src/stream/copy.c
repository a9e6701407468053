/* SPDX-License-Identifier: MIT */
/*
 * copy.c - stream-ordered transfers in PHX_STREAM_WAIT=copy, the default
 * on CUDA and the simulated device.
 *
 * Each ring worker thread owns an engine whose staging slots form a
 * ring, and the ring's words in mapped host memory (struct
 * phx_ring_words).  When a transfer is queued on a stream whose values
 * are fixed (PHX_STREAM_FIXED), it gets the least busy ring, a transfer
 * number t and the next nsegs sequence numbers q there, and
 * phx_io_enqueue() puts on the stream:
 *
 *   for each segment (q, slot = q % nslots):
 *       wait ready[slot] >= q + 1
 *       copy slot <-> buffer        (the copy engine, as for phx_read())
 *       store freed[slot] = q + 1
 *   wait done >= t
 *   store passed[t % PHX_RING_XFERS] = t
 *
 * The worker takes the ring's transfers in the order queued, up to
 * PHX_RING_WINDOW at once (even while their ops are being queued: the
 * thread queueing them may wait for its stream), and gives them to
 * its engine with the ring as their sink (sink.c: file I/O into or out of
 * the slots, in sequence): a transfer's reads run while the stream still
 * copies the ones before it.  As they finish, in ring order, it writes
 * bytes_done and stores done = t; a transfer counts as queued until its
 * stream stored passed, so the words are never unmapped under a stream
 * that still reads them.  The worker makes no driver call while a stream
 * waits on it, and nothing runs on the GPU's SMs.
 *
 * Transfers on one ring from several streams cannot wait on each other in
 * a cycle: a transfer only ever waits for slots of transfers queued
 * before it, and a stream can only wait on work queued before its own.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "stream_i.h"

/* Segments past this go to the copy kernel (cyclic sequence numbers). */
#define PHX_RING_MAX_SEGS (1u << 24)

/* Slots of a ring's first engine: small, so they pin in no time. */
#define PHX_RING_FIRST_CHUNK PHX_MIN_SLOT

static int phx_ring_start(struct phx_device *dev, struct phx_stream_thread *t,
			  size_t staging)
{
	size_t first = (size_t)PHX_RING_SLOTS * PHX_RING_FIRST_CHUNK;
	void *p;
	int ret;

	if (staging <= 2 * first)
		first = staging;
	ret = phx_engine_new_sink(dev, first, PHX_RING_SLOTS, &t->engine);
	if (!ret)
		ret = phx_mapped_alloc(dev, sizeof(struct phx_ring_words), &p,
				       &t->words_daddr);
	if (ret)
		return ret;
	t->words = p;
	t->grow_to = first < staging ? staging : 0;
	return 0;
}

static bool ring_pinned(const struct phx_engine *e)
{
	unsigned int nslots;
	uint64_t chunk;
	char *staging;
	bool pinned;

	phx_engine_slots(e, &staging, &nslots, &chunk, &pinned);
	return pinned;
}

/*
 * The grower: build every small ring's full engine and hand them over;
 * transfers queued from then on are cut for the full engine and use its
 * slots, and the ring's worker swaps it in when it gets to the first of
 * them (the small engine is idle by then: all before it are done).  Then
 * free the small ones.  It makes driver calls that may wait for streams,
 * so no one waits for it but phx_stream_device_close(), after every transfer is
 * done; a ring whose full engine cannot be built keeps its small one.
 */
static void *ring_grow_main(void *arg)
{
	struct phx_stream_pool *w = arg;
	struct phx_engine *e;
	unsigned int i;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phx-ring-grow");
	for (i = 0; i < PHX_STREAM_WORKERS; i++) {
		struct phx_stream_thread *t = &w->threads[i];
		size_t size;

		pthread_mutex_lock(&w->lock);
		size = w->stop ? 0 : t->grow_to;
		pthread_mutex_unlock(&w->lock);
		if (!size)
			continue;
		if (phx_engine_new_sink(w->dev, size, PHX_RING_SLOTS, &e)) {
			phx_err_clear(); /* slower, not wrong */
			continue;
		}
		if (!ring_pinned(e)) {
			/* streams copy only pinned slots: keep the small */
			phx_engine_destroy(e);
			continue;
		}
		pthread_mutex_lock(&w->lock);
		t->grown = e;
		pthread_mutex_unlock(&w->lock);
	}
	for (i = 0; i < PHX_STREAM_WORKERS; i++) {
		struct phx_stream_thread *t = &w->threads[i];

		pthread_mutex_lock(&w->lock);
		while (t->grown && !t->retired && !w->stop)
			pthread_cond_wait(&w->done, &w->lock);
		/*
		 * Not swapped in, the device closing: no transfer used it
		 * (every one is done, and the worker swaps before the first
		 * cut for it starts), so the full one goes.
		 */
		e = t->retired ? t->retired : t->grown;
		t->grown = t->retired = NULL;
		t->grow_to = 0;
		pthread_mutex_unlock(&w->lock);
		if (e)
			phx_engine_destroy(e);
	}
	return NULL;
}

static void phx_ring_grow_locked(struct phx_stream_pool *w,
				 struct phx_stream_thread *t)
{
	phx_assert_held(&w->lock);
	/*
	 * Once a ring has finished a transfer: the process's first one does
	 * not wait for the driver calls of pinning the full rings.
	 */
	if (w->grow_started || !t->grow_to || !t->served)
		return;
	if (!pthread_create(&w->grower, NULL, ring_grow_main, w))
		w->grow_started = true;
}

/*
 * @r is the first transfer cut for @t's full engine: once the small one
 * has nothing left to do, swap them (the grower frees the small one).
 * Whether @r may start.
 */
static bool ring_swap(struct phx_stream_thread *t, struct phx_stream_req *r)
{
	struct phx_stream_pool *w = t->w;

	if (phx_engine_busy(t->engine))
		return false;
	pthread_mutex_lock(&w->lock);
	t->retired = t->engine;
	t->engine = r->engine;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	return true;
}

static void phx_ring_grow_stop(struct phx_stream_pool *w)
{
	if (w->grow_started)
		pthread_join(w->grower, NULL);
	w->grow_started = false;
}

static void phx_ring_teardown_one(struct phx_device *dev,
				  struct phx_stream_thread *t)
{
	phx_mapped_free(dev, t->words, sizeof(*t->words));
	t->words = NULL;
}

static void phx_ring_teardown(struct phx_device *dev, struct phx_stream_pool *w)
{
	for (unsigned int i = 0; i < PHX_STREAM_WORKERS; i++)
		phx_ring_teardown_one(dev, &w->threads[i]);
}

/*
 * Whether @r can take the copy mode: values fixed by the stream's owner
 * and valid, a file the engine takes and, for reads, no byte past its
 * end (the stream's copies are whole segments; the copy kernel copies
 * what a short read brings).  Errors are left to the copy kernel's path,
 * which reports them through bytes_done as the API says.
 */
static bool ring_fits(struct phx_stream *stream, struct phx_stream_req *r)
{
	uint64_t len = *r->len, size;
	int64_t foff = *r->file_off, boff = *r->buf_off;

	if ((stream->flags & PHX_STREAM_FIXED) != PHX_STREAM_FIXED)
		return false;
	if (phx_stream_range_check(len, foff, boff)) {
		phx_err_clear(); /* the copy kernel's path reports it */
		return false;
	}
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

/* The least busy ring, or NULL when every one is full; w->lock held. */
static struct phx_stream_thread *ring_pick_locked(struct phx_stream_pool *w)
{
	struct phx_stream_thread *best = NULL;

	phx_assert_held(&w->lock);

	for (unsigned int i = 0; i < w->nthreads; i++) {
		struct phx_stream_thread *t = &w->threads[i];

		if (t->words && (!best || t->ring_queued < best->ring_queued))
			best = t;
	}
	return best && best->ring_queued < PHX_RING_XFERS ? best : NULL;
}

#define WORD(t, f) ((t)->words_daddr + offsetof(struct phx_ring_words, f))

/* Put @r's part of the protocol (see the file header) on @stream. */
static int ring_queue_ops(struct phx_stream *stream,
			  struct phx_stream_thread *t, struct phx_stream_req *r,
			  bool *onstream, bool *passes)
{
	struct phx_device *dev = stream->dev;
	const struct phx_backend_ops *ops = dev->ops;
	struct phx_ring_words *wd = t->words;
	unsigned int x = r->t % PHX_RING_XFERS, nslots, k;
	bool pinned;
	uint64_t chunk;
	char *staging;
	int ret;

	phx_engine_slots(r->engine, &staging, &nslots, &chunk, &pinned);
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
			*onstream = k > 0;
			return ret;
		}
	}
	ret = ops->stream_wait_value(dev, stream->native, &wd->done,
				     WORD(t, done), r->t);
	*onstream = r->nsegs > 0 || !ret;
	if (!ret)
		ret = ops->stream_write_value(
			dev, stream->native, &wd->passed[x],
			WORD(t, passed) + x * sizeof(uint32_t), r->t);
	if (!ret)
		*passes = true;
	return ret;
}

static int phx_ring_enqueue(struct phx_stream *stream,
			    struct phx_stream_pool *w, struct phx_stream_req *r)
{
	struct phx_device *dev = stream->dev;
	struct phx_stream_thread *t;
	uint64_t chunk = 0, nsegs;
	unsigned int nslots;
	bool pinned = false, onstream = false, passes = false;
	char *staging;
	int ret;

	if (!ring_fits(stream, r))
		return 1;
	pthread_mutex_lock(&w->lock);
	t = ring_pick_locked(w);
	if (t) {
		/* once the grower handed the full engine over, it is this one's */
		r->engine = t->grown ? t->grown : t->engine;
		phx_engine_slots(r->engine, &staging, &nslots, &chunk, &pinned);
	}
	nsegs = t ? phx_sink_nsegs((uint64_t)r->val_file_off, r->val_len,
				   chunk) :
		    0;
	if (t && (!pinned || nsegs > PHX_RING_MAX_SEGS)) {
		/* unpinned staging cannot be copied in stream order */
		pthread_mutex_unlock(&w->lock);
		return 1;
	}
	if (!t) {
		phx_pool_release_locked(w, r);
		pthread_mutex_unlock(&w->lock);
		free(r);
		return phx_err(
			EBUSY,
			"%s: %d stream-ordered transfers already queued on every ring; wait for some to finish",
			dev->name, PHX_RING_XFERS);
	}
	if (++t->ring_t == 0) /* passed[] starts zeroed: never number 0 */
		t->ring_t = 1;
	r->ring = true;
	r->queuing = true;
	r->g = ++w->ring_g;
	if (r->op == PHX_OP_WRITE)
		w->ring_writes++;
	r->t = t->ring_t;
	r->seq = t->ring_seq;
	r->nsegs = (unsigned int)nsegs;
	r->live = r->nsegs;
	t->ring_seq += r->nsegs;
	phx_queue_push(t->ring_head, t->ring_tail, r);
	t->ring_queued++;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);

	/* from here on the worker owns @r; it waits for queuing to end */
	ret = ring_queue_ops(stream, t, r, &onstream, &passes);
	pthread_mutex_lock(&w->lock);
	r->passes = passes;
	if (ret) {
		r->queue_err = ret;
		r->skip = !onstream; /* nothing of it is on the stream */
	}
	r->queuing = false;
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/*
 * Whether @r's values changed since it was queued, which its stream's
 * owner promised they would not (PHX_STREAM_FIXED).
 */
static bool ring_changed(const struct phx_stream_req *r)
{
	return *r->len != r->val_len || *r->file_off != r->val_file_off ||
	       *r->buf_off != r->val_buf_off;
}

/*
 * Give @r's transfer to @t's engine; -EAGAIN when it cannot take it yet
 * (its file slots are all busy).  A transfer that cannot move (a value
 * changed after it was queued, a bad descriptor) still goes through the
 * ring, moving nothing, since its stream waits for its slots.
 */
static int ring_start(struct phx_stream_thread *t, struct phx_stream_req *r)
{
	int err = 0;

	r->io = (struct phx_io){
		.op = r->op,
		.fd = r->fd,
		.file_off = r->val_file_off,
		.dptr = r->dptr + (uint64_t)r->val_buf_off,
		.len = r->val_len,
	};
	r->sink = (struct phx_sink){
		.ready = t->words->ready,
		.freed = t->words->freed,
		.seq = r->seq,
		.live = &r->live,
	};
	/* a promise broken: the copies on the stream are the old ones */
	if (ring_changed(r))
		err = phx_err(
			EINVAL,
			"%s: a stream-ordered transfer's size or offsets changed after it was queued on a stream with fixed values",
			r->dev->name);
	return phx_engine_sink_queue(t->engine, &r->io, &r->sink, err);
}

/*
 * The number of the oldest write on any ring not yet retired, UINT64_MAX
 * if none (w->lock held).  A read may go to the file before its stream
 * gets to it, but not before the writes queued before it are in the file:
 * one of them may be what its stream waits for.
 */
static uint64_t ring_write_floor_locked(struct phx_stream_pool *w)
{
	uint64_t floor = UINT64_MAX;

	phx_assert_held(&w->lock);

	if (!w->ring_writes)
		return floor;
	for (unsigned int i = 0; i < w->nthreads; i++) {
		const struct phx_stream_thread *t = &w->threads[i];
		const struct phx_stream_req *lists[2] = { t->act_head,
							  t->ring_head };

		/* each list is in the order queued: its first write is oldest */
		for (int l = 0; l < 2; l++)
			for (const struct phx_stream_req *r = lists[l]; r;
			     r = r->next)
				if (r->op == PHX_OP_WRITE) {
					floor = phx_min(floor, r->g);
					break;
				}
	}
	return floor;
}

static bool phx_ring_busy_locked(const struct phx_stream_thread *t)
{
	phx_assert_held(&t->w->lock);
	return t->ring_head || t->act_head;
}

static bool phx_ring_pump_locked(struct phx_stream_thread *t)
{
	struct phx_stream_pool *w = t->w;
	struct phx_engine *e = t->engine;
	bool moved = false;
	struct phx_stream_req *r;
	struct phx_io *io;
	uint64_t floor;
	int ret;

	phx_assert_held(&t->w->lock);

	/*
	 * Take the ring's transfers in order, even while their ops are
	 * still being queued: the thread queueing them may be inside a
	 * driver call that waits for its stream to make room, and the stream
	 * waits for these slots.
	 */
	while ((r = t->ring_head) && t->nact < PHX_RING_WINDOW) {
		phx_queue_pop(t->ring_head, t->ring_tail);
		phx_queue_push(t->act_head, t->act_tail, r);
		t->nact++;
		moved = true;
	}
	floor = ring_write_floor_locked(w);
	pthread_mutex_unlock(&w->lock);

	/* into the engine in ring order: each fills its slots after the last */
	for (r = t->act_head; r; r = r->next) {
		if (r->started)
			continue;
		if (r->op == PHX_OP_READ && r->g > floor)
			break; /* an earlier write is not in the file yet */
		if (r->engine != t->engine) {
			if (!ring_swap(t, r))
				break; /* the small engine is not done yet */
			e = t->engine;
		}
		if (ring_start(t, r)) {
			phx_err_clear(); /* again once some finished */
			break;
		}
		r->started = true;
		moved = true;
	}
	if (phx_engine_busy(e)) {
		ret = phx_engine_step(e, !moved);
		if (ret)
			phx_err_clear(); /* its slots are still there: again */
	}
	while ((io = phx_engine_reap(e))) {
		r = (struct phx_stream_req *)((char *)io -
					      offsetof(struct phx_stream_req,
						       io));
		r->finished = true;
		moved = true;
	}

	pthread_mutex_lock(&w->lock);
	/*
	 * done is one word for the ring: transfers end in ring order, and
	 * only once all of their ops are queued (or failed to be).
	 */
	while ((r = t->act_head) && r->finished && !r->queuing) {
		phx_queue_pop(t->act_head, t->act_tail);
		t->nact--;
		t->served = true;
		if (r->op == PHX_OP_WRITE)
			w->ring_writes--;
		/*
		 * Values changed after it was started fail it all the same;
		 * the buffer has the bytes of the values as queued, or zeros
		 * where the change was seen before they were read.
		 */
		*r->bytes_done = r->queue_err	 ? r->queue_err :
				 ring_changed(r) ? -EINVAL :
						   r->io.result;
		/* the stream may move on now */
		if (!r->skip)
			phx_word_store(&t->words->done, r->t);
		if (r->passes) {
			/* retired once its stream stored passed[] (reap) */
			r->next = t->ring_passing;
			t->ring_passing = r;
		} else {
			t->ring_queued--;
			phx_pool_release_locked(w, r);
			free(r);
		}
		moved = true;
	}
	return moved;
}

static void phx_ring_reap_locked(struct phx_stream_thread *t)
{
	struct phx_stream_req **pp = &t->ring_passing, *r;

	phx_assert_held(&t->w->lock);

	while ((r = *pp)) {
		if (__atomic_load_n(&t->words->passed[r->t % PHX_RING_XFERS],
				    __ATOMIC_ACQUIRE) != r->t) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		t->ring_queued--;
		phx_pool_release_locked(t->w, r);
		free(r);
	}
}

/*
 * The first stream_rings workers own a ring each, the staging budget
 * split between them; the others serve the copy kernel, which has rings
 * of its own, and need none.
 */
static int copy_thread_start(struct phx_device *dev,
			     struct phx_stream_thread *t, unsigned int index)
{
	const struct phx_settings *s = phx_settings();
	size_t staging;

	if (index >= s->stream_rings)
		return 0;
	/* slots of PHX_MIN_SLOT at least, whatever PHX_STAGING_SIZE says */
	staging = phx_max(s->staging_size / s->stream_rings,
			  PHX_RING_SLOTS * PHX_MIN_SLOT);
	return phx_ring_start(dev, t, staging);
}

/* Retire what the streams are past, move the ring on, grow it. */
static bool copy_poll_locked(struct phx_stream_thread *t,
			     struct phx_stream_req **claimed)
{
	bool moved = false;

	phx_assert_held(&t->w->lock);

	if (t->ring_passing)
		phx_ring_reap_locked(t);
	if (t->words && phx_ring_busy_locked(t))
		moved = phx_ring_pump_locked(t);
	if (t->words)
		phx_ring_grow_locked(t->w, t);
	return moved;
}

static bool copy_waiting_locked(const struct phx_stream_thread *t)
{
	phx_assert_held(&t->w->lock);
	return phx_ring_busy_locked(t) || t->ring_passing;
}

const struct phx_stream_mode phx_stream_copy = {
	.enqueue = phx_ring_enqueue,
	.fallback = PHX_STREAM_WAIT_KERNEL, /* values read later */
	.thread_start = copy_thread_start,
	.thread_undo = phx_ring_teardown_one,
	.poll_locked = copy_poll_locked,
	.waiting_locked = copy_waiting_locked,
	.stop = phx_ring_grow_stop,
	.teardown = phx_ring_teardown,
};
