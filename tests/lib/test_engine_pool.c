/* SPDX-License-Identifier: MIT */
/*
 * test_engine_pool.c - synchronous calls and batches reuse the device's
 * engines: after the first transfer none of them builds one.
 */
#include "util.h"

/* Read @n bytes of @fd through a batch of @depth in 4 pieces; check them. */
static void batch_read(struct phx_device *dev, unsigned int depth, int fd,
		       struct phx_buf *buf, const void *want, size_t n)
{
	struct phx_io ios[4];
	struct phx_batch *b;
	unsigned int i;

	cr_assert_eq(phx_batch_create(dev, depth, 0, &b), 0, "%s",
		     phx_strerror_last());
	for (i = 0; i < 4; i++)
		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = fd,
			.file_off = (int64_t)(i * n / 4),
			.buf = buf,
			.buf_off = i * n / 4,
			.len = n / 4,
		};
	cr_assert_eq(phx_batch_submit(b, ios, 4), 4);
	cr_assert_eq(phx_batch_wait(b, 4, NULL, 0, -1), 4);
	for (i = 0; i < 4; i++)
		cr_assert_eq(ios[i].result, (int64_t)(n / 4), "entry %u: %s", i,
			     phx_strerror_last());
	phx_batch_destroy(b);
	assert_buf_eq(buf, 0, want, n);
}

Test(engine_pool, calls_and_batches_build_no_engine_after_the_first)
{
	struct rig r =
		rig_open(open_default(), dir_direct(), 4 * MiB, 5, false);
	struct phx_device *dev = r.dev;
	struct phx_buf *buf = r.buf;
	unsigned char *data = r.data;
	size_t n = r.n;
	int in = r.fd, out = empty_file(dir_direct());
	struct phx_engine_stats first, now;
	struct phx_settings set;
	unsigned int i;

	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	cr_assert_eq(engine_stats(dev).built,
		     phx_device_kind(dev) == PHX_DEVICE_KMOD ? 0 : 1,
		     "opening builds the first engine (where it stages)");
	cr_assert_eq(phx_read(buf, 0, in, 0, n), (int64_t)n, "%s",
		     phx_strerror_last());
	first = engine_stats(dev);
	cr_assert_eq(first.built, 1, "the first read finds one engine");
	cr_assert_eq(first.idle, 1, "and gives it back");
	cr_assert_gt(first.staging_bytes, 0);

	for (i = 0; i < 10; i++) {
		cr_assert_eq(phx_read(buf, 0, in, 0, n), (int64_t)n);
		cr_assert_eq(phx_write(buf, 0, out, 0, n), (int64_t)n);
		batch_read(dev, 0, in, buf, data, n);
	}
	now = engine_stats(dev);
	cr_assert_eq(now.built, first.built,
		     "%llu engines built for 30 calls and batches",
		     (unsigned long long)(now.built - first.built));
	cr_assert_eq(now.alive, 1);
	cr_assert_eq(now.staging_bytes, first.staging_bytes);

	/* Another depth re-cuts the same staging instead of building. */
	phx_settings_get(&set);
	batch_read(dev, 2 * (unsigned int)(set.staging_size / set.chunk_size),
		   in, buf, data, n);
	batch_read(dev, 0, in, buf, data, n);
	cr_assert_eq(phx_read(buf, 0, in, 0, n), (int64_t)n);
	now = engine_stats(dev);
	cr_assert_eq(now.built, first.built, "a re-cut builds nothing");
	cr_assert_eq(now.staging_bytes, first.staging_bytes);

	close(out);
	rig_close(&r);
}

/* A hang here is the failure: the time limit only turns it into one. */
Test(engine_pool, batches_past_the_limit_neither_wait_nor_stay, .timeout = 120)
{
	struct rig r = rig_open(open_default(), dir_direct(), MiB, 9, false);
	struct phx_batch *b[6];
	struct phx_engine_stats st;
	uint64_t per;

	/* One thread holding more batches than the pool lends must not hang. */
	batches_create(r.dev, b, 6);
	st = engine_stats(r.dev);
	per = st.staging_bytes / 6;
	cr_assert_eq(st.alive, 6);
	cr_assert_eq(st.idle, 0);
	/* Synchronous calls of the same thread do not wait for its batches. */
	rig_read(&r);
	batches_destroy(b, 6);
	st = engine_stats(r.dev);
	cr_assert_leq(st.alive, 4, "the pool keeps at most four engines");
	cr_assert_eq(st.idle, st.alive);
	cr_assert_eq(st.staging_bytes, st.alive * per,
		     "the engines that left took their staging with them");

	rig_read(&r);
	cr_assert_eq(engine_stats(r.dev).built, 7,
		     "the read used an idle engine");
	rig_close(&r);
}

Test(engine_pool, synchronous_calls_do_not_wait_for_batches_held_idle)
{
	struct rig r = rig_open(open_default(), dir_direct(), MiB, 11, false);
	struct phx_batch *b[4];

	/* Batches kept for later hold every engine the pool counts... */
	batches_create(r.dev, b, 4);
	/* ...and a synchronous read and a host copy still run (no hang). */
	rig_read(&r);
	batches_destroy(b, 4);
	cr_assert_leq(engine_stats(r.dev).alive, 4);
	rig_close(&r);
}
