/* SPDX-License-Identifier: MIT */
/*
 * test_feed.c - the copy kernel's protocol, with the kernel played on the
 * CPU (phx_feed_emulate) against the worker's side.
 */
#include <pthread.h>

#include "stream_i.h"
#include "util.h"

#define SLOT 4096

struct kernel_arg {
	struct phx_feed_ctl *ctl;
	unsigned char *buf;
};

static void *kernel(void *p)
{
	struct kernel_arg *a = p;

	phx_feed_emulate(a->ctl, a->buf);
	return NULL;
}

/* Start the stand-in kernel on @buf and wait until it says it is there. */
static void start(pthread_t *t, struct kernel_arg *a, unsigned char *ring)
{
	a->ctl->slot_size = SLOT;
	a->ctl->slots = (uintptr_t)ring;
	cr_assert_eq(pthread_create(t, NULL, kernel, a), 0);
	while (!__atomic_load_n(&a->ctl->reached, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void finish(pthread_t t, struct phx_feed_ctl *ctl)
{
	phx_feed_wait_exit(ctl);
	pthread_join(t, NULL);
}

static void read_case(size_t fsize, uint64_t n, int64_t foff, int64_t boff)
{
	struct phx_feed_ctl ctl = { 0 };
	unsigned char *data, *ring = xmalloc(SLOT * PHX_FEED_SLOTS);
	unsigned char *buf = calloc(1, (size_t)boff + n + 1);
	struct kernel_arg a = { &ctl, buf };
	int fd = make_file(dir_direct(), fsize, fsize + n, false,
			   (void **)&data);
	uint64_t expect = foff >= (int64_t)fsize ?
				  0 :
				  phx_min_sz(n, fsize - (size_t)foff);
	int64_t done = -1, ret;
	pthread_t t;

	start(&t, &a, ring);
	ret = phx_feed_read(&ctl, ring, fd, n, foff, boff, &done);
	finish(t, &ctl);
	cr_assert_eq(ret, (int64_t)expect, "size %zu n %llu: %lld", fsize,
		     (unsigned long long)n, (long long)ret);
	cr_assert_eq(done, ret);
	cr_assert(!memcmp(buf + boff, data + foff, expect));
	for (size_t i = 0; i < (size_t)boff; i++)
		cr_assert_eq(buf[i], 0, "byte %zu before the range", i);
	cr_assert_eq(buf[boff + expect], 0, "byte after the range");
	close(fd);
	free(data);
	free(ring);
	free(buf);
}

static void write_case(uint64_t n, int64_t foff, int64_t boff)
{
	struct phx_feed_ctl ctl = { 0 };
	unsigned char *ring = xmalloc(SLOT * PHX_FEED_SLOTS);
	unsigned char *buf = xmalloc((size_t)boff + n + 1);
	unsigned char *back = xmalloc(n + 1);
	struct kernel_arg a = { &ctl, buf };
	int fd = empty_file(dir_direct());
	int64_t done = -1, ret;
	pthread_t t;

	fill_random(buf, (size_t)boff + n + 1, n + 7);
	start(&t, &a, ring);
	ret = phx_feed_write(&ctl, ring, fd, n, foff, boff, &done);
	finish(t, &ctl);
	cr_assert_eq(ret, (int64_t)n, "n %llu: %lld", (unsigned long long)n,
		     (long long)ret);
	cr_assert_eq(done, ret);
	cr_assert_eq(pread(fd, back, n + 1, foff), (ssize_t)n);
	cr_assert(!memcmp(back, buf + boff, n));
	close(fd);
	free(ring);
	free(buf);
	free(back);
}

Test(feed, reads_of_every_shape)
{
	read_case(100, 0, 0, 0);
	read_case(100, 1, 5, 3);
	read_case(1 * MiB, 4095, 1, 7);
	read_case(1 * MiB, 4097, 4095, 1);
	read_case(1 * MiB, 1 * MiB - 3, 3, 11); /* many times the ring */
	read_case(50000, 100000, 1234, 5); /* past the end: short */
	read_case(50000, 10, 60000, 0);
}

Test(feed, writes_of_every_shape)
{
	write_case(0, 0, 0);
	write_case(1, 3, 5);
	write_case(4097, 4095, 1);
	write_case(1 * MiB + 5, 7, 13); /* many times the ring */
}

Test(feed, a_bad_fd_reports_its_error_and_ends_the_kernel)
{
	struct phx_feed_ctl ctl = { 0 };
	unsigned char *ring = xmalloc(SLOT * PHX_FEED_SLOTS), buf[16] = { 0 };
	struct kernel_arg a = { &ctl, buf };
	int64_t done = 0;
	pthread_t t;

	start(&t, &a, ring);
	cr_assert_eq(phx_feed_read(&ctl, ring, -1, 10, 0, 0, &done), -EBADF);
	finish(t, &ctl);
	cr_assert_eq(done, -EBADF);
	memset(&ctl, 0, sizeof(ctl));
	start(&t, &a, ring);
	cr_assert_eq(phx_feed_write(&ctl, ring, -1, 10, 0, 0, &done), -EBADF);
	finish(t, &ctl);
	cr_assert_eq(done, -EBADF);
	free(ring);
}
