/* SPDX-License-Identifier: MIT */
/*
 * fdmem.c - chunk operations shared by the backends whose device memory
 * is a file descriptor mapped into the process (sim: a memfd; kmod: a
 * phx.ko range file).  Their reservations are read-only anonymous memory,
 * so a never-backed part of a buffer reads as zeros through a host view.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device.h"

int phx_fdmem_reserve(struct phx_device *dev, uint64_t size, phx_dptr_t *out)
{
	void *p = mmap(NULL, size, PROT_READ,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return phx_err(
			errno == ENOMEM ? EFBIG : errno,
			"%s: cannot reserve %llu bytes of address space: %s",
			dev->name, (unsigned long long)size, strerror(errno));
	*out = (phx_dptr_t)(uintptr_t)p;
	return 0;
}

void phx_fdmem_release(struct phx_device *dev, phx_chunk_t chunk, uint64_t size)
{
	close((int)chunk);
}

int phx_fdmem_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
		  phx_chunk_t chunk, int flags)
{
	void *p = mmap((void *)(uintptr_t)at, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_FIXED | flags, (int)chunk, 0);

	if (p == MAP_FAILED)
		return phx_err(errno, "%s: mapping device memory: %s",
			       dev->name, strerror(errno));
	return 0;
}

void phx_fdmem_unmap(struct phx_device *dev, phx_dptr_t at, uint64_t size)
{
	/* Put the reservation back rather than leave a hole. */
	mmap((void *)(uintptr_t)at, size, PROT_READ,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

int phx_fdmem_export(struct phx_device *dev, phx_chunk_t chunk, uint64_t size,
		     int *fd)
{
	*fd = fcntl((int)chunk, F_DUPFD_CLOEXEC, 0);
	if (*fd < 0)
		return phx_err(errno, "%s: exporting a chunk: %s", dev->name,
			       strerror(errno));
	return 0;
}

int phx_fdmem_dup(struct phx_device *dev, int fd, phx_chunk_t *out)
{
	int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (nfd < 0)
		return phx_err(errno, "%s: importing a chunk: %s", dev->name,
			       strerror(errno));
	*out = (phx_chunk_t)nfd;
	return 0;
}
