/* SPDX-License-Identifier: MIT */
/*
 * kvbench-small.c - small random reads (4-64 KiB, KV-cache blocks) into
 * GPU memory at queue depth 1, 8, 32, 128 with a cold page cache: IOPS
 * and p50/p99 latency.
 *
 * Peers, same file, same offsets, same depth:
 *   io_uring O_DIRECT host   raw io_uring into host memory: the limit
 *   phx batch                a libphoenix batch of that depth (us): each
 *                            round's refills queued, then started with
 *                            the wait, as raw io_uring and cuFile batch
 *                            submit theirs once per round
 *   phx batch, polled        the same, PHX_BATCH_POLL
 *   phx_io_run x QD threads  the synchronous call from QD threads
 *   cuFile batch             cuFileBatchIOSubmit at that depth
 *   cuFileRead x QD threads  the synchronous call from QD threads
 *
 * The peers take turns (measure()): the disk's rate drifts between
 * seconds by more than the differences measured, so each round runs each
 * peer once and every median comes from the same stretch of time.  After
 * each run the last read into every slot is checked byte for byte.
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

struct sm {
	struct kb *b;
	uint64_t bs;
	unsigned int qd;
	int n;
	struct kb_req *reqs;
	double *lat;
	int *slot_of; /* the slot each request used */
	struct kb_dmem dm; /* qd slots of bs */
	int fd; /* O_RDONLY | O_DIRECT */
	void *cufh;
	char note[160];
};

enum sm_peer { SM_RAW, SM_BATCH, SM_POLL, SM_PHX, SM_CUBATCH, SM_CUSYNC };
#define SM_PEERS (SM_CUSYNC + 1)

static const char *const sm_names[] = {
	"io_uring O_DIRECT host (limit)",
	"phx batch",
	"phx batch, polled",
	"phx_io_run x QD threads",
	"cuFile batch",
	"cuFileRead x QD threads",
};

/* ---- libphoenix batch ---------------------------------------------------- */

static double run_batch(struct sm *s, bool poll)
{
	struct phx_io ios[KB_MAX_QD], *done[KB_MAX_QD];
	double start[KB_MAX_QD], t0;
	struct phx_batch *batch;
	int next = 0, finished = 0;
	int ret = phx_batch_create(s->b->dev, s->qd, poll ? PHX_BATCH_POLL : 0,
				   &batch);

	if (ret)
		bl_die("phx_batch_create(depth %u): %s", s->qd,
		       phx_strerror_last());
	t0 = bl_now();
	for (unsigned int q = 0; q < s->qd && next < s->n; q++, next++) {
		ios[q] = (struct phx_io){
			.op = PHX_OP_READ,
			.fd = s->fd,
			.file_off = (int64_t)s->reqs[next].off,
			.dptr = s->dm.dptr + q * s->bs,
			.len = s->bs,
			.user_data = (void *)(uintptr_t)next,
		};
		s->slot_of[next] = (int)q;
		start[q] = bl_now();
		if (phx_batch_queue(batch, &ios[q], 1) != 1)
			bl_die("phx_batch_queue: %s", phx_strerror_last());
	}
	while (finished < s->n) {
		int m = phx_batch_wait(batch, 1, done, s->qd, -1);

		if (m < 0)
			bl_die("phx_batch_wait: %s", phx_strerror_last());
		for (int i = 0; i < m; i++) {
			struct phx_io *io = done[i];
			unsigned int q = (unsigned int)(io - ios);
			int idx = (int)(uintptr_t)io->user_data;

			if (io->result != (int64_t)s->bs)
				bl_die("phx batch read at %" PRIu64
				       ": %" PRId64,
				       s->reqs[idx].off, io->result);
			s->lat[idx] = bl_now() - start[q];
			finished++;
			if (next == s->n)
				continue;
			io->file_off = (int64_t)s->reqs[next].off;
			io->user_data = (void *)(uintptr_t)next;
			s->slot_of[next] = (int)q;
			start[q] = bl_now();
			next++;
			/* phx_batch_wait starts the round's refills at once */
			if (phx_batch_queue(batch, io, 1) != 1)
				bl_die("phx_batch_queue: %s",
				       phx_strerror_last());
		}
	}
	t0 = bl_now() - t0;
	phx_batch_destroy(batch);
	return t0;
}

/* ---- synchronous calls from QD threads ----------------------------------- */

struct sm_thread {
	struct sm *s;
	unsigned int idx;
	bool cufile;
	int err;
	int errnum; /* errno after a failed cuFileRead */
	pthread_t th;
};

