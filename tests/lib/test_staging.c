/* SPDX-License-Identifier: MIT */
/*
 * test_staging.c - a device's staging is pinned from the moment it
 * opens: the first transfer's engine takes it instead of pinning its own,
 * engines past one budget pin theirs, a device closed at once or used at
 * once is right, and a forked child uses staging of its own.
 */
#include <sys/wait.h>

#include "util.h"

/* The staging budget in whole chunks: what the device pins at open. */
static uint64_t budget(void)
{
	struct phx_settings set;

	phx_settings_get(&set);
	return set.staging_size / set.chunk_size * set.chunk_size;
}

static uint64_t pinned(struct phx_device *dev)
{
	struct phx_stats st;

	phx_stats_get(dev, &st);
	return st.pinned_bytes;
}

static struct phx_engine_stats engines(struct phx_device *dev)
{
	struct phx_engine_stats st;

	cr_assert_eq(phx_engine_stats_get(dev, &st), 0);
	return st;
}

static void read_check(struct phx_device *dev, int fd, const void *want,
		       size_t n)
{
	struct phx_buf *buf;

	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_read(buf, 0, fd, 0, n), (int64_t)n, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 0, want, n);
	phx_buf_free(buf);
}

Test(staging, pinned_at_open_and_taken_by_the_first_engine)
{
	struct phx_device *dev = open_default();
	size_t n = 3 * budget() + 5000;
	unsigned char *data;
	int fd = make_file(dir_direct(), n, 31, false, (void **)&data);

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	cr_assert_eq(pinned(dev), budget(), "the budget is pinned at open");
	cr_assert_eq(engines(dev).built, 0, "but no engine is built");

	read_check(dev, fd, data, n);
	cr_assert_eq(engines(dev).built, 1);
	cr_assert_eq(engines(dev).staging_bytes, budget());
	cr_assert_eq(pinned(dev), budget(), "the engine pinned nothing more");
	cr_assert_eq(phx_device_prepare(dev), 0, "ready: returns at once");

	close(fd);
	phx_device_close(dev);
	free(data);
}

Test(staging, engines_past_one_budget_pin_their_own)
{
	struct phx_device *dev = open_default();
	struct phx_batch *b[3];
	unsigned int i;

	if (phx_device_kind(dev) == PHX_DEVICE_KMOD)
		cr_skip_test("kmod devices pin nothing");
	for (i = 0; i < 3; i++)
		cr_assert_eq(phx_batch_create(dev, 0, 0, &b[i]), 0, "%s",
			     phx_strerror_last());
	cr_assert_eq(engines(dev).staging_bytes, 3 * budget());
	cr_assert_eq(pinned(dev), 3 * budget(),
		     "one engine in the device's staging, two in their own");
	for (i = 0; i < 3; i++)
		phx_batch_destroy(b[i]);
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
	size_t n = 2 * budget() + 777;
	unsigned char *data;
	int fd = make_file(dir_direct(), n, 32, false, (void **)&data);
	struct phx_device *dev;
	unsigned int i;

	for (i = 0; i < 5; i++) {
		dev = open_default();
		read_check(dev, fd, data, n);
		phx_device_close(dev);
	}
	close(fd);
	free(data);
}

Test(staging, a_forked_child_uses_staging_of_its_own)
{
	struct phx_device *dev = open_default();
	size_t n = 2 * budget() + 99;
	unsigned char *data;
	int fd = make_file(dir_direct(), n, 34, false, (void **)&data);
	int status;
	pid_t pid;

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
		if (phx_read(buf, 0, fd, 0, n) != (int64_t)n ||
		    phx_memcpy_from_buf(back, buf, 0, n))
			_exit(3);
		ok = !memcmp(back, data, n);
		phx_buf_free(buf);
		_exit(ok ? 0 : 4);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child failed with %d", WEXITSTATUS(status));
	read_check(dev, fd, data, n);
	close(fd);
	phx_device_close(dev);
	free(data);
}
