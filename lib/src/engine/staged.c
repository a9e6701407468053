/* SPDX-License-Identifier: MIT */
/*
 * staged.c - the engine's own slot consumer: the device copies between
 * its pinned staging slots and device memory (phx_staged_consumer).
 *
 * A read segment is read from the file into a slot and, once the read
 * completes, copied to the device asynchronously on one of the engine's
 * copy streams, an event recorded after it; when the event fires the
 * slot is free again.  A write segment is copied from the device into a
 * slot first, then written to the file.  p2p segments (phx.ko) go
 * between the file and the device mapping with no copy at all.  This is
 * the consumer of every engine but the stream sink's (sink.c).
 *
 * Small reads (KV-cache blocks, fio's 4 KiB) cost the driver more per
 * copy than the bytes do.  So the copies of the small reads that
 * complete in one round of the pipeline are held until the round's end
 * and go out together, on one stream, with one event after them: runs of
 * adjacent slots whose bytes also go to adjacent device memory as one
 * copy, the rest as one batch (copy_htod_batch).  Each slot remembers
 * the slot whose event closes its batch (its fence).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_i.h"

static void job_add_region(struct phx_job *j, uint64_t from, uint64_t to,
			   bool direct)
{
	if (from >= to)
		return;
	j->region[j->nregions].from = from;
	j->region[j->nregions].to = to;
	j->region[j->nregions].direct = direct;
	j->nregions++;
}

/* Decide how a job moves its bytes and cut its file range into regions. */
static int staged_plan(struct phx_engine *e, struct phx_job *j)
{
	struct phx_device *dev = e->dev;
	bool is_read = j->io->op == PHX_OP_READ;
	uint64_t a_start = phx_align_down(j->start, PHX_PAGE);
	uint64_t a_end = phx_align_up(j->end, PHX_PAGE);
	bool direct, probe;
	int ret;

	ret = phx_job_direct(e, j, &direct, &probe);
	if (ret)
		return ret;

	/* p2p: the device memory itself is DMA-able host-mapped memory. */
	if (direct && dev->ops->p2p && dev->ops->host_addr &&
	    (j->dptr - j->start) % PHX_PAGE == 0)
		j->p2p = true;

	if (!direct) {
		ret = phx_fd_buffered(j->fde);
		if (ret < 0)
			return ret;
		job_add_region(j, j->start, j->end, false);
		goto out;
	}
	if (is_read && !j->p2p && probe) {
		uint64_t p = phx_probe_len(e);

		/* Each way on the same bytes' worth, then the faster. */
		j->probe = true;
		job_add_region(j, a_start, a_start + p, true);
		job_add_region(j, a_start + p, a_start + 2 * p, false);
		job_add_region(j, a_start + 2 * p, a_end, true);
		goto out;
	}
	if (is_read && !j->p2p) {
		/* The aligned superset; only the asked-for bytes are copied. */
		job_add_region(j, a_start, a_end, true);
		goto out;
	}
	/*
	 * p2p reads and all direct writes: the unaligned edges go through
	 * the page cache (a p2p read must not spill past the asked-for
	 * range into device memory), the aligned middle O_DIRECT.
	 */
	a_start = phx_align_up(j->start, PHX_PAGE);
	a_end = phx_align_down(j->end, PHX_PAGE);
	if (a_start >= a_end) {
		a_start = j->end;
		a_end = j->end;
	}
	if (j->start != a_start || j->end != a_end) {
		ret = phx_fd_buffered(j->fde);
		if (ret < 0)
			return ret;
	}
	job_add_region(j, j->start, a_start, false);
	job_add_region(j, a_start, a_end, true);
	job_add_region(j, a_end, j->end, false);
out:
	if (j->nregions)
		j->pos = j->region[0].from;
	return 0;
}

static bool staged_issuable(const struct phx_job *j)
{
	return !j->err && !j->eof && j->cur < j->nregions;
}

