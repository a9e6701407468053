/* SPDX-License-Identifier: MIT */
/*
 * test_sim.c - what the simulated device's memory promises: fresh memory
 * reads as zeros however it was used before, its capacity is counted
 * exactly through many sparse buffers, and an exported buffer is the
 * same memory in both places, also where pages come after the export.
 */
#include <sys/socket.h>

#include "util.h"
#include "buf.h"

static struct phx_device *open_sim(void)
{
	struct phx_device *dev = NULL;

	cr_assert_eq(phx_device_open("sim0", &dev), 0, "phx_device_open: %s",
		     phx_strerror_last());
	return dev;
}

static uint64_t device_used(struct phx_device *dev)
{
	struct phx_device_info info;

	cr_assert_eq(phx_device_info(dev, &info), 0, "%s", phx_strerror_last());
	return info.used;
}

/* Whether [@off, @off + @len) of @buf reads as zeros. */
static bool reads_zeros(struct phx_buf *buf, uint64_t off, size_t len)
{
	unsigned char *got = xmalloc(len);
	bool zero = true;
	size_t i;

	cr_assert_eq(phx_memcpy_from_buf(got, buf, off, len), 0, "%s",
		     phx_strerror_last());
	for (i = 0; i < len && zero; i++)
		zero = !got[i];
	free(got);
	return zero;
}

Test(sim, memory_given_back_reads_as_zeros_when_backed_again)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, off = 100 * MiB;
	unsigned char *data = xmalloc(4 * gran), one = 0x77;
	struct phx_buf *buf;
	unsigned int round;

	fill_random(data, 4 * gran, 31);
	for (round = 0; round < 20; round++) {
		cr_assert_eq(
			phx_buf_alloc(dev, 256 * MiB, PHX_BUF_SPARSE, &buf), 0,
			"%s", phx_strerror_last());
		/* what was written last round is gone, not just unmapped */
		cr_assert_eq(phx_memcpy_to_buf(buf, off + gran + 5, &one, 1),
			     0);
		cr_assert(reads_zeros(buf, off + gran, 5),
			  "round %u: fresh memory before the byte", round);
		cr_assert(reads_zeros(buf, off + gran + 6, gran - 6),
			  "round %u: fresh memory after the byte", round);
		cr_assert_eq(phx_memcpy_to_buf(buf, off, data, 4 * gran), 0);
		assert_buf_eq(buf, off, data, 4 * gran);
		/* shrinking gives the chunks back; growing again backs none */
		cr_assert_eq(phx_buf_resize(buf, off), 0);
		cr_assert_eq(phx_buf_resize(buf, 256 * MiB), 0);
		cr_assert(reads_zeros(buf, off, 4 * gran),
			  "round %u: truncated and regrown", round);
		cr_assert_eq(phx_memcpy_to_buf(buf, off + 2 * gran, &one, 1),
			     0);
		cr_assert(reads_zeros(buf, off + 2 * gran + 1, gran - 1),
			  "round %u: backed again after a truncate", round);
		phx_buf_free(buf);
	}
	free(data);
	phx_device_close(dev);
}

Test(sim, capacity_is_counted_exactly_through_sparse_cycles)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, limit = 64 * gran, off;
	uint64_t seed = 5, base = device_used(dev), committed;
	struct phx_buf *bufs[4], *full;
	char one = 1;
	unsigned int round, i, k;

	cr_assert_eq(phx_device_set_limit(dev, base + limit), 0);
	for (round = 0; round < 50; round++) {
		for (i = 0; i < 4; i++) {
			cr_assert_eq(phx_buf_alloc(dev, 256 * MiB,
						   PHX_BUF_SPARSE, &bufs[i]),
				     0, "%s", phx_strerror_last());
			/* granules far apart: one chunk each */
			for (k = 0; k < 8; k++) {
				off = rnd_next(&seed) %
				      (256 * MiB / gran / 16) * 16 * gran;
				cr_assert_eq(phx_memcpy_to_buf(bufs[i], off,
							       &one, 1),
					     0, "round %u: %s", round,
					     phx_strerror_last());
			}
		}
		committed = 0;
		for (i = 0; i < 4; i++) {
			cr_assert_leq(phx_buf_committed(bufs[i]), 8 * gran);
			committed += phx_buf_committed(bufs[i]);
		}
		cr_assert_eq(device_used(dev) - base, committed,
			     "round %u: the device counts what buffers hold",
			     round);
		cr_assert_eq(phx_buf_resize(bufs[0], 0), 0);
		cr_assert_eq(phx_buf_committed(bufs[0]), 0);
		for (i = 0; i < 4; i++)
			phx_buf_free(bufs[i]);
		cr_assert_eq(device_used(dev), base,
			     "round %u: %llu bytes still counted", round,
			     (unsigned long long)(device_used(dev) - base));
	}
	/* all of it can be had again, and not a granule more */
	cr_assert_eq(phx_buf_alloc(dev, limit, 0, &full), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_buf_alloc(dev, 256 * MiB, PHX_BUF_SPARSE, &bufs[0]),
		     0);
	cr_assert_eq(phx_memcpy_to_buf(bufs[0], 0, &one, 1), -ENOSPC);
	cr_assert(strstr(phx_strerror_last(), "out of device memory"), "%s",
		  phx_strerror_last());
	phx_buf_free(full);
	cr_assert_eq(phx_memcpy_to_buf(bufs[0], 0, &one, 1), 0, "%s",
		     phx_strerror_last());
	phx_buf_free(bufs[0]);
	cr_assert_eq(device_used(dev), base);
	phx_device_close(dev);
}

