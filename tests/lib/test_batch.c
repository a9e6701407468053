/* SPDX-License-Identifier: MIT */
/* test_batch.c - many transfers at once on one io_uring. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "util.h"
#include "buf.h"

static void small_random_reads(unsigned int flags, bool cold)
{
	struct phx_device *dev = open_default();
	size_t fsize = 16 * MiB, n = 1000, slot = 64 * 1024;
	struct phx_io *ios = calloc(n, sizeof(*ios));
	struct phx_io *done[64];
	unsigned char *data;
	struct phx_batch *b;
	struct phx_buf *buf;
	uint64_t s = 77;
	unsigned int got = 0;
	int fd = make_file(dir_direct(), fsize, 31, cold, (void **)&data);

	cr_assert_eq(phx_buf_alloc(dev, n * slot, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, 32, flags, &b), 0, "%s",
		     phx_strerror_last());
	for (size_t i = 0; i < n; i++) {
		size_t len = rnd_next(&s) % slot + 1;

		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = fd,
			.file_off = (int64_t)(rnd_next(&s) % (fsize - len)),
			.buf = buf,
			.buf_off = i * slot + rnd_next(&s) % 7,
			.len = len,
			.user_data = (void *)i,
		};
		if (ios[i].buf_off + len > (i + 1) * slot)
			ios[i].buf_off = i * slot;
	}
	cr_assert_eq(phx_batch_submit(b, ios, (unsigned int)n), (int)n);
	while (got < n) {
		int k = phx_batch_wait(b, 1, done, 64, -1);

		cr_assert_gt(k, 0, "wait: %d %s", k, phx_strerror_last());
		for (int i = 0; i < k; i++)
			cr_assert_eq(done[i]->result, (int64_t)done[i]->len,
				     "entry %zu: %lld",
				     (size_t)done[i]->user_data,
				     (long long)done[i]->result);
		got += (unsigned int)k;
	}
	cr_assert_eq(phx_batch_wait(b, 0, NULL, 0, 0), 0, "nothing left");
	for (size_t i = 0; i < n; i++)
		assert_buf_eq(buf, ios[i].buf_off, data + ios[i].file_off,
			      ios[i].len);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(ios);
	free(data);
}

Test(batch, thousand_small_reads_cold)
{
	small_random_reads(0, true);
}

Test(batch, thousand_small_reads_hot_polled)
{
	small_random_reads(PHX_BATCH_POLL, false);
}

Test(batch, mixed_reads_and_writes_to_raw_addresses)
{
	struct phx_device *dev = open_default();
	size_t n = 3 * MiB;
	unsigned char *data, *back = xmalloc(n);
	struct phx_buf *buf;
	struct phx_batch *b;
	int in = make_file(dir_direct(), n, 41, true, (void **)&data);
	int out = empty_file(dir_direct());

	cr_assert_eq(phx_buf_alloc(dev, n, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, 0, 0, &b), 0);
	/* raw device addresses (memory libphoenix did not hand out) */
	struct phx_io rd[3];

	for (int i = 0; i < 3; i++)
		rd[i] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = in,
					 .file_off = (int64_t)(i * MiB),
					 .dptr = phx_buf_dptr(buf) + i * MiB,
					 .len = MiB };
	cr_assert_eq(phx_batch_submit(b, rd, 3), 3);
	cr_assert_eq(phx_batch_wait(b, 3, NULL, 0, -1), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rd[i].result, (int64_t)MiB);
	struct phx_io wr = {
		.op = PHX_OP_WRITE, .fd = out, .buf = buf, .len = n
	};

	cr_assert_eq(phx_batch_submit(b, &wr, 1), 1);
	cr_assert_eq(phx_batch_wait(b, 1, NULL, 0, -1), 1);
	cr_assert_eq(wr.result, (int64_t)n);
	cr_assert_eq(pread(out, back, n, 0), (ssize_t)n);
	cr_assert(!memcmp(back, data, n));
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	free(data);
	free(back);
}