/* The slot's copy went out on stream @s, closed by @fence's event. */
static void copy_queued(struct phx_engine *e, struct phx_slot *sl,
			unsigned int s, struct phx_slot *fence)
{
	sl->state = PHX_SLOT_COPY;
	sl->fence = fence;
	sl->copy_next = NULL;
	if (e->copyq[s])
		e->copyq_tail[s]->copy_next = sl;
	else
		e->copyq[s] = sl;
	e->copyq_tail[s] = sl;
}

/* The copy of @sl could not be queued: its job fails, the slot is free. */
static void copy_failed(struct phx_engine *e, struct phx_slot *sl, int err)
{
	phx_job_fail(sl->job, err);
	sl->copied = 0;
	phx_slot_free(e, sl);
}

/* The file offset where @sl's copy starts; sets how many bytes it moves. */
static uint64_t slot_span(struct phx_slot *sl, bool to_device)
{
	struct phx_job *j = sl->job;
	uint64_t cs, ce;

	if (to_device) {
		cs = phx_max(sl->foff, j->start);
		ce = phx_min(sl->foff + sl->done, j->end);
	} else {
		cs = sl->foff;
		ce = sl->foff + sl->len;
	}
	sl->copied = ce > cs ? ce - cs : 0;
	return cs;
}

/* Start a device copy for @sl; the slot completes when its event fires. */
static void slot_copy(struct phx_engine *e, struct phx_slot *sl, bool to_device)
{
	struct phx_device *dev = e->dev;
	struct phx_job *j = sl->job;
	uint64_t cs = slot_span(sl, to_device);
	int ret;

	if (!sl->copied) {
		phx_slot_finish(e, sl);
		return;
	}
	if (to_device)
		ret = dev->ops->copy_htod(dev, j->dptr + (cs - j->start),
					  sl->mem + (cs - sl->foff), sl->copied,
					  sl->stream);
	else if (j->buf)
		ret = phx_buf_copy_out(j->buf, j->io->buf_off + (cs - j->start),
				       sl->mem, sl->copied, sl->stream);
	else
		ret = dev->ops->copy_dtoh(dev, sl->mem,
					  j->dptr + (cs - j->start), sl->copied,
					  sl->stream);
	if (!ret)
		ret = dev->ops->event_record(dev, sl->event, sl->stream);
	if (ret) {
		copy_failed(e, sl, ret);
		return;
	}
	copy_queued(e, sl, sl->sidx, sl);
}

/* Hold the copy of @sl, a read, for the round's end if it is small. */
static bool copy_held(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;
	uint64_t cs = slot_span(sl, true);

	/* a batch's sources must be pinned (copy_htod_batch) */
	if (!sl->copied || sl->copied > PHX_BATCH_COPY_MAX || !e->pinned)
		return false;
	sl->htod.dst = j->dptr + (cs - j->start);
	sl->htod.src = sl->mem + (cs - sl->foff);
	sl->htod.len = sl->copied;
	sl->copy_next = NULL;
	if (e->held)
		e->held_tail->copy_next = sl;
	else
		e->held = sl;
	e->held_tail = sl;
	return true;
}

static int htod_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const struct phx_htod *)a)->src;
	uintptr_t y = (uintptr_t)((const struct phx_htod *)b)->src;

	return x < y ? -1 : x > y;
}

/*
 * Merge the copies of @c whose sources and destinations both continue
 * each other (adjacent slots of one transfer); how many are left.
 */
static unsigned int htod_merge(struct phx_htod *c, unsigned int n)
{
	unsigned int i, k = 0;

	qsort(c, n, sizeof(*c), htod_cmp);
	for (i = 1; i < n; i++) {
		if ((const char *)c[k].src + c[k].len == c[i].src &&
		    c[k].dst + c[k].len == c[i].dst)
			c[k].len += c[i].len;
		else
			c[++k] = c[i];
	}
	return k + 1;
}

/*
 * The round's end: the held copies go out.  One alone goes as it would
 * have (its own stream and event); several go together on the next
 * stream in turn, as few copies as their adjacency allows, in one call,
 * and the last slot's event closes them all.
 */
