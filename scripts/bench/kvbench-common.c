/* SPDX-License-Identifier: MIT */
/*
 * kvbench-common.c - what the phx-kvbench modes share: the peers'
 * libraries, a run of cuFile batch requests, device memory every peer can
 * address, the data file, raw io_uring, and the results table.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvbench.h"

struct kb_phxfile kbpf;

static CUcontext kb_ctx;

/* ---- libraries ---------------------------------------------------------- */

void kb_load_cuda(struct kb *b)
{
	const char *why = "", *err;
	CUdevice dev;

	b->cuda = phx_default_kind(&why) == PHX_DEVICE_CUDA;
	if (b->cuda) {
		err = bl_cuda_load();
		if (err)
			bl_die("libphoenix picked CUDA but libcuda.so.1 does not load: %s",
			       err);
		CU_CHECK(blcu.cuInit(0));
		CU_CHECK(blcu.cuDeviceGet(&dev, 0));
		CU_CHECK(blcu.cuDeviceGetName(b->gpu, sizeof(b->gpu), dev));
		/* the primary context: libphoenix's and cuFile's too */
		CU_CHECK(blcu.cuDevicePrimaryCtxRetain(&kb_ctx, dev));
		CU_CHECK(blcu.cuCtxSetCurrent(kb_ctx));
		CU_CHECK(blcu.cuMemAllocHost_v2(&b->host, KB_HOST));
	} else {
		snprintf(b->gpu, sizeof(b->gpu), "no GPU (%s)",
			 why && *why ? why : "simulated device");
		b->host = aligned_alloc(4096, KB_HOST);
		if (!b->host)
			bl_die("out of host memory");
	}
	if (phx_device_open(NULL, &b->dev))
		bl_die("opening libphoenix's default device: %s",
		       phx_strerror_last());
	kb_thread_ctx();
}

void kb_thread_ctx(void)
{
	if (kb_ctx)
		blcu.cuCtxSetCurrent(kb_ctx);
}

void kb_load_cufile(struct kb *b)
{
	b->cufile_why = b->cuda ? bl_cufile_load() : "no CUDA device";
}

const char *kb_cferr(CUfileError_t e)
{
	static char buf[200];

	return bl_cufile_err(e, errno, buf, sizeof(buf));
}

void kb_batch_param(CUfileIOParams_t *p, void *fh, void *base, off_t dev_off,
		    off_t file_off, size_t size, int opcode)
{
	memset(p, 0, sizeof(*p));
	p->mode = 1; /* CUFILE_BATCH */
	p->u.batch.devPtr_base = base;
	p->u.batch.devPtr_offset = dev_off;
	p->u.batch.file_offset = file_off;
	p->u.batch.size = size;
	p->fh = fh;
	p->opcode = opcode;
}

/*
 * One turn of a cuFile batch: submit the @m requests at @p (none: only
 * wait), then wait for at least one of the *@inflight; their events in
 * @ev, *@nr of them, no longer in *@inflight's count until the caller
 * says so.  0, or -1 with the failing call in @note.
 */
static int kb_batch_turn(void *batch, CUfileIOParams_t *p, unsigned int m,
			 unsigned int *inflight, CUfileIOEvents_t *ev,
			 unsigned int *nr, char *note, size_t size)
{
	CUfileError_t e;

	if (m) {
		e = blcf.cuFileBatchIOSubmit(batch, m, p, 0);
		if (e.err) {
			snprintf(note, size, "cuFileBatchIOSubmit: %s",
				 kb_cferr(e));
			return -1;
		}
		*inflight += m;
	}
	*nr = *inflight;
	e = blcf.cuFileBatchIOGetStatus(batch, 1, nr, ev, NULL);
	if (e.err) {
		snprintf(note, size, "cuFileBatchIOGetStatus: %s", kb_cferr(e));
		return -1;
	}
	return 0;
}

