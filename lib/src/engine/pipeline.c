/* SPDX-License-Identifier: MIT */
/*
 * pipeline.c - the io_uring transfer engine: its staging slots and the
 * job pipeline that moves them.
 *
 * An engine owns one io_uring, pinned staging cut into slots (registered
 * with io_uring as one fixed buffer and with the device), two copy
 * streams and an event per slot.  Each transfer (a "job") is cut into
 * segments of PHX_CHUNK_SIZE; each segment takes a free slot, has its
 * file I/O done through io_uring, and is handed to the engine's slot
 * consumer (struct phx_slot_consumer), which moves its bytes between the
 * slot and the device and gives the slot back: the engine's own copies
 * (staged.c) or a stream's (sink.c).  Reads of other slots are in flight
 * meanwhile, so disk and PCIe overlap.
 *
 * Data paths (enum phx_path):
 *   staged    O_DIRECT reads of the block-aligned superset of the range,
 *             so any offset and length work without the page cache;
 *   buffered  page-cache reads (the file is mostly cached, O_DIRECT is
 *             refused, the file system reads faster that way cold (a
 *             probe, staged.c and job.c), or PHX_DIRECT=off), punted to
 *             io_uring's workers so several copies out of the page cache
 *             run at once;
 *   p2p       the device memory is mapped (phx.ko) and aligned segments go
 *             straight between the file and the mapping, no staging.
 * Unaligned edges of writes go through the page cache, the middle O_DIRECT.
 *
 * Host memory is the staging, whatever the transfer size.  Engines are
 * pooled per device (transfer.c) and lent to synchronous calls, batches
 * and host copies; an engine is used by one thread at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine_i.h"

/* ---- engine lifetime ------------------------------------------------ */

void phx_engine_destroy(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	unsigned int i;

	phx_device_bind(dev);
	if (e->consumer && e->consumer->teardown)
		e->consumer->teardown(e);
	for (i = 0; i < PHX_NR_STREAMS; i++)
		if (e->streams[i]) {
			dev->ops->stream_sync(dev, e->streams[i]);
			dev->ops->stream_destroy(dev, e->streams[i]);
		}
	for (i = 0; i < e->nevents; i++)
		dev->ops->event_destroy(dev, e->slots[i].event);
	if (e->uring_ok)
		io_uring_queue_exit(&e->uring);
	if (e->staging && e->staging_lent) {
		phx_staging_give(dev, e->staging, e->staging_len);
		atomic_fetch_sub(&dev->staging, e->staging_len);
	} else if (e->staging) {
		if (e->pinned) {
			dev->ops->host_unregister(dev, e->staging);
			atomic_fetch_sub(&dev->pinned, e->staging_len);
		}
		munmap(e->staging, e->staging_len);
		atomic_fetch_sub(&dev->staging, e->staging_len);
	}
	free(e->slots);
	free(e->htod);
	free(e);
}

/*
 * Synchronous engines favour big requests (a few large transfers);
 * batches favour depth (many small ones), in the same staging size.
 * @staging: bytes, 0 for the configured size.  @depth: slots of a batch,
 * 0 for the configured queue depth.
 */
struct phx_engine_shape phx_shape_sync(size_t staging)
{
	const struct phx_settings *s = phx_settings();
	struct phx_engine_shape sh = { .chunk = s->chunk_size };

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
struct phx_engine_shape phx_shape_io(uint64_t len)
{
	const struct phx_settings *s = phx_settings();
	struct phx_engine_shape sh = { .nslots = 2 };

	if (len >= s->chunk_size / 2)
		return phx_shape_sync(0);
	sh.chunk = phx_align_up(len + 2 * PHX_PAGE, PHX_MIN_SLOT);
	return sh;
}

struct phx_engine_shape phx_shape_batch(unsigned int depth)
{
	const struct phx_settings *s = phx_settings();
	struct phx_engine_shape sh;