/* Send @buf over a socket pair and receive it in this process. */
static struct phx_buf *share(struct phx_device *dev, struct phx_buf *buf)
{
	struct phx_buf *imp = NULL;
	int sv[2];

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(phx_buf_send(buf, sv[0]), 0, "%s", phx_strerror_last());
	cr_assert_eq(phx_buf_recv(dev, sv[1], &imp), 0, "%s",
		     phx_strerror_last());
	close(sv[0]);
	close(sv[1]);
	return imp;
}

Test(sim, an_exported_buffer_is_the_same_memory_in_both_mappings)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, n = 3 * MiB + 1234;
	unsigned char *data = xmalloc(n), *more = xmalloc(gran);
	unsigned char *mine, *theirs, one = 1;
	struct phx_buf *buf, *imp;

	fill_random(data, n, 41);
	fill_random(more, gran, 43);
	cr_assert_eq(phx_buf_alloc(dev, 256 * MiB, PHX_BUF_SPARSE, &buf), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 10 * MiB + 3, data, n), 0);
	/* backed, never written: its pages come after the export */
	cr_assert_eq(phx_buf_commit(buf, 200 * MiB, gran), 0);
	imp = share(dev, buf);
	cr_assert_neq(phx_buf_dptr(imp), phx_buf_dptr(buf),
		      "a second mapping, not the same addresses");
	assert_buf_eq(imp, 10 * MiB + 3, data, n);
	cr_assert(reads_zeros(imp, 200 * MiB, gran));
	/* written through one, read through the other, both ways */
	cr_assert_eq(phx_memcpy_to_buf(imp, 200 * MiB, more, gran), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 200 * MiB, more, gran);
	cr_assert_eq(phx_memcpy_to_buf(buf, 10 * MiB, more, 100), 0);
	assert_buf_eq(imp, 10 * MiB, more, 100);
	/* and through the host views, which are other addresses again */
	mine = phx_buf_host_view(buf);
	theirs = phx_buf_host_view(imp);
	cr_assert_not_null(mine);
	cr_assert_not_null(theirs);
	mine[200 * MiB + 17] = 0xee;
	cr_assert_eq(theirs[200 * MiB + 17], 0xee);
	more[17] = 0xee;
	/* a hole of the exporter stays one for the importer */
	cr_assert_eq(phx_memcpy_to_buf(imp, 100 * MiB, more, 1), -EPERM);
	/*
	 * What the exporter backs or truncates afterwards is its own: the
	 * importer keeps the memory it mapped, the exporter's new memory
	 * there reads as zeros.
	 */
	cr_assert_eq(phx_memcpy_to_buf(buf, 100 * MiB, more, gran), 0);
	cr_assert_eq(phx_buf_resize(buf, 200 * MiB), 0);
	cr_assert_eq(phx_buf_resize(buf, 256 * MiB), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 200 * MiB + gran - 1, &one, 1), 0);
	cr_assert(reads_zeros(buf, 200 * MiB, gran - 1));
	assert_buf_eq(imp, 200 * MiB, more, 17);
	phx_buf_free(buf);
	/* the importer keeps the memory it holds */
	assert_buf_eq(imp, 10 * MiB + 100, data + 97, n - 97);
	phx_buf_free(imp);
	free(data);
	free(more);
	phx_device_close(dev);
}

