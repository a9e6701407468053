/* SPDX-License-Identifier: MIT */
/*
 * kvbench-kv.c - LMCache's slab pattern: chunks of one size at random
 * chunk-aligned offsets of a slab file, read into (written from) a GPU
 * staging buffer registered in 16 MiB regions, on 1 or more streams, the
 * file opened O_DIRECT as LMCache opens it.
 *
 * Peers, same chunks, same buffer, same queue depth (one transfer in
 * flight per stream):
 *   phxFile async   phxFileReadAsync/WriteAsync through libphxfile.so,
 *                   chunks dealt round-robin to the streams (LMCache)
 *   phx_read        libphoenix's synchronous call, one thread per stream
 *   cuFile async    cuFileReadAsync/WriteAsync on the same streams
 *   cuFile batch    cuFileBatchIOSubmit, as many in flight as streams
 *   io_uring host   raw io_uring into pinned host memory: O_DIRECT cold,
 *                   the page cache hot (the limit)
 *
 * Writes are timed until fdatasync returns, so a peer that leaves them
 * in the page cache pays what O_DIRECT pays inline.  Every read's bytes
 * are checked in device memory (cleared before each run); every write's
 * ranges are scribbled over before the run and checked in the file
 * after it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvbench.h"

#define KV_REGION (16 * MiB) /* LMCache's largest registration */
#define KV_BYTES (256 * MiB) /* staging buffer: the most one pass moves */

struct kv {
	struct kb *b;
	uint64_t chunk;
	int nstreams;
	bool write;
	bool hot;
	int n; /* chunks per pass */
	uint64_t *offs; /* their slab offsets */
	struct kb_dmem dm; /* the staging buffer: chunk i at i * chunk */
	int fd; /* O_RDWR | O_DIRECT, LMCache's descriptor */
	int fd_cached; /* O_RDWR, for the raw peer when hot */
	void *streams[KV_MAX_STREAMS];
	char note[160];
};

/* LMCache's (base, offset) for staging-buffer byte @pos. */
static void region_of(struct kv *k, uint64_t pos, void **base, int64_t *off)
{
	*base = (void *)(uintptr_t)(k->dm.dptr + pos / KV_REGION * KV_REGION);
	*off = (int64_t)(pos % KV_REGION);
}

/* ---- phxFile async ------------------------------------------------------ */

static double run_phxfile(struct kv *k)
{
	size_t *len = calloc((size_t)(unsigned int)k->n, sizeof(*len));
	int64_t *foff = calloc((size_t)(unsigned int)k->n, sizeof(*foff));
	int64_t *boff = calloc((size_t)(unsigned int)k->n, sizeof(*boff));
	int64_t *done = calloc((size_t)(unsigned int)k->n, sizeof(*done));
	void *fh = NULL;
	double t0, t;
	int ret;

	if (!len || !foff || !boff || !done)
		bl_die("out of host memory");
	/* LMCache: handle at slab open, streams, regions; not timed */
	ret = kbpf.HandleRegister(&fh, k->fd);
	if (ret)
		bl_die("phxFileHandleRegister: %s", strerror(-ret));
	for (int s = 0; s < k->nstreams; s++)
		if ((ret = kbpf.StreamRegister(k->streams[s])))
			bl_die("phxFileStreamRegister: %s", strerror(-ret));
	for (uint64_t r = 0; r < k->dm.size; r += KV_REGION)
		if ((ret = kbpf.BufRegister((void *)(uintptr_t)(k->dm.dptr + r),
					    k->dm.size - r < KV_REGION ?
						    k->dm.size - r :
						    KV_REGION)))
			bl_die("phxFileBufRegister: %s", strerror(-ret));

	t0 = bl_now();
	for (int i = 0; i < k->n; i++) {
		void *base;

		region_of(k, i * k->chunk, &base, &boff[i]);
		len[i] = k->chunk;
		foff[i] = (int64_t)k->offs[i];
		done[i] = -1;
		ret = (k->write ? kbpf.WriteAsync : kbpf.ReadAsync)(
			fh, base, &len[i], &foff[i], &boff[i], &done[i],
			k->streams[i % k->nstreams]);
		if (ret)
			bl_die("phxFile%sAsync: %s",
			       k->write ? "Write" : "Read", strerror(-ret));
	}
	/* the wait libphxfile documents: everything queued on the stream */
	for (int s = 0; s < k->nstreams; s++)
		kbpf.StreamDeregister(k->streams[s]);
	t = bl_now() - t0;

	for (int i = 0; i < k->n; i++)
		if (done[i] != (int64_t)k->chunk)
			bl_die("phxFile async: bytes_done %" PRId64
			       " for %" PRIu64 " bytes at %" PRIu64,
			       done[i], k->chunk, k->offs[i]);
	for (uint64_t r = 0; r < k->dm.size; r += KV_REGION)
		kbpf.BufDeregister((void *)(uintptr_t)(k->dm.dptr + r));
	kbpf.HandleDeregister(fh);
	free(len);
	free(foff);
	free(boff);
	free(done);
	return t;
}

