/* SPDX-License-Identifier: MIT */
/*
 * kmod_lib.c - check 4: libphoenix's kmod backend and its p2p path.
 *
 * A buffer on phx0 is filled from an ext4 file with phx_io_run(); the
 * transfer must report PHX_PATH_P2P, the bytes must be right, and every
 * page of the buffer must be a page of the ivshmem BAR (read from
 * /proc/self/pagemap), so the host can check the same bytes in the
 * ivshmem file and the NVMe controller's DMA addresses.  Backing files
 * (what phxfs hands to FUSE passthrough) are the module's growable
 * ranges: host copies, file transfers, growth, trim.
 */
#include <phoenix.h>

#include "guest.h"

static uint64_t page_phys(int pagemap, const void *addr)
{
	uint64_t entry;
	off_t at = (off_t)((uintptr_t)addr / PAGE * 8);

	if (pread(pagemap, &entry, 8, at) != 8 || !(entry >> 63))
		return 0;
	return (entry & ((1ULL << 55) - 1)) * PAGE;
}

/* Report each run of pages contiguous in the BAR to the host. */
static void report_pages(const char *view, uint64_t len, uint64_t bus,
			 uint64_t bar_size)
{
	uint64_t off, run_start = 0, run_phys = 0, runs = 0;
	int pagemap = open("/proc/self/pagemap", O_RDONLY);

	EXPECT(pagemap >= 0, "open pagemap: %s", strerror(errno));
	if (pagemap < 0)
		return;
	for (off = 0; off <= len; off += PAGE) {
		uint64_t phys = off < len ? page_phys(pagemap, view + off) : 0;

		if (off < len)
			EXPECT(phys >= bus && phys < bus + bar_size,
			       "buffer page %llu is at %#llx, outside the BAR",
			       (unsigned long long)(off / PAGE),
			       (unsigned long long)phys);
		if (off &&
		    (off == len || phys != run_phys + (off - run_start))) {
			printf("HOSTCHECK 4 bar %llu %llu pattern %d %llu\n",
			       (unsigned long long)(run_phys - bus),
			       (unsigned long long)(off - run_start),
			       SEED_FILE_LIB, (unsigned long long)run_start);
			printf("HOSTCHECK 4 dma %llu %llu\n",
			       (unsigned long long)run_phys,
			       (unsigned long long)(off - run_start));
			runs++;
		}
		if (!off || phys != run_phys + (off - run_start)) {
			run_start = off;
			run_phys = phys;
		}
	}
	printf("# buffer: %llu runs of BAR pages\n", (unsigned long long)runs);
	close(pagemap);
}

/* Backing files on @dev: @fd is /mnt/lib.bin. */
static void check_backing(struct phx_device *dev, int fd)
{
	struct phx_backing_info bi = {};
	struct phx_backing *bk = NULL;
	struct phx_io io = {};
	uint64_t n = 4 * MIB;
	char *host = malloc(n), *map;
	int bfd, ret;

	ret = phx_backing_alloc(dev, n, &bk);
	EXPECT(!ret, "phx_backing_alloc: %s", phx_strerror_last());
	if (ret || !host)
		return;
	bfd = phx_backing_fd(bk);
	EXPECT(!phx_backing_info(bk, &bi) && bi.size == 0 && bi.capacity == n &&
		       !bi.mapped,
	       "new backing: size %llu capacity %llu mapped %d",
	       (unsigned long long)bi.size, (unsigned long long)bi.capacity,
	       bi.mapped);

	/* file -> backing through the engine, then back to host memory */
	io.op = PHX_OP_READ;
	io.fd = fd;
	io.len = n;
	EXPECT(phx_backing_io(bk, &io) == (int64_t)n, "phx_backing_io: %s",
	       phx_strerror_last());
	printf("# phx_backing_io: %lld bytes by %s\n", (long long)io.result,
	       phx_path_name(io.path));
	EXPECT(phx_backing_read(bk, 0, host, n) == (int64_t)n,
	       "phx_backing_read: %s", phx_strerror_last());
	EXPECT(pat_check(host, n, SEED_FILE_LIB, 0) < 0,
	       "backing bytes differ from lib.bin");

	/* a host write past the size extends it; past the capacity: EFBIG */
	EXPECT(!phx_backing_write(bk, n - 4096, host, 4096),
	       "phx_backing_write: %s", phx_strerror_last());
	EXPECT(phx_backing_write(bk, n, host, 1) == -EFBIG,
	       "a write past the capacity is not refused");

	/* growth moves the bytes under the same descriptor number */
	EXPECT(!phx_backing_reserve(bk, 2 * n), "phx_backing_reserve: %s",
	       phx_strerror_last());
	EXPECT(phx_backing_fd(bk) == bfd, "the descriptor number changed");
	EXPECT(!phx_backing_info(bk, &bi) && bi.capacity >= 2 * n &&
		       bi.size == n,
	       "grown backing: size %llu capacity %llu",
	       (unsigned long long)bi.size, (unsigned long long)bi.capacity);
	memset(host, 0, n);
	EXPECT(phx_backing_read(bk, 0, host, n - 4096) == (int64_t)(n - 4096),
	       "phx_backing_read after the move: %s", phx_strerror_last());
	EXPECT(pat_check(host, n - 4096, SEED_FILE_LIB, 0) < 0,
	       "the bytes did not move with the backing");

	/* a mapped backing cannot move */
	map = mmap(NULL, n, PROT_READ, MAP_SHARED, bfd, 0);
	EXPECT(map != MAP_FAILED, "mmap of the backing: %s", strerror(errno));
	if (map != MAP_FAILED) {
		EXPECT(!phx_backing_info(bk, &bi) && bi.mapped,
		       "a mapped backing says it is not");
		EXPECT(phx_backing_reserve(bk, 4 * n) == -EBUSY,
		       "a mapped backing moved");
		munmap(map, n);
	}
	EXPECT(!phx_backing_trim(bk), "phx_backing_trim: %s",
	       phx_strerror_last());
	EXPECT(!phx_backing_info(bk, &bi) && bi.capacity < 2 * n,
	       "trim kept %llu bytes", (unsigned long long)bi.capacity);
	phx_backing_free(bk);
	free(host);
}