Test(sim, large_copies_into_fresh_memory_across_chunks)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, n = 9 * MiB + 4097;
	unsigned char *data = xmalloc(n);
	struct phx_buf *buf, *copy;
	uint64_t off;

	fill_random(data, n, 47);
	cr_assert_eq(phx_buf_alloc(dev, 256 * MiB, PHX_BUF_SPARSE, &buf), 0);
	/* granules backed apart first: the copy spans several chunks */
	for (off = 20 * MiB; off < 20 * MiB + n; off += 5 * gran)
		cr_assert_eq(phx_buf_commit(buf, off, 1), 0);
	cr_assert_eq(phx_memcpy_to_buf(buf, 20 * MiB - 3, data, n), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 20 * MiB - 3, data, n);
	cr_assert(reads_zeros(buf, 20 * MiB - 3 + n, gran));
	/* device to device, into fresh memory of another buffer */
	cr_assert_eq(phx_buf_alloc(dev, 0, PHX_BUF_SPARSE, &copy), 0);
	cr_assert_eq(phx_buf_resize(copy, 64 * MiB), 0);
	cr_assert_eq(phx_memcpy_buf(copy, 1, buf, 20 * MiB - 3, n), 0, "%s",
		     phx_strerror_last());
	assert_buf_eq(copy, 1, data, n);
	phx_buf_free(copy);
	phx_buf_free(buf);
	free(data);
	phx_device_close(dev);
}

static unsigned int open_fds(void)
{
	char path[64];
	unsigned int n = 0;
	int fd;

	for (fd = 0; fd < 4096; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += !access(path, F_OK);
	}
	return n;
}

/*
 * Each chunk a descriptor of its own grew the descriptor table past each
 * power of two, which waits for an RCU grace period in a threaded
 * process: a buffer now holds one, however many chunks it has.
 */
Test(sim, a_buffer_holds_one_descriptor_however_many_chunks)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, off;
	unsigned int before, n = 0;
	struct phx_buf *buf;
	char one = 1;

	cr_assert_eq(phx_buf_alloc(dev, 256 * MiB, PHX_BUF_SPARSE, &buf), 0);
	/* the first copy also makes what copies need (an engine) */
	cr_assert_eq(phx_memcpy_to_buf(buf, 0, &one, 1), 0);
	before = open_fds();
	for (off = 2 * gran, n = 1; off < 256 * MiB; off += 2 * gran, n++)
		cr_assert_eq(phx_memcpy_to_buf(buf, off, &one, 1), 0, "%s",
			     phx_strerror_last());
	cr_assert_eq(phx_buf_committed(buf), n * gran, "one granule each");
	cr_assert_leq(open_fds(), before, "%u more chunks took %u descriptors",
		      n - 1, open_fds() - before);
	phx_buf_free(buf);
	cr_assert_lt(open_fds(), before, "freeing the buffer closes its one");
	phx_device_close(dev);
}

/*
 * A synchronous copy leaves its work on a pooled stream for its own wait
 * to carry out: one device-to-device copy of more chunks than a stream
 * holds (1024 ops) goes through whole, holes and all.
 */
Test(sim, a_copy_of_more_chunks_than_a_stream_holds)
{
	struct phx_device *dev = open_sim();
	uint64_t gran = dev->granularity, off, len = 3000 * gran;
	struct phx_buf *src, *dst;
	unsigned char v;

	cr_assert_eq(phx_buf_alloc(dev, len, PHX_BUF_SPARSE, &src), 0);
	cr_assert_eq(phx_buf_alloc(dev, len, PHX_BUF_SPARSE, &dst), 0);
	/* every other granule written: 1500 chunks of data between holes */
	for (off = 0; off < len; off += 2 * gran) {
		v = (unsigned char)(off / gran / 2 + 1);
		cr_assert_eq(phx_memcpy_to_buf(src, off + gran - 1, &v, 1), 0);
	}
	cr_assert_eq(phx_memcpy_buf(dst, 0, src, 0, len), 0, "%s",
		     phx_strerror_last());
	for (off = 0; off < len; off += 2 * gran) {
		cr_assert_eq(phx_memcpy_from_buf(&v, dst, off + gran - 1, 1),
			     0);
		cr_assert_eq(v, (unsigned char)(off / gran / 2 + 1),
			     "granule %llu", (unsigned long long)(off / gran));
	}
	cr_assert_eq(phx_buf_committed(dst), len / 2, "holes stay holes");
	phx_buf_free(dst);
	phx_buf_free(src);
	phx_device_close(dev);
}
