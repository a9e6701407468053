/* SPDX-License-Identifier: MIT */
/*
 * test_probe.c - the first long cold read of a file system reads a part
 * of it each way (O_DIRECT, the page cache) and the rest the faster way;
 * later cold reads there take that way alone and say so in their path;
 * PHX_DIRECT=on|off is obeyed without a probe.  Each test is a process of
 * its own, so each starts with nothing probed.
 */
#include "util.h"

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

/* The rig's file read cold into its buffer; the path. */
static enum phx_path rig_cold_read(struct rig *r)
{
	return cold_read(r->dev, r->buf, r->fd, r->data, r->n);
}

/*
 * On the default device, a file of @probes probes' worth (a probe reads
 * one staging budget each way) and @extra bytes more, cold in @dir.
 */
static struct rig probe_rig(const char *dir, size_t probes, size_t extra,
			    uint64_t seed)
{
	struct phx_device *dev = open_default();

	return rig_open(dev, dir, probes * staging_budget() + extra, seed,
			true);
}

Test(probe, the_first_cold_read_tries_both_ways_and_later_ones_keep_one)
{
	struct rig r = probe_rig(dir_direct(), 6, 12345, 51);
	struct phx_device *dev = r.dev;
	size_t n = r.n;
	unsigned char *b;
	int fb = make_file(dir_direct(), n, 52, true, (void **)&b);
	struct moved m0, m1, m2;
	enum phx_path first, second;

	m0 = moved(dev);
	first = rig_cold_read(&r);
	m1 = moved(dev);
	cr_assert(first == PHX_PATH_STAGED || first == PHX_PATH_BUFFERED,
		  "path %s", phx_path_name(first));
	cr_assert_geq(m1.staged - m0.staged, staging_budget() / 2,
		      "a probe's worth read O_DIRECT");
	cr_assert_geq(m1.buffered - m0.buffered, staging_budget() / 2,
		      "and one through the page cache");
	cr_assert_eq(m1.staged - m0.staged + m1.buffered - m0.buffered, n);

	/* Another cold file there: the way found, nothing else. */
	second = cold_read(dev, r.buf, fb, b, n);
	m2 = moved(dev);
	cr_assert_eq(second, first, "%s, then %s", phx_path_name(first),
		     phx_path_name(second));
	if (first == PHX_PATH_STAGED)
		cr_assert_eq(m2.staged - m1.staged, n);
	else
		cr_assert_eq(m2.buffered - m1.buffered, n);

	close(fb);
	free(b);
	rig_close(&r);
}

Test(probe, a_short_cold_read_probes_nothing)
{
	struct rig r = probe_rig(dir_direct(), 2, 99, 53);

	cr_assert_eq(rig_cold_read(&r), PHX_PATH_STAGED);
	cr_assert_eq(moved(r.dev).buffered, 0);
	rig_close(&r);
}

static void forced(const char *value, enum phx_path want)
{
	struct rig r;
	struct moved m;

	setenv("PHX_DIRECT", value, 1);
	r = probe_rig(dir_direct(), 6, 1, 54);
	cr_assert_eq(rig_cold_read(&r), want);
	m = moved(r.dev);
	cr_assert_eq(want == PHX_PATH_STAGED ? m.staged : m.buffered, r.n,
		     "PHX_DIRECT=%s: all of it one way", value);
	rig_close(&r);
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
	struct rig r = probe_rig(dir_tmpfs(), 6, 7, 55);
	enum phx_path p = rig_cold_read(&r);

	cr_assert(p == PHX_PATH_STAGED || p == PHX_PATH_BUFFERED, "path %s",
		  phx_path_name(p));
	rig_close(&r);
}