	sh.nslots =
		depth ? phx_min(depth, PHX_MAX_QUEUE_DEPTH) : s->queue_depth;
	sh.chunk = phx_align_down(s->staging_size / sh.nslots, PHX_PAGE);
	sh.chunk = phx_min(phx_max(sh.chunk, PHX_MIN_SLOT), s->chunk_size);
	return sh;
}

/* Bytes of the block an engine lent from it holds for @len of slots. */
static size_t lent_len(size_t len)
{
	return phx_align_up(len, phx_settings()->chunk_size);
}

/*
 * Whether @e's staging and io_uring can take shape @sh without
 * rebuilding (an engine of the block's may have to take back what it
 * gave: phx_engine_slice() says whether it could).
 */
bool phx_engine_fits(const struct phx_engine *e, struct phx_engine_shape sh)
{
	size_t have = e->staging_lent ? e->staging_cap : e->staging_len;

	return sh.nslots * sh.chunk <= have &&
	       sh.nslots * 2 <= e->uring_entries;
}

/*
 * Hold what @sh needs of the block, for an engine lent from it: grow
 * back into units given back (-EAGAIN where another engine has them
 * now) or give back the units past its slots, for other engines.
 */
static int lent_resize(struct phx_engine *e, struct phx_engine_shape sh)
{
	size_t keep = lent_len((size_t)sh.nslots * sh.chunk);

	if (keep > e->staging_len) {
		if (!phx_staging_take_at(e->dev, e->staging + e->staging_len,
					 keep - e->staging_len))
			return -EAGAIN;
		atomic_fetch_add(&e->dev->staging, keep - e->staging_len);
	} else if (keep < e->staging_len) {
		phx_staging_give(e->dev, e->staging + keep,
				 e->staging_len - keep);
		atomic_fetch_sub(&e->dev->staging, e->staging_len - keep);
	}
	e->staging_len = keep;
	return 0;
}

/*
 * Cut the staging into the slots of shape @sh, each with an event.  The
 * staging is one fixed buffer of the io_uring, so re-cutting it costs no
 * registration: only events for slots it never had.
 */
int phx_engine_slice(struct phx_engine *e, struct phx_engine_shape sh)
{
	struct phx_device *dev = e->dev;
	unsigned int i;
	int ret;

	if (e->staging_lent) {
		ret = lent_resize(e, sh);
		if (ret)
			return ret;
	}
	if (sh.nslots > e->nevents) {
		struct phx_slot *slots =
			realloc(e->slots, sh.nslots * sizeof(*slots));
		struct phx_htod *htod;

		if (!slots)
			return phx_err(ENOMEM,
				       "out of host memory for an engine");
		memset(slots + e->nevents, 0,
		       (sh.nslots - e->nevents) * sizeof(*slots));
		e->slots = slots;
		htod = realloc(e->htod, sh.nslots * sizeof(*htod));
		if (!htod)
			return phx_err(ENOMEM,
				       "out of host memory for an engine");
		e->htod = htod;
		for (i = e->nevents; i < sh.nslots; i++) {
			ret = dev->ops->event_create(dev, &slots[i].event);
			if (ret)
				return ret;
			e->nevents++;
		}
	}
	for (i = 0; i < sh.nslots; i++) {
		struct phx_slot *sl = &e->slots[i];

		sl->state = PHX_SLOT_FREE;
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

/*
 * Cut idle @e for @j, its next job: a read the page cache serves that is
 * longer than a slot runs on slots of PHX_HOT_CHUNK, so that more of
 * io_uring's workers copy out of the page cache at once and a slot
 * reaches the copy engine sooner; any other job runs on @home, the shape
 * @e's owner asked for (a synchronous call's, a batch's depth).  Nothing
 * may be in flight on @e.  Where the cut cannot change (an event short,
 * staging another engine took back) the old one stands.
 */
void phx_engine_fit(struct phx_engine *e, const struct phx_job *j,
		    struct phx_engine_shape home)
{
	struct phx_engine_shape sh = home;
	struct phx_engine_shape hot = {
		.chunk = PHX_HOT_CHUNK,
		.nslots = (unsigned int)phx_min(e->staging_len / PHX_HOT_CHUNK,
						PHX_MAX_SLOTS),
	};

	if (j->io->op == PHX_OP_READ && j->nregions == 1 &&
	    !j->region[0].direct && home.chunk > hot.chunk &&
	    hot.nslots > home.nslots && j->end - j->start > home.chunk &&
	    phx_engine_fits(e, hot))
		sh = hot;
	if (sh.nslots == e->nslots && sh.chunk == e->chunk)
		return;
	if (phx_engine_slice(e, sh))
		phx_err_clear();
}

/*
 * The engine's io_uring.  A read's completion is task work of the thread
 * that submitted it; by default the kernel interrupts that thread for it
 * (an inter-processor interrupt if it runs, per completion).  Engines
 * take it cooperatively instead (Linux 5.19 and later): the kernel flags
 * the work in the ring (IORING_SQ_TASKRUN) and the thread runs it when it
 * next enters the kernel, many completions at once: a waiting thread is
 * still woken, one that polls or copies is not interrupted, and the
 * pipeline looks at the flag each round (engine_step_once).  A thread
 * that waits for another's requests still gets them, once that one next
 * enters the kernel or is woken from a wait.  Older kernels: as before.
 */
static int engine_uring_init(struct phx_engine *e)
{
	struct io_uring_params p = {
		.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
	};
	int ret = io_uring_queue_init_params(e->uring_entries, &e->uring, &p);

	if (ret == -EINVAL)
		ret = io_uring_queue_init(e->uring_entries, &e->uring, 0);
	return ret;
}

/* Build an engine of shape @sh: io_uring, staging (pinned), streams, events. */
int phx_engine_create(struct phx_device *dev, struct phx_engine_shape sh,
		      const struct phx_slot_consumer *consumer,
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
	e->owner = getpid();
	e->consumer = consumer;
	TAILQ_INIT(&e->issue);
	STAILQ_INIT(&e->done);

	/* Room for any cut of up to PHX_MAX_SLOTS without a new io_uring. */
	e->uring_entries = phx_max(sh.nslots, PHX_MAX_SLOTS) * 2;
	ret = engine_uring_init(e);
	if (ret) {
		ret = phx_err(
			-ret,
			"%s: io_uring unavailable: %s; is io_uring disabled (kernel.io_uring_disabled)?",
			dev->name, strerror(-ret));
		goto out;
	}
	e->uring_ok = true;

	e->staging_len = (size_t)(sh.nslots * sh.chunk);
	e->staging = phx_staging_take(dev, e->staging_len);
	e->staging_lent = e->staging;
	if (e->staging_lent)
		e->staging_len = e->staging_cap = lent_len(e->staging_len);
	else
		e->staging = phx_staging_alloc(dev, e->staging_len);
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
		   !io_uring_register_buffers(&e->uring, &iov, 1);

	ret = phx_device_bind(dev);
	if (ret)
		goto out;
	if (e->staging_lent) {
		e->pinned = true; /* with the block, counted there */
	} else if (!dev->ops->host_register(dev, e->staging, e->staging_len)) {
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

void phx_job_complete(struct phx_engine *e, struct phx_job *j)
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
		if (j->by_path[p])
			atomic_fetch_add(&dev->bytes[p], j->by_path[p]);
	atomic_fetch_add(&dev->ios, 1);
	if (j->err)
		atomic_fetch_add(&dev->errors, 1);
	if (j->fde)
		phx_fd_put(j->fde);
	STAILQ_INSERT_TAIL(&e->done, j, done);
}

void phx_job_fail(struct phx_job *j, int err)
{
	if (!j->err)
		j->err = err;
}

/*
 * @sl's I/O failed with @err: the job fails and the slot is released; a
 * read whose consumer waits for every segment (a stream) still hands the
 * slot over.
 */
static void slot_fail(struct phx_engine *e, struct phx_slot *sl, int err)
{
	phx_job_fail(sl->job, err);
	sl->copied = 0;
	if (e->consumer->publish_failed && sl->job->io->op == PHX_OP_READ)
		e->consumer->publish(e, sl);
	else
		phx_slot_free(e, sl);
}

/* ---- the pipeline --------------------------------------------------- */

struct phx_job *phx_engine_next_job(struct phx_engine *e)
{
	struct phx_job *j;

	while ((j = TAILQ_FIRST(&e->issue)) && !e->consumer->issuable(j)) {
		TAILQ_REMOVE(&e->issue, j, issue);
		j->queued = false;
	}
	return j;
}

void phx_slot_prep_io(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->uring);
	int fd = sl->direct ? j->fde->direct_fd : j->fde->buffered_fd;
	char *mem = (sl->target ? sl->target : sl->mem) + sl->done;
	unsigned int n = (unsigned int)(sl->len - sl->done);
	uint64_t off = sl->foff + sl->done;

	/* The io_uring has twice as many entries as slots: never NULL. */
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
	sl->state = PHX_SLOT_IO;
	e->to_submit++;
}

void phx_slot_free(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;

	sl->state = PHX_SLOT_FREE;
	sl->job = NULL;
	sl->target = NULL;
	if (--j->pending == 0 && !e->consumer->issuable(j))
		phx_job_complete(e, j);
}

/* Account a finished segment and release the slot. */
void phx_slot_finish(struct phx_engine *e, struct phx_slot *sl)
{
	struct phx_job *j = sl->job;
	enum phx_path p = sl->target ? PHX_PATH_P2P :
			  sl->direct ? PHX_PATH_STAGED :
				       PHX_PATH_BUFFERED;

	j->moved += sl->copied;
	j->by_path[p] += sl->copied;
	phx_slot_free(e, sl);
}

static void engine_cqe(struct phx_engine *e, struct io_uring_cqe *cqe)
{
	struct phx_slot *sl = io_uring_cqe_get_data(cqe);
	struct phx_job *j = sl->job;
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
			e->consumer->publish(e, sl);
		}
	} else {
		phx_slot_finish(e, sl);
	}
}

/* Whether completions wait as this thread's task work (see engine_uring_init). */
static bool engine_taskrun(const struct phx_engine *e)
{
	return IO_URING_READ_ONCE(*e->uring.sq.kflags) & IORING_SQ_TASKRUN;
}

bool phx_engine_io_ready(struct phx_engine *e, bool *run_tw)
{
	if (io_uring_cq_ready(&e->uring))
		return true;
	if (!*run_tw || !engine_taskrun(e))
		return false;
	io_uring_get_events(&e->uring);
	if (io_uring_cq_ready(&e->uring))
		return true;
	*run_tw = false;
	return false;
}

/*
 * One round of the pipeline: issue, submit, move on what the consumer
 * is done with, reap every completion there is (the consumer hands on
 * the reads' bytes together at the round's end).  With @block it sleeps
 * until something happens (unless the engine is polled, which spins
 * instead).
 */
static int engine_step_once(struct phx_engine *e, bool block)
{
	struct io_uring_cqe *cqe;
	unsigned int progressed = 0, head, seen;
	int ret;

	e->consumer->fill(e);
	if (e->to_submit) {
		ret = io_uring_submit(&e->uring);
		if (ret < 0)
			return phx_err(-ret, "io_uring_submit: %s",
				       strerror(-ret));
		e->inflight += e->to_submit;
		e->to_submit = 0;
	}
	progressed += e->consumer->consumed(e);

	/* all of them into this round (a submit above ran them already) */
	if (e->inflight && engine_taskrun(e))
		io_uring_get_events(&e->uring);
	seen = 0;
	io_uring_for_each_cqe(&e->uring, head, cqe) {
		engine_cqe(e, cqe);
		seen++;
	}
	io_uring_cq_advance(&e->uring, seen);
	if (e->consumer->flush)
		e->consumer->flush(e);
	progressed += seen;

	if (progressed || !block || e->polled || e->to_submit) {
		e->idle_polls = 0;
		return 0;
	}
	return e->consumer->idle(e);
}

int phx_engine_wait_io(struct phx_engine *e)
{
	struct io_uring_cqe *cqe;
	int ret;

	if (e->inflight) {
		ret = io_uring_wait_cqe(&e->uring, &cqe);
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

void phx_engine_queue(struct phx_engine *e, struct phx_job *j)
{
	e->nactive++;
	if (!e->consumer->issuable(j)) {
		phx_job_complete(e, j); /* nothing to move */
		return;
	}
	TAILQ_INSERT_TAIL(&e->issue, j, issue);
	j->queued = true;
}

struct phx_io *phx_engine_reap(struct phx_engine *e)
{
	struct phx_job *j = STAILQ_FIRST(&e->done);
	struct phx_io *io;

	if (!j)
		return NULL;
	STAILQ_REMOVE_HEAD(&e->done, done);
	io = j->io;
	free(j);
	return io;
}

void phx_engine_slots(const struct phx_engine *e, char **staging,
		      unsigned int *nslots, uint64_t *chunk, bool *pinned)
{
	*staging = e->staging;
	*nslots = e->nslots;
	*chunk = e->chunk;
	*pinned = e->pinned;
}
