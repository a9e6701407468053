/* SPDX-License-Identifier: MIT */
/*
 * staging.c - the host memory engines stage through.
 *
 * When a device opens, a thread of its own maps one staging budget
 * (PHX_STAGING_SIZE, in whole PHX_CHUNK_SIZE units), faults it in on the
 * device's node and registers it with the device, so the process's first
 * transfer finds its pinned staging ready or, if it comes early, waits
 * only for the rest of that work.  Where the device pins nothing (sim,
 * kmod: phx_host_register_none) there is nothing to do in advance but
 * the page faults, and those would only raise a process's memory before
 * it moves a byte: there each unit is faulted in when first lent.  Engines take their staging out of this
 * block in whole units; one that finds no room (more engines than one
 * budget holds) or needs less than a unit maps and pins its own, as every
 * engine did before.  So the memory at rest is the budget, the first
 * transfer's engine costs an io_uring and its streams, and an engine
 * never waits for another to give its staging back.
 *
 * The block belongs to the process that opened the device: a child of
 * fork() neither waits for the thread (it has none) nor uses the block.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_i.h"

struct phx_staging {
	pthread_mutex_t lock; /* protects everything below but @stop */
	pthread_cond_t ready; /* @done became true */
	pthread_t thread;
	pid_t owner; /* the process that opened the device */
	bool started; /* @thread runs or ran */
	bool done; /* the block is usable (@mem) or never will be */
	int err; /* why it is not usable */
	atomic_bool stop; /* the device closes: stop building it */
	char *mem;
	uint64_t unit;
	unsigned int units;
	bool *taken; /* units lent to engines */
	bool *touched; /* units faulted in */
};

#define PHX_MPOL_PREFERRED 1

/*
 * Map @len bytes of staging on the host node nearest the device, so the
 * device's DMA does not cross the socket interconnect.  Single-node
 * machines (and unknown nodes) take the default policy.  Not yet faulted
 * in: phx_staging_fault() does that.
 */
static void *staging_map(struct phx_device *dev, size_t len)
{
	unsigned long mask[16] = { 0 };
	int node = dev->numa_node;
	void *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (node >= 0 && node < 1024 &&
	    !access("/sys/devices/system/node/node1", F_OK)) {
		mask[node / 64] = 1UL << (node % 64);
		/* a preference, not a hard binding: best effort */
		syscall(SYS_mbind, p, len, PHX_MPOL_PREFERRED, mask, 1024UL,
			0U);
	}
	return p;
}

void *phx_staging_alloc(struct phx_device *dev, size_t len)
{
	void *p = staging_map(dev, len);

	if (p)
		memset(p, 0, len); /* fault it in now, where the policy says */
	return p;
}

static void block_finish(struct phx_staging *s, int err)
{
	pthread_mutex_lock(&s->lock);
	s->err = err;
	s->done = true;
	pthread_cond_broadcast(&s->ready);
	pthread_mutex_unlock(&s->lock);
}

static void *block_main(void *arg)
{
	struct phx_device *dev = arg;
	struct phx_staging *s = dev->staging_block;
	size_t len = (size_t)s->units * s->unit;
	unsigned int i;
	char *p;
	int ret;

	pthread_setname_np(pthread_self(), "phx-staging");
	p = staging_map(dev, len);
	if (!p) {
		block_finish(s, -ENOMEM);
		return NULL;
	}
	/* unit by unit, so a device closed at once is not kept waiting */
	for (i = 0; i < s->units && !atomic_load(&s->stop) &&
		    dev->ops->host_register != phx_host_register_none;
	     i++) {
		memset(p + (size_t)i * s->unit, 0, s->unit);
		s->touched[i] = true;
	}
	ret = atomic_load(&s->stop) ? -ECANCELED : phx_device_bind(dev);
	if (!ret)
		ret = dev->ops->host_register(dev, p, len);
	if (ret) {
		munmap(p, len);
		phx_err_clear(); /* engines pin their own: slower, not wrong */
		block_finish(s, ret);
		return NULL;
	}
	atomic_fetch_add(&dev->pinned, len);
	s->mem = p;
	block_finish(s, 0);
	return NULL;
}