double kb_batch_run(void *batch, unsigned int qd, int n,
		    void (*fill)(void *ctx, int i, CUfileIOParams_t *p),
		    void (*done)(void *ctx, int i, const CUfileIOEvents_t *ev),
		    void *ctx, char *note, size_t size)
{
	CUfileIOParams_t p[KB_MAX_QD];
	CUfileIOEvents_t ev[KB_MAX_QD];
	unsigned int inflight = 0, nr;
	int next = 0, finished = 0;
	double t0 = bl_now();

	while (finished < n) {
		unsigned int m = 0;

		for (; inflight + m < qd && next < n; m++, next++) {
			fill(ctx, next, &p[m]);
			p[m].cookie = (void *)(uintptr_t)next;
		}
		if (kb_batch_turn(batch, p, m, &inflight, ev, &nr, note, size))
			return -1;
		for (unsigned int i = 0; i < nr; i++)
			done(ctx, (int)(uintptr_t)ev[i].cookie, &ev[i]);
		inflight -= nr;
		finished += (int)nr;
	}
	return bl_now() - t0;
}

void kb_load_phxfile(struct kb *b, const char *argv0)
{
	static const char *const names[] = {
		"phxFileDriverOpen",	 "phxFileDriverClose",
		"phxFileBufRegister",	 "phxFileBufDeregister",
		"phxFileHandleRegister", "phxFileHandleDeregister",
		"phxFileStreamRegister", "phxFileStreamDeregister",
		"phxFileReadAsync",	 "phxFileWriteAsync",
	};
	static char path[4096], why[4200];
	const char *env = getenv("PHX_PHXFILE_LIBRARY"), *missing;
	const char *slash = strrchr(argv0, '/');

	_Static_assert(sizeof(names) / sizeof(names[0]) ==
			       sizeof(kbpf) / sizeof(void *),
		       "one name per phxFile entry point");
	if (env)
		snprintf(path, sizeof(path), "%s", env);
	else
		snprintf(path, sizeof(path), "%.*slibphxfile.so",
			 slash ? (int)(slash - argv0 + 1) : 0, argv0);
	b->phxfile_path = path;
	if (!bl_dl_load(&b->phxfile_path, 1, &kbpf, names,
			sizeof(names) / sizeof(names[0]), &missing)) {
		snprintf(why, sizeof(why),
			 "%s does not load (set PHX_PHXFILE_LIBRARY)", path);
		b->phxfile_why = why;
		return;
	}
	if (missing) {
		snprintf(why, sizeof(why), "%s lacks %s", path, missing);
		b->phxfile_why = why;
	}
}

/* ---- device memory and streams ------------------------------------------ */

void kb_dmem_alloc(struct kb *b, struct kb_dmem *m, uint64_t size)
{
	memset(m, 0, sizeof(*m));
	m->size = size;
	if (b->cuda) {
		CUdeviceptr p;

		CU_CHECK(blcu.cuMemAlloc_v2(&p, size));
		m->dptr = p;
		return;
	}
	if (phx_buf_alloc(b->dev, size, 0, &m->buf))
		bl_die("allocating %" PRIu64 " MiB on %s: %s", size / MiB,
		       b->gpu, phx_strerror_last());
	m->dptr = phx_buf_dptr(m->buf);
}

void kb_dmem_free(struct kb *b, struct kb_dmem *m)
{
	if (b->cuda)
		blcu.cuMemFree_v2(m->dptr);
	else
		phx_buf_free(m->buf);
	memset(m, 0, sizeof(*m));
}

void kb_dmem_to_host(struct kb *b, void *dst, const struct kb_dmem *m,
		     uint64_t off, uint64_t len)
{
	if (b->cuda)
		CU_CHECK(blcu.cuMemcpyDtoH_v2(dst, m->dptr + off, len));
	else if (phx_memcpy_from_buf(dst, m->buf, off, len))
		bl_die("reading device memory back: %s", phx_strerror_last());
}

void kb_dmem_zero(struct kb *b, struct kb_dmem *m)
{
	if (b->cuda) {
		CU_CHECK(blcu.cuMemsetD8_v2(m->dptr, 0, m->size));
		return;
	}
	memset(b->host, 0, KB_HOST);
	for (uint64_t off = 0; off < m->size; off += KB_HOST)
		kb_dmem_from_host(b, m, off, b->host,
				  m->size - off < KB_HOST ? m->size - off :
							    KB_HOST);
}

