/* SPDX-License-Identifier: MIT */
/*
 * readers.c - a long read the page cache serves, on several threads.
 *
 * In the pipeline (pipeline.c) one thread reaps every slot's read and
 * queues every slot's device copy, so a slot that io_uring's worker has
 * filled waits for that thread before its bytes move on.  For a read
 * served by the page cache the copy out of the cache is the CPU's work
 * and the rest is the copy engine's, so when an engine's next jobs are
 * such reads, not yet started, of at least its staging's length together
 * (run_jobs()), and nothing is in flight, the pipeline's fill (staged.c)
 * lends the engine's staging to reader threads of its own instead,
 * PHX_HOT_READERS of them with the calling thread: two slots per reader,
 * and each reader takes the file's next piece, reads it into its free
 * slot with pread() and queues the slot's device copy at once on its own
 * stream, reading the next piece into its other slot meanwhile.  Such
 * jobs queued one after another (a loader's pieces of a file, a copy's
 * steps) run together, the readers going on from one job's pieces to the
 * next's without waiting for each other.
 * The jobs are complete when the call returns, as io_uring completes a
 * cached read within its submission: a synchronous read, a batch's
 * submit or wait, a stream worker's transfer.  A failed read fails its
 * own job; a failed device copy fails every job of the run.  The staging
 * and its pinning are the engine's: host memory stays at the same budget.
 *
 * The threads, their streams and events are made with the engine a
 * device builds at open, on its staging thread (phx_readers_prepare()),
 * so that a process's first load does not wait for them, and otherwise
 * by an engine's first such read; they are kept with the engine, which
 * one thread at a time uses, so one run at a time goes on them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_i.h"

/*
 * Each reader's slots; the bounds of a slot's size: a smaller copy costs
 * the copy engine more per byte, a larger one leaves readers idle at the
 * end of the read.
 */
#define PHX_READER_SLOTS 2
#define PHX_READER_PIECE_MIN (256u << 10)
#define PHX_READER_PIECE_MAX (4u << 20)
/* A thread's stack: a reader calls pread() and the backend's copy. */
#define PHX_READER_STACK (256u << 10)

/*
 * Jobs run together, at most this many: the readers go from one job's
 * pieces to the next's without waiting for each other in between.
 */
#define PHX_READER_JOBS 64

/* A job of a run and what became of it. */
struct phx_read_part {
	struct phx_job *job;
	uint64_t first; /* the run's index of its first piece */
	_Atomic uint64_t short_at; /* where the file ended (UINT64_MAX) */
	_Atomic int err; /* its first failure, negative errno */
};

/* Jobs the readers run together, piece by piece, in order. */
struct phx_read_run {
	struct phx_device *dev;
	uint64_t piece;
	char *staging;
	struct phx_read_part part[PHX_READER_JOBS];
	unsigned int nparts;
	uint64_t npieces;
	_Atomic uint64_t next; /* the next piece to take */
	_Atomic int broken; /* the device's failure: every job fails */
	_Atomic int msg_set;
	char msg[256]; /* the first failure's message */
};

struct phx_reader {
	struct phx_readers *rs;
	unsigned int index;
	void *stream;
	void *event[PHX_READER_SLOTS];
	unsigned int nevents;
	pthread_t tid;
	bool started;
};

struct phx_readers {
	pthread_mutex_t lock; /* protects everything below */
	pthread_cond_t go; /* a read for the threads, or stop */
	pthread_cond_t idle; /* the last thread finished its part */
	struct phx_read_run *run;
	uint64_t gen; /* reads handed out */
	unsigned int busy; /* threads still on the current read */
	unsigned int threads; /* threads started */
	bool stop;
	unsigned int n; /* readers: the calling thread's and the threads' */
	struct phx_reader r[];
};

/*
 * @p failed with @err, a negative errno (the calling thread's message
 * says why); the first failure's message is kept for the caller.  NULL
 * @p: the device failed, and with it every job of the run.
 */
static void run_fail(struct phx_read_run *run, struct phx_read_part *p, int err)
{
	int none = 0;

	atomic_compare_exchange_strong(p ? &p->err : &run->broken, &none, err);
	none = 0;
	if (atomic_compare_exchange_strong(&run->msg_set, &none, 1))
		snprintf(run->msg, sizeof(run->msg), "%s", phx_strerror_last());
}