/* Submit @n entries to @b and wait for all of them; each moved its length. */
static void run_all(struct phx_batch *b, struct phx_io *ios, unsigned int n)
{
	cr_assert_eq(phx_batch_submit(b, ios, n), (int)n, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_batch_wait(b, n, NULL, 0, -1), (int)n);
	for (unsigned int i = 0; i < n; i++)
		cr_assert_eq(ios[i].result, (int64_t)ios[i].len,
			     "entry %u: %lld %s", i, (long long)ios[i].result,
			     phx_strerror_last());
}

/*
 * A batch started on a hot read longer than a slot re-cuts its idle
 * engine into the hot slots, as phx_read() does; a cold read, a few
 * small reads and a write after it get the batch's own cut back: each
 * moves the right bytes by the path it should take.
 */
Test(batch, hot_cold_and_write_on_one_batch_land_their_bytes)
{
	setenv("PHX_CHUNK_SIZE", "4M", 1);
	setenv("PHX_STAGING_SIZE", "16M", 1);
	struct phx_device *dev = open_default();
	size_t len = 40 * MiB + 777, off = 4097;
	unsigned char *data, *back = xmalloc(off + len);
	struct phx_buf *buf = buf_new(dev, off + len + 123, 0);
	struct phx_batch *b;
	struct phx_io io[3];
	int fd = make_file(dir_direct(), off + len, 57, false, (void **)&data);
	int out = empty_file(dir_direct());

	/* four slots of 4 MiB: more than a hot slot */
	cr_assert_eq(phx_batch_create(dev, 4, 0, &b), 0, "%s",
		     phx_strerror_last());
	for (unsigned int round = 0; round < 2; round++) {
		if (round) { /* cold: the same bytes out of the disk */
			fsync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		}
		io[0] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = fd,
					 .file_off = (int64_t)off,
					 .buf = buf,
					 .buf_off = 123,
					 .len = len };
		run_all(b, io, 1);
		cr_expect_eq(
			io[0].path, round ? PHX_PATH_STAGED : PHX_PATH_BUFFERED,
			"round %u: path %s", round, phx_path_name(io[0].path));
		assert_buf_eq(buf, 123, data + off, len);
	}
	for (unsigned int i = 0; i < 3; i++)
		io[i] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = fd,
					 .file_off = (int64_t)(i * 5 * MiB + 3),
					 .buf = buf,
					 .buf_off = i * 4096,
					 .len = 4096 - i };
	run_all(b, io, 3);
	for (unsigned int i = 0; i < 3; i++)
		assert_buf_eq(buf, i * 4096, data + i * 5 * MiB + 3, 4096 - i);
	/* the whole file back into the buffer, hot again, then out of it */
	io[0] = (struct phx_io){
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = off + len
	};
	cr_assert_eq(pread(fd, back, off + len, 0), (ssize_t)(off + len));
	run_all(b, io, 1);
	io[0] = (struct phx_io){
		.op = PHX_OP_WRITE, .fd = out, .buf = buf, .len = off + len
	};
	run_all(b, io, 1);
	memset(back, 0, off + len);
	cr_assert_eq(pread(out, back, off + len, 0), (ssize_t)(off + len));
	cr_assert(!memcmp(back, data, off + len), "written bytes differ");
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	close(out);
	free(data);
	free(back);
}

/*
 * Hot reads at the head of a batch run on the engine's reader threads
 * together, one after the other without a pause, when together they hold
 * at least the staging's length: long ones with the small ones queued
 * behind them, and reads each shorter than the staging.  Reads that
 * together hold less, or are on average smaller than a reader's smallest
 * piece (256 KiB), go through the pipeline.
 */
