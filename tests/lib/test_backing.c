/* SPDX-License-Identifier: MIT */
/*
 * test_backing.c - backing files: device memory as a growable regular
 * file (what phxfs hands to FUSE passthrough), on the simulated device.
 */
#include <sys/mman.h>

#include "util.h"

static struct phx_backing *backing(struct phx_device *dev, uint64_t cap)
{
	struct phx_backing *bk = NULL;

	cr_assert_eq(phx_backing_alloc(dev, cap, &bk), 0, "%s",
		     phx_strerror_last());
	return bk;
}

static struct phx_backing_info info_of(struct phx_backing *bk)
{
	struct phx_backing_info info;

	cr_assert_eq(phx_backing_info(bk, &info), 0, "%s", phx_strerror_last());
	return info;
}

static uint64_t used(struct phx_device *dev)
{
	struct phx_device_info info;

	cr_assert_eq(phx_device_info(dev, &info), 0);
	return info.used;
}

/* A test's device, its use before, and @n bytes to write and read back. */
struct bk_test {
	struct phx_device *dev;
	unsigned char *data, *back;
	size_t n;
	uint64_t before;
};

static struct bk_test bk_start(size_t n)
{
	struct bk_test t = { .dev = open_default(), .n = n };

	t.data = xmalloc(n);
	t.back = xmalloc(n);
	t.before = used(t.dev);
	return t;
}

/* @bk freed gives all its memory back; then the rest goes. */
static void bk_end(struct bk_test *t, struct phx_backing *bk)
{
	phx_backing_free(bk);
	cr_assert_eq(used(t->dev), t->before);
	free(t->data);
	free(t->back);
	phx_device_close(t->dev);
}