static void *sync_main(void *arg)
{
	struct sm_thread *t = arg;
	struct sm *s = t->s;

	kb_thread_ctx();
	for (int i = (int)t->idx; i < s->n; i += (int)s->qd) {
		double t0 = bl_now();
		int64_t got;

		if (t->cufile) {
			got = blcf.cuFileRead(
				s->cufh, (void *)(uintptr_t)s->dm.dptr, s->bs,
				(off_t)s->reqs[i].off, (off_t)(t->idx * s->bs));
		} else {
			struct phx_io io = {
				.op = PHX_OP_READ,
				.fd = s->fd,
				.file_off = (int64_t)s->reqs[i].off,
				.dptr = s->dm.dptr + t->idx * s->bs,
				.len = s->bs,
			};

			got = phx_io_run(s->b->dev, &io);
		}
		if (got != (int64_t)s->bs) {
			t->err = (int)got;
			t->errnum = errno;
			return NULL;
		}
		s->lat[i] = bl_now() - t0;
		s->slot_of[i] = (int)t->idx;
	}
	return NULL;
}

static double run_threads(struct sm *s, bool cufile)
{
	struct sm_thread *t = calloc(s->qd, sizeof(*t));
	double t0 = bl_now();

	if (!t)
		bl_die("out of host memory");
	for (unsigned int q = 0; q < s->qd; q++) {
		t[q] = (struct sm_thread){ .s = s, .idx = q, .cufile = cufile };
		if (pthread_create(&t[q].th, NULL, sync_main, &t[q]))
			bl_die("cannot start thread %u of %u", q, s->qd);
	}
	for (unsigned int q = 0; q < s->qd; q++)
		pthread_join(t[q].th, NULL);
	t0 = bl_now() - t0;
	for (unsigned int q = 0; q < s->qd; q++) {
		char why[200];

		if (t[q].err && cufile)
			bl_die("cuFileRead of %" PRIu64 " bytes returned %s",
			       s->bs,
			       bl_cufile_ret(t[q].err, t[q].errnum, why,
					     sizeof(why)));
		if (t[q].err)
			bl_die("phx_io_run returned %d: %s", t[q].err,
			       phx_strerror_last());
	}
	free(t);
	return t0;
}

/* ---- cuFile batch -------------------------------------------------------- */

/* A cuFile batch run's slots: those free, and when each one's read began. */
struct sm_batch {
	struct sm *s;
	unsigned int free_slots[KB_MAX_QD], nfree;
	double start[KB_MAX_QD];
};

static void sm_batch_fill(void *ctx, int i, CUfileIOParams_t *p)
{
	struct sm_batch *sb = ctx;
	struct sm *s = sb->s;
	unsigned int q = sb->free_slots[--sb->nfree];

	kb_batch_param(p, s->cufh, (void *)(uintptr_t)s->dm.dptr,
		       (off_t)(q * s->bs), (off_t)s->reqs[i].off, s->bs, 0);
	s->slot_of[i] = (int)q;
	sb->start[q] = bl_now();
}

static void sm_batch_done(void *ctx, int i, const CUfileIOEvents_t *ev)
{
	struct sm_batch *sb = ctx;
	struct sm *s = sb->s;
	unsigned int q = (unsigned int)s->slot_of[i];

	if (ev->status != BL_CUFILE_COMPLETE || ev->ret != s->bs)
		bl_die("cuFile batch read at %" PRIu64 ": status %d, %zu bytes",
		       s->reqs[i].off, ev->status, ev->ret);
	s->lat[i] = bl_now() - sb->start[q];
	sb->free_slots[sb->nfree++] = q;
}

static double run_cubatch(struct sm *s)
{
	struct sm_batch sb = { .s = s };
	void *batch = NULL;
	CUfileError_t e = blcf.cuFileBatchIOSetUp(&batch, s->qd);
	double t;

	if (e.err) {
		snprintf(s->note, sizeof(s->note), "cuFileBatchIOSetUp(%u): %s",
			 s->qd, kb_cferr(e));
		return -1;
	}
	for (unsigned int q = 0; q < s->qd; q++)
		sb.free_slots[sb.nfree++] = s->qd - 1 - q;
	t = kb_batch_run(batch, s->qd, s->n, sm_batch_fill, sm_batch_done, &sb,
			 s->note, sizeof(s->note));
	blcf.cuFileBatchIODestroy(batch);
	return t;
}

/* ---- one case ------------------------------------------------------------- */

