/* SPDX-License-Identifier: MIT */
/*
 * readahead.c - sequential read-ahead of open files the daemon serves.
 *
 * A read answered from device memory costs two copies in a row: device to
 * pinned host memory, then the reply into the reader's buffer.  When a
 * read continues the one before on the same open file, the next range of
 * the same size is copied by a worker while this read is answered, and
 * the read that asks for exactly that range takes it.  Anything else
 * throws it away: another range, a change of the file since it was asked
 * for (inode->data_gen), a file shared with another process.  One
 * read-ahead per open file, in a buffer from the device's pinned pool; if
 * the pool has none free, nothing is read ahead.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "phxfs.h"

/* Enough for a few files read at once; each copies one range at a time. */
#define RA_WORKERS 4

/*
 * Protects the queue, the workers' state and every handle's read-ahead
 * (struct phxfs_ra).  Held only to change state, never during a copy.
 */
static pthread_mutex_t ra_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ra_work = PTHREAD_COND_INITIALIZER;
static struct phxfs_handle *queue_head, *queue_tail;
static pthread_t workers[RA_WORKERS];
static unsigned int nworkers;
static bool stopping;
/* Size of the pooled buffers, as file.c's reads take (max_write). */
static size_t ra_buf_len;

static void queue_add(struct phxfs_handle *h)
{
	h->ra.queue_next = NULL;
	if (queue_tail)
		queue_tail->ra.queue_next = h;
	else
		queue_head = h;
	queue_tail = h;
}

static void queue_remove(struct phxfs_handle *h)
{
	struct phxfs_handle **p = &queue_head, *prev = NULL;

	while (*p != h) {
		prev = *p;
		p = &(*p)->ra.queue_next;
	}
	*p = h->ra.queue_next;
	if (queue_tail == h)
		queue_tail = prev;
}

/*
 * Copy @h's read-ahead from the device; the caller moved it to RUNNING,
 * so it is alone on it.  The shared io_lock keeps the buffer and the size
 * still while it copies, as for a read.
 */
static void ra_copy(struct phxfs_handle *h)
{
	struct phxfs_inode *inode = h->inode;
	struct phxfs_ra *ra = &h->ra;
	uint64_t size;

	pthread_rwlock_rdlock(&inode->io_lock);
	size = phxfs_data_size(inode);
	ra->len = 0;
	ra->err = -ESTALE;
	if (!phxfs_ranged(inode) && inode->buf && inode->dev == ra->dev &&
	    ra->off < size) {
		ra->len = size - ra->off < ra->want ? size - ra->off : ra->want;
		ra->err = phx_memcpy_from_buf(ra->host, inode->buf, ra->off,
					      ra->len);
	}
	pthread_rwlock_unlock(&inode->io_lock);
}

static void *ra_worker(void *arg)
{
	struct phxfs_handle *h;

	/* its own name, not its creator's (ps, top, perf) */
	pthread_setname_np(pthread_self(), "phxfs-ra");
	pthread_mutex_lock(&ra_lock);
	for (;;) {
		while (!queue_head && !stopping)
			pthread_cond_wait(&ra_work, &ra_lock);
		if (stopping)
			break;
		h = queue_head;
		queue_remove(h);
		h->ra.state = PHXFS_RA_RUNNING;
		pthread_mutex_unlock(&ra_lock);
		ra_copy(h);
		pthread_mutex_lock(&ra_lock);
		h->ra.state = PHXFS_RA_DONE;
		pthread_cond_broadcast(&h->ra.done);
	}
	pthread_mutex_unlock(&ra_lock);
	return NULL;
}

void phxfs_ra_start(struct phxfs *fs)
{
	int ret = 0;

	if (fs->opts.writeback || fs->opts.no_readahead)
		return;
	ra_buf_len = fs->max_write;
	while (nworkers < RA_WORKERS && !ret) {
		ret = pthread_create(&workers[nworkers], NULL, ra_worker, NULL);
		if (!ret)
			nworkers++;
	}
	if (ret)
		fprintf(stderr,
			"phxfs: read-ahead thread: %s; %u of %d run, reads go on\n",
			strerror(ret), nworkers, RA_WORKERS);
}

void phxfs_ra_stop(void)
{
	unsigned int i;

	pthread_mutex_lock(&ra_lock);
	stopping = true;
	pthread_cond_broadcast(&ra_work);
	pthread_mutex_unlock(&ra_lock);
	for (i = 0; i < nworkers; i++)
		pthread_join(workers[i], NULL);
	nworkers = 0;
}

void phxfs_ra_init(struct phxfs_handle *h, bool on)
{
	memset(&h->ra, 0, sizeof(h->ra));
	h->ra.on = on && nworkers;
	if (h->ra.on)
		pthread_cond_init(&h->ra.done, NULL);
}

static void ra_cancel(struct phxfs_ra *ra, struct phxfs_handle *h)
{
	queue_remove(h);
	ra->state = PHXFS_RA_DONE;
	ra->err = -ECANCELED;
}

