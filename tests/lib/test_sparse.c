/* SPDX-License-Identifier: MIT */
/*
 * test_sparse.c - backing holes of sparse buffers: what a write commits
 * (counted in bytes and chunks) and where the backed ranges are.
 */
#include "util.h"
#include "buf.h"

static unsigned int mapped_chunks(const struct phx_buf *buf)
{
	unsigned int i, n = 0;

	for (i = 0; i < buf->nchunks; i++)
		n += buf->chunks[i].mapped;
	return n;
}

/* A sparse buffer of @size on the default device. */
static struct phx_buf *sparse_buf(uint64_t size)
{
	return buf_new(open_default(), size, PHX_BUF_SPARSE);
}

/* Free @buf and close its device. */
static void sparse_free(struct phx_buf *buf)
{
	struct phx_device *dev = phx_buf_device(buf);

	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(sparse, hole_write_commits_what_it_touches)
{
	struct phx_buf *buf = sparse_buf(256 * MiB);
	uint64_t gran = buf->dev->granularity;
	char data[4096], back[4096];

	fill_random(data, sizeof(data), 7);
	/* 4 KiB in the middle of the 64 MiB grid chunk [128, 192) MiB */
	cr_assert_eq(phx_memcpy_to_buf(buf, 150 * MiB + 100, data, 4096), 0);
	cr_assert_eq(
		phx_buf_committed(buf), gran,
		"a 4 KiB write into a hole backs one %llu-byte granule, not %llu bytes",
		(unsigned long long)gran,
		(unsigned long long)phx_buf_committed(buf));
	cr_assert_eq(mapped_chunks(buf), 1);
	/* one straddling two granules backs two, in one chunk */
	cr_assert_eq(
		phx_memcpy_to_buf(buf, 3 * gran + 100 * MiB - 10, data, 4096),
		0);
	cr_assert_eq(phx_buf_committed(buf), 3 * gran);
	cr_assert_eq(mapped_chunks(buf), 2);
	/* writing where it is backed already commits nothing */
	cr_assert_eq(phx_memcpy_to_buf(buf, 150 * MiB, data, 4096), 0);
	cr_assert_eq(phx_buf_committed(buf), 3 * gran);
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 150 * MiB, 4096), 0);
	cr_assert(!memcmp(back, data, sizeof(back)));
	/* the holes around still read as zeros */
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 150 * MiB + gran, 4096), 0);
	memset(data, 0, sizeof(data));
	cr_assert(!memcmp(back, data, sizeof(back)));
	sparse_free(buf);
}

Test(sparse, appends_keep_large_chunks)
{
	struct phx_buf *buf = sparse_buf(0);
	uint64_t step = MiB, off;
	unsigned int n;
	char *data = xmalloc(step);

	fill_random(data, step, 9);
	for (off = 0; off < 256 * MiB; off += step) {
		cr_assert_eq(phx_buf_resize(buf, off + step), 0);
		cr_assert_eq(phx_memcpy_to_buf(buf, off, data, step), 0, "%s",
			     phx_strerror_last());
	}
	n = mapped_chunks(buf);
	/* the doubling grid: log2(64 MiB / gran) + 1 small ones, 3 of 64 MiB */
	cr_assert_leq(n, 24, "appending 256 MiB made %u chunks", n);
	cr_assert_leq(phx_buf_committed(buf), 256 * MiB);
	free(data);
	sparse_free(buf);
}

Test(sparse, sequential_fill_of_a_hole_grows_geometrically)
{
	struct phx_buf *buf = sparse_buf(256 * MiB);
	uint64_t step = 256 << 10, off, start = 130 * MiB;
	char *data = xmalloc(step);
	unsigned int n;

	fill_random(data, step, 11);
	for (off = start; off < start + 48 * MiB; off += step)
		cr_assert_eq(phx_memcpy_to_buf(buf, off, data, step), 0);
	n = mapped_chunks(buf);
	cr_assert_leq(n, 16, "filling 48 MiB of a hole made %u chunks", n);
	cr_assert_leq(phx_buf_committed(buf), 2 * 48 * MiB);
	free(data);
	sparse_free(buf);
}