static void verify(struct sm *s, enum sm_peer p)
{
	int last[KB_MAX_QD];

	for (unsigned int q = 0; q < s->qd; q++)
		last[q] = -1;
	for (int i = 0; i < s->n; i++)
		last[s->slot_of[i]] = i;
	for (unsigned int q = 0; q < s->qd; q++) {
		int i = last[q];

		if (i < 0)
			continue;
		if (p == SM_RAW) {
			int64_t bad = bl_check((char *)s->b->host + q * s->bs,
					       s->reqs[i].off, s->bs);

			if (bad >= 0)
				bl_die("%s: wrong bytes at file offset %" PRId64,
				       sm_names[p], bad);
		} else {
			kb_check_dmem(s->b, sm_names[p], &s->dm, q * s->bs,
				      s->reqs[i].off, s->bs);
		}
	}
}

/*
 * One run of peer @p into @r (timed unless @warm_up); false, with @r's
 * note, where the peer cannot run.
 */
static bool measure_run(struct sm *s, enum sm_peer p, struct kb_result *r,
			bool warm_up)
{
	double t, cpu0, cpu;

	s->note[0] = 0;
	if (p == SM_RAW)
		memset(s->b->host, 0, s->qd * s->bs);
	else
		kb_dmem_zero(s->b, &s->dm);
	kb_cold(s->b);
	cpu0 = bl_cpu_seconds();
	switch (p) {
	case SM_RAW:
		t = kb_uring(s->fd, false, s->reqs, s->n, s->qd, s->b->host,
			     s->bs, false, s->lat, s->slot_of);
		break;
	case SM_BATCH:
	case SM_POLL:
		t = run_batch(s, p == SM_POLL);
		break;
	case SM_PHX:
		t = run_threads(s, false);
		break;
	case SM_CUBATCH:
		t = run_cubatch(s);
		break;
	default:
		t = run_threads(s, true);
		break;
	}
	cpu = bl_cpu_seconds() - cpu0;
	if (t < 0) {
		snprintf(r->note, sizeof(r->note), "%s", s->note);
		r->n = 0;
		return false;
	}
	verify(s, p);
	if (warm_up)
		return true;
	r->v[r->n] = s->n / t;
	r->p50[r->n] = 1e6 * bl_percentile(s->lat, s->n, 0.50);
	r->p99[r->n] = 1e6 * bl_percentile(s->lat, s->n, 0.99);
	r->cpu[r->n] = 1e6 * cpu / s->n;
	r->n++;
	return true;
}

/*
 * Every peer at one size and depth into @row.  The disk's rate drifts
 * from one second to the next, so the peers take turns: one untimed run
 * each, then a timed run of each per round, the first peer of a round
 * moving on by one each round, so every peer's median comes from the
 * same stretch of time.
 */
static void measure(struct sm *s, const char *group,
		    struct kb_result *row[SM_PEERS])
{
	bool ok[SM_PEERS];

	for (int p = 0; p < SM_PEERS; p++) {
		row[p] = kb_result(group, sm_names[p], "IOPS", p == SM_RAW,
				   p == SM_BATCH);
		ok[p] = true;
		if ((p == SM_CUBATCH || p == SM_CUSYNC) && !s->cufh) {
			snprintf(row[p]->note, sizeof(row[p]->note), "%s",
				 s->b->cufile_why ? s->b->cufile_why : s->note);
			ok[p] = false;
		}
	}
	for (int run = -1; run < s->b->runs; run++)
		for (int i = 0; i < SM_PEERS; i++) {
			int p = (i + (run < 0 ? 0 : run)) % SM_PEERS;

			if (ok[p])
				ok[p] = measure_run(s, (enum sm_peer)p, row[p],
						    run < 0);
		}
}

static const char *const sm_short[SM_PEERS] = {
	"io_uring (limit)", "phx batch",    "phx batch, polled",
	"phx_io_run x QD",  "cuFile batch", "cuFileRead x QD",
};

typedef struct kb_result *sm_table[8][8][SM_PEERS];

/* One table cell: @r's median against the row's limit @lim. */
typedef void sm_cell_fn(char *cell, size_t len, const struct kb_result *r,
			const struct kb_result *lim);

/* " (0.83x)": @v against the row's limit @lim (IOPS, or CPU per read). */
static void ratio_to_limit(char *out, size_t len, double v,
			   const struct kb_result *r,
			   const struct kb_result *lim, bool cpu)
{
	out[0] = 0;
	if (r != lim && lim && lim->n)
		snprintf(out, len, " (%.2fx)",
			 v / bl_median(cpu ? lim->cpu : lim->v, lim->n));
}

