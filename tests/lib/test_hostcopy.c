/* SPDX-License-Identifier: MIT */
/*
 * test_hostcopy.c - copies between host memory and buffers: pageable
 * memory goes through a pooled engine's pinned staging, pinned memory
 * straight to the device.
 */
#include <pthread.h>
#include <sys/mman.h>

#include "util.h"

Test(hostcopy, pageable_memory_goes_through_the_pool_and_lands_right)
{
	struct phx_device *dev = open_default();
	struct phx_settings set;
	struct phx_stats st;
	struct phx_buf *buf;
	unsigned char *data, *back;
	size_t n;
	unsigned int i;

	phx_settings_get(&set);
	/* several staging rings' worth, and an odd tail */
	n = 3 * set.staging_size + 4097;
	data = xmalloc(n);
	back = xmalloc(n);
	fill_random(data, n, 12);
	buf = buf_new(dev, n + 64, PHX_BUF_SPARSE);
	for (i = 0; i < 5; i++) {
		cr_assert_eq(phx_memcpy_to_buf(buf, 7, data, n), 0, "%s",
			     phx_strerror_last());
		memset(back, 0, n);
		cr_assert_eq(phx_memcpy_from_buf(back, buf, 7, n), 0, "%s",
			     phx_strerror_last());
		cr_assert_arr_eq(back, data, n, "round %u", i);
	}
	if (phx_device_kind(dev) != PHX_DEVICE_KMOD)
		cr_assert_eq(engine_stats(dev).built, 1,
			     "ten copies, one engine");
	phx_stats_get(dev, &st);
	cr_assert_eq(st.bytes[PHX_PATH_MEMCPY], 10 * (uint64_t)n);

	/* Never-written ranges of a sparse buffer read as zeros. */
	assert_zeros(buf, n + 7, 57, "past the written range");

	phx_buf_free(buf);
	free(data);
	free(back);
	phx_device_close(dev);
}

Test(hostcopy, pinned_memory_goes_straight_to_the_device)
{
	struct phx_device *dev = open_default();
	size_t n = 3 * MiB + 11;
	struct phx_buf *buf;
	unsigned char *p = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t built;

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	built = engine_stats(dev).built; /* the one opening built */
	fill_random(p, n, 4);
	cr_assert_eq(phx_host_register(dev, p, 2 * n), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, p, n), 0);
	cr_assert_eq(phx_memcpy_from_buf(p + n, buf, 0, n), 0);
	cr_assert_arr_eq(p + n, p, n);
	cr_assert_eq(engine_stats(dev).built, built,
		     "no staging for pinned memory");
	phx_host_unregister(dev, p);

	/* Unregistered, the same memory takes the staged way. */
	memset(p + n, 0, n);
	cr_assert_eq(phx_memcpy_from_buf(p + n, buf, 0, n), 0);
	cr_assert_arr_eq(p + n, p, n);
	if (phx_device_kind(dev) != PHX_DEVICE_KMOD)
		cr_assert_eq(engine_stats(dev).built, 1);

	phx_buf_free(buf);
	munmap(p, 2 * n);
	phx_device_close(dev);
}

/*
 * Pinned buffers from the device's pool: a buffer given back is the one
 * the next request of its size gets, copies through it are right, and
 * past the pool's 64 MiB the request is refused with a line that says so.
 */
Test(host_alloc, pooled_pinned_buffers)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf;
	unsigned char *data = xmalloc(MiB);
	void *p, *q, *held[8];
	int i;

	fill_random(data, MiB, 91);
	cr_assert_eq(phx_buf_alloc(dev, MiB, 0, &buf), 0);
	cr_assert_eq(phx_host_alloc(dev, MiB, &p), 0, "%s",
		     phx_strerror_last());
	memcpy(p, data, MiB);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, p, MiB), 0);
	memset(p, 0, MiB);
	cr_assert_eq(phx_memcpy_from_buf(p, buf, 0, MiB), 0);
	cr_assert(!memcmp(p, data, MiB));
	phx_host_free(dev, p, MiB);
	cr_assert_eq(phx_host_alloc(dev, MiB, &q), 0);
	cr_assert_eq(q, p, "a buffer given back is reused");
	phx_host_free(dev, q, MiB);

	/* 8 x 8 MiB fill the pool; one more is refused */
	for (i = 0; i < 8; i++)
		cr_assert_eq(phx_host_alloc(dev, 8 * MiB, &held[i]), 0, "%s",
			     phx_strerror_last());
	cr_assert_eq(phx_host_alloc(dev, 8 * MiB, &p), -EBUSY);
	cr_assert(strstr(phx_strerror_last(), "pinned host buffers"), "%s",
		  phx_strerror_last());
	phx_host_free(dev, held[7], 8 * MiB);
	cr_assert_eq(phx_host_alloc(dev, 8 * MiB, &held[7]), 0);
	for (i = 0; i < 8; i++)
		phx_host_free(dev, held[i], 8 * MiB);
	cr_assert_eq(phx_host_alloc(dev, 0, &p), -EINVAL);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
}

struct cross_copy {
	struct phx_buf *to, *from;
	int ret;
};

static void *cross_copy_run(void *arg)
{
	struct cross_copy *c = arg;
	unsigned int i;

	for (i = 0; i < 5000 && !c->ret; i++)
		c->ret = phx_memcpy_buf(c->to, 0, c->from, 0, 64 * 1024);
	return NULL;
}

/* A to B on one thread and B to A on another both finish. */
Test(memcpy_buf, opposite_copies_on_two_threads_complete)
{
	struct phx_device *dev = open_default();
	struct phx_buf *a = buf_new(dev, MiB, 0), *b = buf_new(dev, MiB, 0);
	struct cross_copy ab = { .to = b, .from = a };
	struct cross_copy ba = { .to = a, .from = b };
	pthread_t t1, t2;

	cr_assert_eq(pthread_create(&t1, NULL, cross_copy_run, &ab), 0);
	cr_assert_eq(pthread_create(&t2, NULL, cross_copy_run, &ba), 0);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	cr_assert_eq(ab.ret, 0);
	cr_assert_eq(ba.ret, 0);
	phx_buf_free(a);
	phx_buf_free(b);
	phx_device_close(dev);
}

/* Overlapping ranges of one buffer copy as memmove does, both ways. */
static void overlap_case(uint64_t dst_off, uint64_t src_off, uint64_t len,
			 unsigned int flags)
{
	struct phx_device *dev = open_default();
	size_t n = 4 * MiB;
	unsigned char *data = xmalloc(n), *want = xmalloc(n);
	struct phx_buf *buf = buf_new(dev, n, flags);

	fill_random(data, n, 77);
	memcpy(want, data, n);
	memmove(want + dst_off, want + src_off, len);
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, data, n), 0);
	cr_assert_eq(phx_memcpy_buf(buf, dst_off, buf, src_off, len), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 0, want, n);
	phx_buf_free(buf);
	free(data);
	free(want);
	phx_device_close(dev);
}

Test(memcpy_buf, overlap_to_a_later_offset_is_a_memmove)
{
	overlap_case(4096, 0, MiB, 0);
	overlap_case(3 * MiB - 5, MiB + 3, MiB - 7, PHX_BUF_SPARSE);
	overlap_case(777, 0, 2 * MiB + 1, 0);
}

Test(memcpy_buf, overlap_to_an_earlier_offset_is_a_memmove)
{
	overlap_case(0, 4096, MiB, 0);
	overlap_case(MiB + 3, 2 * MiB - 5, MiB - 7, PHX_BUF_SPARSE);
	overlap_case(5, 5, MiB, 0);
}
