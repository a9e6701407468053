/* SPDX-License-Identifier: MIT */
/*
 * kmod_dma.c - check 2: O_DIRECT I/O between the NVMe disk and a mapping of
 * device memory moves the right bytes.
 *
 *   kmod_dma raw    pread of /dev/nvme0n1 into the mapping, pwrite from it
 *   kmod_dma file   pread of an ext4 file, and io_uring reads of another
 *
 * The host checks the same bytes in the ivshmem file and the disk image,
 * and that the controller's DMA addresses were in the BAR (check 3).
 */
#include <liburing.h>

#include "guest.h"

#define URING_DEPTH 16

static uint64_t bus;

static char *direct_buf(uint64_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, len))
		return NULL;
	return p;
}

static void raw_read(int dev)
{
	char *p, *ref;
	int fd, nv;

	fd = range_alloc(dev, 8 * MIB, BAR_RAW_READ, PHX_ALLOC_FIXED);
	p = fd >= 0 ? range_map(fd, 8 * MIB) : NULL;
	EXPECT(p, "alloc/mmap at %llu: %s", BAR_RAW_READ, strerror(errno));
	if (!p)
		return;
	nv = open("/dev/nvme0n1", O_RDONLY | O_DIRECT);
	EXPECT(nv >= 0, "open /dev/nvme0n1: %s", strerror(errno));
	EXPECT(pread(nv, p, 8 * MIB, DISK_RAW_READ) == (ssize_t)(8 * MIB),
	       "O_DIRECT pread into the mapping: %s", strerror(errno));
	close(nv);

	ref = malloc(8 * MIB);
	nv = open("/dev/nvme0n1", O_RDONLY);
	EXPECT(pread(nv, ref, 8 * MIB, DISK_RAW_READ) == (ssize_t)(8 * MIB),
	       "buffered pread: %s", strerror(errno));
	close(nv);
	EXPECT(!memcmp(p, ref, 8 * MIB),
	       "O_DIRECT bytes differ from the page cache's");
	free(ref);
	printf("HOSTCHECK 2 bar %llu %llu disk %llu\n", BAR_RAW_READ, 8 * MIB,
	       DISK_RAW_READ);
	printf("HOSTCHECK 3 dma %llu %llu\n",
	       (unsigned long long)bus + BAR_RAW_READ, 8 * MIB);
	munmap(p, 8 * MIB);
	close(fd);
}

static void raw_write(int dev)
{
	char *p, *back;
	int fd, nv;

	fd = range_alloc(dev, MIB, BAR_DISK_WRITE, PHX_ALLOC_FIXED);
	p = fd >= 0 ? range_map(fd, MIB) : NULL;
	EXPECT(p, "alloc/mmap at %llu: %s", BAR_DISK_WRITE, strerror(errno));
	if (!p)
		return;
	pat_fill(p, MIB, SEED_DISK_WRITE, 0);
	nv = open("/dev/nvme0n1", O_RDWR | O_DIRECT);
	EXPECT(nv >= 0, "open /dev/nvme0n1: %s", strerror(errno));
	EXPECT(pwrite(nv, p, MIB, DISK_WRITE) == (ssize_t)MIB,
	       "O_DIRECT pwrite from the mapping: %s", strerror(errno));
	EXPECT(!fsync(nv), "fsync: %s", strerror(errno));
	back = direct_buf(MIB);
	EXPECT(pread(nv, back, MIB, DISK_WRITE) == (ssize_t)MIB,
	       "read back: %s", strerror(errno));
	EXPECT(pat_check(back, MIB, SEED_DISK_WRITE, 0) < 0,
	       "disk does not hold what the mapping held");
	close(nv);
	free(back);
	printf("HOSTCHECK 2 disk %llu %llu pattern %d 0\n", DISK_WRITE, MIB,
	       SEED_DISK_WRITE);
	printf("HOSTCHECK 3 dma %llu %llu\n",
	       (unsigned long long)bus + BAR_DISK_WRITE, MIB);
	munmap(p, MIB);
	close(fd);
}