static void iops_cell(char *cell, size_t len, const struct kb_result *r,
		      const struct kb_result *lim)
{
	double v = bl_median(r->v, r->n);
	char ratio[16];

	ratio_to_limit(ratio, sizeof(ratio), v, r, lim, false);
	snprintf(cell, len, "%.1fk%s %.0f/%.0f", v / 1e3, ratio,
		 bl_median(r->p50, r->n), bl_median(r->p99, r->n));
}

static void cpu_cell(char *cell, size_t len, const struct kb_result *r,
		     const struct kb_result *lim)
{
	double v = bl_median(r->cpu, r->n);
	char ratio[16];

	ratio_to_limit(ratio, sizeof(ratio), v, r, lim, true);
	snprintf(cell, len, "%.1f%s", v, ratio);
}

/* One row per block size and queue depth, the peers side by side. */
static void print_side_by_side(sm_table res, const struct kb_opts *o,
			       const char *title, sm_cell_fn *cell_of)
{
	printf("\n%s\n", title);
	printf("%-5s %4s", "size", "QD");
	for (int p = 0; p < SM_PEERS; p++)
		printf(" %-25s", sm_short[p]);
	printf("\n");
	for (int si = 0; si < o->nsizes; si++) {
		for (int qi = 0; qi < o->nqds; qi++) {
			struct kb_result **row = res[si][qi];
			char size[24];

			snprintf(size, sizeof(size), "%" PRIu64 "K",
				 o->sizes[si] / KiB);
			printf("%-5s %4d", size, o->qds[qi]);
			for (int p = 0; p < SM_PEERS; p++) {
				char cell[64] = "n/a";

				if (row[p] && row[p]->n)
					cell_of(cell, sizeof(cell), row[p],
						row[SM_RAW]);
				printf(" %-25s", cell);
			}
			printf("\n");
		}
	}
	fflush(stdout);
}

void kb_mode_small(struct kb *b, const struct kb_opts *o)
{
	unsigned int seed = 4096;
	struct sm s = { .b = b };
	static sm_table res;

	s.fd = open(b->path, O_RDONLY | O_DIRECT);
	if (s.fd < 0)
		bl_die("opening %s with O_DIRECT: %s", b->path,
		       strerror(errno));
	if (!b->cufile_why) {
		CUfileDescr_t d = { .type = 1 };
		CUfileError_t e;

		d.handle.fd = s.fd;
		e = blcf.cuFileHandleRegister(&s.cufh, &d);
		if (e.err) {
			snprintf(s.note, sizeof(s.note),
				 "cuFileHandleRegister: %s", kb_cferr(e));
			s.cufh = NULL;
		}
	}
	for (int si = 0; si < o->nsizes; si++) {
		s.bs = o->sizes[si];
		for (int qi = 0; qi < o->nqds; qi++) {
			char group[48];

			s.qd = (unsigned int)o->qds[qi];
			if (s.qd > KB_MAX_QD || s.qd * s.bs > KB_HOST)
				bl_die("queue depth %u of %" PRIu64
				       " KiB is too much",
				       s.qd, s.bs / KiB);
			s.n = (int)(o->ops > s.qd * 64ULL ? o->ops :
							    s.qd * 64ULL);
			s.reqs = calloc(s.n, sizeof(*s.reqs));
			s.lat = calloc(s.n, sizeof(*s.lat));
			s.slot_of = calloc(s.n, sizeof(*s.slot_of));
			if (!s.reqs || !s.lat || !s.slot_of)
				bl_die("out of host memory");
			for (int i = 0; i < s.n; i++) {
				uint64_t slots = b->size / s.bs;

				s.reqs[i].off =
					(((uint64_t)rand_r(&seed) << 31 ^
					  (uint64_t)rand_r(&seed)) %
					 slots) *
					s.bs;
				s.reqs[i].len = s.bs;
			}
			kb_dmem_alloc(b, &s.dm, s.qd * s.bs);
			snprintf(group, sizeof(group),
				 "rand %" PRIu64 "K QD%u cold", s.bs / KiB,
				 s.qd);
			bl_note("%s: %d reads...", group, s.n);
			measure(&s, group, res[si][qi]);
			kb_dmem_free(b, &s.dm);
			free(s.reqs);
			free(s.lat);
			free(s.slot_of);
		}
	}
	if (s.cufh)
		blcf.cuFileHandleDeregister(s.cufh);
	close(s.fd);
	kb_print_table(
		"Small random reads, cold (IOPS; x us = against phx batch)",
		true);
	print_side_by_side(
		res, o,
		"Small random reads side by side: kIOPS (x io_uring) p50/p99 us",
		iops_cell);
	print_side_by_side(
		res, o,
		"CPU time of the whole process per read, us (x io_uring)",
		cpu_cell);
}
