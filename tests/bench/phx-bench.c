/* SPDX-License-Identifier: MIT */
/*
 * phx-bench.c - file <-> GPU rates of libphoenix and its peers, measured in
 * one run on one file of random bytes (scripts/bench-gpu.sh drives it).
 *
 *   phx-bench [-s SIZE] [-r RUNS] [-m BYTES] [-C] DIR
 *
 * Cases: file -> GPU with a cold page cache and a hot one, GPU -> file
 * (timed up to fsync), and the host memory each reader holds while moving
 * -m bytes (measured in a child process per peer, so peers do not see each
 * other's peaks).  Every result is checked against the generator before
 * its time counts; a run that moved wrong bytes aborts the benchmark.
 *
 * The CUDA driver and cuFile are loaded with dlopen(), so the program
 * builds without them and says so, clearly, where there is no GPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "phoenix.h"

#define PIECE (64 * MiB) /* host buffer of the naive peers */
#define PINNED (256 * MiB) /* pinned buffer: copies and checks */
#define URING_BS (4 * MiB) /* raw disk block */
#define URING_QD 32 /* raw disk queue depth */
#define CUFILE_IO (1 * GiB) /* bytes per cuFileRead/cuFileWrite */

/* ---- state ------------------------------------------------------------ */

struct bench {
	const char *dir;
	char data[4096]; /* the random file */
	char out[4096]; /* GPU -> file target */
	uint64_t size;
	int runs;
	uint64_t mem_total;
	bool cold;
	bool drop_ok; /* /proc/sys/vm/drop_caches is writable */
	int nthreads;

	CUdeviceptr dbuf; /* peers' destination */
	void *pinned; /* PINNED bytes */
	void *piece; /* PIECE pageable bytes */
	void *direct; /* URING_QD * URING_BS, aligned */
	void *image; /* the file's bytes in host memory (writes) */
	CUstream stream;

	struct phx_device *pdev;
	struct phx_buf *pbuf;
	const char *phx_path; /* data path of the last libphoenix run */

	const char *cufile_why; /* NULL when cuFile works */
	bool cufile_loaded;
	char gpu[64];
	int driver;
};

struct result {
	const char *casename;
	const char *peer;
	double v[BL_MAX_RUNS];
	int n;
	bool limit; /* the case's limit (or one candidate) */
	bool ours;
	const char *unit; /* "GB/s" or "MiB" */
	char note[96];
};

static struct result results[64];
static int nresults;

static int parse_size(const char *s, uint64_t *out)
{
	return phx_parse_size(s, out) == 0 && *out ? 0 : -1;
}

/* ---- the random file -------------------------------------------------- */

struct par {
	void *p;
	uint64_t file_off, len;
	bool fill;
	atomic_uint_fast64_t bad; /* first mismatch + 1, 0 if none */
	int idx, n;
};

static void *par_main(void *arg)
{
	struct par *job = ((struct par **)arg)[0];
	int idx = (int)(intptr_t)((void **)arg)[1];
	uint64_t words = job->len / 8, per = (words + job->n - 1) / job->n;
	uint64_t lo = idx * per, hi = lo + per > words ? words : lo + per;
	uint64_t base = job->file_off / 8;
	uint64_t *w = job->p;

	for (uint64_t i = lo; i < hi; i++) {
		if (job->fill) {
			w[i] = bl_gen_word(base + i);
		} else if (w[i] != bl_gen_word(base + i)) {
			uint_fast64_t zero = 0;

			atomic_compare_exchange_strong(&job->bad, &zero,
						       i * 8 + 1);
			break;
		}
	}
	return NULL;
}

/*
 * Fill or check @len bytes at @p as the file's bytes at @file_off (both
 * multiples of 8).  Returns -1 or the offset of a mismatch.
 */
static int64_t par_gen(struct bench *b, void *p, uint64_t file_off,
		       uint64_t len, bool fill)
{
	pthread_t th[64];
	void *args[64][2];
	struct par job = { .p = p,
			   .file_off = file_off,
			   .len = len,
			   .fill = fill,
			   .n = b->nthreads };
	struct par *jp = &job;
	int i;

	atomic_init(&job.bad, 0);
	for (i = 0; i < job.n; i++) {
		args[i][0] = jp;
		args[i][1] = (void *)(intptr_t)i;
		if (pthread_create(&th[i], NULL, par_main, args[i]))
			bl_die("cannot start a thread");
	}
	for (i = 0; i < job.n; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&job.bad) ? (int64_t)(file_off + job.bad - 1) : -1;
}

