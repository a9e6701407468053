/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the io_uring transfer engine: staging, slots, the job pipeline.
 *
 * An engine owns one io_uring, a ring of pinned staging slots (registered
 * with io_uring as fixed buffers and with the device), a few copy streams
 * and an event per slot.  Each transfer (a "job") is cut into segments of
 * PHX_CHUNK_SIZE.  A read segment is read from the file into a slot and,
 * once the read completes, copied to the device asynchronously while
 * other slots are still reading, so disk and PCIe overlap.  Writes are the
 * mirror image: device-to-slot copy, then the file write.
 *
 * Data paths:
 *   staged    O_DIRECT reads of the block-aligned superset of the range,
 *             so any offset and length work without the page cache;
 *   buffered  page-cache reads (the file is mostly cached, O_DIRECT is
 *             refused, or PHX_DIRECT=off), punted to io_uring's workers so
 *             several copies out of the page cache run at once;
 *   p2p       the device memory is mapped (phx.ko) and aligned segments go
 *             straight between the file and the mapping, no staging.
 * Unaligned edges of writes go through the page cache, the middle O_DIRECT.
 *
 * Host memory is the staging ring, whatever the transfer size.  Engines
 * are pooled per device (transfer.c) and lent to synchronous calls,
 * batches and host copies; an engine is used by one thread at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_i.h"

/* ---- engine lifetime ------------------------------------------------ */

#define PHX_MPOL_PREFERRED 1

/*
 * Allocate staging memory on the host node nearest the device, so the
 * device's DMA does not cross the socket interconnect.  Single-node
 * machines (and unknown nodes) take the default policy.
 */
static void *staging_alloc(struct phx_device *dev, size_t len)
{
	unsigned long mask[16] = { 0 };
	int node = dev->numa_node;
	void *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (node >= 0 && node < 1024 &&
	    !access("/sys/devices/system/node/node1", F_OK)) {
		mask[node / 64] = 1UL << (node % 64);
		/* a preference, not a hard binding: best effort */
		syscall(SYS_mbind, p, len, PHX_MPOL_PREFERRED, mask, 1024UL,
			0U);
	}
	memset(p, 0, len); /* fault it in now, where the policy says */
	return p;
}

void phx_engine_destroy(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	unsigned int i;

	phx_device_bind(dev);
	for (i = 0; i < PHX_NR_STREAMS; i++)
		if (e->streams[i]) {
			dev->ops->stream_sync(dev, e->streams[i]);
			dev->ops->stream_destroy(dev, e->streams[i]);
		}
	for (i = 0; i < e->nevents; i++)
		dev->ops->event_destroy(dev, e->slots[i].event);
	if (e->ring_ok)
		io_uring_queue_exit(&e->ring);
	if (e->staging) {
		if (e->pinned) {
			dev->ops->host_unregister(dev, e->staging);
			atomic_fetch_sub(&dev->pinned, e->staging_len);
		}
		munmap(e->staging, e->staging_len);
		atomic_fetch_sub(&dev->staging, e->staging_len);
	}
	free(e->slots);
	free(e);
}

/*
 * Synchronous engines favour big requests (a few large transfers);
 * batches favour depth (many small ones), in the same staging size.
 * @staging: bytes, 0 for the configured size.  @depth: slots of a batch,
 * 0 for the configured queue depth.
 */
struct engine_shape phx_shape_sync(size_t staging)
{
	const struct phx_settings *s = phx_settings();
	struct engine_shape sh = { .chunk = s->chunk_size };

	if (!staging)
		staging = s->staging_size;
	sh.nslots = (unsigned int)phx_max(staging / sh.chunk, 1);
	return sh;
}

/*
 * A synchronous transfer of @len bytes: one smaller than a slot takes two
 * slots its size (it may straddle a slot boundary of the file), so that
 * a process's first small transfer pins a few KiB, not the staging; a
 * pooled engine of any size re-cuts to this in no time.
 */
struct engine_shape phx_shape_io(uint64_t len)
{
	const struct phx_settings *s = phx_settings();
	struct engine_shape sh = { .nslots = 2 };

	if (len >= s->chunk_size / 2)
		return phx_shape_sync(0);
	sh.chunk = phx_align_up(len + 2 * PHX_DIO_ALIGN, 64 << 10);
	return sh;
}

struct engine_shape phx_shape_batch(unsigned int depth)
{
	const struct phx_settings *s = phx_settings();
	struct engine_shape sh;

