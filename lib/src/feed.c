// SPDX-License-Identifier: MIT
/*
 * feed.c - the host side of the copy kernel's protocol (feed.h), used by
 * stream-ordered transfers in PHX_STREAM_WAIT=kernel, the default on CUDA
 * and the simulated device (stream.c).
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
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "feed.h"

static uint32_t load_acq(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store_rel(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Between polls: spin briefly, then yield, then sleep up to 50 us. */
void phx_poll_backoff(unsigned int n)
{
	struct timespec ts = { 0, 0 };

	if (n < 64)
		return;
	if (n < 256) {
		sched_yield();
		return;
	}
	ts.tv_nsec = n < 1024 ? 5000 : 50000;
	nanosleep(&ts, NULL);
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

int64_t phx_feed_read(struct phx_feed_ctl *ctl, unsigned char *ring, int fd,
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
			got = pread(fd, ring + s * ctl->slot_size, want,
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

int64_t phx_feed_write(struct phx_feed_ctl *ctl, unsigned char *ring, int fd,
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
		ret = write_all(fd, ring + s * ctl->slot_size, len,
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
		slot = (unsigned char *)(uintptr_t)ctl->ring +
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
