/* SPDX-License-Identifier: MIT */
/*
 * sim.c - a simulated device whose memory lives in host RAM.
 *
 * It behaves like a GPU where it matters to libphoenix: a capacity that
 * can run out, an address space with chunks mapped into it that another
 * process can map too (sim_mem.c), and copies that are queued on streams
 * and carried out by a worker thread per stream, so callers must wait on
 * events exactly as with CUDA.  What it does not simulate: bandwidth,
 * and faults on bad device addresses (a bad address is a bug that
 * crashes the process).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include "device.h"
#include "sim_mem.h"

#define SIM_GRANULARITY (64ULL << 10)

enum sim_op_type {
	SIM_COPY, /* to host memory */
	SIM_COPY_IN, /* to device memory */
	SIM_COPY_BATCH, /* several to device memory (copy_htod_batch) */
	SIM_SET,
	SIM_FN,
	SIM_MARK,
	SIM_WAIT,
	SIM_WRITE,
	SIM_FEED
};

struct sim_op {
	enum sim_op_type type;
	void *dst;
	const void *src;
	size_t len;
	uint8_t value;
	void (*fn)(void *);
	void *arg;
	uint32_t *word; /* SIM_WAIT: until it reaches word_value; SIM_WRITE */
	uint32_t word_value;
	/* SIM_FEED: the copy kernel's part, played on the host */
	phx_feed_play_fn *play;
	/* SIM_COPY_BATCH: its copies, owned by the op */
	struct phx_htod *batch;
	unsigned int nbatch;
	struct sim_op *next;
};

struct sim_stream {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work; /* signalled when ops arrive or on stop */
	pthread_cond_t done; /* signalled when completed advances */
	struct sim_op *head, *tail; /* protected by lock */
	uint64_t submitted; /* protected by lock */
	uint64_t completed; /* protected by lock */
	bool running; /* the head is being carried out; protected by lock */
	bool stop;
	/* stream_create_waited: copies are left for the waiting thread */
	bool waited;
	pid_t owner; /* the process whose thread serves the stream */
};

struct sim_event {
	struct sim_stream *stream;
	uint64_t seq;
};

struct sim_dev {
	struct sim_stream *def;
};

#define SIM_PROBE_PAGES 256 /* pages mincore() looks at in one call */

/*
 * Fault in the pages of device memory at [@p, @p + @len) that are not
 * there yet with one call per SIM_PROBE_PAGES pages, rather than a trap
 * per page as a copy into fresh memory would take them; pages already
 * there cost one mincore() per call.  Best effort: where the kernel has
 * no MADV_POPULATE_WRITE (before 5.14) the copy faults them in itself.
 */
static void sim_prefault(void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p & ~(PHX_PAGE - 1);
	uintptr_t end = (uintptr_t)p + len;
	unsigned char vec[SIM_PROBE_PAGES];

	while (a < end) {
		size_t n = phx_min((end - a + PHX_PAGE - 1) / PHX_PAGE,
				   SIM_PROBE_PAGES);
		size_t i = 0;

		if (!mincore((void *)a, n * PHX_PAGE, vec))
			while (i < n && (vec[i] & 1))
				i++;
		if (i < n &&
		    madvise((void *)a, n * PHX_PAGE, MADV_POPULATE_WRITE) &&
		    errno == EINVAL)
			return;
		a += n * PHX_PAGE;
	}
}

/* Ranges cleared from here up are given back rather than written. */
#define SIM_CLEAR_FREE (64UL << 10)

/*
 * memset() of device memory.  Clearing whole pages of a large range gives
 * them back to the memfd behind the mapping instead (MADV_REMOVE): they
 * read as zeros, as a GPU's cleared memory does, and cost nothing until
 * written again, where writing zeros would touch every page, even those
 * never written (shrinking a file clears its tail).
 */
