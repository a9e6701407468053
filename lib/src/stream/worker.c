/* SPDX-License-Identifier: MIT */
/*
 * worker.c - what the stream modes (copy.c, kernel.c, and the device and
 * host modes in stream.c) share below them: the flags and control blocks
 * a device's queued transfers hold, and the host memory the device reads
 * and writes.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "stream_i.h"

/* The end of a transfer's life: its flag or control block back, one less queued. */
void phx_async_release_locked(struct phx_async_worker *w, struct async_req *r)
{
	if (r->flag && !r->keep_flag)
		w->free_flags[w->nfree_flags++] =
			(uint32_t)(r->flag - w->flags);
	if (r->ctl)
		w->free_flags[w->nfree_flags++] = r->ctl_index;
	w->outstanding--;
	pthread_cond_broadcast(&w->done);
}

/* Every flag (or control block) free, lowest index first out. */
void phx_async_free_all_locked(struct phx_async_worker *w)
{
	for (unsigned int i = 0; i < PHX_ASYNC_FLAGS; i++)
		w->free_flags[i] = PHX_ASYNC_FLAGS - 1 - i;
	w->nfree_flags = PHX_ASYNC_FLAGS;
}

/*
 * Host memory the device reads and writes: @len bytes, zeroed, at *@out,
 * and at *@daddr for the device.  On the caller's thread, before any
 * transfer of ours is queued (pinning waits for host functions on CUDA).
 */
int phx_mapped_alloc(struct phx_device *dev, size_t len, void **out,
		     uint64_t *daddr)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	int ret = 0;

	if (p == MAP_FAILED)
		return phx_err(ENOMEM, "%s: out of host memory for stream work",
			       dev->name);
	if (dev->ops->host_map)
		ret = dev->ops->host_map(dev, p, len, daddr);
	else
		*daddr = (uintptr_t)p;
	if (ret) {
		munmap(p, len);
		return ret;
	}
	*out = p;
	return 0;
}

void phx_mapped_free(struct phx_device *dev, void *p, size_t len)
{
	if (!p)
		return;
	if (dev->ops->host_unmap)
		dev->ops->host_unmap(dev, p);
	munmap(p, len);
}

/* A free flag (or control block) index, or -EBUSY when all are in use. */
int phx_async_take(struct phx_device *dev, struct phx_async_worker *w,
		   unsigned int *index)
{
	pthread_mutex_lock(&w->lock);
	if (!w->nfree_flags) {
		pthread_mutex_unlock(&w->lock);
		return phx_err(
			EBUSY,
			"%s: %d stream-ordered transfers already queued; wait for some to finish",
			dev->name, PHX_ASYNC_FLAGS);
	}
	*index = w->free_flags[--w->nfree_flags];
	pthread_mutex_unlock(&w->lock);
	return 0;
}