	sh.nslots = depth ? phx_min(depth, 4096u) : s->queue_depth;
	sh.chunk = phx_align_down(s->staging_size / sh.nslots, 4096);
	sh.chunk = phx_min(phx_max(sh.chunk, 64 << 10), s->chunk_size);
	return sh;
}

/* Whether @e's staging and ring can take shape @sh without rebuilding. */
bool phx_engine_fits(const struct phx_engine *e, struct engine_shape sh)
{
	return sh.nslots * sh.chunk <= e->staging_len &&
	       sh.nslots * 2 <= e->ring_entries;
}

/*
 * Cut the staging into the slots of shape @sh, each with an event.  The
 * staging is one fixed buffer of the ring, so re-cutting it costs no
 * registration: only events for slots it never had.
 */
int phx_engine_slice(struct phx_engine *e, struct engine_shape sh)
{
	struct phx_device *dev = e->dev;
	unsigned int i;
	int ret;

	if (sh.nslots > e->nevents) {
		struct slot *slots =
			realloc(e->slots, sh.nslots * sizeof(*slots));

		if (!slots)
			return phx_err(ENOMEM,
				       "out of host memory for an engine");
		memset(slots + e->nevents, 0,
		       (sh.nslots - e->nevents) * sizeof(*slots));
		e->slots = slots;
		for (i = e->nevents; i < sh.nslots; i++) {
			ret = dev->ops->event_create(dev, &slots[i].event);
			if (ret)
				return ret;
			e->nevents++;
		}
	}
	for (i = 0; i < sh.nslots; i++) {
		struct slot *sl = &e->slots[i];

		sl->state = SLOT_FREE;
		sl->job = NULL;
		sl->target = NULL;
		sl->mem = e->staging + (size_t)i * sh.chunk;
		sl->sidx = i % PHX_NR_STREAMS;
		sl->stream = e->streams[sl->sidx];
	}
	e->nslots = sh.nslots;
	e->chunk = sh.chunk;
	return 0;
}

/* Build an engine of shape @sh: ring, staging (pinned), streams, events. */
int phx_engine_create(struct phx_device *dev, struct engine_shape sh,
		      struct phx_engine **out)
{
	struct phx_engine *e;
	struct iovec iov;
	unsigned int i;
	int ret;

	e = calloc(1, sizeof(*e));
	if (!e)
		return phx_err(ENOMEM, "out of host memory for an engine");
	e->dev = dev;
	TAILQ_INIT(&e->issue);
	STAILQ_INIT(&e->done);

	/* Room for batches of up to 64 slots to re-cut it without a new ring. */
	e->ring_entries = phx_max(sh.nslots, 64u) * 2;
	ret = io_uring_queue_init(e->ring_entries, &e->ring, 0);
	if (ret) {
		ret = phx_err(
			-ret,
			"%s: io_uring unavailable: %s; is io_uring disabled (kernel.io_uring_disabled)?",
			dev->name, strerror(-ret));
		goto out;
	}
	e->ring_ok = true;

	e->staging_len = (size_t)(sh.nslots * sh.chunk);
	e->staging = staging_alloc(dev, e->staging_len);
	if (!e->staging) {
		ret = phx_err(ENOMEM,
			      "%s: cannot allocate %zu bytes of staging memory",
			      dev->name, e->staging_len);
		goto out;
	}
	atomic_fetch_add(&dev->staging, e->staging_len);
	/*
	 * One fixed buffer for the whole staging saves a page pin per I/O
	 * whatever the slots; optional (memlock limits, io_uring's 1 GiB
	 * cap on a buffer).
	 */
	iov.iov_base = e->staging;
	iov.iov_len = e->staging_len;
	e->fixed = e->staging_len <= (1UL << 30) &&
		   !io_uring_register_buffers(&e->ring, &iov, 1);

	ret = phx_device_bind(dev);
	if (ret)
		goto out;
	if (!dev->ops->host_register(dev, e->staging, e->staging_len)) {
		e->pinned = true;
		atomic_fetch_add(&dev->pinned, e->staging_len);
	}
	for (i = 0; i < PHX_NR_STREAMS; i++) {
		ret = dev->ops->stream_create(dev, &e->streams[i]);
		if (ret)
			goto out;
	}
	ret = phx_engine_slice(e, sh);
	if (ret)
		goto out;
	atomic_fetch_add(&dev->engines_built, 1);
	*out = e;
	return 0;
out:
	phx_engine_destroy(e);
	return ret;
}

/* ---- jobs ----------------------------------------------------------- */