Test(batch, hot_reads_of_a_staging_s_length_run_on_reader_threads)
{
	setenv("PHX_STAGING_SIZE", "4M", 1);
	struct phx_device *dev = open_default();
	size_t len = 20 * MiB + 555, small = 2 * len;
	unsigned char *data;
	struct phx_buf *buf = buf_new(dev, 3 * len, 0);
	struct phx_batch *b;
	struct phx_io io[40];
	int fd = make_file(dir_tmpfs(), len, 58, false, (void **)&data);

	cr_assert_eq(phx_batch_create(dev, 4, 0, &b), 0, "%s",
		     phx_strerror_last());
	io[0] = (struct phx_io){
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = len
	};
	io[1] = (struct phx_io){ .op = PHX_OP_READ,
				 .fd = fd,
				 .file_off = 555,
				 .buf = buf,
				 .buf_off = len,
				 .len = len - 555 };
	for (unsigned int i = 2; i < 5; i++)
		io[i] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = fd,
					 .file_off = (int64_t)(i * 3 * MiB + i),
					 .buf = buf,
					 .buf_off = small + i * 8192,
					 .len = 8000 };
	run_all(b, io, 5);
	cr_assert_eq(engine_stats(dev).threaded_reads, 5);
	assert_buf_eq(buf, 0, data, len);
	assert_buf_eq(buf, len, data + 555, len - 555);
	for (unsigned int i = 2; i < 5; i++)
		assert_buf_eq(buf, small + i * 8192, data + i * 3 * MiB + i,
			      8000);
	/* small ones alone: the pipeline */
	run_all(b, io + 2, 3);
	cr_assert_eq(engine_stats(dev).threaded_reads, 5);
	/* four of 1.5 MiB, each shorter than the staging, 6 MiB together */
	for (unsigned int i = 0; i < 4; i++)
		io[i] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = fd,
					 .file_off =
						 (int64_t)(i * 3 * MiB / 2 + 1),
					 .buf = buf,
					 .buf_off = i * 3 * MiB / 2,
					 .len = 3 * MiB / 2 };
	run_all(b, io, 4);
	cr_assert_eq(engine_stats(dev).threaded_reads, 9);
	assert_buf_eq(buf, 0, data + 1, 6 * MiB);
	/* forty of 128 KiB: 5 MiB together, but each below a reader's piece */
	for (unsigned int i = 0; i < 40; i++)
		io[i] = (struct phx_io){ .op = PHX_OP_READ,
					 .fd = fd,
					 .file_off =
						 (int64_t)(i * (128 << 10) + 3),
					 .buf = buf,
					 .buf_off = i * (128 << 10),
					 .len = (128 << 10) };
	run_all(b, io, 40);
	cr_assert_eq(engine_stats(dev).threaded_reads, 9);
	assert_buf_eq(buf, 0, data + 3, 5 * MiB);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/* One entry fails in the kernel; the others complete with their bytes. */
