/* SPDX-License-Identifier: MIT */
/*
 * device.c - what the device object does by itself, below every layer
 * that uses it: memory charged against its capacity and limit, and the
 * flags that hold its streams (device.h).
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

int phx_device_charge(struct phx_device *dev, uint64_t bytes)
{
	uint64_t cap = dev->limit ? dev->limit : dev->capacity;
	uint64_t cur = atomic_load(&dev->used);
	char b1[32], b2[32];

	do {
		if (cap && cur + bytes > cap)
			return phx_err(
				ENOSPC,
				"%s: out of device memory: %s in use of %s; free buffers or raise the limit",
				dev->name, phx_fmt_bytes(b1, sizeof(b1), cur),
				phx_fmt_bytes(b2, sizeof(b2), cap));
	} while (!atomic_compare_exchange_weak(&dev->used, &cur, cur + bytes));
	return 0;
}

void phx_device_uncharge(struct phx_device *dev, uint64_t bytes)
{
	atomic_fetch_sub(&dev->used, bytes);
}

void phx_flag_set(uint32_t *flag)
{
	__atomic_store_n(flag, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, flag, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void phx_flag_wait(uint32_t *flag)
{
	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE))
		syscall(SYS_futex, flag, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}
