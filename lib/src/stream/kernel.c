/* SPDX-License-Identifier: MIT */
/*
 * kernel.c - PHX_STREAM_WAIT=kernel: the host side of the copy kernel's
 * protocol (struct phx_feed_ctl, device.h), used by stream-ordered
 * transfers in this mode and, in the default copy mode, by transfers
 * whose values are read when the stream gets there (stream.c); and the
 * mode's entry: control blocks, the workers' slots, the launch and the
 * worker's side.
 *
 * Chunk c of a transfer goes through slot c % PHX_FEED_SLOTS.  Reads: the
 * worker fills the slot, stores ready = c + 1; the kernel copies it to the
 * buffer and stores freed = c + 1.  Writes: the worker stores the request
 * (ready = c + 1), the kernel fills the slot from the buffer (freed =
 * c + 1), the worker writes it out.  Either way the worker then sets
 * nchunks and done, and the kernel's blocks leave once every chunk of
 * theirs is copied.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream_i.h"

static uint32_t load_acq(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store_rel(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Poll @p until it holds at least @v. */
static void wait_at_least(const uint32_t *p, uint32_t v)
{
	for (unsigned int n = 0; load_acq(p) < v; n++)
		phx_poll_backoff(n);
}

static size_t chunk_len(const struct phx_feed_ctl *ctl, uint64_t n, uint64_t at)
{
	return n - at < ctl->slot_size ? (size_t)(n - at) :
					 (size_t)ctl->slot_size;
}

/* Tell the kernel there are @c chunks in all, then wait for the last. */
static void finish(struct phx_feed_ctl *ctl, uint32_t c)
{
	uint32_t i;

	ctl->nchunks = c;
	store_rel(&ctl->done, 1);
	for (i = c > PHX_FEED_SLOTS ? c - PHX_FEED_SLOTS : 0; i < c; i++)
		wait_at_least(&ctl->freed[i % PHX_FEED_SLOTS], i + 1);
}

int64_t phx_feed_read(struct phx_feed_ctl *ctl, unsigned char *slots, int fd,
		      uint64_t n, int64_t file_off, int64_t buf_off,
		      int64_t *bytes_done)
{
	uint64_t moved = 0;
	uint32_t c = 0;
	int64_t ret = 0;

	ctl->op = 0;
	while (moved < n) {
		unsigned int s = c % PHX_FEED_SLOTS;
		size_t want = chunk_len(ctl, n, moved);
		ssize_t got;

		/* the slot's previous chunk must have been copied out */
		if (c >= PHX_FEED_SLOTS)
			wait_at_least(&ctl->freed[s], c - PHX_FEED_SLOTS + 1);
		do
			got = pread(fd, slots + s * ctl->slot_size, want,
				    file_off + (int64_t)moved);
		while (got < 0 && errno == EINTR);
		if (got < 0) {
			ret = -errno;
			break;
		}
		if (!got)
			break; /* end of file */
		ctl->off[s] = (uint64_t)buf_off + moved;
		ctl->len[s] = (uint32_t)got;
		store_rel(&ctl->ready[s], c + 1);
		moved += (uint64_t)got;
		c++;
		if ((size_t)got < want)
			break;
	}
	*bytes_done = ret ? ret : (int64_t)moved;
	finish(ctl, c);
	return *bytes_done;
}