Test(batch, error_mid_batch_others_complete)
{
	struct phx_device *dev = open_default();
	struct rlimit rl = { 4 * MiB, 4 * MiB };
	struct phx_io ios[9];
	struct phx_buf *buf;
	struct phx_batch *b;
	int out = empty_file(dir_direct());

	cr_assert_eq(phx_buf_alloc(dev, 8 * MiB, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, 4, 0, &b), 0);
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	for (int i = 0; i < 8; i++)
		ios[i] = (struct phx_io){ .op = PHX_OP_WRITE,
					  .fd = out,
					  .file_off = (int64_t)(i * MiB / 2),
					  .buf = buf,
					  .buf_off = i * MiB / 2,
					  .len = MiB / 2 };
	ios[4].file_off = 6 * MiB; /* beyond the file size limit */
	ios[8] = (struct phx_io){
		.op = PHX_OP_READ, .fd = 9999, .buf = buf, .len = 10
	};
	cr_assert_eq(phx_batch_submit(b, ios, 9), 9);
	cr_assert_eq(phx_batch_wait(b, 9, NULL, 0, -1), 9);
	for (int i = 0; i < 8; i++)
		if (i == 4)
			cr_assert_eq(ios[i].result, -EFBIG);
		else
			cr_assert_eq(ios[i].result, (int64_t)MiB / 2,
				     "entry %d: %lld", i,
				     (long long)ios[i].result);
	cr_assert_eq(ios[8].result, -EBADF);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(batch, wait_timeout_returns)
{
	struct phx_device *dev = open_default();
	struct phx_batch *b;

	cr_assert_eq(phx_batch_create(dev, 0, 0, &b), 0);
	cr_assert_eq(phx_batch_wait(b, 1, NULL, 0, 10), 0,
		     "nothing submitted: nothing completes");
	phx_batch_destroy(b);
	phx_device_close(dev);
}

/*
 * KV-cache blocks, fio's randread: @n reads of 4 KiB (every eighth of
 * another small size at an odd offset) from random places of a cold
 * file, @qd in flight at all times, each completed one's successor queued
 * and all of a round's started by the wait, as phx-kvbench's small mode
 * drives them.  Many complete in one round, so their device copies go
 * out together; every entry lands its own bytes.
 */
static void deep_small_reads(unsigned int qd, unsigned int flags)
{
	struct phx_device *dev = open_default();
	size_t fsize = 64 * MiB, n = 3000, slot = 8192;
	struct phx_io *ios = calloc(n, sizeof(*ios)), **done;
	unsigned char *data, *back = xmalloc(n * slot);
	struct phx_batch *b;
	struct phx_buf *buf;
	uint64_t s = 2027;
	size_t next = 0, got = 0, i;
	int fd = make_file(dir_direct(), fsize, 57, true, (void **)&data);

	done = calloc(qd, sizeof(*done));
	cr_assert(ios && done);
	cr_assert_eq(phx_buf_alloc(dev, n * slot, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, qd, flags, &b), 0, "%s",
		     phx_strerror_last());
	for (i = 0; i < n; i++) {
		size_t len = 4096;
		uint64_t off = rnd_next(&s) % (fsize / 4096) * 4096;

		if (i % 8 == 7) {
			len = rnd_next(&s) % slot + 1;
			off = rnd_next(&s) % (fsize - len);
		}
		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = fd,
			.file_off = (int64_t)off,
			.buf = buf,
			.buf_off = i * slot,
			.len = len,
		};
	}
	for (; next < qd; next++)
		cr_assert_eq(phx_batch_queue(b, &ios[next], 1), 1, "%s",
			     phx_strerror_last());
	while (got < n) {
		int k = phx_batch_wait(b, 1, done, qd, -1);

		cr_assert_gt(k, 0, "wait: %d %s", k, phx_strerror_last());
		for (int j = 0; j < k; j++) {
			cr_assert_eq(done[j]->result, (int64_t)done[j]->len,
				     "entry %zu: %lld", (size_t)(done[j] - ios),
				     (long long)done[j]->result);
			if (next < n)
				cr_assert_eq(
					phx_batch_queue(b, &ios[next++], 1), 1);
		}
		got += (size_t)k;
	}
	cr_assert_eq(phx_batch_wait(b, 0, NULL, 0, 0), 0, "nothing left");
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 0, n * slot), 0);
	for (i = 0; i < n; i++)
		cr_assert(!memcmp(back + i * slot, data + ios[i].file_off,
				  ios[i].len),
			  "entry %zu: %llu bytes at %lld differ", i,
			  (unsigned long long)ios[i].len,
			  (long long)ios[i].file_off);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(ios);
	free(done);
	free(back);
	free(data);
}

Test(batch, small_reads_at_depth_32_land_their_bytes)
{
	deep_small_reads(32, 0);
}

Test(batch, small_reads_at_depth_128_land_their_bytes)
{
	deep_small_reads(128, 0);
}

Test(batch, small_reads_at_depth_128_polled_land_their_bytes)
{
	deep_small_reads(128, PHX_BATCH_POLL);
}

/*
 * Transfers a few slots long from the page cache: their segments take
 * adjacent slots and go to adjacent device memory, so those whose reads
 * complete in one round go out as one copy (the first, at 0, takes every
 * slot of the batch in turn, whole ones).
 */
