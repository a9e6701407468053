/* SPDX-License-Identifier: MIT */
/*
 * test_stream_copy.c - stream-ordered transfers in the copy mode
 * (PHX_STREAM_WAIT=copy): the transfer's copies queued on the stream
 * between waits on the ring's words, the engine on the other side.
 */
#include <fcntl.h>
#include <pthread.h>

#include "util.h"

static struct phx_device *copy_mode(void)
{
	struct phx_settings s;

	setenv("PHX_STREAM_WAIT", "copy", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.stream_wait, PHX_STREAM_WAIT_COPY,
		     "settings were read before the test set copy");
	return open_default();
}

static struct phx_stream *fixed_stream(struct phx_device *dev)
{
	struct phx_stream *st;

	cr_assert_eq(phx_stream_create(dev, &st), 0, "%s", phx_strerror_last());
	cr_assert_eq(phx_stream_set_flags(st, PHX_STREAM_FIXED), 0);
	return st;
}

/* Bytes the device's statistics counted, all paths. */
static uint64_t counted(struct phx_device *dev)
{
	struct phx_stats s;
	uint64_t n = 0;

	phx_stats_get(dev, &s);
	for (int p = 0; p < PHX_PATH_PASSTHROUGH; p++)
		n += s.bytes[p];
	return n;
}

/*
 * Queue a transfer of @op between @fd and @buf on @st, taking its
 * parameters from where they stay until the stream gets there.
 */
static void enqueue(struct phx_stream *st, enum phx_op op, int fd,
		    struct phx_buf *buf, uint64_t *len, int64_t *foff,
		    int64_t *boff, int64_t *done)
{
	cr_assert_eq(phx_io_enqueue(st, op, fd, phx_buf_dptr(buf), len, foff,
				    boff, done),
		     0, "%s", phx_strerror_last());
}

static void sync_all(struct phx_stream **st, int n)
{
	for (int s = 0; s < n; s++)
		cr_assert_eq(phx_stream_sync(st[s]), 0);
}

static void destroy_all(struct phx_stream **st, int n)
{
	for (int s = 0; s < n; s++)
		phx_stream_destroy(st[s]);
}

/*
 * One stream-ordered transfer, synchronized; returns bytes_done.  The
 * pipeline counts stream-ordered bytes like any others.
 */
static int64_t xfer(struct phx_stream *st, enum phx_op op, int fd,
		    struct phx_buf *buf, uint64_t len, int64_t foff,
		    int64_t boff)
{
	struct phx_device *dev = phx_buf_device(buf);
	uint64_t before = counted(dev);
	int64_t done = -12345;

	enqueue(st, op, fd, buf, &len, &foff, &boff, &done);
	cr_assert_eq(phx_stream_sync(st), 0);
	if (done > 0)
		cr_assert_eq(counted(dev) - before, (uint64_t)done,
			     "statistics: %llu bytes of %lld",
			     (unsigned long long)(counted(dev) - before),
			     (long long)done);
	return done;
}

/*
 * Every size around the ring's slots (64 KiB at first, 4 MiB once grown
 * with the default 64 MiB of staging) and past the ring, at aligned and
 * unaligned file and buffer offsets, both ways.
 */
static void round_trips(void)
{
	static const uint64_t sizes[] = { 1,	   4095,	  4096 + 7,
					  2 << 20, (2 << 20) + 1, 37 << 20 };
	static const int64_t foffs[] = { 0, 4096, 12345 };
	static const int64_t boffs[] = { 0, 999 };
	size_t fsize = 48 << 20;
	struct phx_device *dev = copy_mode();
	struct phx_stream *st = fixed_stream(dev);
	struct phx_buf *buf;
	unsigned char *data, *back = xmalloc(fsize);
	int fd = make_file(dir_direct(), fsize, 81, true, (void **)&data);
	int out = empty_file(dir_direct());

	cr_assert_eq(phx_buf_alloc(dev, fsize, 0, &buf), 0);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t f = 0; f < sizeof(foffs) / sizeof(foffs[0]); f++)
			for (size_t b = 0; b < sizeof(boffs) / sizeof(boffs[0]);
			     b++) {
				uint64_t n = sizes[i];
				int64_t fo = foffs[f], bo = boffs[b];

				cr_assert_eq(xfer(st, PHX_OP_READ, fd, buf, n,
						  fo, bo),
					     (int64_t)n, "read %llu at %lld",
					     (unsigned long long)n,
					     (long long)fo);
				assert_buf_eq(buf, (uint64_t)bo, data + fo, n);
				cr_assert_eq(xfer(st, PHX_OP_WRITE, out, buf, n,
						  fo, bo),
					     (int64_t)n);
				cr_assert_eq(pread(out, back, n, fo),
					     (ssize_t)n);
				cr_assert(!memcmp(back, data + fo, n),
					  "write %llu at %lld differs",
					  (unsigned long long)n, (long long)fo);
			}
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(back);
	close(fd);
	close(out);
}

