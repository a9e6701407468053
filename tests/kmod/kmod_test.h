/* SPDX-License-Identifier: MIT */
/*
 * kmod_test.h - what the guest programs of the phx.ko suite and the host
 * checker share: data patterns, the disk layout, reporting helpers.
 *
 * Guest programs print "RESULT <check> pass|fail <what>" for each check
 * they own and "HOSTCHECK ..." lines that tell the host which bytes of
 * the ivshmem file or the disk image must hold what, and which bus
 * addresses the NVMe controller must have DMAed to.  The host checker
 * (hostcheck.c) turns both into the suite's "ok N - ..." lines.
 */
#ifndef KMOD_TEST_H
#define KMOD_TEST_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MIB (1ULL << 20)
#define PAGE 4096ULL

/* Pattern seeds: each data set is a distinct stream. */
#define SEED_MAP_WRITE 1 /* guest writes through the mapping */
#define SEED_HOST_PREFILL 2 /* host writes into the ivshmem file */
#define SEED_FILE_WRITE 3 /* guest write()s the range file */
#define SEED_DISK_WRITE 4 /* guest O_DIRECT pwrite()s to the disk */
#define SEED_FILE_A 10 /* /mnt/a.bin: O_DIRECT pread */
#define SEED_FILE_B 11 /* /mnt/b.bin: io_uring */
#define SEED_FILE_LIB 12 /* /mnt/lib.bin: libphoenix */
#define SEED_FUSE_SRC 20 /* /mnt/src.bin: cp and dd through phxfs */

/* Offsets in device memory (the ivshmem BAR) used by fixed allocations. */
#define BAR_MAP_WRITE (32 * MIB)
#define BAR_HOST_PREFILL (33 * MIB)
#define BAR_FILE_WRITE (34 * MIB)
#define BAR_RAW_READ (36 * MIB)
#define BAR_FILE_A (44 * MIB)
#define BAR_FILE_B (52 * MIB)
#define BAR_DISK_WRITE (60 * MIB)
/* 16 MiB no check reads back: for the programs that run last. */
#define BAR_SCRATCH (16 * MIB)

/* Disk image: an ext4 file system in the first 48 MiB, raw space after. */
#define DISK_FS_SIZE (48 * MIB)
#define DISK_SIZE (64 * MIB)
#define DISK_RAW_READ (16 * MIB) /* inside the fs: whatever mkfs put there */
#define DISK_WRITE (60 * MIB) /* past the fs */

#define FILE_A_SIZE (8 * MIB)
#define FILE_B_SIZE (8 * MIB)
#define FILE_LIB_SIZE (12 * MIB)
#define FUSE_SRC_SIZE (16 * MIB)

static inline uint64_t pat_word(uint32_t seed, uint64_t index)
{
	uint64_t z = ((uint64_t)seed << 48) ^ index;

	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fill @len bytes (a multiple of 8) with the stream @seed from byte @off. */
static inline void pat_fill(void *p, uint64_t len, uint32_t seed, uint64_t off)
{
	uint64_t *w = p;
	uint64_t i;

	for (i = 0; i < len / 8; i++)
		w[i] = pat_word(seed, off / 8 + i);
}

/* Offset of the first byte that differs, or -1 when all match. */
static inline int64_t pat_check(const void *p, uint64_t len, uint32_t seed,
				uint64_t off)
{
	const uint64_t *w = p;
	uint64_t i;

	for (i = 0; i < len / 8; i++)
		if (w[i] != pat_word(seed, off / 8 + i))
			return (int64_t)(i * 8);
	return -1;
}

static int test_failures;

static inline void __attribute__((format(printf, 3, 4)))
test_expect(int cond, int line, const char *fmt, ...)
{
	va_list ap;

	if (cond)
		return;
	test_failures++;
	printf("# FAIL line %d: ", line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#define EXPECT(cond, ...) test_expect(!!(cond), __LINE__, __VA_ARGS__)

/* A call that must fail with @err. */
#define EXPECT_ERR(call, err, what)                                           \
	do {                                                                  \
		errno = 0;                                                    \
		long __r = (long)(call);                                      \
		EXPECT(__r == -1 && errno == (err),                           \
		       "%s: got %ld errno %d (%s), want errno %d (%s)", what, \
		       __r, errno, strerror(errno), err, strerror(err));      \
	} while (0)

static inline int test_result(int check, const char *what)
{
	printf("RESULT %d %s %s\n", check, test_failures ? "fail" : "pass",
	       what);
	fflush(stdout);
	return test_failures ? 1 : 0;
}

#endif /* KMOD_TEST_H */