/* ---- phx_read / phx_write, one thread per stream ------------------------ */

struct kv_thread {
	struct kv *k;
	int idx;
	pthread_t th;
};

static void *phx_sync_main(void *arg)
{
	struct kv_thread *t = arg;
	struct kv *k = t->k;

	kb_thread_ctx();
	for (int i = t->idx; i < k->n; i += k->nstreams) {
		struct phx_io io = {
			.op = k->write ? PHX_OP_WRITE : PHX_OP_READ,
			.fd = k->fd,
			.file_off = (int64_t)k->offs[i],
			.dptr = k->dm.dptr + i * k->chunk,
			.len = k->chunk,
		};

		if (phx_io_run(k->b->dev, &io) != (int64_t)k->chunk)
			bl_die("phx_io_run: %" PRId64 ": %s", io.result,
			       phx_strerror_last());
	}
	return NULL;
}

static double run_phx_sync(struct kv *k)
{
	struct kv_thread t[KV_MAX_STREAMS];
	double t0 = bl_now();

	for (int s = 0; s < k->nstreams; s++) {
		t[s].k = k;
		t[s].idx = s;
		if (pthread_create(&t[s].th, NULL, phx_sync_main, &t[s]))
			bl_die("cannot start a thread");
	}
	for (int s = 0; s < k->nstreams; s++)
		pthread_join(t[s].th, NULL);
	return bl_now() - t0;
}

/* ---- cuFile ------------------------------------------------------------- */

static void *cufile_handle(struct kv *k)
{
	CUfileDescr_t d = { .type = 1 };
	CUfileError_t e;
	void *fh = NULL;

	d.handle.fd = k->fd;
	e = blcf.cuFileHandleRegister(&fh, &d);
	if (e.err) {
		snprintf(k->note, sizeof(k->note), "cuFileHandleRegister: %s",
			 kb_cferr(e));
		return NULL;
	}
	for (uint64_t r = 0; r < k->dm.size; r += KV_REGION)
		blcf.cuFileBufRegister(
			(void *)(uintptr_t)(k->dm.dptr + r),
			k->dm.size - r < KV_REGION ? k->dm.size - r : KV_REGION,
			0);
	return fh;
}

static void cufile_release(struct kv *k, void *fh)
{
	for (uint64_t r = 0; r < k->dm.size; r += KV_REGION)
		blcf.cuFileBufDeregister((void *)(uintptr_t)(k->dm.dptr + r));
	blcf.cuFileHandleDeregister(fh);
}