Test(copy, round_trips_through_the_page_cache)
{
	setenv("PHX_DIRECT", "off", 1);
	round_trips();
}

Test(copy, round_trips_with_o_direct)
{
	setenv("PHX_DIRECT", "on", 1);
	round_trips();
}

/* A descriptor opened with O_DIRECT works at any offset. */
Test(copy, o_direct_descriptor_at_odd_offsets)
{
	struct phx_device *dev = copy_mode();
	struct phx_stream *st = fixed_stream(dev);
	struct phx_buf *buf;
	unsigned char *data;
	int fd = make_file(dir_direct(), 8 << 20, 82, true, (void **)&data);
	int dfd = reopen(fd, O_RDONLY | O_DIRECT);

	if (dfd < 0)
		cr_skip_test("no O_DIRECT in %s", dir_direct());
	cr_assert_eq(phx_buf_alloc(dev, 8 << 20, 0, &buf), 0);
	cr_assert_eq(xfer(st, PHX_OP_READ, dfd, buf, (5 << 20) + 3, 777, 5),
		     (5 << 20) + 3);
	assert_buf_eq(buf, 5, data + 777, (5 << 20) + 3);
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	close(dfd);
	close(fd);
}

/*
 * Many transfers queued at once on four streams (they spread over the
 * rings and share them), each stream writing a region and reading it
 * back into another buffer: order within a stream, none across them.
 */
Test(copy, many_transfers_on_four_streams)
{
	enum { NS = 4, NX = 48, PIECE = 300 * 1000 };
	struct phx_device *dev = copy_mode();
	struct phx_stream *st[NS];
	struct phx_buf *src, *dst;
	size_t total = (size_t)NS * NX * PIECE;
	unsigned char *data = xmalloc(total);
	static uint64_t len[NS][NX];
	static int64_t foff[NS][NX], boff[NS][NX], wdone[NS][NX], rdone[NS][NX];
	int fd = empty_file(dir_tmpfs());

	fill_random(data, total, 83);
	cr_assert_eq(phx_buf_alloc(dev, total, 0, &src), 0);
	cr_assert_eq(phx_buf_alloc(dev, total, 0, &dst), 0);
	cr_assert_eq(phx_memcpy_to_buf(src, 0, data, total), 0);
	for (int s = 0; s < NS; s++)
		st[s] = fixed_stream(dev);
	for (int x = 0; x < NX; x++)
		for (int s = 0; s < NS; s++) {
			uint64_t at = ((uint64_t)x * NS + s) * PIECE;

			len[s][x] = PIECE;
			foff[s][x] = (int64_t)at;
			boff[s][x] = (int64_t)at;
			enqueue(st[s], PHX_OP_WRITE, fd, src, &len[s][x],
				&foff[s][x], &boff[s][x], &wdone[s][x]);
			enqueue(st[s], PHX_OP_READ, fd, dst, &len[s][x],
				&foff[s][x], &boff[s][x], &rdone[s][x]);
		}
	sync_all(st, NS);
	for (int s = 0; s < NS; s++)
		for (int x = 0; x < NX; x++) {
			cr_assert_eq(wdone[s][x], PIECE);
			cr_assert_eq(rdone[s][x], PIECE);
		}
	assert_buf_eq(dst, 0, data, total);
	destroy_all(st, NS);
	phx_buf_free(src);
	phx_buf_free(dst);
	phx_device_close(dev);
	free(data);
	close(fd);
}