int phx_staging_open(struct phx_device *dev)
{
	const struct phx_settings *set = phx_settings();
	struct phx_staging *s = calloc(1, sizeof(*s));

	if (!s)
		return phx_err(ENOMEM, "%s: out of host memory for its staging",
			       dev->name);
	s->unit = set->chunk_size;
	s->units = (unsigned int)(set->staging_size / s->unit);
	s->taken = calloc(s->units, sizeof(*s->taken));
	s->touched = calloc(s->units, sizeof(*s->touched));
	if (!s->taken || !s->touched) {
		free(s->taken);
		free(s->touched);
		free(s);
		return phx_err(ENOMEM, "%s: out of host memory for its staging",
			       dev->name);
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->ready, NULL);
	s->owner = getpid();
	dev->staging_block = s;
	if (pthread_create(&s->thread, NULL, block_main, dev)) {
		/* engines make their own, as they would without it */
		s->done = true;
		s->err = -EAGAIN;
	} else {
		s->started = true;
	}
	return 0;
}

/*
 * Wait for the block's thread; whether the block is usable.  Only in the
 * process that opened the device (the caller checks, before the lock: a
 * child of fork() may have been forked while the thread held it).
 */
static bool block_wait_locked(struct phx_staging *s)
{
	phx_assert_held(&s->lock);
	while (!s->done)
		pthread_cond_wait(&s->ready, &s->lock);
	return s->mem;
}

void *phx_staging_take(struct phx_device *dev, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	unsigned int i, u, n, run = 0;
	void *p = NULL;

	if (!s || len < s->unit || s->owner != getpid())
		return NULL;
	n = (unsigned int)((len + s->unit - 1) / s->unit);
	pthread_mutex_lock(&s->lock);
	if (!block_wait_locked(s) || n > s->units)
		goto out;
	for (i = 0; i < s->units; i++) {
		run = s->taken[i] ? 0 : run + 1;
		if (run == n)
			break;
	}
	if (run < n)
		goto out;
	i = i + 1 - n;
	memset(s->taken + i, true, n * sizeof(*s->taken));
	p = s->mem + (size_t)i * s->unit;
	for (u = i; u < i + n; u++)
		if (!s->touched[u]) {
			memset(s->mem + (size_t)u * s->unit, 0, s->unit);
			s->touched[u] = true;
		}
out:
	pthread_mutex_unlock(&s->lock);
	return p;
}

void phx_staging_give(struct phx_device *dev, void *p, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	size_t i = (size_t)((char *)p - s->mem) / s->unit;
	unsigned int n = (unsigned int)((len + s->unit - 1) / s->unit);

	pthread_mutex_lock(&s->lock);
	memset(s->taken + i, false, n * sizeof(*s->taken));
	pthread_mutex_unlock(&s->lock);
}

void phx_staging_close(struct phx_device *dev)
{
	struct phx_staging *s = dev->staging_block;
	size_t len;

	if (!s)
		return;
	len = (size_t)s->units * s->unit;
	atomic_store(&s->stop, true);
	if (s->started && s->owner == getpid())
		pthread_join(s->thread, NULL);
	if (s->mem && s->owner == getpid() && !phx_device_bind(dev)) {
		dev->ops->host_unregister(dev, s->mem);
		atomic_fetch_sub(&dev->pinned, len);
	}
	if (s->mem)
		munmap(s->mem, len);
	if (s->owner == getpid()) {
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->ready);
	}
	free(s->taken);
	free(s->touched);
	free(s);
	dev->staging_block = NULL;
}

PHX_EXPORT int phx_device_prepare(struct phx_device *dev)
{
	struct phx_staging *s = dev->staging_block;
	int ret = 0;

	if (!s || s->owner != getpid())
		return 0;
	pthread_mutex_lock(&s->lock);
	block_wait_locked(s);
	ret = s->err;
	pthread_mutex_unlock(&s->lock);
	if (ret == -ENOMEM)
		return phx_err(
			ENOMEM,
			"%s: no host memory for its staging; lower PHX_STAGING_SIZE",
			dev->name);
	if (ret)
		return phx_err(
			-ret,
			"%s: its staging could not be pinned in advance (%s); transfers pin their own",
			dev->name, strerror(-ret));
	return 0;
}
