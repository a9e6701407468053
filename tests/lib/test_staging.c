/* SPDX-License-Identifier: MIT */
/*
 * test_staging.c - a device's staging is pinned from the moment it
 * opens: the first transfer's engine takes it instead of pinning its own,
 * engines past one budget pin theirs, a device closed at once or used at
 * once is right, and a forked child uses staging of its own.
 */
#include <pthread.h>
#include <sys/wait.h>

#include "util.h"
#include "engine.h"

static uint64_t pinned(struct phx_device *dev)
{
	struct phx_stats st;

	phx_stats_get(dev, &st);
	return st.pinned_bytes;
}

/* The rig's file read into a buffer of its own on @dev, checked. */
static void read_check(struct phx_device *dev, const struct rig *r)
{
	struct rig here = *r;

	here.buf = buf_new(dev, r->n, 0);
	rig_read(&here);
	phx_buf_free(here.buf);
}

/* The default device and a file of @budgets staging budgets and @extra. */
static struct rig budget_file(size_t budgets, size_t extra, uint64_t seed)
{
	struct phx_device *dev = open_default();

	return rig_file(dev, dir_direct(), budgets * staging_budget() + extra,
			seed, false);
}

Test(staging, pinned_at_open_and_taken_by_the_first_engine)
{
	struct rig r = budget_file(3, 5000, 31);
	struct phx_device *dev = r.dev;

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	cr_assert_eq(pinned(dev), staging_budget(),
		     "the budget is pinned at open");
	cr_assert_eq(engine_stats(dev).built, 1,
		     "and the first engine built out of it");
	cr_assert_eq(engine_stats(dev).idle, 1);
	cr_assert_gt(engine_stats(dev).setup_ns, 0, "the set-up's run is told");
	cr_assert_eq(engine_stats(dev).setup_wait_ns, 0,
		     "prepare()'s wait is not a transfer's");

	read_check(dev, &r);
	cr_assert_eq(engine_stats(dev).built, 1, "the read built none");
	cr_assert_eq(engine_stats(dev).setup_wait_ns, 0,
		     "a transfer after prepare() waits for nothing");
	cr_assert_eq(engine_stats(dev).staging_bytes, staging_budget());
	cr_assert_eq(pinned(dev), staging_budget(),
		     "the engine pinned nothing more");
	cr_assert_eq(phx_device_prepare(dev), 0, "ready: returns at once");
	rig_close(&r);
}

Test(staging, the_first_transfer_waits_for_the_engine_being_built)
{
	/* No device in the rig: each round opens one. */
	struct rig r = rig_file(NULL, dir_direct(), staging_budget() + 4321, 35,
				false);
	struct phx_device *dev;
	uint64_t t0, took;
	unsigned int i;

	for (i = 0; i < 5; i++) {
		dev = open_default();
		if (phx_device_kind(dev) == PHX_DEVICE_KMOD) {
			phx_device_close(dev);
			cr_skip_test("kmod devices build no engine at open");
		}
		t0 = phx_now_ns();
		read_check(dev, &r); /* at once: before the engine is ready */
		took = phx_now_ns() - t0;
		cr_assert_eq(engine_stats(dev).built, 1,
			     "round %u: the read built an engine of its own",
			     i);
		cr_assert_eq(pinned(dev), staging_budget(),
			     "round %u: and pinned staging of its own", i);
		/* whether it waited is the scheduler's; never past its call */
		cr_assert_leq(engine_stats(dev).setup_wait_ns, took,
			      "round %u: a wait longer than the transfer", i);
		cr_assert_eq(phx_device_prepare(dev), 0, "%s",
			     phx_strerror_last());
		cr_assert_gt(engine_stats(dev).setup_ns, 0, "round %u", i);
		phx_device_close(dev);
	}
	rig_close(&r);
}