/*
 * A ring starts with small slots and swaps in its full engine at the
 * first transfer queued after the grower handed it over (ring.c):
 * whenever that happens among these transfers, on one ring or two, every
 * byte arrives.  Rounds of transfers of every size around both slot
 * sizes, queued back to back on two streams.
 */
static void growing_rings(const char *rings)
{
	enum { NS = 2, NX = 6, ROUNDS = 24 };
	static const uint64_t sizes[NX] = {
		4096,	 (64 << 10) + 1,   (2 << 20) - 7,
		2 << 20, (3 << 20) + 4096, 200 << 10
	};
	size_t piece = 4 << 20, total = (size_t)NS * NX * piece;
	struct phx_stream *st[NS];
	struct phx_buf *dst;
	unsigned char *data;
	static uint64_t len[NS][NX];
	static int64_t foff[NS][NX], boff[NS][NX], done[NS][NX];
	struct phx_device *dev;
	int fd = make_file(dir_direct(), total, 87, true, (void **)&data);

	/* staging for 1 MiB slots, past the first engine's 64 KiB ones */
	setenv("PHX_STAGING_SIZE", "16M", 1);
	setenv("PHX_STREAM_RINGS", rings, 1);
	dev = copy_mode();
	cr_assert_eq(phx_buf_alloc(dev, total, 0, &dst), 0);
	for (int s = 0; s < NS; s++)
		st[s] = fixed_stream(dev);
	for (int round = 0; round < ROUNDS; round++) {
		for (int x = 0; x < NX; x++)
			for (int s = 0; s < NS; s++) {
				/*
				 * another size and file offset at each place
				 * every round: stale bytes never match
				 */
				uint64_t at = ((uint64_t)x * NS + s) * piece;

				len[s][x] = sizes[(x + round) % NX];
				foff[s][x] = (int64_t)at + round;
				boff[s][x] = (int64_t)at;
				done[s][x] = -12345;
				enqueue(st[s], PHX_OP_READ, fd, dst, &len[s][x],
					&foff[s][x], &boff[s][x], &done[s][x]);
			}
		sync_all(st, NS);
		for (int x = 0; x < NX; x++)
			for (int s = 0; s < NS; s++) {
				cr_assert_eq(done[s][x], (int64_t)len[s][x],
					     "round %d: %lld of %llu", round,
					     (long long)done[s][x],
					     (unsigned long long)len[s][x]);
				assert_buf_eq(dst, (uint64_t)boff[s][x],
					      data + foff[s][x], len[s][x]);
			}
	}
	destroy_all(st, NS);
	phx_buf_free(dst);
	phx_device_close(dev);
	free(data);
	close(fd);
}

Test(copy, rings_grow_under_transfers_on_two_rings)
{
	growing_rings("2");
}

Test(copy, a_single_ring_grows_under_transfers)
{
	growing_rings("1");
}

/*
 * The worker reads ahead of the stream, but never ahead of the writes
 * queued before: each read queued behind a write of the same bytes, on
 * one stream (on one ring, or spread over two), brings what the write
 * put in the file, not what was there before.  A long cold read
 * first holds the stream, so that the reads could well run before it
 * gets to the writes.
 */
