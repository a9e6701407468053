/* SPDX-License-Identifier: MIT */
/*
 * device.c - what the device object does by itself, below every layer
 * that uses it: memory charged against its capacity and limit, and the
 * flags that hold its streams (device.h).
 */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device.h"

int phx_device_charge(struct phx_device *dev, uint64_t bytes)
{
	uint64_t cap = dev->limit ? dev->limit : dev->capacity;
	uint64_t cur = atomic_load(&dev->used);
	char b1[32], b2[32];

	do {
		/* Written so that no sum can wrap past the capacity */
		if (cap && (cur > cap || bytes > cap - cur))
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

void phx_word_store(uint32_t *word, uint32_t v)
{
	__atomic_store_n(word, v, __ATOMIC_RELEASE);
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

bool phx_word_reached(const uint32_t *word, uint32_t v)
{
	return (int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - v) >= 0;
}

void phx_word_wait(uint32_t *word, uint32_t v)
{
	uint32_t cur;

	while ((int32_t)((cur = __atomic_load_n(word, __ATOMIC_ACQUIRE)) - v) <
	       0)
		syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, cur, NULL, NULL,
			0);
}

void phx_poll_backoff(unsigned int n)
{
	struct timespec ts = { 0, 0 };

	if (n < 64)
		return;
	if (n < 256) {
		sched_yield();
		return;
	}
	ts.tv_nsec = n < 1024 ? 5000 : 50000;
	nanosleep(&ts, NULL);
}

/*
 * For backends whose device memory is mapped in the process at its
 * device address (sim, kmod): the host address is the device address,
 * and host memory needs no pinning for their copies.
 */
void *phx_host_addr_mapped(struct phx_device *dev, phx_dptr_t va)
{
	return (void *)(uintptr_t)va;
}

int phx_host_register_none(struct phx_device *dev, void *p, size_t len)
{
	return 0;
}

void phx_host_unregister_none(struct phx_device *dev, void *p)
{
}
