/* SPDX-License-Identifier: MIT */
/*
 * sink.c - the engine's stream sink: the slots of a stream-ordered
 * transfer, handed to the stream that copies them.
 *
 * phx_io_enqueue() queues, on the caller's stream, one copy-engine copy
 * per segment of the transfer between the device buffer and a fixed slot
 * of a ring, each between a wait and a store on words of mapped host
 * memory (stream.c, copy.c).  The engine here fills the ring in sequence
 * and keeps the other side of that protocol:
 *
 *   read   I/O into the slot, then ready[slot] = q + 1; the stream copies
 *          the slot to the buffer and stores freed[slot] = q + 1;
 *   write  ready[slot] = q + 1 as soon as the slot is free; the stream
 *          copies the buffer into it and stores freed[slot] = q + 1; then
 *          the slot's I/O writes it to the file.
 *
 * The copies are the copy engine's, as for phx_read(); no kernel holds
 * SMs.  While the stream waits on these words the engine makes no driver
 * call (a driver call can wait for the stream), so it polls the words.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_i.h"

uint64_t phx_sink_nsegs(uint64_t file_off, uint64_t len, uint64_t chunk)
{
	if (!len)
		return 0;
	return (file_off + len - 1) / chunk - file_off / chunk + 1;
}

void phx_sink_seg(uint64_t file_off, uint64_t len, uint64_t chunk,
		  unsigned int k, uint64_t *foff, uint64_t *seg_len,
		  uint64_t *slot_off)
{
	uint64_t s = k ? (file_off / chunk + k) * chunk : file_off;
	uint64_t e = phx_min(file_off + len, (s / chunk + 1) * chunk);

	*foff = s;
	*seg_len = e - s;
	*slot_off = s % PHX_PAGE;
}

static int sink_plan(struct phx_engine *e, struct phx_job *j)
{
	bool direct;
	int ret = phx_job_direct(e, j, &direct, NULL);

	if (ret)
		return ret;
	/* buffered reads; the unaligned edges of writes */
	if (!direct || j->io->op == PHX_OP_WRITE) {
		ret = phx_fd_buffered(j->fde);
		if (ret < 0)
			return ret;
	}
	j->direct = direct;
	j->nsegs = (unsigned int)phx_sink_nsegs(j->start, j->end - j->start,
						e->chunk);
	return 0;
}

/* A stream waits for every segment of a sink job, failed or not. */
static bool sink_issuable(const struct phx_job *j)
{
	return j->seg < j->nsegs;
}

static unsigned int slot_index(const struct phx_engine *e,
			       const struct phx_slot *sl)
{
	return (unsigned int)(sl - e->slots);
}

static void sink_publish(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;

	if (j->io->op == PHX_OP_READ) {
		/* the slot holds the file's bytes up to @valid */
		uint64_t valid = sl->foff + sl->done, have = 0;

		if (valid > sl->seg_foff)
			have = phx_min(valid - sl->seg_foff, sl->seg_len);
		/*
		 * The stream's copy is of the whole segment: past the end of
		 * the file (it shrank since the transfer was queued), or after
		 * a failed read, it brings zeros.
		 */
		if (have < sl->seg_len)
			memset(sl->seg_mem + have, 0, sl->seg_len - have);
		sl->copied = j->err ? 0 : have;
	} else {
		sl->copied = sl->seg_len;
	}
	sl->state = PHX_SLOT_COPY;
	phx_word_store(&j->sink->ready[slot_index(e, sl)], sl->seq + 1);
}

/* Give free slots to @j's next segments, in sequence. */
static void sink_fill_job(struct phx_engine *e, struct phx_job *j)
{
	while (j->seg < j->nsegs) {
		uint32_t q = j->sink->seq + j->seg;
		unsigned int i = q % e->nslots;
		struct phx_slot *sl = &e->slots[i];
		char *base = e->staging + (size_t)i * e->chunk;
		uint64_t off;

		if (sl->state != PHX_SLOT_FREE)
			return; /* the stream has not copied it yet */
		phx_sink_seg(j->start, j->end - j->start, e->chunk, j->seg,
			     &sl->seg_foff, &sl->seg_len, &off);
		sl->job = j;
		sl->seq = q;
		sl->seg = j->seg++;
		sl->seg_mem = base + off;
		sl->done = 0;
		sl->copied = 0;
		sl->target = NULL;
		j->pending++;

		if (j->io->op == PHX_OP_WRITE) {
			sl->foff = sl->seg_foff;
			sl->len = sl->seg_len;
			sl->mem = sl->seg_mem;
			sl->direct = j->direct && sl->foff % PHX_PAGE == 0 &&
				     sl->len % PHX_PAGE == 0;
			sink_publish(e, sl); /* free: the stream fills it */
			continue;
		}
		if (j->err) {
			sl->foff = sl->seg_foff; /* nothing read: zeros */
			sink_publish(e, sl);
			continue;
		}
		if (j->direct) {
			/* the 4 KiB-aligned superset, from the slot's start */
			sl->direct = true;
			sl->foff = phx_align_down(sl->seg_foff, PHX_PAGE);
			sl->len = phx_align_up(sl->seg_foff + sl->seg_len,
					       PHX_PAGE) -
				  sl->foff;
			sl->mem = base;
		} else {
			sl->direct = false;
			sl->foff = sl->seg_foff;
			sl->len = sl->seg_len;
			sl->mem = sl->seg_mem;
		}
		phx_slot_prep_io(e, sl);
	}
}