static void fill_expected(struct bench *b, void *p, uint64_t off, uint64_t len)
{
	par_gen(b, p, off, len, true);
}

static void fill_file(void *arg, void *p, uint64_t off, uint64_t len)
{
	fill_expected(arg, p, off, len);
}

static void make_data_file(struct bench *b)
{
	bl_make_file(b->data, b->size, b->pinned, PINNED, fill_file, b);
}

static void check_host(struct bench *b, const char *what, const void *p,
		       uint64_t off, uint64_t len)
{
	int64_t bad = par_gen(b, (void *)p, off, len, false);

	if (bad >= 0)
		bl_die("%s: wrong bytes at file offset %" PRId64
		       "; the result does not count",
		       what, bad);
}

/* Copy @len device bytes at @d back and check them as file bytes at 0. */
static void check_device(struct bench *b, const char *what, CUdeviceptr d,
			 uint64_t len)
{
	for (uint64_t off = 0; off < len; off += PINNED) {
		uint64_t n = len - off < PINNED ? len - off : PINNED;

		CU_CHECK(blcu.cuMemcpyDtoH_v2(b->pinned, d + off, n));
		check_host(b, what, b->pinned, off, n);
	}
}

/* Read @path back through the page cache and check every byte. */
static void check_file(struct bench *b, const char *what, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_size != b->size)
		bl_die("%s: %s is missing or has the wrong size", what, path);
	for (uint64_t off = 0; off < b->size; off += PINNED) {
		uint64_t n = b->size - off < PINNED ? b->size - off : PINNED;

		for (uint64_t got = 0; got < n;) {
			ssize_t r = pread(fd, (char *)b->pinned + got, n - got,
					  off + got);
			if (r <= 0)
				bl_die("%s: reading %s back failed: %s", what,
				       path,
				       r ? strerror(errno) : "short file");
			got += r;
		}
		check_host(b, what, b->pinned, off, n);
	}
	close(fd);
}

/* ---- cache control ---------------------------------------------------- */

static void drop_caches(struct bench *b, const char *path)
{
	int fd;

	sync();
	if (b->drop_ok) {
		fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
		if (fd >= 0 && write(fd, "3\n", 2) == 2) {
			close(fd);
			return;
		}
		if (fd >= 0)
			close(fd);
	}
	/* Not root: evict just this file's pages. */
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

static void warm_cache(struct bench *b)
{
	int fd = open(b->data, O_RDONLY);

	if (fd < 0)
		bl_die("cannot open %s: %s", b->data, strerror(errno));
	for (uint64_t off = 0; off < b->size; off += PIECE)
		if (pread(fd, b->piece, PIECE, off) < 0)
			bl_die("reading %s failed: %s", b->data,
			       strerror(errno));
	close(fd);
}

/* ---- peers: file -> host ---------------------------------------------- */

/* Sampled check of a raw block: its first 64 bytes. */
static void check_block(const void *p, uint64_t off, const char *what)
{
	const uint64_t *w = p;

	for (int i = 0; i < 8; i++)
		if (w[i] != bl_gen_word(off / 8 + i))
			bl_die("%s: wrong bytes at file offset %" PRIu64, what,
			       off);
}

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

	fd = src ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644) :
		   open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		bl_die("%s: open %s: %s", what, path, strerror(errno));
	ret = io_uring_queue_init(URING_QD, &ring, 0);
	if (ret)
		bl_die("%s: io_uring_queue_init: %s", what, strerror(-ret));
	while (done < b->size) {
		while (inflight < URING_QD && next < b->size) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint64_t n = b->size - next < URING_BS ?
					     b->size - next :
					     URING_BS;
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
			uint64_t want = b->size - off < URING_BS ?
						b->size - off :
						URING_BS;

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
	if (src && fsync(fd))
		bl_die("%s: fsync: %s", what, strerror(errno));
	close(fd);
}

static void peer_raw_direct(struct bench *b, uint64_t dst)
{
	(void)dst;
	raw_uring(b, b->data, NULL);
}

static void peer_raw_buffered(struct bench *b, uint64_t dst)
{
	int fd = open(b->data, O_RDONLY);

	(void)dst;
	if (fd < 0)
		bl_die("buffered read: open %s: %s", b->data, strerror(errno));
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

/* ---- peers: file -> GPU ----------------------------------------------- */

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
	int fd = open(b->data, O_RDONLY);

	if (fd < 0)
		bl_die("%s: open %s: %s", what, b->data, strerror(errno));
	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = b->size - off < PIECE ? b->size - off : PIECE;

		pread_full(fd, host, n, off, what);
		CU_CHECK(blcu.cuMemcpyHtoD_v2(dst + off, host, n));
	}
	close(fd);
}

