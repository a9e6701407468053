/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-copy.c - the naive peers of phx-bench: pread into a pageable or
 * pinned host buffer then cuMemcpyHtoD, cuMemcpyDtoH then pwrite, and the
 * pinned copy rate that bounds every file -> GPU case.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "phx-bench.h"

static void pread_full(int fd, void *p, uint64_t n, uint64_t off,
		       const char *what)
{
	for (uint64_t got = 0; got < n;) {
		ssize_t r = pread(fd, (char *)p + got, n - got, off + got);

		if (r <= 0)
			bl_die("%s: pread: %s", what,
			       r ? strerror(errno) : "short file");
		got += r;
	}
}

static void pread_copy(struct bench *b, uint64_t dst, void *host,
		       const char *what)
{
	int fd = open_or_die(what, b->data, O_RDONLY);

	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = piece_len(b->size, off, PIECE);

		pread_full(fd, host, n, off, what);
		CU_CHECK(blcu.cuMemcpyHtoD_v2(dst + off, host, n));
	}
	close(fd);
}

void peer_pread_pageable(struct bench *b, uint64_t dst)
{
	pread_copy(b, dst, b->piece, "pread + cuMemcpyHtoD");
}

void peer_pread_pinned(struct bench *b, uint64_t dst)
{
	pread_copy(b, dst, b->pinned, "pread pinned + cuMemcpyHtoD");
}

void peer_pinned_copy(struct bench *b, uint64_t dst)
{
	for (uint64_t off = 0; off < b->size; off += PINNED) {
		uint64_t n = piece_len(b->size, off, PINNED);

		CU_CHECK(blcu.cuMemcpyHtoDAsync_v2(dst + off, b->pinned, n,
						   b->stream));
	}
	CU_CHECK(blcu.cuStreamSynchronize(b->stream));
}

void peer_copy_pwrite(struct bench *b, uint64_t src)
{
	const char *what = "cuMemcpyDtoH + pwrite";
	int fd = open_or_die(what, b->out, O_WRONLY | O_CREAT | O_TRUNC);

	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = piece_len(b->size, off, PIECE);

		CU_CHECK(blcu.cuMemcpyDtoH_v2(b->piece, src + off, n));
		if (pwrite(fd, b->piece, n, off) != (ssize_t)n)
			bl_die("pwrite of %s: %s", b->out, strerror(errno));
	}
	fsync_or_die(fd, what);
	close(fd);
}