/* pwrite all of @len bytes, or -errno. */
static int write_all(int fd, const unsigned char *p, size_t len, int64_t off)
{
	while (len) {
		ssize_t put = pwrite(fd, p, len, off);

		if (put < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += put;
		len -= (size_t)put;
		off += put;
	}
	return 0;
}

int64_t phx_feed_write(struct phx_feed_ctl *ctl, unsigned char *slots, int fd,
		       uint64_t n, int64_t file_off, int64_t buf_off,
		       int64_t *bytes_done)
{
	uint32_t asked = 0, c;
	uint64_t at = 0, moved = 0;
	int64_t ret = 0;

	ctl->op = 1;
	for (c = 0; ret == 0 && moved < n; c++) {
		unsigned int s = c % PHX_FEED_SLOTS;
		size_t len;

		/* keep every slot asked for */
		while (asked < c + PHX_FEED_SLOTS && at < n) {
			unsigned int a = asked % PHX_FEED_SLOTS;
			size_t l = chunk_len(ctl, n, at);

			ctl->off[a] = (uint64_t)buf_off + at;
			ctl->len[a] = (uint32_t)l;
			store_rel(&ctl->ready[a], asked + 1);
			at += l;
			asked++;
		}
		wait_at_least(&ctl->freed[s], c + 1);
		len = ctl->len[s];
		ret = write_all(fd, slots + s * ctl->slot_size, len,
				file_off + (int64_t)moved);
		if (!ret)
			moved += len;
	}
	*bytes_done = ret ? ret : (int64_t)moved;
	finish(ctl, asked);
	return *bytes_done;
}

void phx_feed_abort(struct phx_feed_ctl *ctl, int64_t err, int64_t *bytes_done)
{
	*bytes_done = err;
	finish(ctl, 0);
}

void phx_feed_wait_exit(struct phx_feed_ctl *ctl)
{
	for (unsigned int b = 0; b < PHX_FEED_SLOTS; b++)
		wait_at_least(&ctl->exited[b], 1);
}

void phx_feed_emulate(struct phx_feed_ctl *ctl, unsigned char *buf)
{
	uint32_t c;

	store_rel(&ctl->reached, 1);
	for (c = 0;; c++) {
		unsigned int s = c % PHX_FEED_SLOTS;
		unsigned char *slot;

		for (unsigned int n = 0;; n++) {
			if (load_acq(&ctl->ready[s]) == c + 1)
				break;
			if (load_acq(&ctl->done) && c >= ctl->nchunks)
				goto out;
			phx_poll_backoff(n);
		}
		slot = (unsigned char *)(uintptr_t)ctl->slots +
		       s * ctl->slot_size;
		if (ctl->op == 0)
			memcpy(buf + ctl->off[s], slot, ctl->len[s]);
		else
			memcpy(slot, buf + ctl->off[s], ctl->len[s]);
		store_rel(&ctl->freed[s], c + 1);
	}
out:
	for (unsigned int b = 0; b < PHX_FEED_SLOTS; b++)
		store_rel(&ctl->exited[b], 1);
}

/* ---- the stream layer's copy-kernel mode ------------------------------ */

/* "kernel" mode: a queued transfer whose kernel has started, taken off. */
static struct phx_stream_req *phx_feed_claim_locked(struct phx_stream_pool *w)
{
	struct phx_stream_req **pp, *r;

	phx_assert_held(&w->lock);

	for (pp = &w->feed_head; (r = *pp); pp = &r->next) {
		if (__atomic_load_n(&r->ctl->reached, __ATOMIC_ACQUIRE)) {
			*pp = r->next;
			return r;
		}
	}
	return NULL;
}

/*
 * "kernel" mode: move @r's bytes through this thread's slots with the
 * kernel on the stream, then give its control block back.  No call into
 * the backend: the stream waits on this, and a driver call could wait on
 * the stream.
 */
static void phx_feed_run(struct phx_stream_thread *t, struct phx_stream_req *r)
{
	struct phx_stream_pool *w = t->w;
	struct phx_feed_ctl *ctl = r->ctl;
	struct phx_device *dev = r->dev;
	uint64_t len = *r->len;
	int64_t foff = *r->file_off, boff = *r->buf_off, res;
	int fl = fcntl(r->fd, F_GETFL), fd = r->fd;

	ctl->slots = t->feed_slots_daddr;
	ctl->slot_size = t->slot_size;
	/* chunks start anywhere: an O_DIRECT fd is read through a twin */
	if (fl >= 0 && (fl & O_DIRECT))
		fd = phx_reopen(r->fd, fl & O_ACCMODE);
	res = phx_stream_range_check(len, foff, boff);
	if (!res && r->op == PHX_OP_WRITE && fl >= 0 && (fl & O_APPEND))
		res = phx_err(
			EINVAL,
			"fd %d is open with O_APPEND: writes go to an offset; open it without",
			r->fd);
	if (res) {
		phx_feed_abort(ctl, res, r->bytes_done);
	} else if (fd < 0) {
		res = -errno;
		phx_feed_abort(ctl, res, r->bytes_done);
	} else if (r->op == PHX_OP_READ) {
		res = phx_feed_read(ctl, t->feed_slots, fd, len, foff, boff,
				    r->bytes_done);
	} else {
		res = phx_feed_write(ctl, t->feed_slots, fd, len, foff, boff,
				     r->bytes_done);
	}
	if (fd >= 0 && fd != r->fd)
		close(fd);
	/* counted as the pipeline counts (once the stream may go on) */
	if (res >= 0)
		atomic_fetch_add(&dev->bytes[PHX_PATH_BUFFERED], (uint64_t)res);
	else
		atomic_fetch_add(&dev->errors, 1);
	atomic_fetch_add(&dev->ios, 1);
	phx_feed_wait_exit(ctl);
	pthread_mutex_lock(&w->lock);
	phx_pool_release_locked(w, r);
	pthread_mutex_unlock(&w->lock);
	free(r);
}

/* "kernel" mode: unmap and free the control blocks and the slots. */
static void phx_feed_teardown(struct phx_device *dev, struct phx_stream_pool *w,
			      struct phx_feed_ctl *ctls)
{
	for (unsigned int i = 0; i < PHX_STREAM_WORKERS; i++) {
		struct phx_stream_thread *t = &w->threads[i];

		phx_mapped_free(dev, t->feed_slots,
				t->slot_size * PHX_FEED_SLOTS);
		t->feed_slots = NULL;
	}
	phx_mapped_free(dev, ctls, PHX_STREAM_FLAGS * sizeof(*ctls));
}

/*
 * "kernel" mode: the control blocks and every worker's slots, made and
 * mapped once, on the caller's thread and before any transfer of ours is
 * queued (the workers all start at the first one).
 */
static int phx_feed_setup(struct phx_device *dev, struct phx_stream_pool *w)
{
	size_t slot;
	void *ctls;
	unsigned int i;
	int ret = 0;

	if (!dev->ops->feed_launch)
		return phx_err(
			EOPNOTSUPP,
			"%s: PHX_STREAM_WAIT=kernel: this device has no copy kernel; use device or host",
			dev->name);
	pthread_mutex_lock(&w->spawn_lock);
	if (w->ctls)
		goto out;
	ret = phx_pool_map_entries(dev, w, sizeof(*w->ctls), &ctls,
				   &w->ctls_daddr);
	if (ret)
		goto out;
	/* the workers share one engine's worth of staging, as for engines */
	slot = phx_max(phx_settings()->staging_size / PHX_STREAM_WORKERS /
			       PHX_FEED_SLOTS,
		       PHX_MIN_SLOT);
	for (i = 0; i < w->nthreads; i++) {
		struct phx_stream_thread *t = &w->threads[i];
		void *slots;

		ret = phx_mapped_alloc(dev, slot * PHX_FEED_SLOTS, &slots,
				       &t->feed_slots_daddr);
		if (ret)
			break;
		t->feed_slots = slots;
		t->slot_size = slot;
	}
	if (ret)
		phx_feed_teardown(dev, w, ctls);
	else
		w->ctls = ctls;
out:
	pthread_mutex_unlock(&w->spawn_lock);
	return ret;
}

/*
 * "kernel" mode: put the copy kernel on the stream and let the workers
 * look for it; nothing on the stream calls back into libphoenix.
 */
static int phx_feed_enqueue(struct phx_stream *stream,
			    struct phx_stream_pool *w, struct phx_stream_req *r)
{
	struct phx_device *dev = stream->dev;
	int ret;

	ret = phx_pool_take(dev, w, &r->ctl_index);
	if (ret)
		return ret;
	r->ctl = &w->ctls[r->ctl_index];
	memset(r->ctl, 0, sizeof(*r->ctl));
	ret = dev->ops->feed_launch(dev, stream->native, r->ctl,
				    w->ctls_daddr +
					    r->ctl_index * sizeof(*r->ctl),
				    r->dptr, phx_feed_emulate);
	pthread_mutex_lock(&w->lock);
	if (ret) {
		w->free_flags[w->nfree_flags++] = r->ctl_index;
	} else {
		r->next = w->feed_head;
		w->feed_head = r;
		pthread_cond_broadcast(&w->work);
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

static int kernel_enqueue(struct phx_stream *stream, struct phx_stream_pool *w,
			  struct phx_stream_req *r)
{
	int ret = phx_feed_setup(stream->dev, w);

	if (!ret)
		ret = phx_feed_enqueue(stream, w, r);
	if (ret)
		phx_pool_unreserve(w, r);
	return ret;
}

static bool kernel_poll_locked(struct phx_stream_thread *t,
			       struct phx_stream_req **claimed)
{
	phx_assert_held(&t->w->lock);
	*claimed = phx_feed_claim_locked(t->w);
	return false;
}

/* Queued transfers whose kernels have not started yet: look again soon. */
static bool kernel_waiting_locked(const struct phx_stream_thread *t)
{
	phx_assert_held(&t->w->lock);
	return t->w->feed_head;
}

static void kernel_teardown(struct phx_device *dev, struct phx_stream_pool *w)
{
	phx_feed_teardown(dev, w, w->ctls);
}

const struct phx_stream_mode phx_stream_kernel = {
	.enqueue = kernel_enqueue,
	.poll_locked = kernel_poll_locked,
	.waiting_locked = kernel_waiting_locked,
	.run = phx_feed_run,
	.teardown = kernel_teardown,
};
