/* SPDX-License-Identifier: MIT */
/*
 * hostcopy.c - copies between host memory and buffers.
 *
 * Host memory pinned with phx_host_register() is copied by the device
 * straight, on a pooled copy stream.  Other host memory goes through the
 * pinned staging of an engine borrowed from the pool, slot by slot, the
 * device's copy of one slot overlapping the CPU's copy of the next, so a
 * pageable buffer moves at close to the pinned rate.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine_i.h"

/* Streams of a device kept for host copies; its phx_host_alloc() pool. */
#define PHX_HOSTCOPY_STREAMS 16
#define PHX_HOST_POOL_BUFS 16

/* What host copies keep of a device. */
struct phx_hostcopy {
	pthread_mutex_t lock; /* protects everything below */
	/* idle copy streams */
	void *streams[PHX_HOSTCOPY_STREAMS];
	unsigned int nstreams;
	/* host memory pinned by phx_host_register() */
	struct phx_host_range {
		uintptr_t start;
		size_t len;
	} * pinned_ranges;
	unsigned int npinned_ranges;
	/*
	 * phx_host_alloc()'s pool: buffers given back and kept pinned, and
	 * the bytes pinned through it (kept and lent).
	 */
	struct phx_host_buf {
		void *p;
		size_t len;
	} host_pool[PHX_HOST_POOL_BUFS];
	unsigned int nhost_pool;
	size_t host_pool_bytes;
};

int phx_hostcopy_open(struct phx_device *dev)
{
	struct phx_hostcopy *hc = calloc(1, sizeof(*hc));

	if (!hc)
		return phx_err(ENOMEM,
			       "%s: out of host memory for its host copies",
			       dev->name);
	pthread_mutex_init(&hc->lock, NULL);
	dev->hostcopy = hc;
	return 0;
}

/*
 * Streams for host memory copies, reused: creating one per copy costs a
 * driver call (a thread on sim) for every FUSE request.
 */
static int stream_get(struct phx_device *dev, void **stream)
{
	pthread_mutex_lock(&dev->hostcopy->lock);
	if (dev->hostcopy->nstreams) {
		*stream = dev->hostcopy->streams[--dev->hostcopy->nstreams];
		pthread_mutex_unlock(&dev->hostcopy->lock);
		return 0;
	}
	pthread_mutex_unlock(&dev->hostcopy->lock);
	/* every use of a pooled stream ends in copy_finish()'s sync */
	if (dev->ops->stream_create_waited)
		return dev->ops->stream_create_waited(dev, stream);
	return dev->ops->stream_create(dev, stream);
}

static void stream_put(struct phx_device *dev, void *stream)
{
	pthread_mutex_lock(&dev->hostcopy->lock);
	if (dev->hostcopy->nstreams < PHX_HOSTCOPY_STREAMS) {
		dev->hostcopy->streams[dev->hostcopy->nstreams++] = stream;
		stream = NULL;
	}
	pthread_mutex_unlock(&dev->hostcopy->lock);
	if (stream)
		dev->ops->stream_destroy(dev, stream);
}

/* Pinned through phx_host_alloc(), kept or lent: at most this per device. */
#define PHX_HOST_POOL (64ULL << 20)

static void host_buf_drop(struct phx_device *dev, void *p, size_t len)
{
	phx_host_unregister(dev, p);
	munmap(p, len);
}

/* Free what host copies keep on @dev: idle copy streams, pinned ranges. */
void phx_hostcopy_release(struct phx_device *dev)
{
	if (!dev->hostcopy)
		return;
	while (dev->hostcopy->nhost_pool) {
		struct phx_host_buf *b =
			&dev->hostcopy->host_pool[--dev->hostcopy->nhost_pool];

		host_buf_drop(dev, b->p, b->len);
		dev->hostcopy->host_pool_bytes -= b->len;
	}
	pthread_mutex_lock(&dev->hostcopy->lock);
	while (dev->hostcopy->nstreams)
		dev->ops->stream_destroy(
			dev, dev->hostcopy->streams[--dev->hostcopy->nstreams]);
	free(dev->hostcopy->pinned_ranges);
	dev->hostcopy->pinned_ranges = NULL;
	dev->hostcopy->npinned_ranges = 0;
	pthread_mutex_unlock(&dev->hostcopy->lock);
	pthread_mutex_destroy(&dev->hostcopy->lock);
	free(dev->hostcopy);
	dev->hostcopy = NULL;
}