static void peer_pread_pageable(struct bench *b, uint64_t dst)
{
	pread_copy(b, dst, b->piece, "pread + cuMemcpyHtoD");
}

static void peer_pread_pinned(struct bench *b, uint64_t dst)
{
	pread_copy(b, dst, b->pinned, "pread pinned + cuMemcpyHtoD");
}

static void peer_pinned_copy(struct bench *b, uint64_t dst)
{
	for (uint64_t off = 0; off < b->size; off += PINNED) {
		uint64_t n = b->size - off < PINNED ? b->size - off : PINNED;

		CU_CHECK(blcu.cuMemcpyHtoDAsync_v2(dst + off, b->pinned, n,
						   b->stream));
	}
	CU_CHECK(blcu.cuStreamSynchronize(b->stream));
}

static const char *cufile_load(struct bench *b)
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
	int fd = open(path, flags | O_DIRECT, 0644);

	if (fd < 0)
		bl_die("cuFile: open %s: %s", path, strerror(errno));
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

static void peer_cufile_read(struct bench *b, uint64_t dst)
{
	int fd;
	void *fh = cufile_handle(b->data, O_RDONLY, &fd);

	for (uint64_t off = 0; off < b->size; off += CUFILE_IO) {
		uint64_t n =
			b->size - off < CUFILE_IO ? b->size - off : CUFILE_IO;
		ssize_t r = blcf.cuFileRead(fh, (void *)(uintptr_t)dst, n, off,
					    off);

		if (r != (ssize_t)n)
			bl_die("cuFileRead at %" PRIu64 " returned %zd", off,
			       r);
	}
	blcf.cuFileHandleDeregister(fh);
	close(fd);
}

static void peer_phx_read(struct bench *b, uint64_t dst_off)
{
	struct phx_io io = { .op = PHX_OP_READ,
			     .file_off = 0,
			     .buf = b->pbuf,
			     .buf_off = dst_off,
			     .len = b->size };

	io.fd = open(b->data, O_RDONLY);
	if (io.fd < 0)
		bl_die("libphoenix: open %s: %s", b->data, strerror(errno));
	if (phx_io_run(b->pdev, &io) != (int64_t)b->size)
		bl_die("libphoenix read failed (%" PRId64 "): %s", io.result,
		       phx_strerror_last());
	b->phx_path = phx_path_name(io.path);
	close(io.fd);
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
	const char *path = op == PHX_OP_READ ? b->data : b->out;
	int fd = op == PHX_OP_READ ?
			 open(path, O_RDONLY) :
			 open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		bl_die("libphoenix: open %s: %s", path, strerror(errno));
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
	if (op == PHX_OP_WRITE && fsync(fd))
		bl_die("libphoenix stream write: fsync: %s", strerror(errno));
	phx_stream_destroy(st);
	close(fd);
}

static void peer_phx_enqueue(struct bench *b, uint64_t dst_off)
{
	phx_enqueue(b, PHX_OP_READ, dst_off, true);
}

static void peer_phx_enqueue_late(struct bench *b, uint64_t dst_off)
{
	phx_enqueue(b, PHX_OP_READ, dst_off, false);
}

/* ---- peers: GPU -> file ----------------------------------------------- */

static void peer_raw_direct_write(struct bench *b, uint64_t src)
{
	(void)src;
	raw_uring(b, b->out, b->image);
}

static void peer_raw_buffered_write(struct bench *b, uint64_t src)
{
	int fd = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	(void)src;
	if (fd < 0)
		bl_die("buffered write: open %s: %s", b->out, strerror(errno));
	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = b->size - off < PIECE ? b->size - off : PIECE;

		if (pwrite(fd, (char *)b->image + off, n, off) != (ssize_t)n)
			bl_die("buffered write of %s: %s", b->out,
			       strerror(errno));
	}
	if (fsync(fd))
		bl_die("buffered write: fsync: %s", strerror(errno));
	close(fd);
}