/* Read up to @n bytes at @off: how many (fewer only at end of file). */
static int64_t read_piece(int fd, char *p, uint64_t n, uint64_t off)
{
	uint64_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return phx_err(
				errno,
				"read of fd %d at offset %llu failed: %s", fd,
				(unsigned long long)(off + got),
				strerror(errno));
		if (!r)
			break;
		got += (uint64_t)r;
	}
	return (int64_t)got;
}

/* The end of file @p's read found at @end, if before the one known. */
static void part_ended(struct phx_read_part *p, uint64_t end)
{
	uint64_t cur = atomic_load(&p->short_at);

	while (end < cur &&
	       !atomic_compare_exchange_weak(&p->short_at, &cur, end))
		;
}

/*
 * Reader @r's share of @run: the next piece, of whichever job, until
 * none is left or the device failed.  The pieces a reader takes only
 * grow, so the job it is on is found by walking forward.
 */
static void reader_run(struct phx_reader *r, struct phx_read_run *run)
{
	struct phx_device *dev = run->dev;
	bool used[PHX_READER_SLOTS] = { false };
	unsigned int k = 0, pi = 0;
	int ret = 0;

	for (;; k = (k + 1) % PHX_READER_SLOTS) {
		char *slot =
			run->staging +
			((size_t)r->index * PHX_READER_SLOTS + k) * run->piece;
		uint64_t idx, off, n;
		struct phx_read_part *p;
		struct phx_job *j;
		int64_t got;

		if (atomic_load(&run->broken))
			break;
		idx = atomic_fetch_add(&run->next, 1);
		if (idx >= run->npieces)
			break;
		while (pi + 1 < run->nparts && run->part[pi + 1].first <= idx)
			pi++;
		p = &run->part[pi];
		j = p->job;
		off = j->start + (idx - p->first) * run->piece;
		if (atomic_load(&p->err) || off >= atomic_load(&p->short_at))
			continue;
		n = phx_min(run->piece, j->end - off);
		/* the slot's last copy must have left it */
		if (used[k]) {
			ret = dev->ops->event_sync(dev, r->event[k]);
			if (ret)
				break;
			used[k] = false;
		}
		got = read_piece(j->fde->buffered_fd, slot, n, off);
		if (got < 0) {
			run_fail(run, p, (int)got);
			continue;
		}
		if ((uint64_t)got < n)
			part_ended(p, off + (uint64_t)got);
		if (!got)
			continue;
		ret = dev->ops->copy_htod(dev, j->dptr + (off - j->start), slot,
					  (uint64_t)got, r->stream);
		if (!ret)
			ret = dev->ops->event_record(dev, r->event[k],
						     r->stream);
		if (ret)
			break;
		used[k] = true;
	}
	/* every copy this reader queued has landed when it is done */
	if (!ret)
		ret = dev->ops->stream_sync(dev, r->stream);
	else
		dev->ops->stream_sync(dev, r->stream);
	if (ret)
		run_fail(run, NULL, ret);
}

static void *reader_thread(void *arg)
{
	struct phx_reader *r = arg;
	struct phx_readers *rs = r->rs;
	uint64_t seen = 0;
	bool bound = false;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		struct phx_read_run *run;

		while (!rs->stop && rs->gen == seen)
			pthread_cond_wait(&rs->go, &rs->lock);
		if (rs->stop)
			break;
		seen = rs->gen;
		run = rs->run;
		pthread_mutex_unlock(&rs->lock);
		if (!bound) {
			int ret = phx_device_bind(run->dev);

			if (ret)
				run_fail(run, NULL, ret);
			bound = !ret;
		}
		if (bound)
			reader_run(r, run);
		pthread_mutex_lock(&rs->lock);
		if (!--rs->busy)
			pthread_cond_signal(&rs->idle);
	}
	pthread_mutex_unlock(&rs->lock);
	return NULL;
}

/* Free reader @r's stream and events, those it has. */
static void reader_fini(struct phx_device *dev, struct phx_reader *r)
{
	for (unsigned int k = 0; k < r->nevents; k++)
		dev->ops->event_destroy(dev, r->event[k]);
	if (r->stream)
		dev->ops->stream_destroy(dev, r->stream);
	r->stream = NULL;
	r->nevents = 0;
}

