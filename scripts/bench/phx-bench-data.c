/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-data.c - phx-bench's random file: made and checked on every
 * core, read back from devices and files; the page cache dropped or warmed
 * between runs, and the open and fsync every peer does.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "phx-bench.h"

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

void fill_expected(struct bench *b, void *p, uint64_t off, uint64_t len)
{
	par_gen(b, p, off, len, true);
}

static void fill_file(void *arg, void *p, uint64_t off, uint64_t len)
{
	fill_expected(arg, p, off, len);
}

void make_data_file(struct bench *b)
{
	bl_make_file(b->data, b->size, b->pinned, PINNED, fill_file, b);
}

void check_host(struct bench *b, const char *what, const void *p, uint64_t off,
		uint64_t len)
{
	int64_t bad = par_gen(b, (void *)p, off, len, false);

	if (bad >= 0)
		bl_die("%s: wrong bytes at file offset %" PRId64
		       "; the result does not count",
		       what, bad);
}

/* Copy @len device bytes at @d back and check them as file bytes at 0. */
void check_device(struct bench *b, const char *what, CUdeviceptr d,
		  uint64_t len)
{
	for (uint64_t off = 0; off < len; off += PINNED) {
		uint64_t n = piece_len(len, off, PINNED);

		CU_CHECK(blcu.cuMemcpyDtoH_v2(b->pinned, d + off, n));
		check_host(b, what, b->pinned, off, n);
	}
}

/* Read @path back through the page cache and check every byte. */
void check_file(struct bench *b, const char *what, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_size != b->size)
		bl_die("%s: %s is missing or has the wrong size", what, path);
	for (uint64_t off = 0; off < b->size; off += PINNED) {
		uint64_t n = piece_len(b->size, off, PINNED);

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

/* Sampled check of a raw block: its first 64 bytes. */
void check_block(const void *p, uint64_t off, const char *what)
{
	const uint64_t *w = p;

	for (int i = 0; i < 8; i++)
		if (w[i] != bl_gen_word(off / 8 + i))
			bl_die("%s: wrong bytes at file offset %" PRIu64, what,
			       off);
}

/* ---- cache control ---------------------------------------------------- */

void drop_caches(struct bench *b, const char *path)
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

void warm_cache(struct bench *b)
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

/* ---- what every peer does --------------------------------------------- */

/* open(2) @path with @flags (mode 0644 where it creates), or die. */
int open_or_die(const char *what, const char *path, int flags)
{
	int fd = open(path, flags, 0644);

	if (fd < 0)
		bl_die("%s: open %s: %s", what, path, strerror(errno));
	return fd;
}

void fsync_or_die(int fd, const char *what)
{
	if (fsync(fd))
		bl_die("%s: fsync: %s", what, strerror(errno));
}