static void peer_cufile_write(struct bench *b, uint64_t src)
{
	int fd;
	void *fh = cufile_handle(b->out, O_WRONLY | O_CREAT | O_TRUNC, &fd);

	for (uint64_t off = 0; off < b->size; off += CUFILE_IO) {
		uint64_t n =
			b->size - off < CUFILE_IO ? b->size - off : CUFILE_IO;
		ssize_t r = blcf.cuFileWrite(fh, (const void *)(uintptr_t)src,
					     n, off, off);

		if (r != (ssize_t)n)
			bl_die("cuFileWrite at %" PRIu64 " returned %zd", off,
			       r);
	}
	blcf.cuFileHandleDeregister(fh);
	if (fsync(fd))
		bl_die("cuFile write: fsync: %s", strerror(errno));
	close(fd);
}

static void peer_copy_pwrite(struct bench *b, uint64_t src)
{
	int fd = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		bl_die("cuMemcpyDtoH + pwrite: open %s: %s", b->out,
		       strerror(errno));
	for (uint64_t off = 0; off < b->size; off += PIECE) {
		uint64_t n = b->size - off < PIECE ? b->size - off : PIECE;

		CU_CHECK(blcu.cuMemcpyDtoH_v2(b->piece, src + off, n));
		if (pwrite(fd, b->piece, n, off) != (ssize_t)n)
			bl_die("pwrite of %s: %s", b->out, strerror(errno));
	}
	if (fsync(fd))
		bl_die("cuMemcpyDtoH + pwrite: fsync: %s", strerror(errno));
	close(fd);
}

static void peer_phx_write(struct bench *b, uint64_t src_off)
{
	struct phx_io io = { .op = PHX_OP_WRITE,
			     .file_off = 0,
			     .buf = b->pbuf,
			     .buf_off = src_off,
			     .len = b->size };

	io.fd = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (io.fd < 0)
		bl_die("libphoenix: open %s: %s", b->out, strerror(errno));
	if (phx_io_run(b->pdev, &io) != (int64_t)b->size)
		bl_die("libphoenix write failed (%" PRId64 "): %s", io.result,
		       phx_strerror_last());
	if (fsync(io.fd))
		bl_die("libphoenix write: fsync: %s", strerror(errno));
	b->phx_path = phx_path_name(io.path);
	close(io.fd);
}

static void peer_phx_enqueue_write(struct bench *b, uint64_t src_off)
{
	phx_enqueue(b, PHX_OP_WRITE, src_off, true);
}

/* ---- running the cases ------------------------------------------------ */

enum dest { TO_HOST, TO_DBUF, TO_PBUF, FROM_HOST, FROM_DBUF, FROM_PBUF };

struct peer {
	const char *name;
	void (*run)(struct bench *b, uint64_t where);
	enum dest dest;
	bool limit;
	bool cufile;
	bool ours;
	bool repeat; /* the first PINNED bytes of the file, over and over */
};

static struct result *new_result(const char *casename, const struct peer *p)
{
	struct result *r = &results[nresults++];

	memset(r, 0, sizeof(*r));
	r->casename = casename;
	r->peer = p->name;
	r->limit = p->limit;
	r->ours = p->ours;
	r->unit = "GB/s";
	return r;
}

static uint64_t dest_addr(struct bench *b, enum dest d)
{
	switch (d) {
	case TO_DBUF:
	case FROM_DBUF:
		return b->dbuf;
	case TO_PBUF:
	case FROM_PBUF:
		return phx_buf_dptr(b->pbuf);
	default:
		return 0;
	}
}

static void clear_dest(struct bench *b, const struct peer *p)
{
	uint64_t d = dest_addr(b, p->dest);

	if (p->dest == TO_DBUF || p->dest == TO_PBUF) {
		CU_CHECK(blcu.cuMemsetD8_v2(d, 0, b->size));
		CU_CHECK(blcu.cuCtxSynchronize());
	}
	if (p->dest >= FROM_HOST)
		unlink(b->out);
}

static void verify(struct bench *b, const struct peer *p)
{
	if (p->repeat) {
		for (uint64_t off = 0; off < b->size; off += PIECE) {
			uint64_t n =
				b->size - off < PIECE ? b->size - off : PIECE;

			CU_CHECK(blcu.cuMemcpyDtoH_v2(b->piece, b->dbuf + off,
						      n));
			check_host(b, p->name, b->piece, off % PINNED, n);
		}
		return;
	}
	switch (p->dest) {
	case TO_DBUF:
	case TO_PBUF:
		check_device(b, p->name, dest_addr(b, p->dest), b->size);
		break;
	case FROM_HOST:
	case FROM_DBUF:
	case FROM_PBUF:
		check_file(b, p->name, b->out);
		break;
	default:
		break; /* raw reads check blocks as they arrive */
	}
}