/* Copy @h's queued read-ahead here; ra_lock held, dropped meanwhile. */
static void ra_copy_here(struct phxfs_ra *ra, struct phxfs_handle *h)
{
	queue_remove(h);
	ra->state = PHXFS_RA_RUNNING;
	pthread_mutex_unlock(&ra_lock);
	ra_copy(h);
	pthread_mutex_lock(&ra_lock);
	ra->state = PHXFS_RA_DONE;
	pthread_cond_broadcast(&ra->done);
}

static void ra_free(struct phxfs_dev *dev, void *host)
{
	if (host)
		phx_host_free(dev->dev, host, ra_buf_len);
}

void phxfs_ra_release(struct phxfs_handle *h)
{
	struct phxfs_ra *ra = &h->ra;
	void *host;

	if (!ra->on)
		return;
	pthread_mutex_lock(&ra_lock);
	while (ra->state == PHXFS_RA_RUNNING)
		pthread_cond_wait(&ra->done, &ra_lock);
	if (ra->state == PHXFS_RA_QUEUED)
		ra_cancel(ra, h);
	host = ra->host;
	pthread_mutex_unlock(&ra_lock);
	ra_free(ra->dev, host);
	pthread_cond_destroy(&ra->done);
}

static bool ra_matches(struct phxfs_handle *h, uint64_t off, size_t size)
{
	struct phxfs_ra *ra = &h->ra;

	return ra->off == off && size <= ra->want;
}

bool phxfs_ra_take(struct phxfs_handle *h, uint64_t off, size_t size,
		   struct phxfs_ra_hit *hit)
{
	struct phxfs_inode *inode = h->inode;
	struct phxfs_ra *ra = &h->ra;
	struct phxfs_dev *dev;
	bool served = false;
	void *host;

	if (!ra->on)
		return false;
	pthread_mutex_lock(&ra_lock);
	/*
	 * Until it is copied or gone.  While we wait, another read of this
	 * file may take it and queue the next one.
	 */
	for (;;) {
		if (ra->state == PHXFS_RA_RUNNING)
			pthread_cond_wait(&ra->done, &ra_lock);
		else if (ra->state != PHXFS_RA_QUEUED)
			break;
		else if (ra_matches(h, off, size))
			ra_copy_here(ra, h); /* no worker came to it yet */
		else
			ra_cancel(ra, h);
	}
	if (ra->state == PHXFS_RA_NONE) {
		pthread_mutex_unlock(&ra_lock);
		return false;
	}
	if (!ra->err && ra_matches(h, off, size) &&
	    ra->gen == atomic_load(&inode->data_gen) &&
	    !atomic_load(&inode->shared)) {
		hit->host = ra->host;
		hit->dev = ra->dev;
		hit->len = ra->len < size ? ra->len : size;
		ra->host = NULL;
		served = true;
	}
	host = ra->host;
	dev = ra->dev;
	ra->host = NULL;
	ra->state = PHXFS_RA_NONE;
	atomic_fetch_add(served ? &dev->ra_hits : &dev->ra_dropped, 1);
	atomic_fetch_add(served ? &inode->ra_hits : &inode->ra_dropped, 1);
	pthread_mutex_unlock(&ra_lock);
	ra_free(dev, host);
	return served;
}

void phxfs_ra_put(struct phxfs_ra_hit *hit)
{
	ra_free(hit->dev, hit->host);
}

void phxfs_ra_advance(struct phxfs_handle *h, struct phxfs_dev *dev,
		      uint64_t off, uint64_t n, size_t size)
{
	struct phxfs_inode *inode = h->inode;
	struct phxfs_ra *ra = &h->ra;
	uint64_t next = off + n;
	void *host = NULL;
	bool seq;

	if (!ra->on)
		return;
	pthread_mutex_lock(&ra_lock);
	seq = ra->next == off;
	ra->next = next;
	pthread_mutex_unlock(&ra_lock);
	if (!seq || !n || size > ra_buf_len ||
	    next >= atomic_load(&inode->size) || atomic_load(&inode->shared))
		return;
	/* Pinned memory or none: a pageable copy would not keep up. */
	if (phx_host_alloc(dev->dev, ra_buf_len, &host))
		return;
	pthread_mutex_lock(&ra_lock);
	if (ra->state == PHXFS_RA_NONE && !stopping) {
		ra->state = PHXFS_RA_QUEUED;
		ra->off = next;
		ra->want = size;
		ra->host = host;
		ra->dev = dev;
		/*
		 * Taken now, not when the copy starts: a change answered
		 * from here on makes it stale whenever the worker runs.
		 */
		ra->gen = atomic_load(&inode->data_gen);
		queue_add(h);
		pthread_cond_signal(&ra_work);
		host = NULL;
	}
	pthread_mutex_unlock(&ra_lock);
	ra_free(dev, host);
}