Test(batch, transfers_over_adjacent_slots_land_their_bytes)
{
	struct phx_device *dev = open_default();
	size_t fsize = 8 * MiB, n = 64, span = 300 * 1024;
	struct phx_io ios[64];
	unsigned char *data, *back = xmalloc(n * span);
	struct phx_batch *b;
	struct phx_buf *buf;
	uint64_t s = 99;
	int fd = make_file(dir_direct(), fsize, 61, false, (void **)&data);

	cr_assert_eq(phx_buf_alloc(dev, n * span, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, 16, 0, &b), 0);
	for (size_t i = 0; i < n; i++) {
		size_t len = span - rnd_next(&s) % 4096;

		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = fd,
			.buf = buf,
			.file_off = (int64_t)(rnd_next(&s) % (fsize - len)),
			.buf_off = i * span,
			.len = len,
		};
	}
	ios[0].file_off = 0;
	cr_assert_eq(phx_batch_submit(b, ios, (unsigned int)n), (int)n);
	cr_assert_eq(phx_batch_wait(b, (unsigned int)n, NULL, 0, -1), (int)n);
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 0, n * span), 0);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(ios[i].result, (int64_t)ios[i].len);
		cr_assert(!memcmp(back + i * span, data + ios[i].file_off,
				  ios[i].len),
			  "entry %zu differs", i);
	}
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(back);
	free(data);
}

/*
 * Queued entries start only with the next submit or wait: a submit of
 * nothing starts them, a wait starts the next ones; a bad entry queued
 * completes with its own error.
 */
Test(batch, queued_entries_start_with_the_next_submit_or_wait)
{
	struct phx_device *dev = open_default();
	struct phx_io ios[17];
	struct phx_buf *buf;
	struct phx_batch *b;
	unsigned char *data;
	int fd = make_file(dir_direct(), 4 * MiB, 67, true, (void **)&data);

	cr_assert_eq(phx_buf_alloc(dev, 4 * MiB, 0, &buf), 0);
	cr_assert_eq(phx_batch_create(dev, 8, 0, &b), 0);
	for (int i = 0; i < 16; i++)
		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = fd,
			.buf = buf,
			.file_off = (int64_t)((15 - i) * 256 * 1024 + 5),
			.buf_off = (uint64_t)i * 256 * 1024,
			.len = 4096 + 7 * i,
		};
	ios[16] = (struct phx_io){
		.op = PHX_OP_READ, .fd = 9999, .buf = buf, .len = 10
	};
	for (int i = 0; i < 8; i++)
		cr_assert_eq(phx_batch_queue(b, &ios[i], 1), 1);
	cr_assert_eq(phx_batch_submit(b, NULL, 0), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_batch_wait(b, 8, NULL, 0, -1), 8);
	cr_assert_eq(phx_batch_queue(b, &ios[8], 9), 9);
	cr_assert_eq(phx_batch_wait(b, 9, NULL, 0, -1), 9);
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(ios[i].result, (int64_t)ios[i].len, "entry %d", i);
		assert_buf_eq(buf, ios[i].buf_off, data + ios[i].file_off,
			      ios[i].len);
	}
	cr_assert_eq(ios[16].result, -EBADF);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/* Fills @c with @n copies from @host into the buffer at @dst. */
typedef void make_copies_fn(struct phx_htod *c, unsigned int n, phx_dptr_t dst,
			    unsigned char *host);

/*
 * The backend's batch of host-to-device copies: @n copies that @make
 * lays out, from 8 MiB of registered host memory into a 16 MiB buffer,
 * in one call on one stream (with the device's kernels loaded first if
 * @load); every byte lands where it was sent.
 */
