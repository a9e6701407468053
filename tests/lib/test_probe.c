/* SPDX-License-Identifier: MIT */
/*
 * test_probe.c - the first long cold read of a file system reads a part
 * of it each way (O_DIRECT, the page cache) and the rest the faster way;
 * later cold reads there take that way alone and say so in their path;
 * PHX_DIRECT=on|off is obeyed without a probe.  Each test is a process of
 * its own, so each starts with nothing probed.
 */
#include "util.h"

/* The probe's share of each way: the sync engine's staging. */
static size_t probe_len(void)
{
	struct phx_settings set;

	phx_settings_get(&set);
	return set.staging_size / set.chunk_size * set.chunk_size;
}

struct moved {
	uint64_t staged, buffered;
};

static struct moved moved(struct phx_device *dev)
{
	struct phx_stats st;

	phx_stats_get(dev, &st);
	return (struct moved){ st.bytes[PHX_PATH_STAGED],
			       st.bytes[PHX_PATH_BUFFERED] };
}

/* A cold read of all of @fd (@n bytes) into @buf, checked; its path. */
static enum phx_path cold_read(struct phx_device *dev, struct phx_buf *buf,
			       int fd, const void *want, size_t n)
{
	struct phx_io io = {
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = n
	};

	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	cr_assert_eq(phx_io_run(dev, &io), (int64_t)n, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 0, want, n);
	return io.path;
}

Test(probe, the_first_cold_read_tries_both_ways_and_later_ones_keep_one)
{
	struct phx_device *dev = open_default();
	size_t n = 6 * probe_len() + 12345;
	unsigned char *a, *b;
	int fa = make_file(dir_direct(), n, 51, true, (void **)&a);
	int fb = make_file(dir_direct(), n, 52, true, (void **)&b);
	struct moved m0, m1, m2;
	enum phx_path first, second;
	struct phx_buf *buf;

	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	m0 = moved(dev);
	first = cold_read(dev, buf, fa, a, n);
	m1 = moved(dev);
	cr_assert(first == PHX_PATH_STAGED || first == PHX_PATH_BUFFERED,
		  "path %s", phx_path_name(first));
	cr_assert_geq(m1.staged - m0.staged, probe_len() / 2,
		      "a probe's worth read O_DIRECT");
	cr_assert_geq(m1.buffered - m0.buffered, probe_len() / 2,
		      "and one through the page cache");
	cr_assert_eq(m1.staged - m0.staged + m1.buffered - m0.buffered, n);

	/* Another cold file there: the way found, nothing else. */
	second = cold_read(dev, buf, fb, b, n);
	m2 = moved(dev);
	cr_assert_eq(second, first, "%s, then %s", phx_path_name(first),
		     phx_path_name(second));
	if (first == PHX_PATH_STAGED)
		cr_assert_eq(m2.staged - m1.staged, n);
	else
		cr_assert_eq(m2.buffered - m1.buffered, n);

	phx_buf_free(buf);
	close(fa);
	close(fb);
	phx_device_close(dev);
	free(a);
	free(b);
}

Test(probe, a_short_cold_read_probes_nothing)
{
	struct phx_device *dev = open_default();
	size_t n = 2 * probe_len() + 99;
	unsigned char *a;
	int fa = make_file(dir_direct(), n, 53, true, (void **)&a);
	struct phx_buf *buf;

	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(cold_read(dev, buf, fa, a, n), PHX_PATH_STAGED);
	cr_assert_eq(moved(dev).buffered, 0);
	phx_buf_free(buf);
	close(fa);
	phx_device_close(dev);
	free(a);
}

static void forced(const char *value, enum phx_path want)
{
	struct phx_device *dev;
	size_t n;
	unsigned char *a;
	struct phx_buf *buf;
	struct moved m;
	int fa;

	setenv("PHX_DIRECT", value, 1);
	dev = open_default();
	n = 6 * probe_len() + 1;
	fa = make_file(dir_direct(), n, 54, true, (void **)&a);
	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(cold_read(dev, buf, fa, a, n), want);
	m = moved(dev);
	cr_assert_eq(want == PHX_PATH_STAGED ? m.staged : m.buffered, n,
		     "PHX_DIRECT=%s: all of it one way", value);
	phx_buf_free(buf);
	close(fa);
	phx_device_close(dev);
	free(a);
}

Test(probe, phx_direct_on_reads_o_direct_without_a_probe)
{
	forced("on", PHX_PATH_STAGED);
}

Test(probe, phx_direct_off_reads_the_page_cache_without_a_probe)
{
	forced("off", PHX_PATH_BUFFERED);
}

/* tmpfs takes O_DIRECT on new kernels, not on old: right either way. */
Test(probe, a_cold_read_on_tmpfs_is_right)
{
	struct phx_device *dev = open_default();
	size_t n = 6 * probe_len() + 7;
	unsigned char *a;
	int fa = make_file(dir_tmpfs(), n, 55, true, (void **)&a);
	struct phx_buf *buf;
	enum phx_path p;

	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	p = cold_read(dev, buf, fa, a, n);
	cr_assert(p == PHX_PATH_STAGED || p == PHX_PATH_BUFFERED, "path %s",
		  phx_path_name(p));
	phx_buf_free(buf);
	close(fa);
	phx_device_close(dev);
	free(a);
}