/*
 * Host ranges pinned through phx_host_register(): copies to and from them
 * go straight to the device; other host memory goes through the pinned
 * staging of a pooled engine.
 */
static bool host_pinned(struct phx_device *dev, const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;
	bool found = false;
	unsigned int i;

	pthread_mutex_lock(&dev->hostcopy->lock);
	for (i = 0; i < dev->hostcopy->npinned_ranges && !found; i++)
		found = a >= dev->hostcopy->pinned_ranges[i].start &&
			a - dev->hostcopy->pinned_ranges[i].start + len <=
				dev->hostcopy->pinned_ranges[i].len;
	pthread_mutex_unlock(&dev->hostcopy->lock);
	return found;
}

PHX_EXPORT int phx_host_register(struct phx_device *dev, void *p, size_t len)
{
	struct phx_host_range *r;
	int ret = phx_device_bind(dev);

	if (ret)
		return ret;
	if (!p || !len)
		return phx_err(EINVAL, "%s: nothing to pin", dev->name);
	ret = dev->ops->host_register(dev, p, len);
	if (ret)
		return ret;
	pthread_mutex_lock(&dev->hostcopy->lock);
	r = realloc(dev->hostcopy->pinned_ranges,
		    (dev->hostcopy->npinned_ranges + 1) * sizeof(*r));
	if (r) {
		dev->hostcopy->pinned_ranges = r;
		r[dev->hostcopy->npinned_ranges].start = (uintptr_t)p;
		r[dev->hostcopy->npinned_ranges].len = len;
		dev->hostcopy->npinned_ranges++;
	}
	pthread_mutex_unlock(&dev->hostcopy->lock);
	/* Untracked, copies from it only take the staged way: still right. */
	return 0;
}

PHX_EXPORT void phx_host_unregister(struct phx_device *dev, void *p)
{
	unsigned int i;

	if (phx_device_bind(dev))
		return;
	pthread_mutex_lock(&dev->hostcopy->lock);
	for (i = 0; i < dev->hostcopy->npinned_ranges; i++)
		if (dev->hostcopy->pinned_ranges[i].start == (uintptr_t)p) {
			dev->hostcopy->pinned_ranges[i] =
				dev->hostcopy->pinned_ranges
					[--dev->hostcopy->npinned_ranges];
			break;
		}
	pthread_mutex_unlock(&dev->hostcopy->lock);
	dev->ops->host_unregister(dev, p);
}

static size_t page_round(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (len + page - 1) / page * page;
}