static void staged_flush(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	struct phx_slot *sl = e->held, *last = e->held_tail, *next;
	unsigned int n = 0, s;
	void *stream;
	int ret;

	if (!sl)
		return;
	e->held = e->held_tail = NULL;
	if (sl == last) {
		slot_copy(e, sl, true);
		return;
	}
	s = e->batch_sidx;
	e->batch_sidx = (s + 1) % PHX_NR_STREAMS;
	stream = e->streams[s];
	for (next = sl; next; next = next->copy_next)
		e->htod[n++] = next->htod;
	n = htod_merge(e->htod, n);
	ret = dev->ops->copy_htod_batch(dev, e->htod, n, stream);
	if (!ret)
		ret = dev->ops->event_record(dev, last->event, stream);
	for (; sl; sl = next) {
		next = sl->copy_next;
		if (ret)
			copy_failed(e, sl, ret);
		else
			copy_queued(e, sl, s, last);
	}
}

static void staged_publish(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;

	if (j->probe && sl->region < 2) {
		j->probe_reads[sl->region]--;
		j->probe_t1[sl->region] = phx_now_ns();
	}
	if (j->io->op == PHX_OP_READ && copy_held(e, sl))
		return;
	slot_copy(e, sl, j->io->op == PHX_OP_READ);
}

/*
 * Whether a probing @j must hold its next segment: its region's turn
 * comes when the region before has no read in flight, so the two ways
 * are timed apart.  At region 2, the faster way is chosen and kept.
 */
static bool probe_hold(struct phx_job *j)
{
	uint64_t d0, d1;

	if (!j->probe || !j->cur)
		return false;
	if (j->probe_reads[j->cur - 1])
		return true;
	if (j->cur < 2)
		return false;
	d0 = j->probe_t1[0] - j->probe_t0[0];
	d1 = j->probe_t1[1] - j->probe_t0[1];
	j->region[2].direct = d0 <= d1;
	phx_probe_record(j->fde->st_dev, d0 <= d1);
	j->probe = false;
	return false;
}

/* Give free slots to jobs with segments left, any slot to any job. */
static void staged_fill(struct phx_engine *e)
{
	unsigned int i;

	if (TAILQ_EMPTY(&e->issue))
		return;
	phx_readers_take(e);
	for (i = 0; i < e->nslots; i++) {
		struct phx_slot *sl = &e->slots[i];
		struct phx_job_region *r;
		struct phx_job *j;
		uint64_t seg_end;

		if (sl->state != PHX_SLOT_FREE)
			continue;
		j = phx_engine_next_job(e);
		if (!j || probe_hold(j))
			return;
		r = &j->region[j->cur];
		if (j->probe) {
			if (!j->probe_reads[j->cur]++ && !j->probe_t0[j->cur])
				j->probe_t0[j->cur] = phx_now_ns();
			sl->region = j->cur;
		}
		/* Segments end on chunk-aligned file offsets. */
		seg_end = phx_min(r->to,
				  phx_align_down(j->pos, e->chunk) + e->chunk);
		sl->job = j;
		sl->mem = e->staging + (size_t)i * e->chunk;
		sl->foff = j->pos;
		sl->len = seg_end - j->pos;
		sl->done = 0;
		sl->copied = 0;
		sl->direct = r->direct;
		sl->target = NULL;
		if (j->p2p && r->direct)
			sl->target = (char *)e->dev->ops->host_addr(e->dev,
								    j->dptr) +
				     (sl->foff - j->start);
		j->pos = seg_end;
		if (j->pos >= r->to && ++j->cur < j->nregions)
			j->pos = j->region[j->cur].from;
		j->pending++;

		if (j->io->op == PHX_OP_WRITE && !sl->target) {
			sl->len = seg_end - sl->foff;
			slot_copy(e, sl, false);
		} else {
			if (sl->target && j->io->op == PHX_OP_WRITE)
				sl->copied = sl->len;
			phx_slot_prep_io(e, sl);
		}
	}
}

