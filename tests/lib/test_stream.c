/* SPDX-License-Identifier: MIT */
/* test_stream.c - stream-ordered transfers. */
#include <pthread.h>

#include "util.h"

/*
 * Each test runs both ways of holding the stream (PHX_STREAM_WAIT): the
 * settings are read once per process, and every test is its own process.
 */
static void stream_wait(const char *mode)
{
	struct phx_settings s;

	setenv("PHX_STREAM_WAIT", mode, 1);
	phx_settings_get(&s);
	cr_assert_eq(s.stream_wait,
		     !strcmp(mode, "host")   ? 0 :
		     !strcmp(mode, "device") ? 1 :
		     !strcmp(mode, "kernel") ? 2 :
					       3,
		     "settings were read before the test set %s", mode);
}

static void parameters_read_when_the_stream_gets_there(void)
{
	struct phx_device *dev = open_default();
	size_t fsize = 4 * MiB;
	unsigned char *data;
	struct phx_stream *st;
	struct phx_buf *buf, *big;
	uint64_t len = 1;
	int64_t foff = 0, boff = 0, done = -12345;
	int fd = make_file(dir_direct(), fsize, 51, true, (void **)&data);

	cr_assert_eq(phx_buf_alloc(dev, fsize, 0, &buf), 0);
	cr_assert_eq(phx_buf_alloc(dev, 256 * MiB, 0, &big), 0);
	cr_assert_eq(phx_stream_create(dev, &st), 0);
	/*
	 * Queue a long read first, so the transfer under test waits its turn
	 * while the values change.
	 */
	uint64_t pre_len = 64 * MiB;
	int64_t pre_off = 0, pre_done = 0;
	void *pre_data;
	int pre_fd = make_file(dir_direct(), pre_len, 52, true, &pre_data);

	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, pre_fd, phx_buf_dptr(big),
				    &pre_len, &pre_off, &pre_off, &pre_done),
		     0, "%s", phx_strerror_last());
	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, fd, phx_buf_dptr(buf),
				    &len, &foff, &boff, &done),
		     0, "%s", phx_strerror_last());
	/* change the values after queueing: the new ones must be used */
	len = 2 * MiB + 7;
	foff = 12345;
	boff = 999;
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(pre_done, (int64_t)pre_len);
	cr_assert_eq(done, (int64_t)len, "bytes_done %lld", (long long)done);
	assert_buf_eq(buf, 999, data + 12345, len);

	/* a write, ordered after the read on the same stream */
	int out = empty_file(dir_direct());
	uint64_t wlen = MiB;
	int64_t wfoff = 4096, wboff = 999, wdone = 0;
	unsigned char *back = xmalloc(MiB);

	cr_assert_eq(phx_io_enqueue(st, PHX_OP_WRITE, out, phx_buf_dptr(buf),
				    &wlen, &wfoff, &wboff, &wdone),
		     0);
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(wdone, (int64_t)MiB);
	cr_assert_eq(pread(out, back, MiB, 4096), (ssize_t)MiB);
	cr_assert(!memcmp(back, data + 12345, MiB));

	/* errors come back through bytes_done */
	int64_t bad = 0;

	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, 9999, phx_buf_dptr(buf),
				    &wlen, &wfoff, &wboff, &bad),
		     0);
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(bad, -EBADF);
	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, fd, 0, NULL, &wfoff,
				    &wboff, &bad),
		     -EFAULT);
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_buf_free(big);
	phx_device_close(dev);
	free(back);
	free(data);
	free(pre_data);
	close(pre_fd);
}

Test(stream, parameters_read_when_the_stream_gets_there_host_wait)
{
	stream_wait("host");
	parameters_read_when_the_stream_gets_there();
}

Test(stream, parameters_read_when_the_stream_gets_there_device_wait)
{
	stream_wait("device");
	parameters_read_when_the_stream_gets_there();
}

Test(stream, parameters_read_when_the_stream_gets_there_kernel_wait)
{
	stream_wait("kernel");
	parameters_read_when_the_stream_gets_there();
}

/* The copy mode gives transfers whose values may change to the kernel. */
Test(stream, parameters_read_when_the_stream_gets_there_copy_wait)
{
	stream_wait("copy");
	parameters_read_when_the_stream_gets_there();
}