static void backend_batch(unsigned int n, make_copies_fn *make, bool load)
{
	struct phx_device *dev = open_default();
	size_t len = 8 * MiB;
	unsigned char *host = mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct phx_htod *c = calloc(n, sizeof(*c));
	struct phx_buf *buf;
	void *stream;

	cr_assert(host != MAP_FAILED && c);
	fill_random(host, len, 71);
	cr_assert_eq(phx_buf_alloc(dev, 16 * MiB, 0, &buf), 0);
	if (load && dev->ops->kernels_load)
		cr_assert_eq(dev->ops->kernels_load(dev), 0, "%s",
			     phx_strerror_last());
	cr_assert_eq(dev->ops->host_register(dev, host, len), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(dev->ops->stream_create(dev, &stream), 0);
	make(c, n, buf->dptr, host);
	cr_assert_eq(dev->ops->copy_htod_batch(dev, c, n, stream), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(dev->ops->stream_sync(dev, stream), 0);
	for (unsigned int i = 0; i < n; i++)
		assert_buf_eq(buf, c[i].dst - buf->dptr, c[i].src, c[i].len);
	dev->ops->stream_destroy(dev, stream);
	dev->ops->host_unregister(dev, host);
	phx_buf_free(buf);
	munmap(host, len);
	free(c);
	phx_device_close(dev);
}

/* Pieces of any length and alignment, one adjacent to the next. */
static void scattered_copies(struct phx_htod *c, unsigned int n, phx_dptr_t dst,
			     unsigned char *host)
{
	uint64_t s = 5;

	for (unsigned int i = 0; i < n; i++)
		c[i] = (struct phx_htod){
			.dst = dst + i * 80 * 1024 + rnd_next(&s) % 1000,
			.src = host + i * 20 * 1024 + rnd_next(&s) % 1000,
			.len = 1 + rnd_next(&s) % (16 * 1024),
		};
	c[51].dst = c[50].dst + c[50].len;
}

/*
 * As the engine's slots send them: addresses and lengths multiples of
 * 16, most up to 16 KiB (on a GPU, one launch of the gather kernel), a
 * fifth up to 32 KiB and one of an odd length (the copy engine's way).
 */
static void aligned_copies(struct phx_htod *c, unsigned int n, phx_dptr_t dst,
			   unsigned char *host)
{
	uint64_t s = 9;

	for (unsigned int i = 0; i < n; i++)
		c[i] = (struct phx_htod){
			.dst = dst + i * 96 * 1024 + 16 * (rnd_next(&s) % 64),
			.src = host + i * 48 * 1024 + 16 * (rnd_next(&s) % 64),
			.len = 16 * (1 + rnd_next(&s) % (i % 5 ? 1024 : 2048)),
		};
	c[7].len = 4093;
}

Test(batch, backend_copies_a_batch_host_to_device)
{
	backend_batch(100, scattered_copies, false);
}

/* PHX_GATHER=on: every window of the 150 (on a GPU, three launches). */
Test(batch, backend_gathers_small_aligned_copies)
{
	setenv("PHX_GATHER", "on", 1);
	backend_batch(150, aligned_copies, true);
}

/* The default gathers a batch of up to 32 copies (CU_GATHER_AUTO_MAX). */
Test(batch, backend_gathers_a_short_batch_by_default)
{
	unsetenv("PHX_GATHER");
	backend_batch(24, aligned_copies, true);
}

/*
 * A caller that polls with a timeout of 0 between work of its own (phx
 * cp backing the next part of its file) keeps the transfers moving:
 * each poll is a round of the pipeline that does not wait.
 */
Test(batch, polling_with_no_timeout_drives_the_transfers)
{
	struct rig r = rig_open(open_default(), dir_direct(), 8 * MiB + 123, 41,
				false);
	struct phx_io ios[4];
	struct phx_batch *b;
	unsigned int i, got = 0, polls = 0;

	cr_assert_eq(phx_batch_create(r.dev, 0, 0, &b), 0);
	for (i = 0; i < 4; i++)
		ios[i] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = r.fd,
			.file_off = (int64_t)(i * r.n / 4),
			.buf = r.buf,
			.buf_off = i * r.n / 4,
			.len = (i + 1) * r.n / 4 - i * r.n / 4,
		};
	cr_assert_eq(phx_batch_submit(b, ios, 4), 4);
	while (got < 4 && polls < 10000000) {
		int k = phx_batch_wait(b, 1, NULL, 0, 0);

		cr_assert_geq(k, 0, "%s", phx_strerror_last());
		got += (unsigned int)k;
		polls++;
	}
	cr_assert_eq(got, 4, "polls never finished the transfers");
	for (i = 0; i < 4; i++)
		cr_assert_eq(ios[i].result, (int64_t)ios[i].len);
	assert_buf_eq(r.buf, 0, r.data, r.n);
	phx_batch_destroy(b);
	rig_close(&r);
}