/*
 * Progress copies whose events fired, oldest first on each stream, up to
 * the first still running (one question per batch: its fence's event
 * closes every copy queued before it); returns how many did.
 */
static unsigned int staged_consumed(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	struct phx_slot *sl, *fence;
	unsigned int s, n = 0;
	int ret;

	for (s = 0; s < PHX_NR_STREAMS; s++) {
		while ((fence = e->copyq[s] ? e->copyq[s]->fence : NULL)) {
			ret = dev->ops->event_query(dev, fence->event);
			if (ret == -EAGAIN)
				break;
			do {
				sl = e->copyq[s];
				e->copyq[s] = sl->copy_next;
				n++;
				if (ret)
					copy_failed(e, sl, ret);
				else if (sl->job->io->op == PHX_OP_WRITE)
					phx_slot_prep_io(e, sl);
				else
					phx_slot_finish(e, sl);
			} while (sl != fence);
		}
	}
	return n;
}

/* The oldest device copy in flight, or NULL. */
static struct phx_slot *oldest_copy(struct phx_engine *e)
{
	for (unsigned int s = 0; s < PHX_NR_STREAMS; s++)
		if (e->copyq[s])
			return e->copyq[s];
	return NULL;
}

/*
 * How long a thread with both copies and reads in flight polls them
 * together before it sleeps on the copy: a small copy lands in 10-20 us.
 */
#define PHX_COPY_POLL_NS 100000u

/*
 * Nothing moved this step.  With reads in flight too, poll the oldest
 * copy and the completion ring together for a while, so that a read
 * completing meanwhile gets its copy at once and neither wakes the
 * thread; then (or with no read in flight) sleep on the copy, which is
 * short next to a disk read.  With no copy in flight, wait for the disk.
 */
static int staged_idle(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	struct phx_slot *sl = oldest_copy(e);
	bool run_tw = true;
	uint64_t t0;
	int ret;

	if (!sl)
		return phx_engine_wait_io(e);
	if (e->inflight) {
		t0 = phx_now_ns();
		for (unsigned int n = 0;; n++) {
			if (phx_engine_io_ready(e, &run_tw))
				return 0;
			ret = dev->ops->event_query(dev, sl->fence->event);
			if (ret != -EAGAIN)
				return 0; /* consumed() takes it, or its error */
			if (phx_now_ns() - t0 >= PHX_COPY_POLL_NS)
				break;
			if (n >= 64)
				sched_yield();
		}
	}
	return dev->ops->event_sync(dev, sl->fence->event);
}

const struct phx_slot_consumer phx_staged_consumer = {
	.plan = staged_plan,
	.issuable = staged_issuable,
	.fill = staged_fill,
	.publish = staged_publish,
	.consumed = staged_consumed,
	.idle = staged_idle,
	.flush = staged_flush,
	.teardown = phx_readers_destroy,
};

/* Run until @j completes (and no request of it is left in flight). */
static int engine_run_job(struct phx_engine *e, struct phx_job *j)
{
	int ret;

	while (phx_engine_busy(e)) {
		ret = phx_engine_step(e, true);
		if (ret)
			return ret;
	}
	return 0;
}

/* Run @io to completion on @e, which nothing else uses meanwhile. */
int64_t phx_engine_run(struct phx_engine *e, struct phx_io *io)
{
	struct phx_job *j;
	int ret;

	ret = phx_job_make(e, io, NULL, &j);
	if (ret) {
		atomic_fetch_add(&e->dev->errors, 1);
		return io->result = ret;
	}
	/* the shape it was lent with is the call's own */
	phx_engine_fit(e, j,
		       (struct phx_engine_shape){ .nslots = e->nslots,
						  .chunk = e->chunk });
	phx_engine_queue(e, j);
	ret = engine_run_job(e, j);
	/* the job is on the done list now */
	STAILQ_INIT(&e->done);
	free(j);
	if (ret)
		return io->result = ret;
	if (io->result >= 0)
		phx_err_clear();
	return io->result;
}
