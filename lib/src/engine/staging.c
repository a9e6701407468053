/* SPDX-License-Identifier: MIT */
/*
 * staging.c - the host memory engines stage through.
 *
 * When a device opens, a thread of its own maps one staging budget
 * (PHX_STAGING_SIZE, in whole PHX_CHUNK_SIZE units) in huge pages where
 * the kernel has them, faults it in on the device's node (with helper
 * threads where the machine has CPUs to spare) and registers
 * it with the device; then it runs what the engine layer asked it to
 * (engine.c: build the pool's first engine out of the block), so that a
 * process's first transfer finds its engine ready or, if it comes early,
 * waits only for the rest of that work.  Where the device copies
 * without staging (kmod: phx.ko memory is host-addressable) the block is
 * only mapped, each unit faulted in when first lent, so a process that
 * moves nothing there holds nothing.  Engines take their staging out of
 * this block in whole units; one that finds no room (more engines than
 * one budget holds) or needs less than a unit maps and pins its own.  So
 * the memory at rest is the budget, and an engine never waits for
 * another to give its staging back.
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
	uint64_t t0; /* when the device opened (phx_now_ns()) */
	bool started; /* @thread runs or ran */
	bool done; /* the block is usable (@mem) or never will be */
	bool settled; /* the thread did all it was to do (@then too) */
	int err; /* why it is not usable */
	atomic_bool stop; /* the device closes: stop building it */
	/* run by the thread once the block is done (false: it stops) */
	void (*then)(struct phx_device *dev, bool run);
	char *mem;
	uint64_t unit;
	unsigned int units;
	bool *taken; /* units lent to engines */
	bool *touched; /* units faulted in */
};

