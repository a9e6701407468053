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

/*
 * With PHX_CHUNK_SIZE=@chunk and PHX_STAGING_SIZE=@staging, the settings
 * are @want_chunk and @want_staging, stderr says @said (NULL: not
 * checked), and transfers work.
 */
static void sizes_give(const char *chunk, const char *staging,
		       uint64_t want_chunk, uint64_t want_staging,
		       const char *said)
{
	struct phx_settings s;

	setenv("PHX_CHUNK_SIZE", chunk, 1);
	setenv("PHX_STAGING_SIZE", staging, 1);
	phx_settings_get(&s);
	cr_assert_eq(s.chunk_size, want_chunk);
	cr_assert_eq(s.staging_size, want_staging);
	if (said)
		cr_assert_stderr_eq_str(said);
	transfers_work();
}

Test(settings, chunk_size_past_the_largest_is_ignored,
     .init = cr_redirect_stderr)
{
	/* the default stays */
	sizes_give(
		"18446744073709551615", "64M", 4 * MiB, 64 * MiB,
		"phoenix: ignoring PHX_CHUNK_SIZE=18446744073709551615: more than the largest, 1073741824 bytes\n");
}

Test(settings, staging_of_too_many_chunks_is_ignored,
     .init = cr_redirect_stderr)
{
	sizes_give(
		"4M", "128G", 4 * MiB, 64 * MiB,
		"phoenix: ignoring PHX_STAGING_SIZE=128G: more than 16384 chunks of 4194304 bytes (PHX_CHUNK_SIZE)\n");
}

Test(settings, huge_staging_of_small_chunks_is_ignored,
     .init = cr_redirect_stderr)
{
	sizes_give("4096", "16T", 4096, 64 * MiB, NULL);
}