static double run_cufile_async(struct kv *k)
{
	size_t *len = calloc((size_t)(unsigned int)k->n, sizeof(*len));
	off_t *foff = calloc((size_t)(unsigned int)k->n, sizeof(*foff));
	off_t *boff = calloc((size_t)(unsigned int)k->n, sizeof(*boff));
	ssize_t *done = calloc((size_t)(unsigned int)k->n, sizeof(*done));
	void *fh = cufile_handle(k);
	double t0, t = -1;
	CUfileError_t e;

	if (!len || !foff || !boff || !done)
		bl_die("out of host memory");
	if (!fh)
		goto out;
	/* as LMCache's cuFile backend registers them: the three FIXED flags */
	for (int s = 0; s < k->nstreams; s++)
		blcf.cuFileStreamRegister(k->streams[s], 0x7);
	t0 = bl_now();
	for (int i = 0; i < k->n; i++) {
		void *base;
		int64_t off;

		region_of(k, i * k->chunk, &base, &off);
		len[i] = k->chunk;
		foff[i] = (off_t)k->offs[i];
		boff[i] = (off_t)off;
		done[i] = -1;
		e = (k->write ? blcf.cuFileWriteAsync : blcf.cuFileReadAsync)(
			fh, base, &len[i], &foff[i], &boff[i], &done[i],
			k->streams[i % k->nstreams]);
		if (e.err) {
			snprintf(k->note, sizeof(k->note), "cuFile%sAsync: %s",
				 k->write ? "Write" : "Read", kb_cferr(e));
			break;
		}
	}
	for (int s = 0; s < k->nstreams; s++)
		blcu.cuStreamSynchronize(k->streams[s]);
	if (!k->note[0])
		t = bl_now() - t0;
	for (int s = 0; s < k->nstreams; s++)
		blcf.cuFileStreamDeregister(k->streams[s]);
	for (int i = 0; t >= 0 && i < k->n; i++)
		if (done[i] != (ssize_t)k->chunk)
			bl_die("cuFile async: %zd bytes of %" PRIu64
			       " at %" PRIu64,
			       done[i], k->chunk, k->offs[i]);
	cufile_release(k, fh);
out:
	free(len);
	free(foff);
	free(boff);
	free(done);
	return t;
}

struct kv_batch {
	struct kv *k;
	void *fh;
};

static void kv_batch_fill(void *ctx, int i, CUfileIOParams_t *p)
{
	struct kv_batch *kvb = ctx;
	struct kv *k = kvb->k;
	void *base;
	int64_t off;

	region_of(k, i * k->chunk, &base, &off);
	kb_batch_param(p, kvb->fh, base, (off_t)off, (off_t)k->offs[i],
		       k->chunk, k->write ? 1 : 0);
}

static void kv_batch_done(void *ctx, int i, const CUfileIOEvents_t *ev)
{
	struct kv *k = ((struct kv_batch *)ctx)->k;

	if (ev->status != BL_CUFILE_COMPLETE || ev->ret != k->chunk)
		bl_die("cuFile batch: status %d, %zu bytes of %" PRIu64
		       " at %" PRIu64,
		       ev->status, ev->ret, k->chunk, k->offs[i]);
}

static double run_cufile_batch(struct kv *k)
{
	struct kv_batch kvb = { .k = k, .fh = cufile_handle(k) };
	void *batch = NULL;
	double t = -1;
	CUfileError_t e;

	if (!kvb.fh)
		return -1;
	e = blcf.cuFileBatchIOSetUp(&batch, (unsigned int)k->nstreams);
	if (e.err) {
		snprintf(k->note, sizeof(k->note), "cuFileBatchIOSetUp: %s",
			 kb_cferr(e));
		goto out;
	}
	t = kb_batch_run(batch, (unsigned int)k->nstreams, k->n, kv_batch_fill,
			 kv_batch_done, &kvb, k->note, sizeof(k->note));
	blcf.cuFileBatchIODestroy(batch);
out:
	cufile_release(k, kvb.fh);
	return t;
}

/* ---- raw io_uring into host memory -------------------------------------- */

static double run_raw(struct kv *k)
{
	struct kb_req *r = calloc((size_t)(unsigned int)k->n, sizeof(*r));
	double t;

	if (!r)
		bl_die("out of host memory");
	for (int i = 0; i < k->n; i++) {
		r[i].off = k->offs[i];
		r[i].len = k->chunk;
	}
	t = kb_uring(k->hot && !k->write ? k->fd_cached : k->fd, k->write, r,
		     k->n, (unsigned int)k->nstreams, k->b->host, k->chunk,
		     true, NULL, NULL);
	free(r);
	return t;
}