Test(stream, wrapped_default_stream)
{
	struct phx_device *dev = open_default();
	struct phx_stream *st;
	struct phx_buf *buf;
	unsigned char *data;
	uint64_t len = 100000;
	int64_t foff = 3, boff = 0, done = 0;
	int fd = make_file(dir_tmpfs(), 200000, 61, false, (void **)&data);

	cr_assert_eq(phx_buf_alloc(dev, 200000, 0, &buf), 0);
	cr_assert_eq(phx_stream_wrap(dev, NULL, &st), 0);
	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, fd, phx_buf_dptr(buf),
				    &len, &foff, &boff, &done),
		     0);
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(done, 100000);
	assert_buf_eq(buf, 0, data + 3, 100000);
	phx_stream_destroy(st);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
}

/* The last close waits for transfers still queued on a stream. */
static void close_waits_for_queued_transfers(bool fixed)
{
	struct phx_device *dev = open_default();
	struct phx_stream *st;
	size_t n = 64 * MiB;
	uint64_t len = n / 2;
	int64_t foff[2] = { 0, (int64_t)(n / 2) }, boff = 0,
		done[2] = { -1, -1 };
	unsigned char *data, *host;
	int fd;

	/* A raw address is host memory only on the simulated device. */
	if (phx_device_kind(dev) != PHX_DEVICE_SIM)
		cr_skip_test("needs device addresses the host can read");
	fd = make_file(dir_direct(), n, 71, true, (void **)&data);
	host = xmalloc(n);
	cr_assert_eq(phx_stream_wrap(dev, NULL, &st), 0);
	if (fixed)
		cr_assert_eq(phx_stream_set_flags(st, PHX_STREAM_FIXED), 0);
	/* the second waits on the stream behind the first */
	for (int i = 0; i < 2; i++)
		cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, fd,
					    (phx_dptr_t)(uintptr_t)host +
						    (uint64_t)foff[i],
					    &len, &foff[i], &boff, &done[i]),
			     0, "%s", phx_strerror_last());
	/* a wrapper's destroy does not wait; the device's last close does */
	phx_stream_destroy(st);
	phx_device_close(dev);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(done[i], (int64_t)len, "bytes_done[%d] %lld", i,
			     (long long)done[i]);
	cr_assert(!memcmp(host, data, n));
	close(fd);
	free(host);
	free(data);
}

Test(stream, close_waits_for_queued_transfers_host_wait)
{
	stream_wait("host");
	close_waits_for_queued_transfers(false);
}

Test(stream, close_waits_for_queued_transfers_device_wait)
{
	stream_wait("device");
	close_waits_for_queued_transfers(false);
}

Test(stream, close_waits_for_queued_transfers_kernel_wait)
{
	stream_wait("kernel");
	close_waits_for_queued_transfers(false);
}

Test(stream, close_waits_for_queued_transfers_copy_wait)
{
	stream_wait("copy");
	close_waits_for_queued_transfers(true);
}

/* A bad choice is ignored with one line that says what would do. */
Test(settings, bad_choices_are_reported_and_ignored, .init = cr_redirect_stderr)
{
	struct phx_settings s;

	setenv("PHX_HOT_READERS", "lots", 1);
	setenv("PHX_STREAM_WAIT", "sideways", 1);
	setenv("PHX_DIRECT", "maybe", 1);
	setenv("PHX_GATHER", "yes", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.hot_readers, 16);
	cr_assert_eq(s.stream_wait, -1);
	cr_assert_eq(s.direct, -1);
	cr_assert_eq(s.gather, -1);
	fflush(stderr);
	cr_assert_stderr_eq_str(
		"phoenix: ignoring PHX_HOT_READERS=lots: not a count of at least 0\n"
		"phoenix: ignoring PHX_DIRECT=maybe: use auto, off or on\n"
		"phoenix: ignoring PHX_STREAM_WAIT=sideways: use auto, host, device, kernel or copy\n"
		"phoenix: ignoring PHX_GATHER=yes: use auto, off or on\n");
}

/* A reader count past the most is cut to 64. */
Test(settings, hot_readers_past_the_most_are_cut)
{
	struct phx_settings s;

	setenv("PHX_HOT_READERS", "1000", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.hot_readers, 64);
}
