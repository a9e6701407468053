/* SPDX-License-Identifier: MIT */
/*
 * buf.c - device buffers: reserved address space backed by chunks.
 *
 * A buffer reserves more address space than it needs and maps physical
 * chunks into it on demand.  The chunk table starts as a grid whose sizes
 * double from the device's granularity up to PHX_ALLOC_CHUNK, so a 4 KiB
 * file costs one small chunk and a 16 GiB one a few hundred large ones.
 * Backing a hole of a sparse buffer splits the grid chunk under it and
 * backs only the granules the range touches; a range that continues
 * backed data takes twice the chunk before it, so growth stays geometric.
 * The table is kept sorted by offset and covers [0, reserved) exactly.
 * Growing past the reservation maps the same chunks into a larger one:
 * data is never copied.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"

#define PHX_MIN_RESERVE (256ULL << 20)
#define PHX_MAX_SIZE (1ULL << 46) /* 64 TiB: beyond any device */

/* log2 of a power of two */
static unsigned int ilog2_u64(uint64_t v)
{
	return 63 - (unsigned int)__builtin_clzll(v);
}

/* The largest chunk: alloc_chunk rounded down to gran * 2^n. */
uint64_t phx_max_chunk_of(uint64_t gran)
{
	uint64_t want = phx_settings()->alloc_chunk;
	uint64_t m = gran;

	while (m * 2 <= want)
		m *= 2;
	return m;
}

unsigned int phx_chunk_index(uint64_t gran, uint64_t max_chunk, uint64_t off)
{
	unsigned int k = ilog2_u64(max_chunk / gran) + 1;

	if (off < gran)
		return 0;
	if (off < max_chunk)
		return ilog2_u64(off / gran) + 1;
	return (unsigned int)(k - 1 + off / max_chunk);
}

void phx_chunk_extent(uint64_t gran, uint64_t max_chunk, unsigned int idx,
		      uint64_t *off, uint64_t *size)
{
	unsigned int k = ilog2_u64(max_chunk / gran) + 1;

	if (idx == 0) {
		*off = 0;
		*size = gran;
	} else if (idx < k) {
		*off = gran << (idx - 1);
		*size = *off;
	} else {
		*off = (uint64_t)(idx - k + 1) * max_chunk;
		*size = max_chunk;
	}
}

uint64_t phx_buf_gran(const struct phx_buf *buf)
{
	return buf->dev->granularity;
}

