/* SPDX-License-Identifier: MIT */
/*
 * base.h - the bottom of libphoenix (lib/src/base): the thread's one-line
 * error message (errors.c), the settings and their PHX_* overrides
 * (settings.c), and the helpers and limits every layer above uses.
 */
#ifndef PHX_BASE_H
#define PHX_BASE_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "phoenix.h"

#define PHX_EXPORT __attribute__((visibility("default")))

#define phx_min(a, b) ((a) < (b) ? (a) : (b))
#define phx_max(a, b) ((a) > (b) ? (a) : (b))
#define phx_align_down(x, a) ((x) / (a) * (a))
#define phx_align_up(x, a) (((x) + (a)-1) / (a) * (a))

/*
 * Record a one-line message for phx_strerror_last() and return -@err
 * (@err is a positive errno), so call sites read
 * "return phx_err(ENOSPC, "...", ...);".
 */
int phx_err(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear the thread's last message (successful public calls). */
void phx_err_clear(void);

/* The settings in force; parsed once from the environment. */
const struct phx_settings *phx_settings(void);

/*
 * The device kinds' words, from one table (errors.c): phx_kind_prefix()
 * is what names a kind's devices ("gpu" for "gpu0"; "none" for no kind);
 * phx_kind_word() is the kind that the @len bytes at @s name, by its
 * name or its prefix ("cuda" or "gpu"), or PHX_DEVICE_NONE.
 */
const char *phx_kind_prefix(enum phx_device_kind kind);
enum phx_device_kind phx_kind_word(const char *s, size_t len);

/* The monotonic clock, in nanoseconds. */
static inline uint64_t phx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Human-readable byte count into @buf ("64 MiB"); returns @buf. */
char *phx_fmt_bytes(char *buf, size_t len, uint64_t bytes);

/*
 * A queue of nodes linked through their ->next, the first at @head and the
 * last at @tail (both NULL when it is empty): phx_queue_push() puts @node
 * last, phx_queue_pop() takes the first off (the queue must not be empty).
 */
#define phx_queue_push(head, tail, node)       \
	do {                                   \
		(node)->next = NULL;           \
		if (tail)                      \
			(tail)->next = (node); \
		else                           \
			(head) = (node);       \
		(tail) = (node);               \
	} while (0)
#define phx_queue_pop(head, tail)      \
	do {                           \
		(head) = (head)->next; \
		if (!(head))           \
			(tail) = NULL; \
	} while (0)

/*
 * Limits named once.  PHX_PAGE: the host page, which is also the
 * alignment O_DIRECT asks of file offsets, lengths and memory.
 * PHX_MIN_SLOT: the smallest staging slot cut, and the least staging.
 * PHX_MAX_QUEUE_DEPTH: the most slots of an engine (PHX_QUEUE_DEPTH and
 * a batch's depth).  PHX_MAX_CHUNK: the largest PHX_CHUNK_SIZE.
 * PHX_MAX_STAGING_SLOTS: the most chunks in PHX_STAGING_SIZE (a
 * synchronous engine has a slot per chunk and two io_uring entries per
 * slot, and io_uring takes at most 32768).  PHX_DEVICE_KINDS: the values
 * of enum phx_device_kind.
 */
#define PHX_PAGE 4096ULL
#define PHX_MIN_SLOT (64u << 10)
#define PHX_MAX_QUEUE_DEPTH 4096u
#define PHX_MAX_CHUNK (1ULL << 30)
#define PHX_MAX_STAGING_SLOTS 16384u
#define PHX_DEVICE_KINDS (PHX_DEVICE_KMOD + 1)

/*
 * Lock rules, checked in debug builds (PHX_DEBUG, the sanitized build):
 * a function named *_locked asserts that the calling thread holds the
 * lock its comment names.
 */
#ifdef PHX_DEBUG
#include <assert.h>
#include <pthread.h>
#include <unistd.h>
#define phx_assert_held(m) assert((m)->__data.__owner == gettid())
#else
#define phx_assert_held(m) ((void)(m))
#endif

#endif /* PHX_BASE_H */