/* Stop @rs's threads and free their streams and events. */
static void readers_stop(struct phx_device *dev, struct phx_readers *rs)
{
	pthread_mutex_lock(&rs->lock);
	rs->stop = true;
	pthread_cond_broadcast(&rs->go);
	pthread_mutex_unlock(&rs->lock);
	for (unsigned int i = 0; i < rs->n; i++) {
		if (rs->r[i].started)
			pthread_join(rs->r[i].tid, NULL);
		reader_fini(dev, &rs->r[i]);
	}
	pthread_mutex_destroy(&rs->lock);
	pthread_cond_destroy(&rs->go);
	pthread_cond_destroy(&rs->idle);
}

void phx_readers_destroy(struct phx_engine *e)
{
	struct phx_readers *rs = e->readers;

	e->readers = NULL;
	/*
	 * A child of fork() has the memory, not the threads or streams; the
	 * conditions still count the parent's threads waiting on them, so
	 * destroying them would wait for threads the child does not have.
	 */
	if (rs && e->owner == getpid())
		readers_stop(e->dev, rs);
	free(rs);
}

/* Reader @r's stream and events; 0 or a negative errno. */
static int reader_init(struct phx_device *dev, struct phx_reader *r)
{
	int ret = dev->ops->stream_create(dev, &r->stream);

	if (ret) {
		r->stream = NULL;
		return ret;
	}
	for (; r->nevents < PHX_READER_SLOTS; r->nevents++) {
		ret = dev->ops->event_create(dev, &r->event[r->nevents]);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * @e's readers, made the first time: @n of them, the calling thread's
 * first; fewer where threads could not start.  NULL where none can run
 * (the error cleared: the pipeline reads instead).
 */
static struct phx_readers *readers_get(struct phx_engine *e, unsigned int n)
{
	struct phx_readers *rs = e->readers;
	pthread_attr_t attr;
	unsigned int i;

	if (rs)
		return rs->n > 1 ? rs : NULL;
	rs = calloc(1, sizeof(*rs) + n * sizeof(rs->r[0]));
	if (!rs)
		return NULL;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->go, NULL);
	pthread_cond_init(&rs->idle, NULL);
	rs->n = n;
	e->readers = rs;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, PHX_READER_STACK);
	for (i = 0; i < n; i++) {
		struct phx_reader *r = &rs->r[i];

		r->rs = rs;
		r->index = i;
		if (reader_init(e->dev, r))
			break;
		if (i && pthread_create(&r->tid, &attr, reader_thread, r))
			break;
		/* named here, so that it has its name once this returns */
		if (i)
			pthread_setname_np(r->tid, "phx-reader");
		r->started = i > 0;
		rs->threads += i > 0;
	}
	pthread_attr_destroy(&attr);
	/* the readers past the first that could not start stay unused */
	if (i < n) {
		phx_err_clear();
		reader_fini(e->dev, &rs->r[i]);
		rs->n = i ? i : 1;
	}
	return rs->n > 1 ? rs : NULL;
}

/* How many readers @e's staging holds, as many as the setting asks. */
static unsigned int readers_count(const struct phx_engine *e)
{
	return (unsigned int)phx_min(
		phx_settings()->hot_readers,
		e->staging_len / (PHX_READER_SLOTS * PHX_READER_PIECE_MIN));
}

/*
 * Whether the readers could read @j: a read the page cache serves (one
 * region, not O_DIRECT, not peer-to-peer), not failed, with bytes left
 * before the file's end.
 */
static bool reader_job(const struct phx_job *j)
{
	return j->io->op == PHX_OP_READ && j->nregions == 1 &&
	       !j->region[0].direct && !j->p2p && !j->err &&
	       j->start < j->fde->size;
}

/* Whether none of @e's slots is in use. */
static bool engine_idle(const struct phx_engine *e)
{
	for (unsigned int i = 0; i < e->nslots; i++)
		if (e->slots[i].state != PHX_SLOT_FREE)
			return false;
	return !e->inflight && !e->to_submit;
}