Test(staging, a_streams_engine_takes_the_block_from_an_idle_one)
{
	struct rig r = budget_file(2, 777, 36);
	struct phx_device *dev = r.dev;
	struct phx_stream *st;
	struct phx_buf *buf;
	uint64_t len = r.n;
	int64_t foff = 0, boff = 0, done = -1;

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	cr_assert_eq(engine_stats(dev).idle, 1, "the first engine, idle");
	buf = buf_new(dev, r.n, 0);
	cr_assert_eq(phx_stream_create(dev, &st), 0, "%s", phx_strerror_last());
	cr_assert_eq(phx_stream_set_flags(st, PHX_STREAM_FIXED), 0);
	cr_assert_eq(phx_io_enqueue(st, PHX_OP_READ, r.fd, phx_buf_dptr(buf),
				    &len, &foff, &boff, &done),
		     0, "%s", phx_strerror_last());
	cr_assert_eq(phx_stream_sync(st), 0);
	cr_assert_eq(done, (int64_t)r.n, "%s", phx_strerror_last());
	phx_stream_destroy(st);
	cr_assert_eq(pinned(dev), staging_budget(),
		     "the stream's engine pinned staging of its own");
	phx_buf_free(buf);
	read_check(dev, &r);
	rig_close(&r);
}

Test(staging, an_engine_cut_smaller_leaves_the_rest_to_others)
{
	struct phx_device *dev = open_default();
	struct phx_settings set;
	struct phx_batch *b[4];
	unsigned int i, units;

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	phx_settings_get(&set);
	units = (unsigned int)(set.staging_size / set.chunk_size);
	if (units < 4)
		cr_skip_test("the budget holds fewer than four chunks");
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	/* one slot of a chunk each: the first takes the built engine */
	for (i = 0; i < 4; i++)
		cr_assert_eq(phx_batch_create(dev, 1, 0, &b[i]), 0, "%s",
			     phx_strerror_last());
	cr_assert_eq(pinned(dev), staging_budget(),
		     "batches pinned staging of their own beside the block");
	batches_destroy(b, 4);
	/* and a full-size engine is whole again */
	for (i = 0; i < 3; i++) {
		struct rig r = rig_open(dev, dir_direct(),
					staging_budget() + 99, 37 + i, false);

		rig_read(&r);
		phx_buf_free(r.buf);
		close(r.fd);
		free(r.data);
	}
	cr_assert_eq(pinned(dev), staging_budget());
	phx_device_close(dev);
}

Test(staging, engines_past_one_budget_pin_their_own)
{
	struct phx_device *dev = open_default();
	struct phx_batch *b[3];

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	batches_create(dev, b, 3);
	cr_assert_eq(engine_stats(dev).staging_bytes, 3 * staging_budget());
	cr_assert_eq(pinned(dev), 3 * staging_budget(),
		     "one engine in the device's staging, two in their own");
	batches_destroy(b, 3);
	phx_device_close(dev);
}

/* Under ASan this also proves nothing leaks when the build is cut short. */
Test(staging, a_device_closed_at_once_stops_cleanly, .timeout = 120)
{
	struct phx_device *dev;
	unsigned int i;

	for (i = 0; i < 20; i++) {
		dev = open_default();
		phx_device_close(dev);
	}
	dev = open_default();
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	phx_device_close(dev);
}

Test(staging, the_first_transfer_right_after_open_is_right)
{
	/* No device in the rig: each round opens one. */
	struct rig r = rig_file(NULL, dir_direct(), 2 * staging_budget() + 777,
				32, false);
	struct phx_device *dev;
	unsigned int i;

	for (i = 0; i < 5; i++) {
		dev = open_default();
		read_check(dev, &r);
		phx_device_close(dev);
	}
	rig_close(&r);
}

Test(staging, a_forked_child_uses_staging_of_its_own)
{
	struct phx_device *dev;
	struct rig r;
	int status;
	size_t n;
	pid_t pid;

	skip_fork_beside_threads();
	r = budget_file(2, 99, 34);
	dev = r.dev;
	n = r.n;
	if (phx_device_kind(dev) == PHX_DEVICE_CUDA)
		cr_skip_test("CUDA is not usable in a forked child");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct phx_buf *buf;
		unsigned char *back = malloc(n);
		int ok;

		/* The parent's thread is not here: this must not wait. */
		if (phx_device_prepare(dev) || phx_buf_alloc(dev, n, 0, &buf))
			_exit(2);
		if (phx_read(buf, 0, r.fd, 0, n) != (int64_t)n ||
		    phx_memcpy_from_buf(back, buf, 0, n))
			_exit(3);
		ok = !memcmp(back, r.data, n);
		phx_buf_free(buf);
		_exit(ok ? 0 : 4);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child failed with %d", WEXITSTATUS(status));
	read_check(dev, &r);
	rig_close(&r);
}
