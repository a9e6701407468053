/* SPDX-License-Identifier: MIT */
/* guest.h - small helpers for the guest programs of the phx.ko suite. */
#ifndef KMOD_GUEST_H
#define KMOD_GUEST_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../kmod/phx_uapi.h"
#include "kmod_test.h"

static inline int dev_open(struct phx_ioc_info *info)
{
	int fd = open("/dev/phx0", O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("# cannot open /dev/phx0: %s\n", strerror(errno));
		return -1;
	}
	if (info && ioctl(fd, PHX_IOC_INFO, info)) {
		printf("# PHX_IOC_INFO: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* A range file of @size bytes; at @offset when @flags has FIXED. */
static inline int range_alloc(int dev, uint64_t size, uint64_t offset,
			      uint32_t flags)
{
	struct phx_ioc_alloc req = { .size = size,
				     .offset = offset,
				     .flags = flags };

	if (ioctl(dev, PHX_IOC_ALLOC, &req))
		return -1;
	return req.fd;
}

static inline void *range_map(int fd, uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

#endif /* KMOD_GUEST_H */
