/* SPDX-License-Identifier: MIT */
/*
 * kmod_map.c - check 1: bytes written through a mapping of a phx.ko range
 * are in device memory (the host sees them in the ivshmem file), bytes the
 * host put there are seen through the mapping, and read/write on the range
 * file reach the same memory.
 */
#include <sys/stat.h>

#include "guest.h"

/* A range file of 1 MiB at @offset of the BAR; -1 (a failed check). */
static int fixed_range(int dev, uint64_t offset, uint32_t flags)
{
	int fd = range_alloc(dev, MIB, offset, PHX_ALLOC_FIXED | flags);

	EXPECT(fd >= 0, "alloc at %llu: %s", (unsigned long long)offset,
	       strerror(errno));
	return fd;
}

static char *map_range(int fd)
{
	char *p = range_map(fd, MIB);

	EXPECT(p, "mmap: %s", strerror(errno));
	return p;
}

/* read_iter of the range file @fd brings the pattern @seed, else @what. */
static void read_sees(int fd, uint32_t seed, const char *what)
{
	char *back = malloc(MIB);

	EXPECT(pread(fd, back, MIB, 0) == (ssize_t)MIB, "pread: %s",
	       strerror(errno));
	EXPECT(pat_check(back, MIB, seed, 0) < 0, "%s", what);
	free(back);
}

static void map_write(int dev)
{
	struct stat st;
	char *p;
	int fd;

	fd = fixed_range(dev, BAR_MAP_WRITE, 0);
	if (fd < 0)
		return;
	EXPECT(!fstat(fd, &st) && S_ISREG(st.st_mode) &&
		       (uint64_t)st.st_size == MIB,
	       "range fd is not a regular file of 1 MiB (mode %o size %lld)",
	       st.st_mode, (long long)st.st_size);
	p = map_range(fd);
	if (!p)
		return;
	pat_fill(p, MIB, SEED_MAP_WRITE, 0);
	EXPECT(!msync(p, MIB, MS_SYNC), "msync: %s", strerror(errno));
	read_sees(fd, SEED_MAP_WRITE,
		  "read_iter does not see the mapping's bytes");
	printf("HOSTCHECK 1 bar %llu %llu pattern %d 0\n", BAR_MAP_WRITE, MIB,
	       SEED_MAP_WRITE);
	munmap(p, MIB);
	close(fd);
}

static void host_prefill(int dev)
{
	int64_t bad;
	char *p;
	int fd;

	fd = fixed_range(dev, BAR_HOST_PREFILL, PHX_ALLOC_NOCLEAR);
	if (fd < 0)
		return;
	p = map_range(fd);
	if (!p)
		return;
	bad = pat_check(p, MIB, SEED_HOST_PREFILL, 0);
	EXPECT(bad < 0, "host's bytes not seen through the mapping at %lld",
	       (long long)bad);
	read_sees(fd, SEED_HOST_PREFILL,
		  "host's bytes not seen through read_iter");
	munmap(p, MIB);
	close(fd);
}

static void file_write(int dev)
{
	char *p, *buf;
	int fd;

	fd = fixed_range(dev, BAR_FILE_WRITE, 0);
	if (fd < 0)
		return;
	buf = malloc(MIB);
	pat_fill(buf, MIB, SEED_FILE_WRITE, 0);
	/* Two writes, the second unaligned, to exercise write_iter. */
	EXPECT(pwrite(fd, buf, 4093, 0) == 4093, "pwrite: %s", strerror(errno));
	EXPECT(pwrite(fd, buf + 4093, MIB - 4093, 4093) ==
		       (ssize_t)(MIB - 4093),
	       "pwrite: %s", strerror(errno));
	EXPECT(!fsync(fd), "fsync: %s", strerror(errno));
	p = range_map(fd, MIB);
	EXPECT(p && pat_check(p, MIB, SEED_FILE_WRITE, 0) < 0,
	       "write_iter's bytes not seen through the mapping");
	printf("HOSTCHECK 1 bar %llu %llu pattern %d 0\n", BAR_FILE_WRITE, MIB,
	       SEED_FILE_WRITE);
	free(buf);
	if (p)
		munmap(p, MIB);
	close(fd);
}

int main(void)
{
	struct phx_ioc_info info;
	int dev;

	dev = dev_open(&info);
	EXPECT(dev >= 0, "no /dev/phx0");
	if (dev < 0)
		return test_result(1, "mapping <-> ivshmem file");
	printf("# phx0: %llu MiB at bus %#llx (%s), provider %u\n",
	       (unsigned long long)(info.size / MIB),
	       (unsigned long long)info.bus_addr, info.pci_name, info.provider);
	printf("HOSTCHECK 0 info %llu %llu\n",
	       (unsigned long long)info.bus_addr,
	       (unsigned long long)info.size);
	map_write(dev);
	host_prefill(dev);
	file_write(dev);
	close(dev);
	return test_result(1, "mapping <-> ivshmem file");
}
