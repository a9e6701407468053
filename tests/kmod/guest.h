/* SPDX-License-Identifier: MIT */
/* guest.h - small helpers for the guest programs of the phx.ko suite. */
#ifndef KMOD_GUEST_H
#define KMOD_GUEST_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

/* What the device has free now; 0 where it cannot be asked. */
static inline uint64_t free_bytes(void)
{
	struct phx_ioc_info now = {};
	int dev = dev_open(&now);

	if (dev >= 0)
		close(dev);
	return now.free;
}

/*
 * Whether all @size bytes of the device come back free.  A range is
 * freed when its last reference goes, which can be late (pinned pages
 * held by I/O in flight): the module is given a moment.
 */
static inline int all_free(uint64_t size)
{
	int i;

	for (i = 0; i < 1500; i++) {
		if (free_bytes() == size)
			return 1;
		usleep(20000);
	}
	return 0;
}

/* Write @val to the sysfs attribute @path: 0 or -1 (errno). */
static inline int write_sysfs(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

/* Load phx.ko again after a test unloaded it: 0 or -1 (errno). */
static inline int reload_module(void)
{
	int fd = open("/phx.ko", O_RDONLY | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -1;
	ret = syscall(SYS_finit_module, fd, "", 0);
	close(fd);
	return ret;
}

#endif /* KMOD_GUEST_H */
