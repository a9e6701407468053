/* SPDX-License-Identifier: MIT */
/* test_batch.c - many transfers at once on one io_uring. */
#include <signal.h>
#include <sys/resource.h>

#include "util.h"

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
			.op = PHX_OP_READ, .fd = fd,
			.file_off = (int64_t)(rnd_next(&s) % (fsize - len)),
			.buf = buf, .buf_off = i * slot + rnd_next(&s) % 7,
			.len = len, .user_data = (void *)i,
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
		rd[i] = (struct phx_io){ .op = PHX_OP_READ, .fd = in,
					 .file_off = (int64_t)(i * MiB),
					 .dptr = phx_buf_dptr(buf) + i * MiB,
					 .len = MiB };
	cr_assert_eq(phx_batch_submit(b, rd, 3), 3);
	cr_assert_eq(phx_batch_wait(b, 3, NULL, 0, -1), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(rd[i].result, (int64_t)MiB);
	struct phx_io wr = { .op = PHX_OP_WRITE, .fd = out, .buf = buf,
			     .len = n };

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
		ios[i] = (struct phx_io){ .op = PHX_OP_WRITE, .fd = out,
					  .file_off = (int64_t)(i * MiB / 2),
					  .buf = buf, .buf_off = i * MiB / 2,
					  .len = MiB / 2 };
	ios[4].file_off = 6 * MiB; /* beyond the file size limit */
	ios[8] = (struct phx_io){ .op = PHX_OP_READ, .fd = 9999, .buf = buf,
				  .len = 10 };
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