/*
 * One peer in one case: an optional warm-up, then b->runs timed runs,
 * each checked.  @cold drops the page cache before every run.
 */
static void measure(struct bench *b, const char *casename, const struct peer *p,
		    bool cold, bool warmup)
{
	struct result *r = new_result(casename, p);
	uint64_t where = p->dest == TO_PBUF || p->dest == FROM_PBUF ?
				 0 :
				 dest_addr(b, p->dest);

	if (p->cufile && cufile_load(b)) {
		snprintf(r->note, sizeof(r->note), "n/a: %s", b->cufile_why);
		printf("  %-16s %-34s %s\n", casename, p->name, r->note);
		return;
	}
	printf("  %-16s %-34s", casename, p->name);
	fflush(stdout);
	if (!cold && p->dest < FROM_HOST)
		warm_cache(b);
	for (int i = warmup ? -1 : 0; i < b->runs; i++) {
		double t;

		clear_dest(b, p);
		if (cold)
			drop_caches(b, b->data);
		t = bl_now();
		p->run(b, where);
		t = bl_now() - t;
		verify(b, p);
		if (i >= 0) {
			r->v[r->n++] = b->size / t / 1e9;
			printf(" %6.2f", r->v[r->n - 1]);
			fflush(stdout);
		}
	}
	if (p->ours)
		snprintf(r->note, sizeof(r->note), "path %s", b->phx_path);
	printf("\n");
}

static double median(const struct result *r)
{
	return r->n ? bl_median(r->v, r->n) : 0;
}

static double spread(const struct result *r)
{
	double lo = r->v[0], hi = r->v[0], m = median(r);

	for (int i = 1; i < r->n; i++) {
		lo = r->v[i] < lo ? r->v[i] : lo;
		hi = r->v[i] > hi ? r->v[i] : hi;
	}
	return m > 0 ? (hi - lo) / m * 100 : 0;
}

static void print_table(void)
{
	const char *last = NULL;

	printf("\n%-18s %-34s %9s %6s %8s %8s  %s\n", "case", "peer", "median",
	       "spread", "x limit", "x phx", "note");
	for (int i = 0; i < nresults; i++) {
		struct result *r = &results[i];
		double lim = 0, ours = 0, m = median(r);
		char ratio_l[16] = "-", ratio_p[16] = "-";

		if (!last || strcmp(last, r->casename))
			printf("\n");
		last = r->casename;
		for (int j = 0; j < nresults; j++) {
			struct result *o = &results[j];

			if (strcmp(o->casename, r->casename))
				continue;
			if (o->limit && median(o) > lim)
				lim = median(o);
			if (o->ours)
				ours = median(o);
		}
		if (!r->n) {
			printf("%-18s %-34s %9s %6s %8s %8s  %s\n", r->casename,
			       r->peer, "-", "-", "-", "-", r->note);
			continue;
		}
		if (lim > 0 && strcmp(r->unit, "GB/s") == 0)
			snprintf(ratio_l, sizeof(ratio_l), "%.2f", m / lim);
		if (ours > 0)
			snprintf(ratio_p, sizeof(ratio_p), "%.2f", m / ours);
		printf("%-18s %-34s %4.*f %-4s %5.0f%% %8s %8s  %s%s\n",
		       r->casename, r->peer, strcmp(r->unit, "MiB") ? 2 : 0, m,
		       r->unit, spread(r), ratio_l, ratio_p,
		       r->limit ? "limit " : "", r->note);
	}
	printf("\nGB/s = 1e9 bytes/s, median of the timed runs; spread = (max - min) / median;\n"
	       "x limit = median / the case's limit (the best limit row); x phx = median / libphoenix's.\n");
}

/* ---- host memory while moving mem_total bytes (child process) -------- */

static atomic_bool sampling;
static atomic_uint_fast64_t pinned_peak;

static void *sampler(void *arg)
{
	struct bench *b = arg;
	struct phx_stats st;

	while (atomic_load(&sampling)) {
		if (b->pdev) {
			phx_stats_get(b->pdev, &st);
			if (st.pinned_bytes > atomic_load(&pinned_peak))
				atomic_store(&pinned_peak, st.pinned_bytes);
		}
		usleep(2000);
	}
	return NULL;
}