static void file_read(int dev)
{
	int64_t bad;
	char *p;
	int fd, fa;

	fd = range_alloc(dev, FILE_A_SIZE, BAR_FILE_A, PHX_ALLOC_FIXED);
	p = fd >= 0 ? range_map(fd, FILE_A_SIZE) : NULL;
	EXPECT(p, "alloc/mmap at %llu: %s", BAR_FILE_A, strerror(errno));
	if (!p)
		return;
	fa = open("/mnt/a.bin", O_RDONLY | O_DIRECT);
	EXPECT(fa >= 0, "open /mnt/a.bin O_DIRECT: %s", strerror(errno));
	EXPECT(pread(fa, p, FILE_A_SIZE, 0) == (ssize_t)FILE_A_SIZE,
	       "O_DIRECT pread of an ext4 file: %s", strerror(errno));
	close(fa);
	bad = pat_check(p, FILE_A_SIZE, SEED_FILE_A, 0);
	EXPECT(bad < 0, "a.bin differs at %lld", (long long)bad);
	printf("HOSTCHECK 2 bar %llu %llu pattern %d 0\n", BAR_FILE_A,
	       FILE_A_SIZE, SEED_FILE_A);
	printf("HOSTCHECK 3 dma %llu %llu\n",
	       (unsigned long long)bus + BAR_FILE_A, FILE_A_SIZE);
	munmap(p, FILE_A_SIZE);
	close(fd);
}

static void uring_read(int dev)
{
	const uint64_t piece = FILE_B_SIZE / URING_DEPTH;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	int64_t bad;
	char *p;
	int fd, fb, i, ret;

	fd = range_alloc(dev, FILE_B_SIZE, BAR_FILE_B, PHX_ALLOC_FIXED);
	p = fd >= 0 ? range_map(fd, FILE_B_SIZE) : NULL;
	EXPECT(p, "alloc/mmap at %llu: %s", BAR_FILE_B, strerror(errno));
	if (!p)
		return;
	fb = open("/mnt/b.bin", O_RDONLY | O_DIRECT);
	EXPECT(fb >= 0, "open /mnt/b.bin O_DIRECT: %s", strerror(errno));
	ret = io_uring_queue_init(URING_DEPTH, &ring, 0);
	EXPECT(!ret, "io_uring_queue_init: %s", strerror(-ret));
	if (ret)
		return;
	/* All reads in flight at once, in reverse order for good measure. */
	for (i = URING_DEPTH - 1; i >= 0; i--) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_read(sqe, fb, p + i * piece, piece, i * piece);
		sqe->user_data = i;
	}
	ret = io_uring_submit(&ring);
	EXPECT(ret == URING_DEPTH, "io_uring_submit: %d", ret);
	for (i = 0; i < URING_DEPTH; i++) {
		ret = io_uring_wait_cqe(&ring, &cqe);
		EXPECT(!ret, "io_uring_wait_cqe: %s", strerror(-ret));
		if (ret)
			break;
		EXPECT(cqe->res == (int)piece, "read %llu: res %d",
		       (unsigned long long)cqe->user_data, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	io_uring_queue_exit(&ring);
	close(fb);
	bad = pat_check(p, FILE_B_SIZE, SEED_FILE_B, 0);
	EXPECT(bad < 0, "b.bin differs at %lld", (long long)bad);
	printf("HOSTCHECK 2 bar %llu %llu pattern %d 0\n", BAR_FILE_B,
	       FILE_B_SIZE, SEED_FILE_B);
	printf("HOSTCHECK 3 dma %llu %llu\n",
	       (unsigned long long)bus + BAR_FILE_B, FILE_B_SIZE);
	munmap(p, FILE_B_SIZE);
	close(fd);
}

int main(int argc, char **argv)
{
	struct phx_ioc_info info;
	int dev;

	dev = dev_open(&info);
	EXPECT(dev >= 0, "no /dev/phx0");
	if (dev < 0 || argc != 2)
		return test_result(2, "O_DIRECT and io_uring into the mapping");
	bus = info.bus_addr;
	if (!strcmp(argv[1], "raw")) {
		raw_read(dev);
		raw_write(dev);
	} else {
		file_read(dev);
		uring_read(dev);
	}
	close(dev);
	return test_result(2, "O_DIRECT and io_uring into the mapping");
}