/* ---- one case ------------------------------------------------------------ */

enum kv_peer { KV_RAW, KV_PHXFILE, KV_PHX, KV_CUFILE_ASYNC, KV_CUFILE_BATCH };

static const char *const kv_names[] = {
	"io_uring host (limit)",
	"phxFile async (LMCache)",
	"phx_io_run, thread/stream",
	"cuFile async",
	"cuFile batch",
};

/* Each peer's timed run: seconds, or -1 with why in k->note. */
static double (*const kv_runs[])(struct kv *k) = {
	[KV_RAW] = run_raw,
	[KV_PHXFILE] = run_phxfile,
	[KV_PHX] = run_phx_sync,
	[KV_CUFILE_ASYNC] = run_cufile_async,
	[KV_CUFILE_BATCH] = run_cufile_batch,
};

/* Scribble over the write targets: a write that moves nothing shows. */
static void scribble(struct kv *k)
{
	memset(k->b->host, 0xa5, k->chunk);
	for (int i = 0; i < k->n; i++)
		if (pwrite(k->fd_cached, k->b->host, k->chunk, k->offs[i]) !=
		    (ssize_t)k->chunk)
			bl_die("scribbling %s: %s", k->b->path,
			       strerror(errno));
	if (fdatasync(k->fd_cached))
		bl_die("fdatasync %s: %s", k->b->path, strerror(errno));
}

/*
 * Whether every chunk holds the file's bytes.  Wrong bytes from a peer of
 * ours abort the run; from cuFile they make its row a note instead.
 */
static bool verify(struct kv *k, enum kv_peer p)
{
	char what[96];

	snprintf(what, sizeof(what), "%s %s", kv_names[p],
		 k->write ? "write" : "read");
	for (int i = 0; i < k->n; i++) {
		int64_t bad;

		if (k->write) {
			if (pread(k->fd_cached, k->b->host, k->chunk,
				  k->offs[i]) != (ssize_t)k->chunk)
				bl_die("%s: reading back: %s", what,
				       strerror(errno));
			bad = bl_check(k->b->host, k->offs[i], k->chunk);
		} else if (p == KV_RAW) {
			bad = bl_check((char *)k->b->host + i * k->chunk,
				       k->offs[i], k->chunk);
		} else {
			bad = kb_find_bad_dmem(k->b, &k->dm, i * k->chunk,
					       k->offs[i], k->chunk);
		}
		if (bad >= 0 &&
		    (p == KV_CUFILE_ASYNC || p == KV_CUFILE_BATCH)) {
			snprintf(k->note, sizeof(k->note),
				 "wrong bytes at file offset %" PRId64
				 ": not counted",
				 bad);
			return false;
		}
		if (bad >= 0)
			bl_die("%s: wrong bytes at file offset %" PRId64
			       "; the result does not count",
			       what, bad);
	}
	return true;
}

/* The staging buffer holds the bytes each chunk's write puts back. */
static void fill_staging(struct kv *k)
{
	for (int i = 0; i < k->n; i++)
		kb_fill((char *)k->b->host + i * k->chunk, k->offs[i],
			k->chunk);
	kb_dmem_from_host(k->b, &k->dm, 0, k->b->host,
			  (uint64_t)k->n * k->chunk);
}

static void prepare(struct kv *k, enum kv_peer p)
{
	if (k->write) {
		scribble(k);
		if (p == KV_RAW)
			for (int i = 0; i < k->n; i++)
				kb_fill((char *)k->b->host + i * k->chunk,
					k->offs[i], k->chunk);
		return;
	}
	if (p != KV_RAW)
		kb_dmem_zero(k->b, &k->dm);
	else
		memset(k->b->host, 0, (size_t)k->n * k->chunk);
	if (k->hot)
		kb_warm(k->b, k->offs, k->n, k->chunk);
	else
		kb_cold(k->b);
}