static uint64_t status_kib(const char *key)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = strtoull(line + strlen(key), NULL, 10);
	if (f)
		fclose(f);
	return v * 1024;
}

static void cuda_init(struct bench *b);

static int mem_child(struct bench *b, const char *peer)
{
	pthread_t th;
	uint64_t base, hwm, dst;
	CUdeviceptr dbig = 0;
	int fd;
	double t;

	cuda_init(b);
	if (!strcmp(peer, "libphoenix")) {
		if (phx_buf_alloc(b->pdev, b->mem_total, 0, &b->pbuf))
			bl_die("phx_buf_alloc: %s", phx_strerror_last());
	} else {
		CU_CHECK(blcu.cuMemAlloc_v2(&dbig, b->mem_total));
		if (!strcmp(peer, "cuFile") && cufile_load(b)) {
			printf("MEM n/a %s\n", b->cufile_why);
			return 0;
		}
	}
	warm_cache(b);
	/* Reset VmHWM to the current RSS: only the transfers count. */
	fd = open("/proc/self/clear_refs", O_WRONLY);
	if (fd < 0 || write(fd, "5", 1) != 1)
		bl_die("cannot reset the peak RSS (/proc/self/clear_refs)");
	close(fd);
	base = status_kib("VmRSS:");
	atomic_store(&sampling, true);
	pthread_create(&th, NULL, sampler, b);
	t = bl_now();
	for (dst = 0; dst + b->size <= b->mem_total; dst += b->size) {
		if (!strcmp(peer, "libphoenix"))
			peer_phx_read(b, dst);
		else if (!strcmp(peer, "cuFile"))
			peer_cufile_read(b, dbig + dst);
		else
			peer_pread_pinned(b, dbig + dst);
	}
	t = bl_now() - t;
	atomic_store(&sampling, false);
	pthread_join(th, NULL);
	hwm = status_kib("VmHWM:");
	/* No peer name: names have spaces ("pread pinned + copy"). */
	printf("MEM %" PRIu64 " %" PRIu64 " %" PRIu64 " %.2f\n", hwm, base,
	       (uint64_t)atomic_load(&pinned_peak), dst / t / 1e9);
	return 0;
}

/* Run "phx-bench --mem-child PEER" and turn its line into a result. */
static void measure_mem(struct bench *b, const char *argv0, const char *peer,
			bool ours)
{
	char cmd[8192], line[512], name[64], why[80];
	struct peer p = { .name = peer, .ours = ours };
	struct result *r;
	uint64_t hwm, base, pinned;
	double gbps;
	FILE *f;
	bool got = false;

	snprintf(cmd, sizeof(cmd),
		 "'%s' -s %" PRIu64 " -m %" PRIu64 " --mem-child '%s' '%s'",
		 argv0, b->size, b->mem_total, peer, b->dir);
	snprintf(name, sizeof(name), "%s", peer);
	p.name = name;
	r = new_result("host memory", &p);
	r->peer = peer;
	r->unit = "MiB";
	printf("  %-16s %-34s", "host memory", peer);
	fflush(stdout);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MEM %" SCNu64 " %" SCNu64 " %" SCNu64 " %lf",
			   &hwm, &base, &pinned, &gbps) == 4) {
			r->v[r->n++] = hwm / (double)MiB;
			snprintf(
				r->note, sizeof(r->note),
				"peak RSS; %.0f MiB before, pinned peak %.0f MiB, %.2f GB/s",
				base / (double)MiB, pinned / (double)MiB, gbps);
			got = true;
		} else if (sscanf(line, "MEM n/a %79[^\n]", why) == 1) {
			snprintf(r->note, sizeof(r->note), "n/a: %s", why);
		}
	}
	if (!f || pclose(f) != 0 || !got)
		if (!r->note[0])
			snprintf(r->note, sizeof(r->note),
				 "failed: see the messages above");
	printf(" %s\n", got ? "done" : r->note);
}

/* ---- setup ------------------------------------------------------------ */