static void job_complete(struct phx_engine *e, struct job *j)
{
	struct phx_device *dev = e->dev;
	unsigned int p, best = PHX_PATH_NONE;

	if (j->queued) {
		TAILQ_REMOVE(&e->issue, j, issue);
		j->queued = false;
	}
	e->nactive--;

	for (p = 1; p < PHX_PATH_COUNT; p++)
		if (j->by_path[p] > j->by_path[best])
			best = p;
	j->io->path = (enum phx_path)best;
	j->io->result = j->err ? j->err : (int64_t)j->moved;
	for (p = 1; p < PHX_PATH_COUNT; p++)
		atomic_fetch_add(&dev->bytes[p], j->by_path[p]);
	atomic_fetch_add(&dev->ios, 1);
	if (j->err)
		atomic_fetch_add(&dev->errors, 1);
	if (j->fde)
		phx_fd_put(j->fde);
	STAILQ_INSERT_TAIL(&e->done, j, done);
}

static bool job_issuable(const struct job *j)
{
	/* a stream waits for every segment of a sink job, failed or not */
	if (j->sink)
		return j->seg < j->nsegs;
	return !j->err && !j->eof && j->cur < j->nregions;
}

static void job_fail(struct job *j, int err)
{
	if (!j->err)
		j->err = err;
}

/*
 * @sl's I/O failed with @err: the job fails and the slot is released; a
 * stream-ordered read still hands the slot over, since its stream waits
 * for every segment.
 */
static void slot_fail(struct phx_engine *e, struct slot *sl, int err)
{
	job_fail(sl->job, err);
	sl->copied = 0;
	if (sl->job->sink && sl->job->io->op == PHX_OP_READ)
		phx_sink_publish(e, sl);
	else
		phx_slot_free(e, sl);
}

/* ---- the pipeline --------------------------------------------------- */

/* The oldest job with segments to issue; drops the ones that have none. */
static struct job *next_issuable(struct phx_engine *e)
{
	struct job *j;

	while ((j = TAILQ_FIRST(&e->issue)) && !job_issuable(j)) {
		TAILQ_REMOVE(&e->issue, j, issue);
		j->queued = false;
	}
	return j;
}

void phx_slot_prep_io(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
	int fd = sl->direct ? j->fde->direct_fd : j->fde->buffered_fd;
	char *mem = (sl->target ? sl->target : sl->mem) + sl->done;
	unsigned int n = (unsigned int)(sl->len - sl->done);
	uint64_t off = sl->foff + sl->done;

	/* The ring has twice as many entries as slots: never NULL. */
	if (j->io->op == PHX_OP_READ) {
		if (e->fixed && !sl->target)
			io_uring_prep_read_fixed(sqe, fd, mem, n, off, 0);
		else
			io_uring_prep_read(sqe, fd, mem, n, off);
	} else {
		if (e->fixed && !sl->target)
			io_uring_prep_write_fixed(sqe, fd, mem, n, off, 0);
		else
			io_uring_prep_write(sqe, fd, mem, n, off);
	}
	/* Page-cache copies run in parallel on io_uring's workers. */
	if (!sl->direct)
		sqe->flags |= IOSQE_ASYNC;
	io_uring_sqe_set_data(sqe, sl);
	sl->state = SLOT_IO;
	e->to_submit++;
}

void phx_slot_free(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;

	sl->state = SLOT_FREE;
	sl->job = NULL;
	sl->target = NULL;
	if (--j->pending == 0 && !job_issuable(j))
		job_complete(e, j);
}

/* Account a finished segment and release the slot. */
void phx_slot_finish(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;
	enum phx_path p = sl->target ? PHX_PATH_P2P :
			  sl->direct ? PHX_PATH_STAGED :
				       PHX_PATH_BUFFERED;

	j->moved += sl->copied;
	j->by_path[p] += sl->copied;
	phx_slot_free(e, sl);
}

/* Start a device copy for @sl; the slot completes when its event fires. */
static void slot_copy(struct phx_engine *e, struct slot *sl, bool to_device)
{
	struct phx_device *dev = e->dev;
	struct job *j = sl->job;
	uint64_t cs, ce;
	int ret;

	if (j->sink) {
		phx_sink_publish(e, sl);
		return;
	}
	if (to_device) {
		cs = phx_max(sl->foff, j->start);
		ce = phx_min(sl->foff + sl->done, j->end);
	} else {
		cs = sl->foff;
		ce = sl->foff + sl->len;
	}
	sl->copied = ce > cs ? ce - cs : 0;
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
		job_fail(j, ret);
		sl->copied = 0;
		phx_slot_free(e, sl);
		return;
	}
	sl->state = SLOT_COPY;
	sl->copy_next = NULL;
	if (e->copyq[sl->sidx])
		e->copyq_tail[sl->sidx]->copy_next = sl;
	else
		e->copyq[sl->sidx] = sl;
	e->copyq_tail[sl->sidx] = sl;
}