Test(sparse, next_data_reports_backed_ranges)
{
	struct phx_buf *buf = sparse_buf(256 * MiB);
	uint64_t gran = buf->dev->granularity, d, l;
	char one = 1;

	cr_assert_eq(phx_buf_next_data(buf, 0, &d, &l), -ENXIO,
		     "an empty buffer is one hole");
	cr_assert(strstr(phx_strerror_last(), "no data"));
	cr_assert_eq(phx_memcpy_to_buf(buf, 100 * MiB + 5, &one, 1), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 200 * MiB, &one, 1), 0);
	cr_assert_eq(phx_buf_next_data(buf, 0, &d, &l), 0);
	cr_assert_eq(d, 100 * MiB);
	cr_assert_eq(l, gran);
	cr_assert_eq(phx_buf_next_data(buf, 100 * MiB + 7, &d, &l), 0);
	cr_assert_eq(d, 100 * MiB + 7, "inside data, data starts at off");
	cr_assert_eq(l, gran - 7);
	cr_assert_eq(phx_buf_next_data(buf, 100 * MiB + gran, &d, &l), 0);
	cr_assert_eq(d, 200 * MiB);
	cr_assert_eq(phx_buf_next_data(buf, 200 * MiB + gran, &d, &l), -ENXIO,
		     "only hole after the last data");
	cr_assert_eq(phx_buf_next_data(buf, 256 * MiB, &d, &l), -ENXIO,
		     "past the end");
	/*
	 * adjacent backed chunks are one range (the write continuing the
	 * granule before takes twice it); the size clips the last range
	 */
	cr_assert_eq(phx_memcpy_to_buf(buf, 100 * MiB + gran, &one, 1), 0);
	cr_assert_eq(phx_buf_next_data(buf, 99 * MiB, &d, &l), 0);
	cr_assert_eq(d, 100 * MiB);
	cr_assert_eq(l, 3 * gran);
	cr_assert_eq(phx_buf_resize(buf, 200 * MiB + 3), 0);
	cr_assert_eq(phx_buf_next_data(buf, 150 * MiB, &d, &l), 0);
	cr_assert_eq(d, 200 * MiB);
	cr_assert_eq(l, 3);
	sparse_free(buf);
}

static uint64_t device_used(struct phx_device *dev, uint64_t *capacity)
{
	struct phx_device_info info;

	cr_assert_eq(phx_device_info(dev, &info), 0);
	if (capacity)
		*capacity = info.capacity;
	return info.used;
}

/* A read past the end of the file backs only what the file holds. */
Test(sparse, read_past_end_of_file_backs_only_what_comes)
{
	struct phx_device *dev = open_default();
	uint64_t cap, before = device_used(dev, &cap);
	struct phx_buf *buf = buf_new(dev, cap, PHX_BUF_SPARSE);
	uint64_t gran = buf->dev->granularity;
	void *data;
	int fd = make_file(dir_direct(), 10, 5, false, &data);

	cr_assert_eq(phx_read(buf, 0, fd, 0, cap), 10, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_committed(buf), gran);
	cr_assert_eq(phx_read(buf, 0, fd, 0, 200 * MiB), 10);
	cr_assert_eq(phx_buf_committed(buf), gran);
	assert_buf_eq(buf, 0, data, 10);
	cr_assert_eq(phx_read(buf, 64 * MiB, fd, 10, 100 * MiB), 0,
		     "at the end of the file: nothing to read");
	cr_assert_eq(phx_buf_committed(buf), gran, "and nothing backed");
	cr_assert_eq(device_used(dev, NULL), before + gran);
	phx_buf_free(buf);
	free(data);
	close(fd);
	phx_device_close(dev);
}

/* A commit that does not fit gives back what it backed on the way. */
Test(sparse, failed_commit_keeps_nothing)
{
	struct phx_device *dev = open_default();
	uint64_t cap, before = device_used(dev, &cap);
	struct phx_buf *buf = buf_new(dev, 2 * cap, PHX_BUF_SPARSE);
	uint64_t gran = buf->dev->granularity;
	char data[100];

	fill_random(data, sizeof(data), 9);
	cr_assert_eq(phx_memcpy_to_buf(buf, cap / 2, data, sizeof(data)), 0);
	cr_assert_eq(phx_buf_commit(buf, 0, 2 * cap), -ENOSPC);
	cr_assert_eq(phx_buf_committed(buf), gran, "only the earlier write");
	cr_assert_eq(device_used(dev, NULL), before + gran);
	assert_buf_eq(buf, cap / 2, data, sizeof(data));
	phx_buf_free(buf);
	phx_device_close(dev);
}