static void reads_see_writes(const char *rings)
{
	enum { NX = 40, PIECE = 777 * 1000 };
	size_t total = (size_t)NX * PIECE;
	struct phx_device *dev;
	struct phx_stream *st;
	struct phx_buf *src, *dst;
	unsigned char *old, *data = xmalloc(total);
	static uint64_t len[NX];
	static int64_t off[NX], wdone[NX], rdone[NX];
	int fd = make_file(dir_direct(), total, 88, false, (void **)&old);
	uint64_t glen = 96 << 20;
	int64_t goff = 0, gdone;
	struct phx_buf *gbuf;
	void *gdata;
	int gate = make_file(dir_direct(), glen, 90, true, &gdata);

	setenv("PHX_STREAM_RINGS", rings, 1);
	dev = copy_mode();
	st = fixed_stream(dev);
	fill_random(data, total, 89);
	cr_assert_eq(phx_buf_alloc(dev, total, 0, &src), 0);
	cr_assert_eq(phx_buf_alloc(dev, total, 0, &dst), 0);
	cr_assert_eq(phx_buf_alloc(dev, glen, 0, &gbuf), 0);
	cr_assert_eq(phx_memcpy_to_buf(src, 0, data, total), 0);
	enqueue(st, PHX_OP_READ, gate, gbuf, &glen, &goff, &goff, &gdone);
	for (int x = 0; x < NX; x++) {
		len[x] = PIECE;
		off[x] = (int64_t)x * PIECE;
		enqueue(st, PHX_OP_WRITE, fd, src, &len[x], &off[x], &off[x],
			&wdone[x]);
		enqueue(st, PHX_OP_READ, fd, dst, &len[x], &off[x], &off[x],
			&rdone[x]);
	}
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(gdone, (int64_t)glen);
	for (int x = 0; x < NX; x++) {
		cr_assert_eq(wdone[x], PIECE);
		cr_assert_eq(rdone[x], PIECE);
	}
	assert_buf_eq(dst, 0, data, total);
	phx_stream_destroy(st);
	phx_buf_free(src);
	phx_buf_free(dst);
	phx_buf_free(gbuf);
	free(gdata);
	close(gate);
	phx_device_close(dev);
	free(data);
	free(old);
	close(fd);
}

Test(copy, reads_see_the_writes_queued_before_them)
{
	reads_see_writes("1");
}

Test(copy, reads_see_the_writes_queued_before_them_on_two_rings)
{
	reads_see_writes("2");
}

/*
 * A read past the end of the file as it is when queued moves what the
 * file has, exactly (the copy kernel takes it) and leaves the rest of the
 * buffer alone.
 */
Test(copy, read_past_end_of_file_is_short)
{
	struct phx_device *dev = copy_mode();
	struct phx_stream *st = fixed_stream(dev);
	struct phx_buf *buf;
	unsigned char *data, *ones = xmalloc(MiB);
	int fd = make_file(dir_tmpfs(), 3 * MiB, 84, false, (void **)&data);

	memset(ones, 0xa5, MiB);
	cr_assert_eq(phx_buf_alloc(dev, 4 * MiB, 0, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 3 * MiB - 100, ones, MiB), 0);
	uint64_t len = 4 * MiB;
	int64_t foff = 100, boff = 0, done = 0;

	enqueue(st, PHX_OP_READ, fd, buf, &len, &foff, &boff, &done);
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(done, 3 * MiB - 100);
	assert_buf_eq(buf, 0, data + 100, 3 * MiB - 100);
	assert_buf_eq(buf, 3 * MiB - 100, ones, MiB);
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(ones);
	close(fd);
}

/*
 * A transfer the engine refuses once the stream gets there (a write to
 * a descriptor open only for reading) reports it through bytes_done and
 * lets the stream go on; the next transfer is unharmed.
 */
Test(copy, refused_transfer_reports_and_lets_the_stream_go)
{
	struct phx_device *dev = copy_mode();
	struct phx_stream *st = fixed_stream(dev);
	struct phx_buf *buf;
	unsigned char *data;
	int fd = make_file(dir_tmpfs(), 5 * MiB, 85, false, (void **)&data);
	int ro = reopen(fd, O_RDONLY);

	cr_assert_geq(ro, 0);
	cr_assert_eq(phx_buf_alloc(dev, 5 * MiB, 0, &buf), 0);
	cr_assert_eq(xfer(st, PHX_OP_WRITE, ro, buf, 5 * MiB, 0, 0), -EBADF);
	cr_assert_eq(xfer(st, PHX_OP_READ, ro, buf, 5 * MiB, 0, 0), 5 * MiB);
	assert_buf_eq(buf, 0, data, 5 * MiB);
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	close(ro);
	close(fd);
}

Test(copy, unknown_stream_flags_are_refused)
{
	struct phx_device *dev = copy_mode();
	struct phx_stream *st;

	cr_assert_eq(phx_stream_create(dev, &st), 0);
	cr_assert_eq(phx_stream_set_flags(st, 0x100), -EINVAL);
	cr_assert_str_eq(phx_strerror_last(), "unknown stream flags 0x100");
	phx_stream_destroy(st);
	phx_device_close(dev);
}