/* Give free slots to jobs with segments left. */
static void engine_fill(struct phx_engine *e)
{
	struct job *head = next_issuable(e);
	unsigned int i;

	/* a ring's jobs take its slots in sequence, one job after the other */
	if (head && head->sink) {
		do {
			phx_sink_fill(e, head);
			if (job_issuable(head))
				return; /* its next slot is not free yet */
		} while ((head = next_issuable(e)));
		return;
	}
	for (i = 0; i < e->nslots; i++) {
		struct slot *sl = &e->slots[i];
		struct job_region *r;
		struct job *j;
		uint64_t seg_end;

		if (sl->state != SLOT_FREE)
			continue;
		j = next_issuable(e);
		if (!j)
			return;
		r = &j->region[j->cur];
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

static void engine_cqe(struct phx_engine *e, struct io_uring_cqe *cqe)
{
	struct slot *sl = io_uring_cqe_get_data(cqe);
	struct job *j = sl->job;
	int res = cqe->res;

	e->inflight--;
	if (res == -EINVAL && sl->direct) {
		/* O_DIRECT refused after all (FUSE, odd alignment): page cache */
		int bfd = phx_fd_buffered(j->fde);

		if (bfd >= 0 && !sl->target) {
			sl->direct = false;
			phx_slot_prep_io(e, sl);
			return;
		}
	}
	if (res == -EAGAIN || res == -EINTR) {
		phx_slot_prep_io(e, sl);
		return;
	}
	if (res < 0) {
		slot_fail(e, sl,
			  phx_err(-res, "%s fd %d at offset %llu: %s",
				  j->io->op == PHX_OP_READ ? "reading" :
							     "writing",
				  j->fde->user_fd,
				  (unsigned long long)(sl->foff + sl->done),
				  strerror(-res)));
		return;
	}
	sl->done += (uint64_t)res;
	if (sl->done < sl->len) {
		if (j->io->op == PHX_OP_READ &&
		    (res == 0 || sl->foff + sl->done >= j->fde->size)) {
			j->eof = true; /* short read at end of file */
		} else if (res > 0) {
			phx_slot_prep_io(e, sl);
			return;
		} else {
			slot_fail(
				e, sl,
				phx_err(EIO,
					"writing fd %d: no progress at offset %llu",
					j->fde->user_fd,
					(unsigned long long)(sl->foff +
							     sl->done)));
			return;
		}
	}
	if (j->io->op == PHX_OP_READ) {
		if (sl->target) {
			sl->copied = phx_min(sl->foff + sl->done, j->end) -
				     phx_min(sl->foff, j->end);
			phx_slot_finish(e, sl);
		} else {
			slot_copy(e, sl, true);
		}
	} else {
		phx_slot_finish(e, sl);
	}
}

/* A sink's slots the stream is done with; returns how many. */
static unsigned int sink_poll(struct phx_engine *e)
{
	unsigned int i, n = 0;

	for (i = 0; i < e->nslots; i++) {
		struct slot *sl = &e->slots[i];

		/* the stream copies, not us: no driver call here */
		if (sl->state != SLOT_COPY || !phx_sink_consumed(e, sl))
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

/*
 * Progress copies whose events fired, oldest first on each stream, up to
 * the first still running; returns how many did.
 */
static unsigned int engine_poll_copies(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	unsigned int s, n = 0;
	struct slot *sl;
	int ret;

	for (s = 0; s < PHX_NR_STREAMS; s++) {
		while ((sl = e->copyq[s])) {
			ret = dev->ops->event_query(dev, sl->event);
			if (ret == -EAGAIN)
				break;
			e->copyq[s] = sl->copy_next;
			n++;
			if (ret) {
				job_fail(sl->job, ret);
				sl->copied = 0;
				phx_slot_free(e, sl);
			} else if (sl->job->io->op == PHX_OP_WRITE) {
				phx_slot_prep_io(e, sl);
			} else {
				phx_slot_finish(e, sl);
			}
		}
	}
	return n;
}

/* The oldest device copy in flight, or NULL. */
static struct slot *oldest_copy(struct phx_engine *e)
{
	for (unsigned int s = 0; s < PHX_NR_STREAMS; s++)
		if (e->copyq[s])
			return e->copyq[s];
	return NULL;
}

static bool sink_busy(const struct phx_engine *e)
{
	for (unsigned int i = 0; i < e->nslots; i++)
		if (e->slots[i].state == SLOT_COPY && e->slots[i].job->sink)
			return true;
	return false;
}

/*
 * One round of the pipeline.  With @block it sleeps until something
 * happens (unless the engine is polled, which spins instead).
 */
static int engine_step_once(struct phx_engine *e, bool block)
{
	struct io_uring_cqe *cqe;
	unsigned int progressed = 0, head, seen;
	struct slot *sl;
	int ret;

	engine_fill(e);
	if (e->to_submit) {
		ret = io_uring_submit(&e->ring);
		if (ret < 0)
			return phx_err(-ret, "io_uring_submit: %s",
				       strerror(-ret));
		e->inflight += e->to_submit;
		e->to_submit = 0;
	}
	progressed += engine_poll_copies(e);
	if (e->sink_ring)
		progressed += sink_poll(e);

	seen = 0;
	io_uring_for_each_cqe(&e->ring, head, cqe) {
		engine_cqe(e, cqe);
		seen++;
	}
	io_uring_cq_advance(&e->ring, seen);
	progressed += seen;

	if (progressed || !block || e->polled || e->to_submit) {
		e->sink_polls = 0;
		return 0;
	}

	/* Copies are short next to disk reads: wait on them first. */
	if (e->sink_ring && sink_busy(e))
		return phx_sink_idle(e); /* a stream copies: poll */
	sl = oldest_copy(e);
	if (sl) {
		ret = e->dev->ops->event_sync(e->dev, sl->event);
		return ret;
	}
	if (e->inflight) {
		ret = io_uring_wait_cqe(&e->ring, &cqe);
		if (ret < 0 && ret != -EINTR)
			return phx_err(-ret, "io_uring_wait_cqe: %s",
				       strerror(-ret));
	}
	return 0;
}

/* A failed step leaves requests in flight: the engine is not lent again. */
int phx_engine_step(struct phx_engine *e, bool block)
{
	int ret = engine_step_once(e, block);

	if (ret)
		e->broken = true;
	return ret;
}

bool phx_engine_busy(const struct phx_engine *e)
{
	return e->nactive > 0;
}

/* Run until @j completes (and no request of it is left in flight). */
static int engine_run_job(struct phx_engine *e, struct job *j)
{
	int ret;

	while (phx_engine_busy(e)) {
		ret = phx_engine_step(e, true);
		if (ret)
			return ret;
	}
	return 0;
}

void phx_engine_queue(struct phx_engine *e, struct job *j)
{
	e->nactive++;
	if (!j->nregions) {
		job_complete(e, j); /* nothing to move */
		return;
	}
	TAILQ_INSERT_TAIL(&e->issue, j, issue);
	j->queued = true;
}

/* Run @io to completion on @e, which nothing else uses meanwhile. */
int64_t phx_engine_run(struct phx_engine *e, struct phx_io *io)
{
	struct job *j;
	int ret;

	ret = phx_job_make(e, io, NULL, &j);
	if (ret) {
		atomic_fetch_add(&e->dev->errors, 1);
		return io->result = ret;
	}
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

int phx_engine_sink_queue(struct phx_engine *e, struct phx_io *io,
			  struct phx_sink *sink, int err)
{
	struct job *j = NULL;
	int ret = err;

	if (!ret) {
		ret = phx_job_make(e, io, sink, &j);
		if (ret == -EAGAIN)
			return ret;
	}
	if (ret) {
		/* nothing moves, but its stream waits for every segment */
		j = phx_sink_failed_job(e, io, sink, ret);
		if (!j)
			return -EAGAIN;
	}
	phx_engine_queue(e, j);
	return 0;
}

struct phx_io *phx_engine_reap(struct phx_engine *e)
{
	struct job *j = STAILQ_FIRST(&e->done);
	struct phx_io *io;

	if (!j)
		return NULL;
	STAILQ_REMOVE_HEAD(&e->done, done);
	io = j->io;
	free(j);
	return io;
}

void phx_engine_ring(const struct phx_engine *e, char **staging,
		     unsigned int *nslots, uint64_t *chunk, bool *pinned)
{
	*staging = e->staging;
	*nslots = e->nslots;
	*chunk = e->chunk;
	*pinned = e->pinned;
}