static struct kb_result *measure(struct kv *k, enum kv_peer p,
				 const char *group)
{
	struct kb_result *r = kb_result(group, kv_names[p], "GB/s", p == KV_RAW,
					p == KV_PHXFILE);
	const char *skip = NULL;

	if ((p == KV_CUFILE_ASYNC || p == KV_CUFILE_BATCH) && k->b->cufile_why)
		skip = k->b->cufile_why;
	if (p == KV_PHXFILE && k->b->phxfile_why)
		skip = k->b->phxfile_why;
	if (skip) {
		snprintf(r->note, sizeof(r->note), "%s", skip);
		return r;
	}
	/* one untimed run first: what is paid once stays out */
	for (int run = -1; run < k->b->runs; run++) {
		double t;

		k->note[0] = 0;
		prepare(k, p);
		t = kv_runs[p](k);
		if (t < 0) {
			snprintf(r->note, sizeof(r->note), "%s", k->note);
			r->n = 0;
			return r;
		}
		if (k->write) {
			/* on disk, as an O_DIRECT write is when it returns */
			double t0 = bl_now();

			if (fdatasync(k->fd))
				bl_die("fdatasync %s: %s", k->b->path,
				       strerror(errno));
			t += bl_now() - t0;
		}
		if (!verify(k, p)) {
			snprintf(r->note, sizeof(r->note), "%s", k->note);
			r->n = 0;
			return r;
		}
		if (run >= 0)
			r->v[r->n++] = (double)k->n * k->chunk / t / 1e9;
	}
	/* as it goes: a run stopped by its time limit still says who stalled */
	bl_note("  %s: %.2f GB/s", kv_names[p], r->n ? r->v[r->n - 1] : 0.0);
	return r;
}

static void random_offsets(struct kv *k, unsigned int *seed)
{
	uint64_t slots = k->b->size / k->chunk;

	if ((uint64_t)k->n > slots)
		k->n = (int)slots;
	/* distinct slots: a partial Fisher-Yates over a sparse permutation */
	for (int i = 0; i < k->n; i++) {
		uint64_t j;
		bool dup;

		do {
			j = (((uint64_t)rand_r(seed) << 31) ^
			     (uint64_t)rand_r(seed)) %
			    slots;
			dup = false;
			for (int m = 0; m < i && !dup; m++)
				dup = k->offs[m] == j * k->chunk;
		} while (dup);
		k->offs[i] = j * k->chunk;
	}
}

static void size_label(uint64_t v, char *out, size_t n)
{
	if (v % MiB == 0)
		snprintf(out, n, "%" PRIu64 "M", v / MiB);
	else
		snprintf(out, n, "%" PRIu64 "K", v / KiB);
}

/* The medians of one run of kb_mode_kv, by size, stream count, case, peer. */
#define KV_CASES 3 /* read hot, read cold, write */
#define KV_PEERS 5

static const char *const kv_short[KV_PEERS] = {
	"io_uring (limit)", "phxFile async", "phx_io_run",
	"cuFile async",	    "cuFile batch",
};

static const char *const kv_cases[KV_CASES] = { "read hot", "read cold",
						"write" };

typedef struct kb_result *kv_table[8][4][KV_CASES][KV_PEERS];

static double med_of(const struct kb_result *r)
{
	return r && r->n ? bl_median(r->v, r->n) : NAN;
}

/* "GB/s (x limit)" in a column of @w characters, or "n/a". */
static void print_cell(double v, double lim, int w)
{
	char cell[40];

	if (isnan(v))
		snprintf(cell, sizeof(cell), "n/a");
	else if (isnan(lim) || lim <= 0)
		snprintf(cell, sizeof(cell), "%.2f", v);
	else
		snprintf(cell, sizeof(cell), "%.2f (%.2fx)", v, v / lim);
	printf(" %*s", w, cell);
}

/*
 * One row per chunk size, case and stream count, the peers side by side:
 * GB/s and the ratio to the limit; then LMCache's path against
 * phx_io_run (the goal: 0.8x hot) and against itself on one
 * stream.
 */