PHX_EXPORT int phx_host_alloc(struct phx_device *dev, size_t len, void **out)
{
	size_t want = page_round(len);
	struct phx_host_buf drop = { 0 };
	unsigned int i;
	void *p;

	if (!len)
		return phx_err(EINVAL, "%s: a pinned buffer of 0 bytes",
			       dev->name);
	pthread_mutex_lock(&dev->hostcopy->lock);
	for (i = 0; i < dev->hostcopy->nhost_pool; i++)
		if (dev->hostcopy->host_pool[i].len == want) {
			*out = dev->hostcopy->host_pool[i].p;
			dev->hostcopy->host_pool[i] =
				dev->hostcopy->host_pool
					[--dev->hostcopy->nhost_pool];
			pthread_mutex_unlock(&dev->hostcopy->lock);
			return 0;
		}
	/* make room: a kept buffer of another size goes */
	if (dev->hostcopy->host_pool_bytes + want > PHX_HOST_POOL &&
	    dev->hostcopy->nhost_pool) {
		drop = dev->hostcopy->host_pool[--dev->hostcopy->nhost_pool];
		dev->hostcopy->host_pool_bytes -= drop.len;
	}
	if (dev->hostcopy->host_pool_bytes + want > PHX_HOST_POOL) {
		pthread_mutex_unlock(&dev->hostcopy->lock);
		if (drop.p)
			host_buf_drop(dev, drop.p, drop.len);
		return phx_err(
			EBUSY,
			"%s: the %llu MiB of pinned host buffers are all in use; give some back or use other memory",
			dev->name, PHX_HOST_POOL >> 20);
	}
	dev->hostcopy->host_pool_bytes += want;
	pthread_mutex_unlock(&dev->hostcopy->lock);
	if (drop.p)
		host_buf_drop(dev, drop.p, drop.len);

	p = phx_host_map(want);
	if (!p) {
		pthread_mutex_lock(&dev->hostcopy->lock);
		dev->hostcopy->host_pool_bytes -= want;
		pthread_mutex_unlock(&dev->hostcopy->lock);
		return phx_err(ENOMEM, "%s: out of host memory for %zu bytes",
			       dev->name, want);
	}
	/* past the memlock limit it stays pageable: copies are staged */
	if (phx_host_register(dev, p, want))
		phx_err_clear();
	*out = p;
	return 0;
}

PHX_EXPORT void phx_host_free(struct phx_device *dev, void *p, size_t len)
{
	size_t have = page_round(len);

	if (!p)
		return;
	pthread_mutex_lock(&dev->hostcopy->lock);
	if (dev->hostcopy->nhost_pool < PHX_HOST_POOL_BUFS) {
		dev->hostcopy->host_pool[dev->hostcopy->nhost_pool].p = p;
		dev->hostcopy->host_pool[dev->hostcopy->nhost_pool].len = have;
		dev->hostcopy->nhost_pool++;
		p = NULL;
	} else {
		dev->hostcopy->host_pool_bytes -= have;
	}
	pthread_mutex_unlock(&dev->hostcopy->lock);
	if (p)
		host_buf_drop(dev, p, have);
}

/* Whether a copy of [@p, @p + @len) should go through pinned staging. */
static bool host_staged(struct phx_device *dev, const void *p, uint64_t len)
{
	return dev->ops->pinned_copies && !host_pinned(dev, p, len);
}

/* Wait for every slot copy of @e still in flight; the first error. */
static int slots_drain(struct phx_engine *e)
{
	unsigned int i;
	int ret = 0, r;

	for (i = 0; i < e->nslots; i++) {
		struct phx_slot *sl = &e->slots[i];

		if (sl->state != PHX_SLOT_COPY)
			continue;
		r = e->dev->ops->event_sync(e->dev, sl->event);
		if (!ret)
			ret = r;
		sl->state = PHX_SLOT_FREE;
	}
	return ret;
}

/* Count the @len bytes of a host copy that returned @ret, where it worked. */
static int copy_counted(struct phx_device *dev, int ret, uint64_t len)
{
	if (!ret)
		atomic_fetch_add(&dev->bytes[PHX_PATH_MEMCPY], len);
	return ret;
}

/*
 * End a staged copy of @len bytes that returned @ret: wait for its slots,
 * mark @e broken when they failed, give @e back, count the bytes when it
 * worked.  Returns the first error.
 */
static int staged_end(struct phx_device *dev, struct phx_engine *e, int ret,
		      uint64_t len)
{
	int r = slots_drain(e);

	if (r) {
		ret = ret ? ret : r;
		e->broken = true;
	}
	phx_engine_put(dev, e);
	return copy_counted(dev, ret, len);
}

/*
 * Host -> device through the staging of a pooled engine: each slot is
 * filled by the CPU while the device copies the slots before it.
 */
