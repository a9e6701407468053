/* SPDX-License-Identifier: MIT */
/* util.h - helpers shared by the libphoenix suites. */
#ifndef PHX_TEST_UTIL_H
#define PHX_TEST_UTIL_H

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "phoenix.h"

#define MiB (1ULL << 20)

/*
 * A test that forks while the process's other threads run (a device's
 * staging, reader or stream threads) runs in the plain build only: the
 * AddressSanitizer of the compilers here has no fork handler, so a child
 * can inherit its allocator's lock held by a thread it does not have and
 * hang at its first allocation.  glibc's malloc takes its locks around
 * fork().
 */
#ifdef __SANITIZE_ADDRESS__
#define skip_fork_beside_threads()                                           \
	cr_skip_test("forks beside running threads, which AddressSanitizer " \
		     "does not support; the plain build runs it")
#else
#define skip_fork_beside_threads() ((void)0)
#endif

static inline size_t phx_min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* Directory on a file system with O_DIRECT (ext4 in CI). */
static inline const char *dir_direct(void)
{
	const char *d = getenv("PHX_TEST_EXT4");

	return d && *d ? d : "/tmp";
}

/* Directory on tmpfs. */
static inline const char *dir_tmpfs(void)
{
	const char *d = getenv("PHX_TEST_TMPFS");

	return d && *d ? d : "/dev/shm";
}

/* xorshift: reproducible per test, never produces zero bytes. */
static inline uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static inline void fill_random(void *p, size_t n, uint64_t seed)
{
	unsigned char *b = p;
	uint64_t s = seed | 1, v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % 8 == 0)
			v = rnd_next(&s);
		b[i] = (unsigned char)(v >> (8 * (i % 8)));
		if (!b[i])
			b[i] = 0xa5;
	}
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	cr_assert_not_null(p, "out of memory");
	return p;
}

/*
 * Create a file of @size random bytes in @dir; returns an fd opened
 * O_RDWR.  With @cold the file is synced and dropped from the page cache.
 */
static inline int make_file(const char *dir, size_t size, uint64_t seed,
			    bool cold, void **content)
{
	char path[4096];
	void *data = xmalloc(size);
	int fd;

	snprintf(path, sizeof(path), "%s/phx-test-XXXXXX", dir);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0, "mkstemp in %s: %s", dir, strerror(errno));
	unlink(path);
	fill_random(data, size, seed);
	cr_assert_eq(pwrite(fd, data, size, 0), (ssize_t)size);
	if (cold) {
		fsync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	}
	if (content)
		*content = data;
	else
		free(data);
	return fd;
}

static inline int empty_file(const char *dir)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/phx-test-XXXXXX", dir);
	fd = mkstemp(path);
	cr_assert_geq(fd, 0, "mkstemp in %s: %s", dir, strerror(errno));
	unlink(path);
	return fd;
}

static inline struct phx_device *open_default(void)
{
	struct phx_device *dev = NULL;
	int ret = phx_device_open(NULL, &dev);

	cr_assert_eq(ret, 0, "phx_device_open: %s", phx_strerror_last());
	return dev;
}

/* The staging budget in whole chunks: what a device pins at open. */
static inline uint64_t staging_budget(void)
{
	struct phx_settings set;

	phx_settings_get(&set);
	return set.staging_size / set.chunk_size * set.chunk_size;
}

static inline struct phx_engine_stats engine_stats(struct phx_device *dev)
{
	struct phx_engine_stats st;

	cr_assert_eq(phx_engine_stats_get(dev, &st), 0);
	return st;
}

static inline struct phx_buf *buf_new(struct phx_device *dev, uint64_t size,
				      unsigned int flags)
{
	struct phx_buf *buf = NULL;

	cr_assert_eq(phx_buf_alloc(dev, size, flags, &buf), 0,
		     "phx_buf_alloc: %s", phx_strerror_last());
	return buf;
}

/* @n batches of the default depth on @dev, in @b. */
static inline void batches_create(struct phx_device *dev, struct phx_batch **b,
				  unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		cr_assert_eq(phx_batch_create(dev, 0, 0, &b[i]), 0, "%s",
			     phx_strerror_last());
}

static inline void batches_destroy(struct phx_batch **b, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		phx_batch_destroy(b[i]);
}

/* @fd opened once more, through /proc, with @flags; -1 where it fails. */
static inline int reopen(int fd, int flags)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, flags);
}

/* Read back [off, off+len) of @buf and compare with @want. */
static inline void assert_buf_eq(struct phx_buf *buf, uint64_t off,
				 const void *want, size_t len)
{
	unsigned char *got = xmalloc(len);
	size_t i;
	int ret = phx_memcpy_from_buf(got, buf, off, len);

	cr_assert_eq(ret, 0, "phx_memcpy_from_buf: %s", phx_strerror_last());
	if (memcmp(got, want, len)) {
		for (i = 0; i < len; i++)
			if (got[i] != ((const unsigned char *)want)[i])
				break;
		cr_assert_fail("buffer differs at byte %zu of %zu", i, len);
	}
	free(got);
}

/* Every byte of [@off, @off + @len) of @buf is zero (@what names it). */
static inline void assert_zeros(struct phx_buf *buf, uint64_t off, size_t len,
				const char *what)
{
	unsigned char *back = xmalloc(len);

	memset(back, 0xff, len);
	cr_assert_eq(phx_memcpy_from_buf(back, buf, off, len), 0, "%s",
		     phx_strerror_last());
	for (size_t i = 0; i < len; i++)
		if (back[i])
			cr_assert_fail("%s: byte %zu of %zu is %u", what, i,
				       len, back[i]);
	free(back);
}

/*
 * What most transfer tests start from: a device, a file of @n random
 * bytes in @dir (@data holds them) and, from rig_open(), a buffer of @n
 * bytes on the device.  rig_close() gives all of it back, the device too.
 */
struct rig {
	struct phx_device *dev;
	struct phx_buf *buf;
	unsigned char *data;
	size_t n;
	int fd;
};

static inline struct rig rig_file(struct phx_device *dev, const char *dir,
				  size_t n, uint64_t seed, bool cold)
{
	struct rig r = { .dev = dev, .n = n };

	r.fd = make_file(dir, n, seed, cold, (void **)&r.data);
	return r;
}

static inline struct rig rig_open(struct phx_device *dev, const char *dir,
				  size_t n, uint64_t seed, bool cold)
{
	struct rig r = rig_file(dev, dir, n, seed, cold);

	r.buf = buf_new(dev, n, 0);
	return r;
}

/* The rig's whole file read into its buffer, checked. */
static inline void rig_read(struct rig *r)
{
	cr_assert_eq(phx_read(r->buf, 0, r->fd, 0, r->n), (int64_t)r->n, "%s",
		     phx_strerror_last());
	assert_buf_eq(r->buf, 0, r->data, r->n);
}

static inline void rig_close(struct rig *r)
{
	phx_buf_free(r->buf);
	close(r->fd);
	phx_device_close(r->dev);
	free(r->data);
}

#endif