static void sim_set(void *dst, uint8_t value, size_t len)
{
	uintptr_t a = ((uintptr_t)dst + PHX_PAGE - 1) & ~(PHX_PAGE - 1);
	uintptr_t b = ((uintptr_t)dst + len) & ~(PHX_PAGE - 1);

	if (!value && len >= SIM_CLEAR_FREE && b > a &&
	    !madvise((void *)a, b - a, MADV_REMOVE)) {
		memset(dst, 0, a - (uintptr_t)dst);
		memset((void *)b, 0, (uintptr_t)dst + len - b);
		return;
	}
	sim_prefault(dst, len);
	memset(dst, value, len);
}

/* Carry out one op of a stream. */
static void sim_run(struct sim_op *op)
{
	switch (op->type) {
	case SIM_COPY_IN:
		sim_prefault(op->dst, op->len);
		/* fall through */
	case SIM_COPY:
		memmove(op->dst, op->src, op->len);
		break;
	case SIM_COPY_BATCH:
		for (unsigned int i = 0; i < op->nbatch; i++) {
			void *dst = (void *)(uintptr_t)op->batch[i].dst;

			sim_prefault(dst, op->batch[i].len);
			memmove(dst, op->batch[i].src, op->batch[i].len);
		}
		break;
	case SIM_SET:
		sim_set(op->dst, op->value, op->len);
		break;
	case SIM_FN:
		op->fn(op->arg);
		break;
	case SIM_MARK:
		break;
	case SIM_WAIT:
		phx_word_wait(op->word, op->word_value);
		break;
	case SIM_WRITE:
		phx_word_store(op->word, op->word_value);
		break;
	case SIM_FEED:
		op->play(op->arg, op->dst);
		break;
	}
}

static void sim_op_free(struct sim_op *op)
{
	free(op->batch);
	free(op);
}

/* @op, the stream's head, is done; s->lock held. */
static void sim_retire(struct sim_stream *s, struct sim_op *op)
{
	phx_queue_pop(s->head, s->tail);
	s->completed++;
	s->running = false;
	pthread_cond_broadcast(&s->done);
	/* the stream's thread waits for what is left, or to stop */
	if (s->head || s->stop)
		pthread_cond_signal(&s->work);
	sim_op_free(op);
}