void kb_dmem_from_host(struct kb *b, struct kb_dmem *m, uint64_t off,
		       const void *src, uint64_t len)
{
	if (b->cuda)
		CU_CHECK(blcu.cuMemcpyHtoD_v2(m->dptr + off, src, len));
	else if (phx_memcpy_to_buf(m->buf, off, src, len))
		bl_die("filling device memory: %s", phx_strerror_last());
}

/*
 * A native stream: a CUstream, or on the simulated device a libphoenix
 * stream's native handle (libphxfile accepts either as its stream).
 */
void *kb_stream_new(struct kb *b)
{
	struct phx_stream *s;
	CUstream cs;

	if (b->cuda) {
		CU_CHECK(blcu.cuStreamCreate(&cs, 1 /* non-blocking */));
		return cs;
	}
	if (phx_stream_create(b->dev, &s))
		bl_die("creating a stream on %s: %s", b->gpu,
		       phx_strerror_last());
	/* the wrapper stays alive as long as the process: it owns the native */
	return phx_stream_native(s);
}

void kb_stream_free(struct kb *b, void *native)
{
	if (b->cuda)
		blcu.cuStreamDestroy_v2(native);
}

/* ---- the data file ------------------------------------------------------ */

void kb_fill(void *p, uint64_t file_off, uint64_t len)
{
	uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = bl_gen_word(file_off / 8 + i);
}

/*
 * Copy @len device bytes at @off back and check them as file bytes: the
 * first wrong file offset, or -1.
 */
int64_t kb_find_bad_dmem(struct kb *b, const struct kb_dmem *m, uint64_t off,
			 uint64_t file_off, uint64_t len)
{
	for (uint64_t done = 0; done < len; done += KB_HOST) {
		uint64_t n = len - done < KB_HOST ? len - done : KB_HOST;
		int64_t bad;

		kb_dmem_to_host(b, b->host, m, off + done, n);
		bad = bl_check(b->host, file_off + done, n);
		if (bad >= 0)
			return bad;
	}
	return -1;
}

void kb_check_dmem(struct kb *b, const char *what, const struct kb_dmem *m,
		   uint64_t off, uint64_t file_off, uint64_t len)
{
	int64_t bad = kb_find_bad_dmem(b, m, off, file_off, len);

	if (bad >= 0)
		bl_die("%s: wrong bytes for file offset %" PRId64
		       "; the result does not count",
		       what, bad);
}

static void fill_file(void *arg, void *p, uint64_t file_off, uint64_t len)
{
	(void)arg;
	kb_fill(p, file_off, len);
}

void kb_make_file(struct kb *b)
{
	bl_make_file(b->path, b->size, b->host, KB_HOST, fill_file, NULL);
}

/* Nothing of the file in the page cache. */
void kb_cold(struct kb *b)
{
	int fd = open(b->path, O_RDONLY);

	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	if (b->root) {
		fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
		if (fd >= 0) {
			if (write(fd, "1\n", 2) != 2)
				b->root = false;
			close(fd);
		}
	}
}

/* The @n ranges of @len bytes at @offs in the page cache. */
void kb_warm(struct kb *b, const uint64_t *offs, int n, uint64_t len)
{
	int fd = open(b->path, O_RDONLY);

	if (fd < 0)
		bl_die("cannot open %s: %s", b->path, strerror(errno));
	for (int i = 0; i < n; i++)
		for (uint64_t d = 0; d < len; d += KB_HOST) {
			uint64_t m = len - d < KB_HOST ? len - d : KB_HOST;

			if (pread(fd, b->host, m, offs[i] + d) < 0)
				bl_die("reading %s: %s", b->path,
				       strerror(errno));
		}
	close(fd);
}

/* ---- raw io_uring ------------------------------------------------------- */

