/* SPDX-License-Identifier: MIT */
/*
 * transfer.c - the synchronous and batch API over a pool of engines.
 *
 * Each device keeps up to PHX_MAX_ENGINES engines.  Synchronous calls
 * and host copies borrow one per call, a batch for its life, and give it
 * back; an engine of another shape is re-cut rather than rebuilt, so
 * after the first transfer no call pays for io_uring setup, staging or
 * pinning.  The first engine is built at open by the device's staging
 * thread (engine.c), so not even the first transfer does.  Stream-ordered
 * workers (stream.c) own engines of their own; an idle pooled engine
 * holding the staging block makes way for them.
 *
 * Engines belong to the process that built them: a child of fork()
 * builds its own (an io_uring and a device's streams do not cross a
 * fork).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_i.h"

/* The engines of a device, idle or lent (phx_engine_get()). */
struct phx_engine_pool {
	pthread_mutex_t lock; /* protects everything below */
	pthread_cond_t cond; /* an engine came back or went */
	struct phx_engine *free; /* idle engines */
	unsigned int count; /* engines of the pool, idle or lent */
	unsigned int idle;
	unsigned int sync; /* lent to synchronous callers */
	unsigned int batch; /* lent to batches */
	bool pending; /* the staging thread is building the first engine */
	pid_t owner; /* the process that opened the device */
};

/* The link to the first idle engine this process may use, or NULL. */
static struct phx_engine **pool_first_free(struct phx_engine_pool *p)
{
	struct phx_engine **pp;
	pid_t me = getpid();

	for (pp = &p->free; *pp; pp = &(*pp)->next_free)
		if ((*pp)->owner == me)
			return pp;
	return NULL;
}

/*
 * Wait while the first engine is on its way and none is idle (a
 * transfer waiting for the device's set-up: counted in its stats).
 */
static void pool_wait_prebuilt_locked(struct phx_device *dev)
{
	struct phx_engine_pool *p = dev->engines;
	uint64_t t0;

	phx_assert_held(&p->lock);
	if (!p->pending || p->owner != getpid() || pool_first_free(p))
		return;
	t0 = phx_now_ns();
	while (p->pending && p->owner == getpid() && !pool_first_free(p))
		pthread_cond_wait(&p->cond, &p->lock);
	atomic_fetch_add(&dev->setup_wait_ns, phx_now_ns() - t0);
}

/*
 * Before an engine takes @len bytes of staging (0: grows back into the
 * units it gave back): if the block has no room for it, idle pooled
 * engines of this process that hold part of the block give it back
 * (they are rebuilt when needed), so that the host memory in use stays
 * at one budget: a stream's engine beside the engine built at open, a
 * synchronous call after a load of several workers.
 */
