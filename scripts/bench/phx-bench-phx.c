/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-phx.c - libphoenix in phx-bench: phx_io_run reads and writes,
 * and transfers ordered on a stream (phx_io_enqueue).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "phx-bench.h"

/* One phx_io_run of the whole file, to or from the buffer at @buf_off. */
static void phx_run(struct bench *b, enum phx_op op, uint64_t buf_off)
{
	bool write = op == PHX_OP_WRITE;
	struct phx_io io = { .op = op,
			     .file_off = 0,
			     .buf = b->pbuf,
			     .buf_off = buf_off,
			     .len = b->size };

	io.fd = write ? open_or_die("libphoenix", b->out,
				    O_WRONLY | O_CREAT | O_TRUNC) :
			open_or_die("libphoenix", b->data, O_RDONLY);
	if (phx_io_run(b->pdev, &io) != (int64_t)b->size)
		bl_die("libphoenix %s failed (%" PRId64 "): %s",
		       write ? "write" : "read", io.result,
		       phx_strerror_last());
	if (write)
		fsync_or_die(io.fd, "libphoenix write");
	b->phx_path = phx_path_name(io.path);
	close(io.fd);
}

void peer_phx_read(struct bench *b, uint64_t dst_off)
{
	phx_run(b, PHX_OP_READ, dst_off);
}

void peer_phx_write(struct bench *b, uint64_t src_off)
{
	phx_run(b, PHX_OP_WRITE, src_off);
}

/*
 * A transfer stream ordered: queued on a stream, waited for there.  With
 * @fixed the stream promises its values do not change (PHX_STREAM_FIXED,
 * what LMCache and the Python package do): the stream's own copies move
 * the bytes.  Without, the values are read when the stream gets there
 * and the copy kernel moves them.
 */
static void phx_enqueue(struct bench *b, enum phx_op op, uint64_t dev_off,
			bool fixed)
{
	uint64_t len = b->size;
	int64_t foff = 0, boff = (int64_t)dev_off, done = 0;
	struct phx_stream *st;
	int fd = op == PHX_OP_READ ?
			 open_or_die("libphoenix", b->data, O_RDONLY) :
			 open_or_die("libphoenix", b->out,
				     O_WRONLY | O_CREAT | O_TRUNC);

	if (phx_stream_create(b->pdev, &st))
		bl_die("phx_stream_create: %s", phx_strerror_last());
	if (fixed && phx_stream_set_flags(st, PHX_STREAM_FIXED))
		bl_die("phx_stream_set_flags: %s", phx_strerror_last());
	if (phx_io_enqueue(st, op, fd, phx_buf_dptr(b->pbuf), &len, &foff,
			   &boff, &done))
		bl_die("phx_io_enqueue: %s", phx_strerror_last());
	if (phx_stream_sync(st))
		bl_die("phx_stream_sync: %s", phx_strerror_last());
	if (done != (int64_t)b->size)
		bl_die("stream-ordered transfer returned %" PRId64, done);
	if (op == PHX_OP_WRITE)
		fsync_or_die(fd, "libphoenix stream write");
	phx_stream_destroy(st);
	close(fd);
}

void peer_phx_enqueue(struct bench *b, uint64_t dst_off)
{
	phx_enqueue(b, PHX_OP_READ, dst_off, true);
}

void peer_phx_enqueue_late(struct bench *b, uint64_t dst_off)
{
	phx_enqueue(b, PHX_OP_READ, dst_off, false);
}

void peer_phx_enqueue_write(struct bench *b, uint64_t src_off)
{
	phx_enqueue(b, PHX_OP_WRITE, src_off, true);
}