#define PHX_MPOL_PREFERRED 1
#define PHX_HUGE_PAGE (2UL << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Map @len bytes on a huge-page boundary, asking for huge pages where
 * @len holds whole ones: faulting in, pinning (the device's and
 * io_uring's) and the kernel's copies through the page tables then walk
 * one entry per 2 MiB instead of 512.  Where the kernel has none to give
 * (transparent huge pages off), the advice is ignored.
 */
static void *huge_map(size_t len)
{
	size_t over = len >= PHX_HUGE_PAGE ? PHX_HUGE_PAGE : 0;
	uintptr_t a, b;
	char *p;

	p = mmap(NULL, len + over, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (!over)
		return p;
	a = phx_align_up((uintptr_t)p, PHX_HUGE_PAGE);
	b = (uintptr_t)p + len + over;
	if (a > (uintptr_t)p)
		munmap(p, a - (uintptr_t)p);
	if (b > a + len)
		munmap((void *)(a + len), b - (a + len));
	if (len % PHX_HUGE_PAGE == 0)
		madvise((void *)a, len, MADV_HUGEPAGE);
	return (void *)a;
}

/* Fault [@p, @p + @len) in for writing: one call where the kernel can. */
static void fault_in(void *p, size_t len)
{
	if (madvise(p, len, MADV_POPULATE_WRITE))
		memset(p, 0, len);
}

/*
 * Map @len bytes of staging on the host node nearest the device, so the
 * device's DMA does not cross the socket interconnect.  Single-node
 * machines (and unknown nodes) take the default policy.  Not yet faulted
 * in: fault_in() does that.
 */
static void *staging_map(struct phx_device *dev, size_t len)
{
	unsigned long mask[16] = { 0 };
	int node = dev->numa_node;
	void *p;

	p = huge_map(len);
	if (!p)
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
		fault_in(p, len); /* now, where the policy says */
	return p;
}

void *phx_host_map(size_t len)
{
	void *p = huge_map(len);

	if (p)
		fault_in(p, len);
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

/*
 * The block is done either way: run @then, note how long the set-up ran
 * (the device's stats), and say the thread is done.
 */
static void block_settle(struct phx_device *dev, struct phx_staging *s)
{
	if (s->then)
		s->then(dev, !atomic_load(&s->stop));
	atomic_store(&dev->setup_ns, phx_now_ns() - s->t0);
	pthread_mutex_lock(&s->lock);
	s->settled = true;
	pthread_cond_broadcast(&s->ready);
	pthread_mutex_unlock(&s->lock);
}

/* Threads that fault the block in together: up to this many. */
#define PHX_FAULT_THREADS 4

/* The block's pages while it is faulted in: units taken in turn. */
struct block_fault {
	struct phx_staging *s;
	char *p;
	atomic_uint next;
};

/* Fault in units until none is left (or the device closes). */
static void *block_fault_units(void *arg)
{
	struct block_fault *f = arg;
	struct phx_staging *s = f->s;
	unsigned int i;

	/* unit by unit, so a device closed at once is not kept waiting */
	while (!atomic_load(&s->stop) &&
	       (i = atomic_fetch_add(&f->next, 1)) < s->units) {
		fault_in(f->p + (size_t)i * s->unit, s->unit);
		s->touched[i] = true;
	}
	return NULL;
}

/*
 * Fault the block in, on this thread and, where the machine has CPUs to
 * spare (a quarter of them), on up to three more: clearing its pages is
 * most of the block's making, and spread out it is done sooner.
 */
static void block_fault(struct phx_staging *s, char *p)
{
	struct block_fault f = { .s = s, .p = p };
	pthread_t helpers[PHX_FAULT_THREADS - 1];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned int i, n = 0, want;

	want = cpus > 0 ? (unsigned int)(cpus / 4) : 0;
	want = phx_min(phx_min(want, PHX_FAULT_THREADS), s->units);
	atomic_init(&f.next, 0);
	for (i = 1; i < want; i++)
		if (!pthread_create(&helpers[n], NULL, block_fault_units, &f))
			n++;
	block_fault_units(&f);
	for (i = 0; i < n; i++)
		pthread_join(helpers[i], NULL);
}

static void *block_main(void *arg)
{
	struct phx_device *dev = arg;
	struct phx_staging *s = dev->staging_block;
	size_t len = (size_t)s->units * s->unit;
	char *p;
	int ret;

	pthread_setname_np(pthread_self(), "phx-staging");
	p = staging_map(dev, len);
	if (!p) {
		block_finish(s, -ENOMEM);
		block_settle(dev, s);
		return NULL;
	}
	if (dev->ops->pinned_copies)
		block_fault(s, p);
	ret = atomic_load(&s->stop) ? -ECANCELED : phx_device_bind(dev);
	if (!ret)
		ret = dev->ops->host_register(dev, p, len);
	if (ret) {
		munmap(p, len);
		phx_err_clear(); /* engines pin their own: slower, not wrong */
		block_finish(s, ret);
		block_settle(dev, s);
		return NULL;
	}
	atomic_fetch_add(&dev->pinned, len);
	s->mem = p;
	block_finish(s, 0);
	block_settle(dev, s);
	return NULL;
}

int phx_staging_open(struct phx_device *dev,
		     void (*then)(struct phx_device *dev, bool run))
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
	s->t0 = phx_now_ns();
	s->then = then;
	dev->staging_block = s;
	if (pthread_create(&s->thread, NULL, block_main, dev)) {
		/* engines make their own, as they would without it */
		s->done = true;
		s->settled = true;
		s->err = -EAGAIN;
		if (then)
			then(dev, false);
	} else {
		s->started = true;
	}
	return 0;
}

/*
 * Wait for the block's thread; whether the block is usable.  Only in the
 * process that opened the device (the caller checks, before the lock: a
 * child of fork() may have been forked while the thread held it).  A
 * transfer's wait: counted in @dev's stats.
 */
static bool block_wait_locked(struct phx_device *dev, struct phx_staging *s)
{
	uint64_t t0;

	phx_assert_held(&s->lock);
	if (!s->done) {
		t0 = phx_now_ns();
		while (!s->done)
			pthread_cond_wait(&s->ready, &s->lock);
		atomic_fetch_add(&dev->setup_wait_ns, phx_now_ns() - t0);
	}
	return s->mem;
}

/* The first unit of a free run of @n units, or -1; the block is done. */
static int block_find_locked(struct phx_staging *s, unsigned int n)
{
	unsigned int i, run = 0;

	phx_assert_held(&s->lock);
	if (!s->mem || n > s->units)
		return -1;
	for (i = 0; i < s->units; i++) {
		run = s->taken[i] ? 0 : run + 1;
		if (run == n)
			return (int)(i + 1 - n);
	}
	return -1;
}

/* The units @len bytes of the block take. */
static unsigned int block_units(const struct phx_staging *s, size_t len)
{
	return (unsigned int)((len + s->unit - 1) / s->unit);
}

/*
 * Lend units [@i, @i + @n) of the block, free until now: mark them taken
 * and fault in those never touched before.  Their memory.
 */
static void *block_lend_locked(struct phx_staging *s, unsigned int i,
			       unsigned int n)
{
	unsigned int u;

	phx_assert_held(&s->lock);
	memset(s->taken + i, true, n * sizeof(*s->taken));
	for (u = i; u < i + n; u++)
		if (!s->touched[u]) {
			fault_in(s->mem + (size_t)u * s->unit, s->unit);
			s->touched[u] = true;
		}
	return s->mem + (size_t)i * s->unit;
}

int phx_staging_room(struct phx_device *dev, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	unsigned int n;
	int room;

	if (!s || len < s->unit || s->owner != getpid())
		return -1;
	n = block_units(s, len);
	pthread_mutex_lock(&s->lock);
	if (!block_wait_locked(dev, s) || n > s->units)
		room = -1;
	else
		room = block_find_locked(s, n) >= 0;
	pthread_mutex_unlock(&s->lock);
	return room;
}

void *phx_staging_take(struct phx_device *dev, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	unsigned int n;
	void *p = NULL;
	int i;

	if (!s || len < s->unit || s->owner != getpid())
		return NULL;
	n = block_units(s, len);
	pthread_mutex_lock(&s->lock);
	block_wait_locked(dev, s);
	i = block_find_locked(s, n);
	if (i >= 0)
		p = block_lend_locked(s, (unsigned int)i, n);
	pthread_mutex_unlock(&s->lock);
	return p;
}

bool phx_staging_take_at(struct phx_device *dev, void *p, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	unsigned int i, u, n;
	bool ok = true;

	if (!s || !len || s->owner != getpid())
		return false;
	pthread_mutex_lock(&s->lock);
	if (!block_wait_locked(dev, s) || (char *)p < s->mem) {
		ok = false;
		goto out;
	}
	i = (unsigned int)((size_t)((char *)p - s->mem) / s->unit);
	n = block_units(s, len);
	for (u = i; u < i + n && ok; u++)
		ok = u < s->units && !s->taken[u];
	if (!ok)
		goto out;
	block_lend_locked(s, i, n);
out:
	pthread_mutex_unlock(&s->lock);
	return ok;
}

void phx_staging_give(struct phx_device *dev, void *p, size_t len)
{
	struct phx_staging *s = dev->staging_block;
	size_t i = (size_t)((char *)p - s->mem) / s->unit;
	unsigned int n = block_units(s, len);

	pthread_mutex_lock(&s->lock);
	memset(s->taken + i, false, n * sizeof(*s->taken));
	pthread_mutex_unlock(&s->lock);
}

void phx_staging_stop(struct phx_device *dev)
{
	struct phx_staging *s = dev->staging_block;

	if (!s)
		return;
	atomic_store(&s->stop, true);
	if (s->started && s->owner == getpid())
		pthread_join(s->thread, NULL);
	s->started = false;
}

void phx_staging_close(struct phx_device *dev)
{
	struct phx_staging *s = dev->staging_block;
	size_t len;

	if (!s)
		return;
	len = (size_t)s->units * s->unit;
	phx_staging_stop(dev);
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
	while (!s->settled)
		pthread_cond_wait(&s->ready, &s->lock);
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
