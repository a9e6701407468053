/* SPDX-License-Identifier: MIT */
/*
 * sink.c - the engine's stream sink: the slots of a stream-ordered
 * transfer, handed to the stream that copies them.
 *
 * phx_io_enqueue() queues, on the caller's stream, one copy-engine copy
 * per segment of the transfer between the device buffer and a fixed slot
 * of a ring, each between a wait and a store on words of mapped host
 * memory (stream.c, ring.c).  The engine here fills the ring in sequence
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
	*slot_off = s % PHX_DIO_ALIGN;
}

int phx_sink_plan(struct phx_engine *e, struct job *j)
{
	bool direct;
	int ret = phx_job_direct(e, j, &direct);

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
	j->nregions = 1; /* something to move: see phx_engine_queue() */
	return 0;
}

static unsigned int slot_index(const struct phx_engine *e,
			       const struct slot *sl)
{
	return (unsigned int)(sl - e->slots);
}

void phx_sink_publish(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;

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
	sl->state = SLOT_COPY;
	phx_word_store(&j->sink->ready[slot_index(e, sl)], sl->seq + 1);
}

void phx_sink_fill(struct phx_engine *e, struct job *j)
{
	while (j->seg < j->nsegs) {
		uint32_t q = j->sink->seq + j->seg;
		unsigned int i = q % e->nslots;
		struct slot *sl = &e->slots[i];
		char *base = e->staging + (size_t)i * e->chunk;
		uint64_t off;

		if (sl->state != SLOT_FREE)
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
			sl->direct = j->direct &&
				     sl->foff % PHX_DIO_ALIGN == 0 &&
				     sl->len % PHX_DIO_ALIGN == 0;
			phx_sink_publish(e, sl); /* free: the stream fills it */
			continue;
		}
		if (j->err) {
			sl->foff = sl->seg_foff; /* nothing read: zeros */
			phx_sink_publish(e, sl);
			continue;
		}
		if (j->direct) {
			/* the 4 KiB-aligned superset, from the slot's start */
			sl->direct = true;
			sl->foff = phx_align_down(sl->seg_foff, PHX_DIO_ALIGN);
			sl->len = phx_align_up(sl->seg_foff + sl->seg_len,
					       PHX_DIO_ALIGN) -
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

bool phx_sink_consumed(const struct phx_engine *e, const struct slot *sl)
{
	const struct phx_sink *sink = sl->job->sink;

	/* copies that never made it onto the stream are not waited for */
	if (sl->seg >= __atomic_load_n(sink->live, __ATOMIC_ACQUIRE))
		return true;
	return phx_word_reached(&sink->freed[slot_index(e, sl)], sl->seq + 1);
}

struct job *phx_sink_failed_job(struct phx_engine *e, struct phx_io *io,
				struct phx_sink *sink, int err)
{
	struct job *j = calloc(1, sizeof(*j));

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
	j->nregions = j->nsegs ? 1 : 0;
	return j;
}

int phx_sink_idle(struct phx_engine *e)
{
	struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 20000 };
	struct io_uring_cqe *cqe;
	int ret;

	if (!e->inflight) {
		phx_poll_backoff(e->sink_polls++);
		return 0;
	}
	/* I/O and stream copies both pending: look at the words often */
	ret = io_uring_wait_cqe_timeout(&e->ring, &cqe, &ts);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return phx_err(-ret, "io_uring_wait_cqe: %s", strerror(-ret));
	return 0;
}