Test(backing, is_a_regular_file_that_grows_within_its_capacity)
{
	struct bk_test t = bk_start(3 * MiB + 123);
	struct phx_backing *bk;
	struct stat st;

	if (phx_device_kind(t.dev) == PHX_DEVICE_CUDA) {
		cr_assert_eq(phx_backing_alloc(t.dev, MiB, &bk), -EOPNOTSUPP);
		cr_assert(strstr(phx_strerror_last(), "no backing files"));
		phx_device_close(t.dev);
		return;
	}
	bk = backing(t.dev, 4 * MiB);
	cr_assert_eq(fstat(phx_backing_fd(bk), &st), 0);
	cr_assert(S_ISREG(st.st_mode), "FUSE passthrough needs a regular file");
	cr_assert_eq(info_of(bk).size, 0);
	cr_assert_eq(info_of(bk).capacity, 4 * MiB);
	cr_assert_eq(used(t.dev), t.before + 4 * MiB,
		     "capacity counts as used");

	fill_random(t.data, t.n, 3);
	cr_assert_eq(phx_backing_write(bk, 0, t.data, t.n), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(info_of(bk).size, t.n);
	memset(t.back, 0, t.n);
	cr_assert_eq(phx_backing_read(bk, 0, t.back, t.n), (int64_t)t.n, "%s",
		     phx_strerror_last());
	cr_assert_arr_eq(t.back, t.data, t.n);
	/* Short only at the end of the file. */
	cr_assert_eq(phx_backing_read(bk, t.n - 100, t.back, 4096), 100);
	cr_assert_arr_eq(t.back, t.data + t.n - 100, 100);

	cr_assert_eq(phx_backing_write(bk, 4 * MiB - 10, t.data, 11), -EFBIG);
	cr_assert(strstr(phx_strerror_last(), "phx_backing_reserve"), "%s",
		  phx_strerror_last());
	cr_assert_eq(info_of(bk).size, t.n, "a refused write changes nothing");
	bk_end(&t, bk);
}

Test(backing, reserve_moves_bytes_under_the_same_fd_and_trim_gives_back)
{
	struct bk_test t = bk_start(2 * MiB + 5);
	struct phx_backing *bk;
	int fd;

	if (phx_device_kind(t.dev) == PHX_DEVICE_CUDA) {
		phx_device_close(t.dev);
		return;
	}
	bk = backing(t.dev, t.n);
	fd = phx_backing_fd(bk);
	fill_random(t.data, t.n, 8);
	cr_assert_eq(phx_backing_write(bk, 0, t.data, t.n), 0);
	cr_assert_eq(phx_backing_reserve(bk, 1000), 0, "already there");
	cr_assert_eq(phx_backing_reserve(bk, 8 * MiB), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_backing_fd(bk), fd, "the descriptor number stays");
	cr_assert_eq(info_of(bk).capacity, 8 * MiB);
	cr_assert_eq(info_of(bk).size, t.n);
	cr_assert_eq(used(t.dev), t.before + 8 * MiB,
		     "the old memory is given back");
	cr_assert_eq(phx_backing_read(bk, 0, t.back, t.n), (int64_t)t.n);
	cr_assert_arr_eq(t.back, t.data, t.n, "the bytes moved with it");

	cr_assert_eq(phx_backing_write(bk, 6 * MiB, t.data, 4096), 0);
	cr_assert_eq(ftruncate(fd, (off_t)t.n), 0);
	cr_assert_eq(phx_backing_trim(bk), 0, "%s", phx_strerror_last());
	cr_assert_lt(info_of(bk).capacity, 8 * MiB);
	cr_assert_geq(info_of(bk).capacity, t.n);
	cr_assert_eq(used(t.dev), t.before + info_of(bk).capacity);
	bk_end(&t, bk);
}

Test(backing, transfers_between_a_file_and_a_backing)
{
	size_t n = 5 * MiB + 777;
	unsigned char *back = xmalloc(n);
	struct rig r = rig_file(open_default(), dir_direct(), n, 21, true);
	int out = empty_file(dir_direct());
	struct phx_backing *bk;
	struct phx_io io = {
		.op = PHX_OP_READ,
		.fd = r.fd,
		.file_off = 0,
		.buf_off = 4096,
		.len = n,
	};

	if (phx_device_kind(r.dev) == PHX_DEVICE_CUDA) {
		phx_device_close(r.dev);
		return;
	}
	bk = backing(r.dev, n + 4096);
	cr_assert_eq(phx_backing_io(bk, &io), (int64_t)n, "%s",
		     phx_strerror_last());
	cr_assert_neq(io.path, PHX_PATH_NONE);
	cr_assert_eq(info_of(bk).size, n + 4096, "a read extends the backing");
	cr_assert_eq(phx_backing_read(bk, 4096, back, n), (int64_t)n);
	cr_assert_arr_eq(back, r.data, n);

	io = (struct phx_io){ .op = PHX_OP_WRITE,
			      .fd = out,
			      .file_off = 3,
			      .buf_off = 4096,
			      .len = n };
	cr_assert_eq(phx_backing_io(bk, &io), (int64_t)n, "%s",
		     phx_strerror_last());
	memset(back, 0, n);
	cr_assert_eq(pread(out, back, n, 3), (ssize_t)n);
	cr_assert_arr_eq(back, r.data, n);

	io = (struct phx_io){
		.op = PHX_OP_WRITE, .fd = out, .buf_off = 4096, .len = n + 1
	};
	cr_assert_eq(phx_backing_io(bk, &io), -ERANGE, "past the size");
	io = (struct phx_io){ .op = PHX_OP_READ, .fd = r.fd, .len = n + 8192 };
	cr_assert_eq(phx_backing_io(bk, &io), -EFBIG, "past the capacity");

	phx_backing_free(bk);
	close(out);
	free(back);
	rig_close(&r);
}

/* Sizes near UINT64_MAX are refused, and the device's count stays. */
Test(backing, sizes_that_would_wrap_are_refused_and_the_count_stays)
{
	struct bk_test t = bk_start(4096);
	struct phx_backing *bk, *bk2 = NULL;
	uint64_t after;

	if (phx_device_kind(t.dev) == PHX_DEVICE_CUDA) {
		phx_device_close(t.dev);
		return;
	}
	bk = backing(t.dev, MiB);
	fill_random(t.data, t.n, 4);
	cr_assert_eq(phx_backing_write(bk, 0, t.data, t.n), 0);
	after = used(t.dev);
	cr_assert_eq(phx_backing_reserve(bk, UINT64_MAX), -EFBIG);
	cr_assert_eq(phx_backing_reserve(bk, UINT64_MAX - 8192), -ENOSPC);
	cr_assert_eq(used(t.dev), after, "%s", phx_strerror_last());
	cr_assert_eq(info_of(bk).capacity, MiB);
	cr_assert_eq(phx_backing_alloc(t.dev, UINT64_MAX, &bk2), -EFBIG);
	cr_assert_eq(phx_backing_alloc(t.dev, UINT64_MAX - 8192, &bk2),
		     -ENOSPC);
	cr_assert_eq(phx_backing_alloc(t.dev, UINT64_MAX / 2 + 1, &bk2),
		     -ENOSPC);
	cr_assert_null(bk2);
	cr_assert_eq(used(t.dev), after);
	cr_assert_eq(phx_backing_read(bk, 0, t.back, t.n), (int64_t)t.n);
	cr_assert_arr_eq(t.back, t.data, t.n, "the bytes are still there");
	bk_end(&t, bk);
}

/* A read that is refused or fails leaves the backing's size as it was. */
Test(backing, failed_read_does_not_grow_the_backing)
{
	struct rig r = rig_file(open_default(), dir_direct(), 100000, 5, false);
	int wfd = reopen(r.fd, O_WRONLY);
	struct phx_backing *bk;
	struct phx_io io;

	if (phx_device_kind(r.dev) == PHX_DEVICE_CUDA) {
		close(wfd);
		rig_close(&r);
		return;
	}
	bk = backing(r.dev, MiB);
	io = (struct phx_io){ .op = PHX_OP_READ,
			      .fd = r.fd,
			      .file_off = -1,
			      .buf_off = 4096,
			      .len = 500000 };
	cr_assert_eq(phx_backing_io(bk, &io), -EINVAL);
	cr_assert_eq(info_of(bk).size, 0);
	io = (struct phx_io){ .op = PHX_OP_READ, .fd = 9999, .len = 800000 };
	cr_assert_eq(phx_backing_io(bk, &io), -EBADF);
	cr_assert_eq(info_of(bk).size, 0);
	io = (struct phx_io){ .op = PHX_OP_READ, .fd = wfd, .len = 800000 };
	cr_assert_eq(phx_backing_io(bk, &io), -EBADF);
	cr_assert_eq(info_of(bk).size, 0);
	/* short: the file grows by what came */
	io = (struct phx_io){
		.op = PHX_OP_READ, .fd = r.fd, .buf_off = 10, .len = 900000
	};
	cr_assert_eq(phx_backing_io(bk, &io), 100000, "%s",
		     phx_strerror_last());
	cr_assert_eq(info_of(bk).size, 100010);
	phx_backing_free(bk);
	close(wfd);
	rig_close(&r);
}