void phx_readers_prepare(struct phx_engine *e)
{
	unsigned int n = readers_count(e);

	if (n > 1)
		readers_get(e, n);
}

/*
 * Gather into @run the jobs at the head of @e's queue that the readers
 * run together: reads the page cache serves, not yet started, up to
 * PHX_READER_JOBS (their plans opened the files' page-cache
 * descriptors).  False when that gains less than it costs: the jobs hold
 * fewer bytes than the staging (the pipeline keeps up with a short read),
 * or are shorter on average than a reader's smallest piece (the pipeline
 * copies many small pieces in one go, a reader one at a time).  A run is
 * counted by its bytes, not by its first job's, so a loader's short tail
 * of one range or a copy cut into steps runs on the readers with the long
 * jobs around it.
 */
static bool run_gather(struct phx_engine *e, struct phx_read_run *run)
{
	struct phx_job *j = phx_engine_next_job(e);
	uint64_t bytes = 0;

	run->nparts = 0;
	for (; j && run->nparts < PHX_READER_JOBS; j = TAILQ_NEXT(j, issue)) {
		struct phx_read_part *p = &run->part[run->nparts];

		if (j->pending || j->cur || j->pos != j->region[0].from ||
		    !reader_job(j))
			break;
		bytes += phx_min(j->end, j->fde->size) - j->start;
		*p = (struct phx_read_part){ .job = j };
		atomic_init(&p->short_at, UINT64_MAX);
		atomic_init(&p->err, 0);
		run->nparts++;
	}
	return run->nparts && bytes >= e->staging_len &&
	       bytes >= (uint64_t)run->nparts * PHX_READER_PIECE_MIN;
}

/* The jobs of @run are done: their results, and the device's counts. */
static void run_complete(struct phx_engine *e, struct phx_read_run *run)
{
	int broken = atomic_load(&run->broken);

	for (unsigned int i = 0; i < run->nparts; i++) {
		struct phx_read_part *p = &run->part[i];
		struct phx_job *j = p->job;
		int err = broken ? broken : atomic_load(&p->err);

		if (err) {
			/* the first failure's message, on the calling thread */
			phx_job_fail(j, phx_err(-err, "%s", run->msg));
		} else {
			uint64_t end =
				phx_min(atomic_load(&p->short_at), j->end);

			j->moved = end - j->start;
			j->by_path[PHX_PATH_BUFFERED] = j->moved;
			j->eof = end < j->end;
		}
		atomic_fetch_add(&e->dev->threaded_reads, 1);
		phx_job_complete(e, j);
	}
}

void phx_readers_take(struct phx_engine *e)
{
	struct phx_job *j = phx_engine_next_job(e);
	/* on the stack: the run ends before this returns */
	struct phx_read_run r, *run = &r;
	struct phx_readers *rs;
	unsigned int n;

	/* cheap checks first: this runs at every fill */
	if (!j || !reader_job(j) || !engine_idle(e))
		return;
	n = readers_count(e);
	if (n < 2 || !run_gather(e, run))
		return;
	rs = readers_get(e, n);
	if (!rs)
		return; /* the pipeline reads them */
	run->dev = e->dev;
	run->staging = e->staging;
	run->piece = phx_align_down(
		phx_min(e->staging_len / (PHX_READER_SLOTS * rs->n),
			PHX_READER_PIECE_MAX),
		PHX_PAGE);
	run->npieces = 0;
	for (unsigned int i = 0; i < run->nparts; i++) {
		struct phx_read_part *p = &run->part[i];

		p->first = run->npieces;
		run->npieces += (p->job->end - p->job->start + run->piece - 1) /
				run->piece;
	}
	atomic_init(&run->next, 0);
	atomic_init(&run->broken, 0);
	atomic_init(&run->msg_set, 0);

	pthread_mutex_lock(&rs->lock);
	rs->run = run;
	rs->gen++;
	rs->busy = rs->threads;
	pthread_cond_broadcast(&rs->go);
	pthread_mutex_unlock(&rs->lock);
	reader_run(&rs->r[0], run);
	pthread_mutex_lock(&rs->lock);
	while (rs->busy)
		pthread_cond_wait(&rs->idle, &rs->lock);
	rs->run = NULL;
	pthread_mutex_unlock(&rs->lock);

	run_complete(e, run);
}