static void *sim_stream_main(void *arg)
{
	struct sim_stream *s = arg;
	struct sim_op *op;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phx-sim-stream");
	pthread_mutex_lock(&s->lock);
	for (;;) {
		/* a waiter carrying out the head finishes it even when stopping */
		while ((!s->head && !s->stop) || s->running)
			pthread_cond_wait(&s->work, &s->lock);
		if (!s->head)
			break;
		op = s->head;
		s->running = true;
		pthread_mutex_unlock(&s->lock);
		sim_run(op);
		pthread_mutex_lock(&s->lock);
		sim_retire(s, op);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/*
 * Ops a stream holds before pushing another waits for it to run one, as
 * a GPU's command queue does (it holds only so many): whoever queues work
 * on a stream may wait for the stream, and so for whatever the stream
 * waits for.
 */
#define SIM_STREAM_DEPTH 1024

/* Ops a thread waiting for its stream may carry out itself. */
static bool sim_inline(const struct sim_op *op)
{
	return op->type == SIM_COPY || op->type == SIM_COPY_IN ||
	       op->type == SIM_COPY_BATCH || op->type == SIM_SET ||
	       op->type == SIM_MARK || op->type == SIM_WRITE;
}

static int sim_push(struct sim_stream *s, const struct sim_op *tmpl)
{
	struct sim_op *op = malloc(sizeof(*op));

	if (!op)
		return phx_err(ENOMEM, "sim: out of host memory for a copy");
	*op = *tmpl;
	pthread_mutex_lock(&s->lock);
	while (s->submitted - s->completed >= SIM_STREAM_DEPTH) {
		pthread_cond_signal(&s->work); /* a waited stream's too */
		pthread_cond_wait(&s->done, &s->lock);
	}
	phx_queue_push(s->head, s->tail, op);
	s->submitted++;
	/*
	 * On a waited stream the thread that queued a copy carries it out
	 * when it waits (sim_wait_seq): waking the stream's thread as well
	 * would cost the wake-up of an idle CPU and a race for the copy.
	 */
	if (!s->waited || !sim_inline(op))
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/*
 * Wait until @s has completed @seq ops.  Copies at the head of the stream
 * that its thread has not started yet are carried out here, in order, as
 * the thread would: the waiter would only sleep meanwhile, and handing
 * each small copy to another thread and back costs two wake-ups, more
 * than the copy.  Host functions, waits on memory and the copy kernel
 * stay on the stream's thread.
 */
static void sim_wait_seq(struct sim_stream *s, uint64_t seq)
{
	struct sim_op *op;

	pthread_mutex_lock(&s->lock);
	while (s->completed < seq) {
		op = s->head;
		if (op && !s->running && sim_inline(op)) {
			s->running = true;
			pthread_mutex_unlock(&s->lock);
			sim_run(op);
			pthread_mutex_lock(&s->lock);
			sim_retire(s, op);
			continue;
		}
		pthread_cond_wait(&s->done, &s->lock);
	}
	pthread_mutex_unlock(&s->lock);
}

static int sim_stream_new(bool waited, struct sim_stream **out)
{
	struct sim_stream *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return phx_err(ENOMEM, "sim: out of host memory for a stream");
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->done, NULL);
	s->waited = waited;
	s->owner = getpid();
	ret = pthread_create(&s->thread, NULL, sim_stream_main, s);
	if (ret) {
		free(s);
		return phx_err(ret, "sim: cannot start a stream thread: %s",
			       strerror(ret));
	}
	*out = s;
	return 0;
}

/*
 * A child of fork() has a copy of its parent's stream but not the thread
 * that serves it, and the lock and conditions as the parent's threads left
 * them (a condition may count the thread as its waiter): there the copy is
 * only memory to give back.
 */
static bool sim_stream_inherited(const struct sim_stream *s)
{
	return s->owner != getpid();
}

static void sim_stream_free(struct sim_stream *s)
{
	struct sim_op *op;

	if (sim_stream_inherited(s)) {
		while ((op = s->head)) {
			phx_queue_pop(s->head, s->tail);
			sim_op_free(op);
		}
		free(s);
		return;
	}
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->done);
	free(s);
}

static struct sim_stream *sim_stream_of(struct phx_device *dev, void *stream)
{
	struct sim_dev *sd = dev->priv;

	return stream ? stream : sd->def;
}

/* ---- ops ------------------------------------------------------------ */

static int sim_probe(const char **why)
{
	return (int)phx_settings()->sim_devices;
}

static int sim_query(int index, struct phx_device_info *info)
{
	snprintf(info->model, sizeof(info->model), "simulated device");
	info->capacity = phx_settings()->sim_capacity;
	info->free = info->capacity;
	info->numa_node = -1;
	return 0;
}

static int sim_open(struct phx_device *dev)
{
	struct sim_dev *sd = calloc(1, sizeof(*sd));
	int ret;

	if (!sd)
		return phx_err(ENOMEM, "sim: out of host memory");
	ret = sim_stream_new(false, &sd->def);
	if (ret) {
		free(sd);
		return ret;
	}
	dev->priv = sd;
	dev->granularity = SIM_GRANULARITY;
	return 0;
}

static void sim_close(struct phx_device *dev)
{
	struct sim_dev *sd = dev->priv;

	sim_stream_free(sd->def);
	free(sd);
	dev->priv = NULL;
}

/* A memfd: it grows as written, the library counts its capacity. */
static int sim_backing_alloc(struct phx_device *dev, uint64_t capacity, int *fd)
{
	*fd = memfd_create("phx-sim-backing", MFD_CLOEXEC);
	if (*fd < 0)
		return phx_err(errno, "%s: memfd_create: %s", dev->name,
			       strerror(errno));
	return 0;
}

static int sim_stream_create(struct phx_device *dev, void **stream)
{
	return sim_stream_new(false, (struct sim_stream **)stream);
}

static int sim_stream_create_waited(struct phx_device *dev, void **stream)
{
	return sim_stream_new(true, (struct sim_stream **)stream);
}

static void sim_stream_destroy(struct phx_device *dev, void *stream)
{
	sim_stream_free(stream);
}

static int sim_stream_sync(struct phx_device *dev, void *stream)
{
	struct sim_stream *s = sim_stream_of(dev, stream);
	uint64_t seq;

	pthread_mutex_lock(&s->lock);
	seq = s->submitted;
	pthread_mutex_unlock(&s->lock);
	sim_wait_seq(s, seq);
	return 0;
}

static void *sim_stream_default(struct phx_device *dev)
{
	struct sim_dev *sd = dev->priv;

	return sd->def;
}

static int sim_copy(struct phx_device *dev, enum sim_op_type type, void *dst,
		    const void *src, size_t len, void *stream)
{
	struct sim_op op = { .type = type, .dst = dst, .src = src, .len = len };

	if (!len)
		return 0;
	return sim_push(sim_stream_of(dev, stream), &op);
}

static int sim_copy_htod(struct phx_device *dev, phx_dptr_t dst,
			 const void *src, size_t len, void *stream)
{
	return sim_copy(dev, SIM_COPY_IN, (void *)(uintptr_t)dst, src, len,
			stream);
}

static int sim_copy_dtoh(struct phx_device *dev, void *dst, phx_dptr_t src,
			 size_t len, void *stream)
{
	return sim_copy(dev, SIM_COPY, dst, (const void *)(uintptr_t)src, len,
			stream);
}

/*
 * One op for the whole batch: the stream's thread (or a thread waiting
 * for it) carries out every copy in one turn, so the batch costs one
 * push and at most one wake-up, however many copies it holds.
 */
static int sim_copy_htod_batch(struct phx_device *dev,
			       const struct phx_htod *copies, unsigned int n,
			       void *stream)
{
	struct sim_op op = { .type = SIM_COPY_BATCH, .nbatch = n };
	int ret;

	if (!n)
		return 0;
	op.batch = malloc(n * sizeof(*op.batch));
	if (!op.batch)
		return phx_err(ENOMEM, "sim: out of host memory for copies");
	memcpy(op.batch, copies, n * sizeof(*op.batch));
	ret = sim_push(sim_stream_of(dev, stream), &op);
	if (ret)
		free(op.batch);
	return ret;
}

static int sim_copy_dtod(struct phx_device *dev, phx_dptr_t dst, phx_dptr_t src,
			 size_t len, void *stream)
{
	return sim_copy(dev, SIM_COPY_IN, (void *)(uintptr_t)dst,
			(const void *)(uintptr_t)src, len, stream);
}

static int sim_memset_d8(struct phx_device *dev, phx_dptr_t dst, uint8_t value,
			 size_t len, void *stream)
{
	struct sim_op op = { .type = SIM_SET,
			     .dst = (void *)(uintptr_t)dst,
			     .len = len,
			     .value = value };

	if (!len)
		return 0;
	return sim_push(sim_stream_of(dev, stream), &op);
}

static int sim_event_create(struct phx_device *dev, void **event)
{
	struct sim_event *e = calloc(1, sizeof(*e));

	if (!e)
		return phx_err(ENOMEM, "sim: out of host memory for an event");
	*event = e;
	return 0;
}

static void sim_event_destroy(struct phx_device *dev, void *event)
{
	free(event);
}

static int sim_event_record(struct phx_device *dev, void *event, void *stream)
{
	struct sim_event *e = event;
	struct sim_stream *s = sim_stream_of(dev, stream);

	pthread_mutex_lock(&s->lock);
	e->stream = s;
	e->seq = s->submitted;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int sim_event_query(struct phx_device *dev, void *event)
{
	struct sim_event *e = event;
	int ret;

	if (!e->stream)
		return 0;
	pthread_mutex_lock(&e->stream->lock);
	ret = e->stream->completed >= e->seq ? 0 : -EAGAIN;
	pthread_mutex_unlock(&e->stream->lock);
	return ret;
}

static int sim_event_sync(struct phx_device *dev, void *event)
{
	struct sim_event *e = event;

	if (e->stream)
		sim_wait_seq(e->stream, e->seq);
	return 0;
}

static int sim_launch_host_fn(struct phx_device *dev, void *stream,
			      void (*fn)(void *), void *arg)
{
	struct sim_op op = { .type = SIM_FN, .fn = fn, .arg = arg };

	return sim_push(sim_stream_of(dev, stream), &op);
}

/* Simulated streams are host threads: they use the host address. */
static int sim_stream_wait_value(struct phx_device *dev, void *stream,
				 uint32_t *word, uint64_t daddr, uint32_t value)
{
	struct sim_op op = { .type = SIM_WAIT,
			     .word = word,
			     .word_value = value };

	return sim_push(sim_stream_of(dev, stream), &op);
}

static int sim_stream_write_value(struct phx_device *dev, void *stream,
				  uint32_t *word, uint64_t daddr,
				  uint32_t value)
{
	struct sim_op op = { .type = SIM_WRITE,
			     .word = word,
			     .word_value = value };

	return sim_push(sim_stream_of(dev, stream), &op);
}

/* The copy kernel, played by the stream's thread (device.h). */
static int sim_feed_launch(struct phx_device *dev, void *stream,
			   struct phx_feed_ctl *ctl, uint64_t ctl_daddr,
			   phx_dptr_t buf, phx_feed_play_fn *play)
{
	struct sim_op op = { .type = SIM_FEED,
			     .arg = ctl,
			     .dst = (void *)(uintptr_t)buf,
			     .play = play };

	return sim_push(sim_stream_of(dev, stream), &op);
}

const struct phx_backend_ops phx_sim_ops = {
	.kind = PHX_DEVICE_SIM,
	.probe = sim_probe,
	.query = sim_query,
	.locate = phx_sim_locate,
	.open = sim_open,
	.close = sim_close,
	.va_reserve = phx_sim_va_reserve,
	.va_release = phx_sim_va_release,
	.chunk_create = phx_sim_chunk_create,
	.chunk_release = phx_sim_chunk_release,
	.chunk_map = phx_sim_chunk_map,
	.chunk_map_bare = phx_sim_chunk_map_bare,
	.range_access = phx_sim_range_access,
	.chunk_unmap = phx_fdmem_unmap,
	.chunk_export = phx_sim_chunk_export,
	.chunk_import = phx_sim_chunk_import,
	.host_addr = phx_host_addr_mapped,
	.backing_alloc = sim_backing_alloc,
	.p2p = false,
	.pinned_copies = true,
	.host_register = phx_host_register_none,
	.host_unregister = phx_host_unregister_none,
	.stream_create = sim_stream_create,
	.stream_create_waited = sim_stream_create_waited,
	.stream_destroy = sim_stream_destroy,
	.stream_sync = sim_stream_sync,
	.stream_default = sim_stream_default,
	.copy_htod = sim_copy_htod,
	.copy_dtoh = sim_copy_dtoh,
	.copy_htod_batch = sim_copy_htod_batch,
	.copy_dtod = sim_copy_dtod,
	.memset_d8 = sim_memset_d8,
	.event_create = sim_event_create,
	.event_destroy = sim_event_destroy,
	.event_record = sim_event_record,
	.event_query = sim_event_query,
	.event_sync = sim_event_sync,
	.launch_host_fn = sim_launch_host_fn,
	.stream_wait_value = sim_stream_wait_value,
	.stream_write_value = sim_stream_write_value,
	.stream_wait_auto = PHX_STREAM_WAIT_COPY,
	.feed_launch = sim_feed_launch,
};
