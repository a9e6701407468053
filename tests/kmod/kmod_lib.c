/* SPDX-License-Identifier: MIT */
/*
 * kmod_lib.c - check 4: libphoenix's kmod backend and its p2p path.
 *
 * A buffer on phx0 is filled from an ext4 file with phx_io_run(); the
 * transfer must report PHX_PATH_P2P, the bytes must be right, and every
 * page of the buffer must be a page of the ivshmem BAR (read from
 * /proc/self/pagemap), so the host can check the same bytes in the
 * ivshmem file and the NVMe controller's DMA addresses.
 */
#include <phoenix.h>

#include "guest.h"

#define PAGE 4096ULL

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

	close(fd);
	phx_buf_free(buf);
	phx_device_close(dev);
	return test_result(4, "libphoenix p2p path");
}