static void pool_yield_staging(struct phx_device *dev, size_t len)
{
	struct phx_engine_pool *p = dev->engines;
	struct phx_engine **pp, *e;

	pthread_mutex_lock(&p->lock);
	pool_wait_prebuilt_locked(dev);
	while (!len || !phx_staging_room(dev, len)) { /* 0: no room now */
		for (pp = &p->free; *pp; pp = &(*pp)->next_free)
			if ((*pp)->owner == getpid() && (*pp)->staging_lent)
				break;
		if (!*pp)
			break;
		e = *pp;
		*pp = e->next_free;
		p->count--;
		p->idle--;
		pthread_mutex_unlock(&p->lock);
		phx_engine_destroy(e);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
}

/*
 * Lend an engine of shape @sh from @dev's pool: an idle one of that shape,
 * else an idle one re-cut to it, else a new one.  Synchronous callers
 * (@wait) hold theirs for one call: they wait while PHX_MAX_ENGINES are
 * lent to such callers and none is idle.  Batches hold theirs for their
 * life and never wait, nor count against that limit: a thread holding
 * batches would otherwise wait for itself in its next synchronous call.
 * Engines past the limit are freed when they come back.
 */
int phx_engine_get(struct phx_device *dev, struct phx_engine_shape sh,
		   bool wait, struct phx_engine **out)
{
	struct phx_engine *e, **pp, **pick, **first;
	pid_t me = getpid();
	int ret;

	pthread_mutex_lock(&dev->engines->lock);
	pool_wait_prebuilt_locked(dev);
	while (wait && !pool_first_free(dev->engines) &&
	       dev->engines->sync >= PHX_MAX_ENGINES)
		pthread_cond_wait(&dev->engines->cond, &dev->engines->lock);
	if (wait)
		dev->engines->sync++;
	else
		dev->engines->batch++;
	first = pool_first_free(dev->engines);
	if (!first) {
		dev->engines->count++;
		pthread_mutex_unlock(&dev->engines->lock);
		goto build;
	}
	pick = NULL;
	for (pp = first; *pp; pp = &(*pp)->next_free) {
		if ((*pp)->owner != me)
			continue;
		if ((*pp)->nslots == sh.nslots && (*pp)->chunk == sh.chunk) {
			pick = pp;
			break;
		}
		if (!pick && phx_engine_fits(*pp, sh))
			pick = pp;
	}
	if (!pick)
		pick = first;
	e = *pick;
	*pick = e->next_free;
	dev->engines->idle--;
	pthread_mutex_unlock(&dev->engines->lock);

	if (e->nslots == sh.nslots && e->chunk == sh.chunk)
		goto lent;
	if (phx_engine_fits(e, sh)) {
		ret = phx_engine_slice(e, sh);
		if (ret == -EAGAIN) {
			/* what it gave back is held by idle engines */
			pool_yield_staging(dev, 0);
			ret = phx_engine_slice(e, sh);
		}
		if (!ret)
			goto lent;
	}
	/* Too small for this shape: build one in its place. */
	phx_engine_destroy(e);
build:
	pool_yield_staging(dev, (size_t)sh.nslots * sh.chunk);
	ret = phx_engine_create(dev, sh, &phx_staged_consumer, &e);
	if (ret) {
		pthread_mutex_lock(&dev->engines->lock);
		dev->engines->count--;
		if (wait)
			dev->engines->sync--;
		else
			dev->engines->batch--;
		pthread_cond_signal(&dev->engines->cond);
		pthread_mutex_unlock(&dev->engines->lock);
		return ret;
	}
lent:
	e->lent_sync = wait;
	*out = e;
	return 0;
}

/*
 * Return @e to the pool.  Broken engines go, and so do engines that would
 * leave more than PHX_MAX_ENGINES outside batches.
 */
void phx_engine_put(struct phx_device *dev, struct phx_engine *e)
{
	e->polled = false;
	pthread_mutex_lock(&dev->engines->lock);
	if (e->lent_sync)
		dev->engines->sync--;
	else
		dev->engines->batch--;
	if (e->broken ||
	    dev->engines->count > PHX_MAX_ENGINES + dev->engines->batch) {
		dev->engines->count--;
		pthread_cond_signal(&dev->engines->cond);
		pthread_mutex_unlock(&dev->engines->lock);
		phx_engine_destroy(e);
		return;
	}
	e->next_free = dev->engines->free;
	dev->engines->free = e;
	dev->engines->idle++;
	pthread_cond_signal(&dev->engines->cond);
	pthread_mutex_unlock(&dev->engines->lock);
}

PHX_EXPORT int phx_engine_stats_get(struct phx_device *dev,
				    struct phx_engine_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&dev->engines->lock);
	out->alive = dev->engines->count;
	out->idle = dev->engines->idle;
	pthread_mutex_unlock(&dev->engines->lock);
	out->built = atomic_load(&dev->engines_built);
	out->staging_bytes = atomic_load(&dev->staging);
	out->threaded_reads = atomic_load(&dev->threaded_reads);
	out->setup_ns = atomic_load(&dev->setup_ns);
	out->setup_wait_ns = atomic_load(&dev->setup_wait_ns);
	return 0;
}

int phx_engine_pool_open(struct phx_device *dev, bool prebuild)
{
	struct phx_engine_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return phx_err(ENOMEM, "%s: out of host memory for its engines",
			       dev->name);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->pending = prebuild;
	p->owner = getpid();
	dev->engines = p;
	return 0;
}

/*
 * On the device's staging thread, once its block is pinned: build the
 * engine a synchronous call or a one-worker batch takes (the configured
 * staging and depth) out of the block, idle in the pool.  Not where the
 * block is already taken (a transfer came first and built its own) or
 * could not be made: then it would pin staging of its own for nothing.
 */