int main(void)
{
	struct phx_device_info info;
	struct phx_ioc_info kinfo;
	struct phx_device *dev = NULL;
	struct phx_buf *buf = NULL;
	struct phx_stats stats;
	struct phx_io io = {};
	const char *view;
	struct phx_stream *st;
	uint64_t one = 1;
	int64_t bad, zero = 0, done = 1;
	int ret, fd;

	/* read once per process: the copy kernel is asked for below */
	setenv("PHX_STREAM_WAIT", "kernel", 1);
	fd = dev_open(&kinfo);
	EXPECT(fd >= 0, "no /dev/phx0");
	if (fd < 0)
		return test_result(4, "libphoenix p2p path");
	close(fd);

	ret = phx_device_open("phx0", &dev);
	EXPECT(!ret, "phx_device_open(phx0): %s", phx_strerror_last());
	if (ret)
		return test_result(4, "libphoenix p2p path");
	EXPECT(!phx_device_info(dev, &info) && info.kind == PHX_DEVICE_KMOD,
	       "phx0 is not a kmod device");
	printf("# %s: %s, %llu MiB\n", info.name, info.model,
	       (unsigned long long)(info.capacity / MIB));

	ret = phx_buf_alloc(dev, FILE_LIB_SIZE, 0, &buf);
	EXPECT(!ret, "phx_buf_alloc: %s", phx_strerror_last());
	fd = open("/mnt/lib.bin", O_RDONLY);
	EXPECT(fd >= 0, "open /mnt/lib.bin: %s", strerror(errno));
	if (ret || fd < 0)
		return test_result(4, "libphoenix p2p path");

	io.op = PHX_OP_READ;
	io.fd = fd;
	io.buf = buf;
	io.len = FILE_LIB_SIZE;
	EXPECT(phx_io_run(dev, &io) == (int64_t)FILE_LIB_SIZE,
	       "phx_io_run: %lld (%s)", (long long)io.result,
	       phx_strerror_last());
	EXPECT(io.path == PHX_PATH_P2P, "transfer took the %s path, not p2p",
	       phx_path_name(io.path));
	printf("# phx_io_run: %lld bytes by %s\n", (long long)io.result,
	       phx_path_name(io.path));

	/* phx_read() of an unaligned middle: edges buffered, middle p2p. */
	EXPECT(phx_read(buf, 4096 + 100, fd, 4096 + 100, 4 * MIB) ==
		       (int64_t)(4 * MIB),
	       "phx_read: %s", phx_strerror_last());

	view = phx_buf_host_view(buf);
	EXPECT(view, "no host view of a kmod buffer");
	if (view) {
		bad = pat_check(view, FILE_LIB_SIZE, SEED_FILE_LIB, 0);
		EXPECT(bad < 0, "lib.bin differs at %lld", (long long)bad);
		report_pages(view, FILE_LIB_SIZE, kinfo.bus_addr, kinfo.size);
	}
	phx_stats_get(dev, &stats);
	EXPECT(stats.bytes[PHX_PATH_P2P] >= FILE_LIB_SIZE,
	       "stats: %llu bytes by p2p",
	       (unsigned long long)stats.bytes[PHX_PATH_P2P]);

	/* phx.ko has no copy kernel: kernel mode says so and what to use */
	EXPECT(!phx_stream_create(dev, &st), "phx_stream_create: %s",
	       phx_strerror_last());
	ret = phx_io_enqueue(st, PHX_OP_READ, fd, phx_buf_dptr(buf), &one,
			     &zero, &zero, &done);
	EXPECT(ret == -EOPNOTSUPP && strstr(phx_strerror_last(), "use device"),
	       "kernel mode on phx.ko: %d (%s)", ret, phx_strerror_last());
	EXPECT(done == 1, "a refused transfer reported %lld", (long long)done);
	phx_stream_destroy(st);

	check_backing(dev, fd);

	close(fd);
	phx_buf_free(buf);
	phx_device_close(dev);
	return test_result(4, "libphoenix p2p path");
}