static int staged_copy_in(struct phx_device *dev, phx_dptr_t dptr,
			  const char *src, uint64_t len)
{
	struct phx_engine *e;
	uint64_t done = 0, n;
	unsigned int i = 0;
	int ret;

	ret = phx_engine_get(dev, phx_shape_sync(0), true, &e);
	if (ret)
		return ret;
	while (!ret && done < len) {
		struct phx_slot *sl = &e->slots[i++ % e->nslots];

		if (sl->state == PHX_SLOT_COPY) {
			sl->state = PHX_SLOT_FREE;
			ret = dev->ops->event_sync(dev, sl->event);
			if (ret)
				break;
		}
		n = phx_min(len - done, e->chunk);
		memcpy(sl->mem, src + done, n);
		ret = dev->ops->copy_htod(dev, dptr + done, sl->mem, n,
					  sl->stream);
		if (!ret)
			ret = dev->ops->event_record(dev, sl->event,
						     sl->stream);
		if (!ret)
			sl->state = PHX_SLOT_COPY;
		done += n;
	}
	return staged_end(dev, e, ret, len);
}

/* Device -> host, the mirror image: copies run ahead of the CPU's. */
static int staged_copy_out(struct phx_buf *buf, uint64_t off, char *dst,
			   uint64_t len)
{
	struct phx_device *dev = buf->dev;
	struct phx_engine *e;
	uint64_t issued = 0, drained = 0;
	unsigned int head = 0, tail = 0;
	int ret;

	ret = phx_engine_get(dev, phx_shape_sync(0), true, &e);
	if (ret)
		return ret;
	while (!ret && drained < len) {
		struct phx_slot *sl;

		while (!ret && issued < len && head - tail < e->nslots) {
			sl = &e->slots[head++ % e->nslots];
			sl->foff = issued;
			sl->copied = phx_min(len - issued, e->chunk);
			ret = phx_buf_copy_out(buf, off + issued, sl->mem,
					       sl->copied, sl->stream);
			if (!ret)
				ret = dev->ops->event_record(dev, sl->event,
							     sl->stream);
			if (!ret)
				sl->state = PHX_SLOT_COPY;
			issued += sl->copied;
		}
		if (ret)
			break;
		sl = &e->slots[tail++ % e->nslots];
		sl->state = PHX_SLOT_FREE;
		ret = dev->ops->event_sync(dev, sl->event);
		if (!ret)
			memcpy(dst + sl->foff, sl->mem, sl->copied);
		drained += sl->copied;
	}
	return staged_end(dev, e, ret, len);
}

/* Start a synchronous copy: this thread on @dev, a pooled stream. */
static int copy_begin(struct phx_device *dev, void **stream)
{
	int ret = phx_device_bind(dev);

	return ret ? ret : stream_get(dev, stream);
}

/*
 * End a synchronous copy queued on a pooled stream: wait for what was
 * queued, also when queueing the rest failed (the caller's memory must
 * not be read after it returns), return the stream, count @memcpy_bytes
 * when it worked.
 */
static int copy_finish(struct phx_device *dev, void *stream, int ret,
		       uint64_t memcpy_bytes)
{
	int sret = dev->ops->stream_sync(dev, stream);

	if (!ret)
		ret = sret;
	stream_put(dev, stream);
	return copy_counted(dev, ret, memcpy_bytes);
}

PHX_EXPORT int phx_memcpy_to_buf(struct phx_buf *buf, uint64_t off,
				 const void *src, uint64_t len)
{
	struct phx_device *dev = buf->dev;
	void *stream;
	phx_dptr_t dptr;
	int ret;

	ret = phx_buf_check_range(buf, off, len);
	if (ret || !len)
		return ret;
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	pthread_mutex_lock(&buf->lock);
	ret = phx_buf_commit_locked(buf, off, len);
	dptr = buf->dptr;
	pthread_mutex_unlock(&buf->lock);
	if (ret)
		return ret;
	if (host_staged(dev, src, len))
		return staged_copy_in(dev, dptr + off, src, len);
	ret = stream_get(dev, &stream);
	if (ret)
		return ret;
	ret = dev->ops->copy_htod(dev, dptr + off, src, len, stream);
	return copy_finish(dev, stream, ret, len);
}