double kb_uring(int fd, bool write, const struct kb_req *reqs, int n,
		unsigned int qd, void *host, uint64_t slot, bool per_req,
		double *lat, int *slot_of)
{
	double t0, start[KB_MAX_QD];
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	int next = 0, done = 0, inflight = 0, ret;
	unsigned int free_slots[KB_MAX_QD], nfree = qd;

	if (qd > KB_MAX_QD)
		bl_die("queue depth %u is over %d", qd, KB_MAX_QD);
	for (unsigned int i = 0; i < qd; i++)
		free_slots[i] = qd - 1 - i;
	ret = io_uring_queue_init(qd < 8 ? 8 : qd, &ring, 0);
	if (ret)
		bl_die("io_uring_queue_init: %s", strerror(-ret));
	t0 = bl_now();
	while (done < n) {
		while (nfree && next < n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			unsigned int s = free_slots[--nfree];
			char *p = (char *)host +
				  (per_req ? (uint64_t)next : s) * slot;

			if (write)
				io_uring_prep_write(sqe, fd, p, reqs[next].len,
						    reqs[next].off);
			else
				io_uring_prep_read(sqe, fd, p, reqs[next].len,
						   reqs[next].off);
			io_uring_sqe_set_data64(sqe, (uint64_t)next << 16 | s);
			if (slot_of)
				slot_of[next] = (int)s;
			start[s] = bl_now();
			next++;
			inflight++;
		}
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0)
			bl_die("io_uring_submit_and_wait: %s", strerror(-ret));
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			uint64_t data = io_uring_cqe_get_data64(cqe);
			unsigned int s = data & 0xffff;
			int i = (int)(data >> 16);

			if (cqe->res != (int)reqs[i].len)
				bl_die("raw io_uring %s of %" PRIu64
				       " bytes at %" PRIu64 ": %s",
				       write ? "write" : "read", reqs[i].len,
				       reqs[i].off,
				       cqe->res < 0 ? strerror(-cqe->res) :
						      "short transfer");
			if (lat)
				lat[i] = bl_now() - start[s];
			free_slots[nfree++] = s;
			inflight--;
			done++;
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	t0 = bl_now() - t0;
	io_uring_queue_exit(&ring);
	return t0;
}

/* ---- results ------------------------------------------------------------ */

static struct kb_result results[512];
static int nresults;

void kb_results_reset(void)
{
	nresults = 0;
}

struct kb_result *kb_result(const char *group, const char *peer,
			    const char *unit, bool limit, bool ours)
{
	struct kb_result *r;

	if (nresults == (int)(sizeof(results) / sizeof(results[0])))
		bl_die("too many results");
	r = &results[nresults++];
	memset(r, 0, sizeof(*r));
	snprintf(r->group, sizeof(r->group), "%s", group);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	r->unit = unit;
	r->limit = limit;
	r->ours = ours;
	return r;
}

static double group_ref(int first, int last, bool limit)
{
	for (int i = first; i < last; i++)
		if ((limit ? results[i].limit : results[i].ours) &&
		    results[i].n)
			return bl_median(results[i].v, results[i].n);
	return NAN;
}

/*
 * One table: per result the median and spread of its runs, its ratio to
 * the group's limit and to the group's Phoenix row ("us").
 */
void kb_print_table(const char *title, bool latency)
{
	printf("\n%s\n", title);
	printf("%-26s %-32s %15s %7s %8s %7s", "case", "peer", "median",
	       "spread", "x limit", "x us");
	if (latency)
		printf(" %9s %9s", "p50 us", "p99 us");
	printf("\n");
	for (int i = 0; i < nresults;) {
		int last = i;
		double lim, ours;

		while (last < nresults &&
		       !strcmp(results[last].group, results[i].group))
			last++;
		lim = group_ref(i, last, true);
		ours = group_ref(i, last, false);
		for (; i < last; i++) {
			struct kb_result *r = &results[i];
			double med, lo, hi;

			if (!r->n) {
				printf("%-26s %-32s %15s  %s\n", r->group,
				       r->peer, "n/a", r->note);
				continue;
			}
			med = bl_median(r->v, r->n);
			lo = hi = r->v[0];
			for (int k = 1; k < r->n; k++) {
				lo = r->v[k] < lo ? r->v[k] : lo;
				hi = r->v[k] > hi ? r->v[k] : hi;
			}
			printf("%-26s %-32s %10.4g %-4s %6.1f%% %7.2fx %6.2fx",
			       r->group, r->peer, med, r->unit,
			       med ? 100 * (hi - lo) / med : 0, med / lim,
			       med / ours);
			if (latency)
				printf(" %9.1f %9.1f", bl_median(r->p50, r->n),
				       bl_median(r->p99, r->n));
			if (r->note[0])
				printf("  %s", r->note);
			printf("\n");
		}
	}
	fflush(stdout);
}
