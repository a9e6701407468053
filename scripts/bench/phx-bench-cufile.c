/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-cufile.c - phx-bench's cuFile peers: cuFileRead and cuFileWrite
 * of CUFILE_IO bytes at a time on an O_DIRECT handle, loaded at run time.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "phx-bench.h"

/* Load cuFile and open its driver once.  Returns NULL or why not. */
const char *cufile_load(struct bench *b)
{
	CUfileError_t e;

	if (b->cufile_loaded)
		return b->cufile_why;
	b->cufile_loaded = true;
	b->cufile_why = bl_cufile_load();
	if (b->cufile_why)
		return b->cufile_why;
	e = blcf.cuFileDriverOpen();
	if (e.err)
		return b->cufile_why = "cuFileDriverOpen failed";
	return NULL;
}

static void *cufile_handle(const char *path, int flags, int *fdp)
{
	CUfileDescr_t d;
	CUfileError_t e;
	void *fh = NULL;
	int fd = open_or_die("cuFile", path, flags | O_DIRECT);

	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = fd;
	e = blcf.cuFileHandleRegister(&fh, &d);
	if (e.err)
		bl_die("cuFileHandleRegister(%s) failed: error %d (CUDA %d); on a machine without udev data, run scripts/bench-gpu.sh as root",
		       path, e.err, e.cu_err);
	*fdp = fd;
	return fh;
}

/* The whole file between device memory at @dev and the disk. */
static void cufile_move(struct bench *b, uint64_t dev, bool write)
{
	int fd;
	void *fh = write ? cufile_handle(b->out, O_WRONLY | O_CREAT | O_TRUNC,
					 &fd) :
			   cufile_handle(b->data, O_RDONLY, &fd);
	void *p = (void *)(uintptr_t)dev;

	for (uint64_t off = 0; off < b->size; off += CUFILE_IO) {
		uint64_t n = piece_len(b->size, off, CUFILE_IO);
		ssize_t r = write ? blcf.cuFileWrite(fh, p, n, off, off) :
				    blcf.cuFileRead(fh, p, n, off, off);

		if (r != (ssize_t)n)
			bl_die("%s at %" PRIu64 " returned %zd",
			       write ? "cuFileWrite" : "cuFileRead", off, r);
	}
	blcf.cuFileHandleDeregister(fh);
	if (write)
		fsync_or_die(fd, "cuFile write");
	close(fd);
}

void peer_cufile_read(struct bench *b, uint64_t dst)
{
	cufile_move(b, dst, false);
}

void peer_cufile_write(struct bench *b, uint64_t src)
{
	cufile_move(b, src, true);
}
