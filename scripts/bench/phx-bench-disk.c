/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-disk.c - the disk's own rates, the limits of phx-bench's cases:
 * raw io_uring O_DIRECT and buffered reads and writes between the file and
 * host memory, no GPU involved.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <string.h>
#include <unistd.h>

#include "phx-bench.h"

/* io_uring O_DIRECT at queue depth URING_QD; @src NULL reads. */
static void raw_uring(struct bench *b, const char *path, const void *src)
{
	const char *what = src ? "raw O_DIRECT write" : "raw O_DIRECT read";
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	uint64_t next = 0, done = 0;
	int fd, ret, inflight = 0, free_slots[URING_QD];

	for (int i = 0; i < URING_QD; i++)
		free_slots[i] = i;

	fd = open_or_die(what, path,
			 src ? O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT :
			       O_RDONLY | O_DIRECT);
	ret = io_uring_queue_init(URING_QD, &ring, 0);
	if (ret)
		bl_die("%s: io_uring_queue_init: %s", what, strerror(-ret));
	while (done < b->size) {
		while (inflight < URING_QD && next < b->size) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint64_t n = piece_len(b->size, next, URING_BS);
			int slot = free_slots[URING_QD - 1 - inflight];

			if (src)
				io_uring_prep_write(sqe, fd,
						    (const char *)src + next, n,
						    next);
			else
				io_uring_prep_read(sqe, fd,
						   (char *)b->direct +
							   slot * URING_BS,
						   n, next);
			/* Offsets are block multiples: the slot fits below. */
			io_uring_sqe_set_data64(sqe, next | slot);
			next += n;
			inflight++;
		}
		io_uring_submit_and_wait(&ring, 1);
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			uint64_t data = io_uring_cqe_get_data64(cqe);
			uint64_t off = data & ~(uint64_t)(URING_BS - 1);
			int slot = data & (URING_BS - 1);
			uint64_t want = piece_len(b->size, off, URING_BS);

			if (cqe->res != (int)want)
				bl_die("%s of %s at %" PRIu64 ": %s", what,
				       path, off,
				       cqe->res < 0 ? strerror(-cqe->res) :
						      "short transfer");
			if (!src)
				check_block((char *)b->direct + slot * URING_BS,
					    off, what);
			done += want;
			free_slots[URING_QD - inflight] = slot;
			inflight--;
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	io_uring_queue_exit(&ring);
	if (src)
		fsync_or_die(fd, what);
	close(fd);
}

void peer_raw_direct(struct bench *b, uint64_t dst)
{
	(void)dst;
	raw_uring(b, b->data, NULL);
}

void peer_raw_buffered(struct bench *b, uint64_t dst)
{
	int fd = open_or_die("buffered read", b->data, O_RDONLY);

	(void)dst;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (uint64_t off = 0; off < b->size;) {
		ssize_t r = read(fd, b->piece, PIECE);

		if (r <= 0)
			bl_die("buffered read of %s: %s", b->data,
			       r ? strerror(errno) : "short file");
		check_block(b->piece, off, "buffered read");
		off += r;
	}
	close(fd);
}

void peer_raw_direct_write(struct bench *b, uint64_t src)
{
	(void)src;
	raw_uring(b, b->out, b->image);
}

void peer_raw_buffered_write(struct bench *b, uint64_t src)
{
	int fd = open_or_die("buffered write", b->out,
			     O_WRONLY | O_CREAT | O_TRUNC);

	(void)src;
	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = piece_len(b->size, off, PIECE);

		if (pwrite(fd, (char *)b->image + off, n, off) != (ssize_t)n)
			bl_die("buffered write of %s: %s", b->out,
			       strerror(errno));
	}
	fsync_or_die(fd, "buffered write");
	close(fd);
}
