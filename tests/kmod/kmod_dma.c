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

/*
 * @size bytes of device memory at @offset of the BAR, as a range file
 * (in *@fd) and mapped; NULL (a failed check) where either fails.
 */
static char *fixed_map(int dev, uint64_t size, uint64_t offset, int *fd)
{
	char *p;

	*fd = range_alloc(dev, size, offset, PHX_ALLOC_FIXED);
	p = *fd >= 0 ? range_map(*fd, size) : NULL;
	EXPECT(p, "alloc/mmap at %llu: %s", (unsigned long long)offset,
	       strerror(errno));
	return p;
}

/*
 * The controller DMAed @size bytes at @offset of the BAR (check 3, the
 * host looks); the mapping @p and its range file @fd go.
 */
static void dma_done(char *p, int fd, uint64_t size, uint64_t offset)
{
	printf("HOSTCHECK 3 dma %llu %llu\n",
	       (unsigned long long)(bus + offset), (unsigned long long)size);
	munmap(p, size);
	close(fd);
}

static int open_direct(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECT);

	EXPECT(fd >= 0, "open %s O_DIRECT: %s", path, strerror(errno));
	return fd;
}

/*
 * @size bytes at @offset of the BAR, mapped at @p, hold the pattern
 * @seed of the file @name, as the host must find in the ivshmem file.
 */
static void holds_file(const char *name, char *p, uint64_t size,
		       uint64_t offset, uint32_t seed)
{
	int64_t bad = pat_check(p, size, seed, 0);

	EXPECT(bad < 0, "%s differs at %lld", name, (long long)bad);
	printf("HOSTCHECK 2 bar %llu %llu pattern %u 0\n",
	       (unsigned long long)offset, (unsigned long long)size, seed);
}

static void raw_read(int dev)
{
	char *p, *ref;
	int fd, nv;

	p = fixed_map(dev, 8 * MIB, BAR_RAW_READ, &fd);
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
	dma_done(p, fd, 8 * MIB, BAR_RAW_READ);
}

static void raw_write(int dev)
{
	char *p, *back;
	int fd, nv;

	p = fixed_map(dev, MIB, BAR_DISK_WRITE, &fd);
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
	dma_done(p, fd, MIB, BAR_DISK_WRITE);
}

static void file_read(int dev)
{
	char *p;
	int fd, fa;

	p = fixed_map(dev, FILE_A_SIZE, BAR_FILE_A, &fd);
	if (!p)
		return;
	fa = open_direct("/mnt/a.bin");
	EXPECT(pread(fa, p, FILE_A_SIZE, 0) == (ssize_t)FILE_A_SIZE,
	       "O_DIRECT pread of an ext4 file: %s", strerror(errno));
	close(fa);
	holds_file("a.bin", p, FILE_A_SIZE, BAR_FILE_A, SEED_FILE_A);
	dma_done(p, fd, FILE_A_SIZE, BAR_FILE_A);
}

static void uring_read(int dev)
{
	const uint64_t piece = FILE_B_SIZE / URING_DEPTH;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	char *p;
	int fd, fb, i, ret;

	p = fixed_map(dev, FILE_B_SIZE, BAR_FILE_B, &fd);
	if (!p)
		return;
	fb = open_direct("/mnt/b.bin");
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
	holds_file("b.bin", p, FILE_B_SIZE, BAR_FILE_B, SEED_FILE_B);
	dma_done(p, fd, FILE_B_SIZE, BAR_FILE_B);
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