static void cuda_init(struct bench *b)
{
	const char *why = "";
	CUcontext ctx;
	CUdevice dev;
	const char *err = bl_cuda_load();
	CUresult r;

	if (err)
		bl_die("no GPU here: libcuda.so.1 not found (%s); run scripts/bench-gpu.sh on a machine with an NVIDIA GPU and driver",
		       err);
	r = blcu.cuInit(0);
	if (r)
		bl_die("no usable GPU: cuInit failed: %s", bl_cu_err(r));
	CU_CHECK(blcu.cuDeviceGet(&dev, 0));
	CU_CHECK(blcu.cuDeviceGetName(b->gpu, sizeof(b->gpu), dev));
	CU_CHECK(blcu.cuDriverGetVersion(&b->driver));
	/* The primary context: the one libphoenix uses too. */
	CU_CHECK(blcu.cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(blcu.cuCtxSetCurrent(ctx));
	CU_CHECK(blcu.cuStreamCreate(&b->stream, 1 /* non-blocking */));
	CU_CHECK(blcu.cuMemAllocHost_v2(&b->pinned, PINNED));

	if (phx_default_kind(&why) != PHX_DEVICE_CUDA)
		bl_die("libphoenix would not use the GPU (%s); unset PHX_DEVICE or fix the driver",
		       why ? why : "?");
	if (phx_device_open("gpu0", &b->pdev))
		bl_die("phx_device_open(gpu0): %s", phx_strerror_last());
	CU_CHECK(blcu.cuCtxSetCurrent(ctx));
}

static void usage(void)
{
	fprintf(stderr,
		"usage: phx-bench [-s SIZE] [-r RUNS] [-m BYTES] [-C] DIR\n"
		"  -s SIZE   size of the random file (default 4G)\n"
		"  -r RUNS   timed runs per peer (default 3, at most %d)\n"
		"  -m BYTES  bytes moved while host memory is measured (default 16G)\n"
		"  -C        skip the cold-cache case\n"
		"  DIR       a directory on the disk to measure (not tmpfs)\n",
		BL_MAX_RUNS);
	exit(2);
}

static void print_versions(struct bench *b)
{
	struct utsname u;
	char date[64];

	uname(&u);
	bl_date(date, sizeof(date));
	printf("phx-bench: %s, libphoenix %s, %s, CUDA driver %d.%d, kernel %s, %d threads\n",
	       date, phx_version(), b->gpu, b->driver / 1000,
	       b->driver % 1000 / 10, u.release, b->nthreads);
	printf("stream-ordered reads: PHX_STREAM_WAIT=%s\n", bl_stream_wait());
	printf("file %s: %" PRIu64 " MiB; %d timed runs per peer; cold = %s\n",
	       b->data, b->size / MiB, b->runs,
	       !b->cold	  ? "skipped" :
	       b->drop_ok ? "drop_caches" :
			    "fadvise(DONTNEED) (not root)");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mem-child", required_argument, NULL, 'M' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench bench = {
		.size = 4 * GiB, .runs = 3, .mem_total = 16 * GiB, .cold = true
	};
	struct bench *b = &bench;
	const char *mem_child_peer = NULL;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "s:r:m:C", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			b->size = bl_opt_size(optarg, MiB);
			break;
		case 'r':
			b->runs = bl_opt_runs(optarg);
			if (b->runs < 0)
				usage();
			break;
		case 'm':
			if (parse_size(optarg, &b->mem_total))
				bl_die("bad size %s", optarg);
			break;
		case 'C':
			b->cold = false;
			break;
		case 'M':
			mem_child_peer = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	b->dir = argv[optind];
	b->nthreads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
	if (b->mem_total < b->size)
		b->mem_total = b->size;
	snprintf(b->data, sizeof(b->data), "%s/phx-bench.dat", b->dir);
	snprintf(b->out, sizeof(b->out), "%s/phx-bench.out", b->dir);
	b->drop_ok = access("/proc/sys/vm/drop_caches", W_OK) == 0;
	b->piece = aligned_alloc(4096, PIECE);
	b->direct = aligned_alloc(4096, URING_QD * URING_BS);
	if (!b->piece || !b->direct)
		bl_die("out of host memory");

	if (mem_child_peer)
		return mem_child(b, mem_child_peer);

	/* Fail here, before creating gigabytes, when there is no GPU. */
	cuda_init(b);
	print_versions(b);
	make_data_file(b);
	CU_CHECK(blcu.cuMemAlloc_v2(&b->dbuf, b->size));
	if (phx_buf_alloc(b->pdev, b->size, 0, &b->pbuf))
		bl_die("phx_buf_alloc(%" PRIu64 " MiB): %s", b->size / MiB,
		       phx_strerror_last());
	/* The pinned copy peer sends the file's first bytes everywhere. */
	fill_expected(b, b->pinned, 0, PINNED);

	static const struct peer hot[] = {
		{ .name = "pinned cuMemcpyHtoDAsync",
		  .run = peer_pinned_copy,
		  .dest = TO_DBUF,
		  .limit = true,
		  .repeat = true },
		{ .name = "buffered read (page cache)",
		  .run = peer_raw_buffered,
		  .dest = TO_HOST },
		{ .name = "cuFile cuFileRead",
		  .run = peer_cufile_read,
		  .dest = TO_DBUF,
		  .cufile = true },
		{ .name = "pread + cuMemcpyHtoD (pageable)",
		  .run = peer_pread_pageable,
		  .dest = TO_DBUF },
		{ .name = "pread pinned + cuMemcpyHtoD",
		  .run = peer_pread_pinned,
		  .dest = TO_DBUF },
		{ .name = "libphoenix phx_read",
		  .run = peer_phx_read,
		  .dest = TO_PBUF,
		  .ours = true },
		{ .name = "libphoenix phx_io_enqueue (stream)",
		  .run = peer_phx_enqueue,
		  .dest = TO_PBUF },
		{ .name = "libphoenix phx_io_enqueue (stream, late values)",
		  .run = peer_phx_enqueue_late,
		  .dest = TO_PBUF },
	};
	static const struct peer cold[] = {
		{ .name = "raw O_DIRECT io_uring QD32 4M",
		  .run = peer_raw_direct,
		  .dest = TO_HOST,
		  .limit = true },
		{ .name = "raw buffered read",
		  .run = peer_raw_buffered,
		  .dest = TO_HOST,
		  .limit = true },
		{ .name = "cuFile cuFileRead",
		  .run = peer_cufile_read,
		  .dest = TO_DBUF,
		  .cufile = true },
		{ .name = "pread + cuMemcpyHtoD (pageable)",
		  .run = peer_pread_pageable,
		  .dest = TO_DBUF },
		{ .name = "pread pinned + cuMemcpyHtoD",
		  .run = peer_pread_pinned,
		  .dest = TO_DBUF },
		{ .name = "libphoenix phx_read",
		  .run = peer_phx_read,
		  .dest = TO_PBUF,
		  .ours = true },
		{ .name = "libphoenix phx_io_enqueue (stream)",
		  .run = peer_phx_enqueue,
		  .dest = TO_PBUF },
	};
	static const struct peer wr[] = {
		{ .name = "raw O_DIRECT io_uring QD32 4M",
		  .run = peer_raw_direct_write,
		  .dest = FROM_HOST,
		  .limit = true },
		{ .name = "raw buffered write",
		  .run = peer_raw_buffered_write,
		  .dest = FROM_HOST,
		  .limit = true },
		{ .name = "cuFile cuFileWrite",
		  .run = peer_cufile_write,
		  .dest = FROM_DBUF,
		  .cufile = true },
		{ .name = "cuMemcpyDtoH + pwrite",
		  .run = peer_copy_pwrite,
		  .dest = FROM_DBUF },
		{ .name = "libphoenix phx_write",
		  .run = peer_phx_write,
		  .dest = FROM_PBUF,
		  .ours = true },
		{ .name = "libphoenix phx_io_enqueue write (stream)",
		  .run = peer_phx_enqueue_write,
		  .dest = FROM_PBUF },
	};

	printf("\nper-run GB/s:\n");
	for (size_t i = 0; i < sizeof(hot) / sizeof(hot[0]); i++)
		measure(b, "file->GPU hot", &hot[i], false, true);
	if (b->cold)
		for (size_t i = 0; i < sizeof(cold) / sizeof(cold[0]); i++)
			measure(b, "file->GPU cold", &cold[i], true, false);

	b->image = aligned_alloc(4096, b->size);
	if (!b->image)
		bl_die("out of host memory for the %" PRIu64 " MiB write image",
		       b->size / MiB);
	fill_expected(b, b->image, 0, b->size);
	/* The read cases left the file's bytes in both GPU buffers. */
	check_device(b, "GPU buffer before writes", b->dbuf, b->size);
	check_device(b, "libphoenix buffer before writes",
		     phx_buf_dptr(b->pbuf), b->size);
	for (size_t i = 0; i < sizeof(wr) / sizeof(wr[0]); i++)
		measure(b, "GPU->file", &wr[i], false, true);
	unlink(b->out);
	free(b->image);

	measure_mem(b, argv[0], "libphoenix", true);
	measure_mem(b, argv[0], "cuFile", false);
	measure_mem(b, argv[0], "pread pinned + copy", false);

	print_table();
	return 0;
}