PHX_EXPORT int phx_memcpy_from_buf(void *dst, struct phx_buf *buf, uint64_t off,
				   uint64_t len)
{
	struct phx_device *dev = buf->dev;
	void *stream;
	int ret;

	ret = phx_buf_check_range(buf, off, len);
	if (ret || !len)
		return ret;
	if (host_staged(dev, dst, len)) {
		ret = phx_device_bind(dev);
		return ret ? ret : staged_copy_out(buf, off, dst, len);
	}
	ret = copy_begin(dev, &stream);
	if (ret)
		return ret;
	ret = phx_buf_copy_out(buf, off, dst, len, stream);
	return copy_finish(dev, stream, ret, len);
}

/*
 * Lock @a and @b (which may be the same buffer) in address order: copies
 * from A to B and from B to A on two threads then take the locks in the
 * same order and cannot each hold one that the other waits for.
 */
static void buf_lock_pair(struct phx_buf *a, struct phx_buf *b)
{
	struct phx_buf *first = (uintptr_t)a < (uintptr_t)b ? a : b;
	struct phx_buf *second = first == a ? b : a;

	pthread_mutex_lock(&first->lock);
	if (second != first)
		pthread_mutex_lock(&second->lock);
}

static void buf_unlock_pair(struct phx_buf *a, struct phx_buf *b)
{
	if (a != b)
		pthread_mutex_unlock(&b->lock);
	pthread_mutex_unlock(&a->lock);
}

PHX_EXPORT int phx_memcpy_buf(struct phx_buf *dst, uint64_t dst_off,
			      struct phx_buf *src, uint64_t src_off,
			      uint64_t len)
{
	struct phx_device *dev = dst->dev;
	uint64_t done = 0, dist, step = UINT64_MAX;
	bool backward = false;
	void *stream;
	int ret;

	if (dst->dev->ops != src->dev->ops)
		return phx_err(EXDEV,
			       "cannot copy between a %s and a %s device",
			       phx_kind_name(dst->dev->ops->kind),
			       phx_kind_name(src->dev->ops->kind));
	ret = phx_buf_check_range(dst, dst_off, len);
	if (!ret)
		ret = phx_buf_check_range(src, src_off, len);
	/* a range copied onto itself is already there */
	if (ret || !len || (dst == src && dst_off == src_off))
		return ret;
	ret = copy_begin(dev, &stream);
	if (ret)
		return ret;
	/*
	 * Overlapping ranges of one buffer copy as memmove does: back to
	 * front when the destination is the later one, and in pieces no
	 * longer than the distance between them, so that no piece reads
	 * bytes an earlier piece (or itself) already overwrote.
	 */
	if (dst == src) {
		dist = dst_off > src_off ? dst_off - src_off :
					   src_off - dst_off;
		if (dist < len) {
			step = dist;
			backward = dst_off > src_off;
		}
	}
	/*
	 * Walk the source chunk by chunk: data is copied (backing the
	 * destination as needed), holes only clear what the destination
	 * already backs, so a sparse file stays sparse when it moves.
	 */
	buf_lock_pair(dst, src);
	while (!ret && done < len) {
		uint64_t at, n, off;
		const struct phx_buf_chunk *c;

		if (backward) {
			/* the piece ending at src_off + len - done */
			uint64_t end = src_off + len - done;

			c = phx_buf_chunk_at(src, end - 1);
			n = phx_min(phx_min(len - done, step), end - c->off);
			off = end - n;
		} else {
			off = src_off + done;
			c = phx_buf_chunk_at(src, off);
			n = phx_min(phx_min(len - done, step),
				    c->off + c->size - off);
		}
		at = dst_off + (off - src_off);
		if (c->mapped) {
			ret = phx_buf_commit_locked(dst, at, n);
			if (!ret)
				ret = dev->ops->copy_dtod(dev, dst->dptr + at,
							  src->dptr + off, n,
							  stream);
		} else {
			ret = phx_buf_zero_locked(dst, at, n, stream);
		}
		done += n;
	}
	buf_unlock_pair(dst, src);
	return copy_finish(dev, stream, ret, 0);
}
