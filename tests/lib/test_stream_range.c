/* SPDX-License-Identifier: MIT */
/*
 * test_stream_range.c - a stream-ordered transfer whose range does not
 * fit (a length past INT64_MAX, an end that wraps) moves nothing, in
 * every way of holding the stream.
 */
#include "util.h"

static void stream_wait(const char *mode)
{
	setenv("PHX_STREAM_WAIT", mode, 1);
}

static void bad_ranges_move_nothing(const char *mode)
{
	static const struct {
		uint64_t len;
		int64_t foff, boff;
	} bad[] = {
		{ UINT64_MAX, 0, 0 },
		{ (uint64_t)INT64_MAX, 10, 0 },
		{ (uint64_t)INT64_MAX + 1, 0, 0 },
		{ 100, INT64_MAX - 5, 0 },
		{ 100, 0, INT64_MAX - 5 },
		{ 100, -1, 0 },
		{ 100, 0, -4096 },
	};
	struct phx_device *dev;
	struct phx_stream *st;
	struct phx_buf *buf;
	unsigned int i, op, f;
	struct stat sb;
	int in, out;

	stream_wait(mode);
	dev = open_default();
	buf = buf_new(dev, 4 * MiB, 0);
	in = make_file(dir_direct(), MiB, 7, false, NULL);
	out = empty_file(dir_direct());
	cr_assert_eq(phx_stream_create(dev, &st), 0, "%s", phx_strerror_last());
	for (op = 0; op < 2; op++) {
		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			uint64_t len = bad[i].len;
			int64_t foff = bad[i].foff, boff = bad[i].boff;
			int64_t done = 12345;
			enum phx_op o = op ? PHX_OP_WRITE : PHX_OP_READ;

			/* values read when the stream gets there, then fixed
			 * when queued: the same */
			for (f = 0; f < 2; f++) {
				done = 12345;
				cr_assert_eq(
					phx_stream_set_flags(
						st, f ? PHX_STREAM_FIXED : 0),
					0);
				cr_assert_eq(
					phx_io_enqueue(st, o, op ? out : in,
						       phx_buf_dptr(buf), &len,
						       &foff, &boff, &done),
					0, "%s", phx_strerror_last());
				cr_assert_eq(phx_stream_sync(st), 0);
				cr_assert_eq(done, -EINVAL,
					     "case %u op %u fixed %u: %lld", i,
					     op, f, (long long)done);
			}
		}
	}
	cr_assert_eq(fstat(out, &sb), 0);
	cr_assert_eq(sb.st_size, 0, "nothing was written");
	phx_stream_destroy(st);
	phx_buf_free(buf);
	close(in);
	close(out);
	phx_device_close(dev);
}

Test(stream_range, bad_ranges_move_nothing_host_wait)
{
	bad_ranges_move_nothing("host");
}

Test(stream_range, bad_ranges_move_nothing_device_wait)
{
	bad_ranges_move_nothing("device");
}

Test(stream_range, bad_ranges_move_nothing_kernel_wait)
{
	bad_ranges_move_nothing("kernel");
}

Test(stream_range, bad_ranges_move_nothing_copy_wait)
{
	bad_ranges_move_nothing("copy");
}