/* Whether the stream is done with @sl. */
static bool sink_done(const struct phx_engine *e, const struct phx_slot *sl)
{
	const struct phx_sink *sink = sl->job->sink;

	/* copies that never made it onto the stream are not waited for */
	if (sl->seg >= __atomic_load_n(sink->live, __ATOMIC_ACQUIRE))
		return true;
	return phx_word_reached(&sink->freed[slot_index(e, sl)], sl->seq + 1);
}

/* A stream copies: poll its words and the disk. */
static int sink_poll_idle(struct phx_engine *e)
{
	struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 20000 };
	struct io_uring_cqe *cqe;
	int ret;

	if (!e->inflight) {
		phx_poll_backoff(e->idle_polls++);
		return 0;
	}
	/* I/O and stream copies both pending: look at the words often */
	ret = io_uring_wait_cqe_timeout(&e->uring, &cqe, &ts);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return phx_err(-ret, "io_uring_wait_cqe: %s", strerror(-ret));
	return 0;
}

/* A ring's jobs take its slots in sequence, one job after the other. */
static void sink_fill(struct phx_engine *e)
{
	struct phx_job *head;

	while ((head = phx_engine_next_job(e))) {
		sink_fill_job(e, head);
		if (sink_issuable(head))
			return; /* its next slot is not free yet */
	}
}

/* A sink's slots the stream is done with; returns how many. */
static unsigned int sink_consumed(struct phx_engine *e)
{
	unsigned int i, n = 0;

	for (i = 0; i < e->nslots; i++) {
		struct phx_slot *sl = &e->slots[i];

		/* the stream copies, not us: no driver call here */
		if (sl->state != PHX_SLOT_COPY || !sink_done(e, sl))
			continue;
		n++;
		if (sl->job->io->op == PHX_OP_READ)
			phx_slot_finish(e, sl);
		else if (sl->job->err)
			phx_slot_free(e, sl);
		else
			phx_slot_prep_io(e, sl);
	}
	return n;
}

static bool sink_busy(const struct phx_engine *e)
{
	for (unsigned int i = 0; i < e->nslots; i++)
		if (e->slots[i].state == PHX_SLOT_COPY)
			return true;
	return false;
}

static int sink_idle(struct phx_engine *e)
{
	if (sink_busy(e))
		return sink_poll_idle(e);
	return phx_engine_wait_io(e);
}

const struct phx_slot_consumer phx_sink_consumer = {
	.plan = sink_plan,
	.issuable = sink_issuable,
	.fill = sink_fill,
	.publish = sink_publish,
	.consumed = sink_consumed,
	.idle = sink_idle,
	.publish_failed = true,
};

/*
 * A job for @io that moves nothing and fails with @err: its segments
 * still take their slots in sequence and hand them to the stream (a
 * read's are zeros), since the stream waits for every one.  NULL when
 * out of host memory.
 */
static struct phx_job *sink_failed_job(struct phx_engine *e, struct phx_io *io,
				       struct phx_sink *sink, int err)
{
	struct phx_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	io->result = 0;
	io->path = PHX_PATH_NONE;
	j->io = io;
	j->sink = sink;
	j->err = err;
	/* the values were checked when the transfer was queued */
	j->start = (uint64_t)io->file_off;
	j->end = j->start + io->len;
	j->nsegs = (unsigned int)phx_sink_nsegs(j->start, io->len, e->chunk);
	return j;
}

int phx_engine_sink_queue(struct phx_engine *e, struct phx_io *io,
			  struct phx_sink *sink, int err)
{
	struct phx_job *j = NULL;
	int ret = err;

	if (!ret) {
		ret = phx_job_make(e, io, sink, &j);
		if (ret == -EAGAIN)
			return ret;
	}
	if (ret) {
		/* nothing moves, but its stream waits for every segment */
		j = sink_failed_job(e, io, sink, ret);
		if (!j)
			return -EAGAIN;
	}
	phx_engine_queue(e, j);
	return 0;
}