static void print_side_by_side(kv_table res, const struct kb_opts *o)
{
	printf("\nLMCache slab pattern side by side: GB/s (x limit); last two columns: phxFile async against phx_io_run and against its own 1-stream row\n");
	printf("%-6s %-10s %7s", "chunk", "case", "streams");
	for (int p = 0; p < KV_PEERS; p++)
		printf(" %16s", kv_short[p]);
	printf(" %12s %11s\n", "x phx_io_run", "x 1 stream");
	for (int si = 0; si < o->nsizes; si++) {
		char label[24];

		size_label(o->sizes[si], label, sizeof(label));
		for (int c = 0; c < KV_CASES; c++) {
			for (int ns = 0; ns < o->nstreams; ns++) {
				struct kb_result **row = res[si][ns][c];
				double lim = med_of(row[KV_RAW]);
				double ours = med_of(row[KV_PHXFILE]);
				double one = NAN;

				for (int m = 0; m < o->nstreams; m++)
					if (o->streams[m] == 1)
						one = med_of(res[si][m][c]
								[KV_PHXFILE]);
				printf("%-6s %-10s %7d", label, kv_cases[c],
				       o->streams[ns]);
				for (int p = 0; p < KV_PEERS; p++)
					print_cell(med_of(row[p]),
						   p == KV_RAW ? NAN : lim, 16);
				printf(" %11.2fx %10.2fx\n",
				       ours / med_of(row[KV_PHX]), ours / one);
			}
		}
	}
	fflush(stdout);
}

void kb_mode_kv(struct kb *b, const struct kb_opts *o)
{
	static const enum kv_peer peers[] = { KV_RAW, KV_PHXFILE, KV_PHX,
					      KV_CUFILE_ASYNC,
					      KV_CUFILE_BATCH };
	unsigned int seed = 15;
	struct kv k = { .b = b };
	static kv_table res;

	k.fd = open(b->path, O_RDWR | O_DIRECT);
	k.fd_cached = open(b->path, O_RDWR);
	if (k.fd < 0 || k.fd_cached < 0)
		bl_die("opening %s with O_DIRECT: %s (the slab must be on a disk file system)",
		       b->path, strerror(errno));
	for (int s = 0; s < KV_MAX_STREAMS; s++)
		k.streams[s] = NULL;
	for (int si = 0; si < o->nsizes; si++) {
		char label[24];

		k.chunk = o->sizes[si];
		size_label(k.chunk, label, sizeof(label));
		k.n = (int)(KV_BYTES / k.chunk < o->ops ? KV_BYTES / k.chunk :
							  o->ops);
		k.offs = calloc(k.n, sizeof(*k.offs));
		if (!k.offs)
			bl_die("out of host memory");
		random_offsets(&k, &seed);
		kb_dmem_alloc(b, &k.dm, (uint64_t)k.n * k.chunk);
		for (int ns = 0; ns < o->nstreams; ns++) {
			k.nstreams = o->streams[ns];
			for (int s = 0; s < k.nstreams; s++)
				if (!k.streams[s])
					k.streams[s] = kb_stream_new(b);
			for (int c = 0; c < 3; c++) {
				char group[48];

				k.write = c == 2;
				k.hot = c == 0;
				if (k.write)
					fill_staging(&k);
				snprintf(group, sizeof(group), "kv %s x%d %s",
					 label, k.nstreams,
					 k.write ? "write" :
					 k.hot	 ? "read hot" :
						   "read cold");
				bl_note("%s: %d chunks at random offsets...",
					group, k.n);
				for (size_t p = 0;
				     p < sizeof(peers) / sizeof(peers[0]); p++)
					res[si][ns][c][peers[p]] =
						measure(&k, peers[p], group);
			}
		}
		kb_dmem_free(b, &k.dm);
		free(k.offs);
	}
	for (int s = 0; s < KV_MAX_STREAMS; s++)
		if (k.streams[s])
			kb_stream_free(b, k.streams[s]);
	close(k.fd);
	close(k.fd_cached);
	kb_print_table(
		"LMCache slab pattern (GB/s; one transfer in flight per stream; x us = against phxFile async)",
		false);
	print_side_by_side(res, o);
}