/* Index of the chunk holding @off (the last one if @off is past them). */
unsigned int phx_chunk_find(const struct phx_buf *buf, uint64_t off)
{
	unsigned int lo = 0, hi = buf->nchunks;

	while (hi - lo > 1) {
		unsigned int mid = lo + (hi - lo) / 2;

		if (buf->chunks[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

const struct phx_buf_chunk *phx_buf_chunk_at(const struct phx_buf *buf,
					     uint64_t off)
{
	return &buf->chunks[phx_chunk_find(buf, off)];
}

/* Bytes of address space to reserve for @size: whole chunks. */
static uint64_t reserve_for(uint64_t gran, uint64_t size)
{
	uint64_t m = phx_max_chunk_of(gran), off, csz;
	unsigned int idx;

	if (size < PHX_MIN_RESERVE)
		size = PHX_MIN_RESERVE;
	idx = phx_chunk_index(gran, m, size - 1);
	phx_chunk_extent(gran, m, idx, &off, &csz);
	return off + csz;
}

/* Grow the chunk table to cover @reserved bytes. */
static int chunks_cover(struct phx_buf *buf, uint64_t reserved)
{
	uint64_t gran = phx_buf_gran(buf), m = phx_max_chunk_of(gran), end = 0;
	unsigned int first, last, i, n;
	struct phx_buf_chunk *c;

	if (buf->nchunks) {
		c = &buf->chunks[buf->nchunks - 1];
		end = c->off + c->size;
	}
	if (end >= reserved)
		return 0;
	/* The table always ends on a grid boundary: append grid chunks. */
	first = buf->nchunks ? phx_chunk_index(gran, m, end) : 0;
	last = phx_chunk_index(gran, m, reserved - 1);
	n = buf->nchunks + (last - first + 1);
	c = realloc(buf->chunks, n * sizeof(*c));
	if (!c)
		return phx_err(ENOMEM, "out of host memory for a chunk table");
	for (i = first; i <= last; i++) {
		struct phx_buf_chunk *e = &c[buf->nchunks + (i - first)];

		memset(e, 0, sizeof(*e));
		phx_chunk_extent(gran, m, i, &e->off, &e->size);
	}
	buf->chunks = c;
	buf->nchunks = n;
	return 0;
}

static void chunk_drop(struct phx_buf *buf, struct phx_buf_chunk *c)
{
	struct phx_device *dev = buf->dev;

	if (!c->mapped)
		return;
	dev->ops->chunk_unmap(dev, buf->dptr + c->off, c->size);
	dev->ops->chunk_release(dev, c->handle, c->size);
	c->mapped = false;
	buf->committed -= c->size;
	if (!buf->imported)
		phx_device_uncharge(dev, c->size);
}

/* Split the unmapped chunk @i at @at (inside it): two table entries. */
static int chunk_split(struct phx_buf *buf, unsigned int i, uint64_t at)
{
	struct phx_buf_chunk *c;
	uint64_t end;

	c = realloc(buf->chunks, (buf->nchunks + 1) * sizeof(*c));
	if (!c)
		return phx_err(ENOMEM, "out of host memory for a chunk table");
	buf->chunks = c;
	memmove(&c[i + 1], &c[i], (buf->nchunks - i) * sizeof(*c));
	buf->nchunks++;
	end = c[i].off + c[i].size;
	c[i].size = at - c[i].off;
	c[i + 1].off = at;
	c[i + 1].size = end - at;
	return 0;
}

/*
 * Make [@from, @to) (granule-aligned, inside the unmapped chunk @*i) one
 * table entry; *i then indexes it.
 */
int phx_chunk_carve(struct phx_buf *buf, unsigned int *i, uint64_t from,
		    uint64_t to)
{
	int ret;

	if (from > buf->chunks[*i].off) {
		ret = chunk_split(buf, *i, from);
		if (ret)
			return ret;
		(*i)++;
	}
	if (to < buf->chunks[*i].off + buf->chunks[*i].size)
		return chunk_split(buf, *i, to);
	return 0;
}

/*
 * Give the unmapped chunk @c memory and map it.  Where the device makes
 * chunks without clearing them, the clearing is queued here and
 * *@queued set: the caller waits for it before anyone sees the chunk.
 */
static int chunk_back(struct phx_buf *buf, struct phx_buf_chunk *c,
		      bool *queued)
{
	const struct phx_backend_ops *ops = buf->dev->ops;
	struct phx_device *dev = buf->dev;
	bool uncleared = ops->chunk_create_uncleared != NULL;
	int ret;

	ret = phx_device_charge(dev, c->size);
	if (ret)
		return ret;
	ret = uncleared ?
		      ops->chunk_create_uncleared(dev, c->size, &c->handle) :
		      ops->chunk_create(dev, c->size, &c->handle);
	if (ret) {
		phx_device_uncharge(dev, c->size);
		return ret;
	}
	ret = ops->chunk_map(dev, buf->dptr + c->off, c->size, c->handle);
	if (!ret && uncleared) {
		ret = ops->chunk_clear(dev, buf->dptr + c->off, c->size);
		if (ret)
			ops->chunk_unmap(dev, buf->dptr + c->off, c->size);
	}
	if (ret) {
		ops->chunk_release(dev, c->handle, c->size);
		phx_device_uncharge(dev, c->size);
		return ret;
	}
	*queued = *queued || uncleared;
	c->mapped = true;
	buf->committed += c->size;
	return 0;
}

/*
 * The part of the unmapped chunk @i to back for [@s, @e) (inside it): a
 * dense buffer backs whole chunks; a sparse one the granules touched, or,
 * where the range continues the backed chunk before it, at least twice
 * that chunk, so appends keep getting large chunks.
 */
static void back_span(const struct phx_buf *buf, unsigned int i, uint64_t s,
		      uint64_t e, uint64_t *from, uint64_t *to)
{
	const struct phx_buf_chunk *c = &buf->chunks[i];
	uint64_t gran = phx_buf_gran(buf), end = c->off + c->size;

	if (!(buf->flags & PHX_BUF_SPARSE)) {
		*from = c->off;
		*to = end;
		return;
	}
	*from = s / gran * gran;
	*to = (e + gran - 1) / gran * gran;
	if (*from == c->off && i && buf->chunks[i - 1].mapped)
		*to = phx_max(*to, c->off + 2 * buf->chunks[i - 1].size);
	*to = phx_min(*to, end);
}

/* Which granules of [@from, @to) are backed now, or NULL. */
static bool *backed_now(const struct phx_buf *buf, uint64_t from, uint64_t to)
{
	uint64_t gran = phx_buf_gran(buf);
	bool *was = calloc((to - from) / gran + 1, sizeof(*was));
	unsigned int k;

	if (!was) {
		phx_err(ENOMEM, "out of host memory for a commit");
		return NULL;
	}
	for (k = phx_chunk_find(buf, from);
	     k < buf->nchunks && buf->chunks[k].off < to; k++)
		if (buf->chunks[k].mapped)
			was[(buf->chunks[k].off - from) / gran] = true;
	return was;
}

/*
 * A commit failed: the chunks of [@from, @to) it backed (not in @was) go
 * again, so the device gets back what the call took, and chunks whose
 * clearing failed, which may hold what other buffers left, are not seen.
 */
static void chunks_unback(struct phx_buf *buf, uint64_t from, uint64_t to,
			  const bool *was)
{
	unsigned int i;

	for (i = phx_chunk_find(buf, from);
	     i < buf->nchunks && buf->chunks[i].off < to; i++) {
		struct phx_buf_chunk *c = &buf->chunks[i];

		if (c->mapped && !was[(c->off - from) / phx_buf_gran(buf)])
			chunk_drop(buf, c);
	}
}

int phx_buf_commit_locked(struct phx_buf *buf, uint64_t off, uint64_t len)
{
	uint64_t end = off + len, gran = phx_buf_gran(buf), from, to;
	bool queued = false, *was = NULL;
	unsigned int i;
	int ret = 0, wret;

	phx_assert_held(&buf->lock);

	if (!len)
		return 0;
	/* what was backed before, by granule: kept should clearing fail */
	from = buf->chunks[phx_chunk_find(buf, off)].off;
	to = phx_min(phx_align_up(end, gran), buf->reserved);
	for (i = phx_chunk_find(buf, off);
	     i < buf->nchunks && buf->chunks[i].off < end; i++) {
		uint64_t s, e, bfrom, bto;

		if (buf->chunks[i].mapped)
			continue;
		if (buf->imported) {
			ret = phx_err(
				EPERM,
				"cannot back a hole in an imported buffer: write it in the owning process");
			break;
		}
		if (!was) {
			was = backed_now(buf, from, to);
			if (!was) {
				ret = -ENOMEM;
				break;
			}
		}
		s = phx_max(off, buf->chunks[i].off);
		e = phx_min(end, buf->chunks[i].off + buf->chunks[i].size);
		back_span(buf, i, s, e, &bfrom, &bto);
		ret = phx_chunk_carve(buf, &i, bfrom, bto);
		if (!ret)
			ret = chunk_back(buf, &buf->chunks[i], &queued);
		/*
		 * A span larger than the range (appends grow geometrically)
		 * that does not fit: back only the granules the range needs,
		 * so a file can grow up to the last of the device's memory.
		 */
		if (ret == -ENOSPC && (buf->flags & PHX_BUF_SPARSE) &&
		    phx_align_up(e, gran) < bto) {
			ret = phx_chunk_carve(buf, &i, bfrom,
					      phx_align_up(e, gran));
			if (!ret)
				ret = chunk_back(buf, &buf->chunks[i], &queued);
		}
		if (ret)
			break;
	}
	if (queued) {
		/* one wait for every chunk this commit backed */
		wret = buf->dev->ops->chunk_clear_wait(buf->dev);
		ret = ret ? ret : wret;
	}
	/* a failed commit gives back all it backed: nothing is kept half */
	if (ret && was)
		chunks_unback(buf, from, to, was);
	free(was);
	return ret;
}

/* A buffer object with @reserved bytes of address space and no memory. */
int phx_buf_new(struct phx_device *dev, uint64_t reserved, unsigned int flags,
		bool imported, struct phx_buf **out)
{
	struct phx_buf *buf = calloc(1, sizeof(*buf));
	int ret;

	if (!buf)
		return phx_err(ENOMEM, "out of host memory for a buffer");
	buf->dev = dev;
	buf->flags = flags;
	buf->imported = imported;
	buf->reserved = reserved;
	pthread_mutex_init(&buf->lock, NULL);
	ret = dev->ops->va_reserve(dev, reserved, &buf->dptr);
	if (ret) {
		pthread_mutex_destroy(&buf->lock);
		free(buf);
		return ret;
	}
	*out = buf;
	return chunks_cover(buf, reserved);
}

/* Give back everything @buf holds; the device context is bound. */
void phx_buf_destroy(struct phx_buf *buf)
{
	unsigned int i;

	for (i = 0; i < buf->nchunks; i++)
		chunk_drop(buf, &buf->chunks[i]);
	buf->dev->ops->va_release(buf->dev, buf->dptr, buf->reserved);
	free(buf->chunks);
	pthread_mutex_destroy(&buf->lock);
	free(buf);
}

PHX_EXPORT int phx_buf_alloc(struct phx_device *dev, uint64_t size,
			     unsigned int flags, struct phx_buf **out)
{
	struct phx_buf *buf = NULL;
	int ret;

	if (flags & ~(unsigned int)PHX_BUF_SPARSE)
		return phx_err(EINVAL, "%s: unknown buffer flags 0x%x",
			       dev->name, flags);
	if (size > PHX_MAX_SIZE)
		return phx_err(EFBIG,
			       "%s: cannot allocate %llu bytes: too large",
			       dev->name, (unsigned long long)size);
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	ret = phx_buf_new(dev, reserve_for(dev->granularity, size), flags,
			  false, &buf);
	if (ret)
		return ret;
	buf->size = size;
	if (!(flags & PHX_BUF_SPARSE)) {
		/* no one sees @buf yet, but the lock rule has no exception */
		pthread_mutex_lock(&buf->lock);
		ret = phx_buf_commit_locked(buf, 0, size);
		pthread_mutex_unlock(&buf->lock);
		if (ret) {
			phx_buf_destroy(buf);
			return ret;
		}
	}
	*out = buf;
	phx_err_clear();
	return 0;
}

PHX_EXPORT void phx_buf_free(struct phx_buf *buf)
{
	if (!buf)
		return;
	phx_device_bind(buf->dev);
	phx_buf_destroy(buf);
}

/* Move every mapped chunk into a larger reservation. */
static int buf_move(struct phx_buf *buf, uint64_t reserved)
{
	struct phx_device *dev = buf->dev;
	phx_dptr_t va;
	unsigned int i, j;
	int ret;

	ret = dev->ops->va_reserve(dev, reserved, &va);
	if (ret)
		return ret;
	for (i = 0; i < buf->nchunks; i++) {
		struct phx_buf_chunk *c = &buf->chunks[i];

		if (!c->mapped)
			continue;
		ret = dev->ops->chunk_map(dev, va + c->off, c->size, c->handle);
		if (ret)
			goto out_unmap;
	}
	for (i = 0; i < buf->nchunks; i++)
		if (buf->chunks[i].mapped)
			dev->ops->chunk_unmap(dev,
					      buf->dptr + buf->chunks[i].off,
					      buf->chunks[i].size);
	dev->ops->va_release(dev, buf->dptr, buf->reserved);
	buf->dptr = va;
	buf->reserved = reserved;
	return chunks_cover(buf, reserved);

out_unmap:
	for (j = 0; j < i; j++)
		if (buf->chunks[j].mapped)
			dev->ops->chunk_unmap(dev, va + buf->chunks[j].off,
					      buf->chunks[j].size);
	dev->ops->va_release(dev, va, reserved);
	return ret;
}

int phx_buf_zero_locked(struct phx_buf *buf, uint64_t from, uint64_t len,
			void *stream)
{
	struct phx_device *dev = buf->dev;
	uint64_t to = from + len;
	unsigned int i;
	int ret = 0;

	phx_assert_held(&buf->lock);

	for (i = 0; i < buf->nchunks && !ret; i++) {
		struct phx_buf_chunk *c = &buf->chunks[i];
		uint64_t s = phx_max(from, c->off);
		uint64_t e = phx_min(to, c->off + c->size);

		if (!c->mapped || s >= e)
			continue;
		ret = dev->ops->memset_d8(dev, buf->dptr + s, 0, e - s, stream);
	}
	return ret;
}

/* Zero [from, to) where it is backed, so regrowth reads zeros. */
static int buf_zero_range(struct phx_buf *buf, uint64_t from, uint64_t to)
{
	struct phx_device *dev = buf->dev;
	void *stream = dev->ops->stream_default(dev);
	int ret;

	ret = phx_buf_zero_locked(buf, from, to - from, stream);
	if (!ret)
		ret = dev->ops->stream_sync(dev, stream);
	return ret;
}

PHX_EXPORT int phx_buf_resize(struct phx_buf *buf, uint64_t size)
{
	struct phx_device *dev = buf->dev;
	unsigned int i;
	int ret = 0;

	if (buf->imported)
		return phx_err(EPERM, "cannot resize an imported buffer");
	if (size > PHX_MAX_SIZE)
		return phx_err(EFBIG, "%s: cannot grow a buffer to %llu bytes",
			       dev->name, (unsigned long long)size);
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	pthread_mutex_lock(&buf->lock);
	if (size > buf->reserved) {
		uint64_t r = reserve_for(phx_buf_gran(buf),
					 phx_max(size, 2 * buf->reserved));

		ret = buf_move(buf, r);
		if (ret)
			goto out;
	}
	if (size < buf->size) {
		/* Free whole chunks past the end, zero the partial one. */
		for (i = 0; i < buf->nchunks; i++) {
			struct phx_buf_chunk *c = &buf->chunks[i];

			if (c->off >= size)
				chunk_drop(buf, c);
		}
		ret = buf_zero_range(buf, size, buf->size);
		if (ret)
			goto out;
	}
	if (!(buf->flags & PHX_BUF_SPARSE) && size > buf->size) {
		/* a failed commit gives back what it took: the old backing */
		ret = phx_buf_commit_locked(buf, buf->size, size - buf->size);
		if (ret)
			goto out;
	}
	buf->size = size;
out:
	pthread_mutex_unlock(&buf->lock);
	return ret;
}

int phx_buf_check_range(const struct phx_buf *buf, uint64_t off, uint64_t len)
{
	if (off > buf->size || len > buf->size - off)
		return phx_err(
			ERANGE,
			"range %llu+%llu is outside the %llu-byte buffer",
			(unsigned long long)off, (unsigned long long)len,
			(unsigned long long)buf->size);
	return 0;
}

PHX_EXPORT int phx_buf_commit(struct phx_buf *buf, uint64_t off, uint64_t len)
{
	int ret = phx_buf_check_range(buf, off, len);

	if (ret)
		return ret;
	ret = phx_device_bind(buf->dev);
	if (ret)
		return ret;
	pthread_mutex_lock(&buf->lock);
	ret = phx_buf_commit_locked(buf, off, len);
	pthread_mutex_unlock(&buf->lock);
	return ret;
}

PHX_EXPORT uint64_t phx_buf_size(const struct phx_buf *buf)
{
	return buf->size;
}

PHX_EXPORT uint64_t phx_buf_committed(const struct phx_buf *buf)
{
	return buf->committed;
}

PHX_EXPORT int phx_buf_next_data(struct phx_buf *buf, uint64_t off,
				 uint64_t *data_off, uint64_t *data_len)
{
	uint64_t start = 0, end = 0;
	unsigned int i;
	int ret = -ENXIO;

	pthread_mutex_lock(&buf->lock);
	for (i = phx_chunk_find(buf, off);
	     i < buf->nchunks && buf->chunks[i].off < buf->size; i++) {
		const struct phx_buf_chunk *c = &buf->chunks[i];

		if (!c->mapped || c->off + c->size <= off) {
			if (!ret)
				break;
			continue;
		}
		if (ret)
			start = phx_max(off, c->off);
		end = c->off + c->size;
		ret = 0;
	}
	end = phx_min(end, buf->size);
	if (!ret && start < end) {
		*data_off = start;
		*data_len = end - start;
	} else {
		ret = phx_err(
			ENXIO,
			"no data at or after offset %llu of the %llu-byte buffer",
			(unsigned long long)off, (unsigned long long)buf->size);
	}
	pthread_mutex_unlock(&buf->lock);
	return ret;
}

PHX_EXPORT phx_dptr_t phx_buf_dptr(const struct phx_buf *buf)
{
	return buf->dptr;
}

PHX_EXPORT struct phx_device *phx_buf_device(const struct phx_buf *buf)
{
	return buf->dev;
}

PHX_EXPORT void *phx_buf_host_view(struct phx_buf *buf)
{
	struct phx_device *dev = buf->dev;

	return dev->ops->host_addr ? dev->ops->host_addr(dev, buf->dptr) : NULL;
}

int phx_buf_copy_out(struct phx_buf *buf, uint64_t off, void *dst, uint64_t len,
		     void *stream)
{
	struct phx_device *dev = buf->dev;
	uint64_t end = off + len;
	unsigned int i;
	int ret = 0;

	if (!len)
		return 0;
	pthread_mutex_lock(&buf->lock);
	for (i = phx_chunk_find(buf, off); i < buf->nchunks && !ret; i++) {
		struct phx_buf_chunk *c = &buf->chunks[i];
		uint64_t s = phx_max(off, c->off);
		uint64_t e = phx_min(end, c->off + c->size);

		if (s >= end)
			break;
		if (c->mapped)
			ret = dev->ops->copy_dtoh(dev, (char *)dst + (s - off),
						  buf->dptr + s, e - s, stream);
		else
			memset((char *)dst + (s - off), 0, e - s);
	}
	pthread_mutex_unlock(&buf->lock);
	return ret;
}