void phx_engine_pool_prebuild(struct phx_device *dev, bool run)
{
	struct phx_engine_shape sh = phx_shape_sync(0);
	struct phx_engine_pool *p = dev->engines;
	struct phx_engine *e = NULL;

	if (run && phx_staging_room(dev, (size_t)sh.nslots * sh.chunk) > 0 &&
	    phx_engine_create(dev, sh, &phx_staged_consumer, &e)) {
		e = NULL;
		phx_err_clear(); /* the first transfer builds one, as before */
	}
	if (e)
		phx_readers_prepare(e);
	pthread_mutex_lock(&p->lock);
	if (e) {
		e->next_free = p->free;
		p->free = e;
		p->count++;
		p->idle++;
	}
	p->pending = false;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void phx_engine_pool_destroy(struct phx_device *dev)
{
	struct phx_engine *e;

	if (!dev->engines)
		return;

	pthread_mutex_lock(&dev->engines->lock);
	while ((e = dev->engines->free)) {
		dev->engines->free = e->next_free;
		dev->engines->count--;
		dev->engines->idle--;
		phx_engine_destroy(e);
	}
	pthread_mutex_unlock(&dev->engines->lock);
	pthread_mutex_destroy(&dev->engines->lock);
	pthread_cond_destroy(&dev->engines->cond);
	free(dev->engines);
	dev->engines = NULL;
}

PHX_EXPORT int64_t phx_io_run(struct phx_device *dev, struct phx_io *io)
{
	struct phx_engine *e;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return io->result = ret;
	ret = phx_engine_get(dev, phx_shape_io(io->len), true, &e);
	if (ret)
		return io->result = ret;
	phx_engine_run(e, io);
	phx_engine_put(dev, e);
	return io->result;
}

/*
 * Engines outside the pool, for the stream-ordered workers (stream.c):
 * made and freed by their owner, used by one thread at a time.
 */
int phx_engine_new(struct phx_device *dev, size_t staging,
		   struct phx_engine **out)
{
	struct phx_engine_shape sh = phx_shape_sync(staging);
	int ret = phx_device_bind(dev);

	if (ret)
		return ret;
	pool_yield_staging(dev, (size_t)sh.nslots * sh.chunk);
	return phx_engine_create(dev, sh, &phx_staged_consumer, out);
}

int phx_engine_new_sink(struct phx_device *dev, size_t staging,
			unsigned int nslots, struct phx_engine **out)
{
	struct phx_engine_shape sh = {
		.nslots = nslots,
		.chunk = phx_align_down(staging / nslots, PHX_PAGE),
	};
	int ret = phx_device_bind(dev);

	if (!ret && !sh.chunk)
		ret = phx_err(EINVAL, "%s: %zu bytes of staging for %u slots",
			      dev->name, staging, nslots);
	if (ret)
		return ret;
	pool_yield_staging(dev, (size_t)sh.nslots * sh.chunk);
	return phx_engine_create(dev, sh, &phx_sink_consumer, out);
}

int64_t phx_engine_io(struct phx_engine *e, struct phx_io *io)
{
	int ret = phx_device_bind(e->dev);

	return ret ? io->result = ret : phx_engine_run(e, io);
}

static int64_t buf_io(enum phx_op op, struct phx_buf *buf, uint64_t buf_off,
		      int fd, int64_t file_off, uint64_t len)
{
	struct phx_io io = {
		.op = op,
		.fd = fd,
		.file_off = file_off,
		.buf = buf,
		.buf_off = buf_off,
		.len = len,
	};

	return phx_io_run(buf->dev, &io);
}

PHX_EXPORT int64_t phx_read(struct phx_buf *buf, uint64_t buf_off, int fd,
			    int64_t file_off, uint64_t len)
{
	return buf_io(PHX_OP_READ, buf, buf_off, fd, file_off, len);
}

PHX_EXPORT int64_t phx_write(struct phx_buf *buf, uint64_t buf_off, int fd,
			     int64_t file_off, uint64_t len)
{
	return buf_io(PHX_OP_WRITE, buf, buf_off, fd, file_off, len);
}

/* ---- batches -------------------------------------------------------- */

struct phx_batch {
	struct phx_device *dev;
	struct phx_engine *engine;
	struct phx_engine_shape shape; /* its depth's cut */
};

PHX_EXPORT int phx_batch_create(struct phx_device *dev, unsigned int depth,
				unsigned int flags, struct phx_batch **out)
{
	struct phx_batch *b;
	int ret;

	if (flags & ~(unsigned int)PHX_BATCH_POLL)
		return phx_err(EINVAL, "unknown batch flags 0x%x", flags);
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	b = calloc(1, sizeof(*b));
	if (!b)
		return phx_err(ENOMEM, "out of host memory for a batch");
	b->dev = dev;
	/*
	 * Now, before any of its transfers: loading waits for the device's
	 * queued work (device.h).  Without the kernels the small copies
	 * take the copy engine's way.
	 */
	if (dev->ops->kernels_load && dev->ops->kernels_load(dev))
		phx_err_clear();
	ret = phx_engine_get(dev, phx_shape_batch(depth), false, &b->engine);
	if (ret) {
		free(b);
		return ret;
	}
	b->engine->polled = flags & PHX_BATCH_POLL;
	b->shape = (struct phx_engine_shape){ .nslots = b->engine->nslots,
					      .chunk = b->engine->chunk };
	*out = b;
	return 0;
}

/*
 * Make jobs of @n entries and queue them on the batch's engine, without
 * starting them; how many were queued, or a negative errno if none.
 */
static int batch_queue(struct phx_batch *b, struct phx_io *ios, unsigned int n)
{
	struct phx_engine *e = b->engine;
	unsigned int i;
	int ret;

	if (!ios && n)
		return phx_err(EINVAL, "batch: %u transfers in a NULL array",
			       n);

	for (i = 0; i < n; i++) {
		struct phx_job *j;

		while ((ret = phx_job_make(e, &ios[i], NULL, &j)) == -EAGAIN &&
		       phx_engine_busy(e)) {
			/* all file slots busy: let transfers finish */
			ret = phx_engine_step(e, true);
			if (ret)
				return i ? (int)i : ret;
		}
		if (ret) {
			/* A bad entry completes with its own error. */
			j = calloc(1, sizeof(*j));
			if (!j)
				return i ? (int)i :
					   phx_err(ENOMEM,
						   "out of host memory");
			j->io = &ios[i];
			j->err = ret;
		} else if (!phx_engine_busy(e)) {
			/* a hot load runs on the hot cut as phx_read() does */
			phx_engine_fit(e, j, b->shape);
		}
		phx_engine_queue(e, j);
	}
	return (int)n;
}

PHX_EXPORT int phx_batch_queue(struct phx_batch *b, struct phx_io *ios,
			       unsigned int n)
{
	int ret = phx_device_bind(b->dev);

	return ret ? ret : batch_queue(b, ios, n);
}

PHX_EXPORT int phx_batch_submit(struct phx_batch *b, struct phx_io *ios,
				unsigned int n)
{
	int ret, got;

	ret = phx_device_bind(b->dev);
	if (ret)
		return ret;
	got = batch_queue(b, ios, n);
	if (got < 0 || (unsigned int)got < n)
		return got;
	/* get the I/O going before returning: what was queued too */
	ret = phx_engine_step(b->engine, false);
	return ret ? ret : got;
}

PHX_EXPORT int phx_batch_wait(struct phx_batch *b, unsigned int min,
			      struct phx_io **done, unsigned int max,
			      int timeout_ms)
{
	struct phx_engine *e = b->engine;
	struct timespec t0, now;
	unsigned int n = 0;
	bool stepped = false;
	int ret;

	ret = phx_device_bind(b->dev);
	if (ret)
		return ret;
	/*
	 * What phx_batch_queue() left goes out with one submission; a job
	 * whose segments are all out (the queue is pruned lazily) does not
	 * need the extra round.
	 */
	if (phx_engine_next_job(e)) {
		ret = phx_engine_step(e, false);
		if (ret)
			return ret;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		while (!STAILQ_EMPTY(&e->done) && (!done || n < max)) {
			struct phx_job *j = STAILQ_FIRST(&e->done);

			STAILQ_REMOVE_HEAD(&e->done, done);
			if (done)
				done[n] = j->io;
			n++;
			free(j);
		}
		if (n >= min || !phx_engine_busy(e) || (done && n >= max))
			break;
		/* 0: one round of the pipeline that does not wait, then go */
		if (!timeout_ms && stepped)
			break;
		if (timeout_ms > 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) * 1000 +
				    (now.tv_nsec - t0.tv_nsec) / 1000000 >=
			    timeout_ms)
				break;
		}
		ret = phx_engine_step(e, timeout_ms != 0);
		if (ret)
			return ret;
		stepped = true;
	}
	return (int)n;
}

PHX_EXPORT void phx_batch_destroy(struct phx_batch *b)
{
	struct phx_engine *e;

	if (!b)
		return;
	e = b->engine;
	phx_device_bind(b->dev);
	while (phx_engine_busy(e))
		if (phx_engine_step(e, true))
			break;
	while (!STAILQ_EMPTY(&e->done)) {
		struct phx_job *j = STAILQ_FIRST(&e->done);

		STAILQ_REMOVE_HEAD(&e->done, done);
		free(j);
	}
	phx_engine_put(b->dev, e);
	free(b);
}
