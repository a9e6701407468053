/* SPDX-License-Identifier: MIT */
/*
 * test_settings.c - staging and chunk sizes past what the engine can
 * take are reported and ignored: the device opens and moves bytes.
 */
#include "util.h"

/* With the settings of the test in force, a read and a write work. */
static void transfers_work(void)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, MiB, 0);
	void *data;
	int fd = make_file(dir_direct(), MiB, 4, false, &data);
	int out = empty_file(dir_direct());

	cr_assert_eq(phx_read(buf, 0, fd, 0, MiB), (int64_t)MiB, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 0, data, MiB);
	cr_assert_eq(phx_write(buf, 0, out, 0, MiB), (int64_t)MiB, "%s",
		     phx_strerror_last());
	phx_buf_free(buf);
	free(data);
	close(fd);
	close(out);
	phx_device_close(dev);
}

Test(settings, chunk_size_past_the_largest_is_ignored,
     .init = cr_redirect_stderr)
{
	struct phx_settings s;

	setenv("PHX_CHUNK_SIZE", "18446744073709551615", 1);
	setenv("PHX_STAGING_SIZE", "64M", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.chunk_size, 4 * MiB, "the default stays");
	cr_assert_stderr_eq_str(
		"phoenix: ignoring PHX_CHUNK_SIZE=18446744073709551615: more than the largest, 1073741824 bytes\n");
	transfers_work();
}

Test(settings, staging_of_too_many_chunks_is_ignored,
     .init = cr_redirect_stderr)
{
	struct phx_settings s;

	setenv("PHX_CHUNK_SIZE", "4M", 1);
	setenv("PHX_STAGING_SIZE", "128G", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.staging_size, 64 * MiB, "the default stays");
	cr_assert_stderr_eq_str(
		"phoenix: ignoring PHX_STAGING_SIZE=128G: more than 16384 chunks of 4194304 bytes (PHX_CHUNK_SIZE)\n");
	transfers_work();
}

Test(settings, huge_staging_of_small_chunks_is_ignored,
     .init = cr_redirect_stderr)
{
	struct phx_settings s;

	setenv("PHX_CHUNK_SIZE", "4096", 1);
	setenv("PHX_STAGING_SIZE", "16T", 1);
	phx_settings_get(&s);
	cr_assert_eq(s.staging_size, 64 * MiB);
	cr_assert_eq(s.chunk_size, 4096);
	transfers_work();
}
