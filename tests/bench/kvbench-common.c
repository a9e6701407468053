/* SPDX-License-Identifier: MIT */
/*
 * kvbench-common.c - what the phx-kvbench modes share: the peers'
 * libraries, device memory every peer can address, the data file, raw
 * io_uring, and the results table.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvbench.h"

struct kb_cuda kbcu;
struct kb_cufile kbcf;
struct kb_phxfile kbpf;

static CUcontext kb_ctx;

void kb_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("phx-kvbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void kb_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

double kb_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *kb_cu_err(CUresult r)
{
	const char *s = NULL;

	if (kbcu.cuGetErrorName && !kbcu.cuGetErrorName(r, &s) && s)
		return s;
	return "unknown CUDA error";
}

#define CU_CHECK(call)                                                 \
	do {                                                           \
		CUresult r_ = (call);                                  \
		if (r_)                                                \
			kb_die("%s failed: %s", #call, kb_cu_err(r_)); \
	} while (0)

/* Resolve @n names into the function-pointer table at @table. */
static const char *load_syms(void *lib, void *table, const char *const *names,
			     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		void *sym = dlsym(lib, names[i]);

		if (!sym)
			return names[i];
		memcpy((char *)table + i * sizeof(void *), &sym, sizeof(sym));
	}
	return NULL;
}

/* ---- libraries ---------------------------------------------------------- */

void kb_load_cuda(struct kb *b)
{
	static const char *const names[] = {
		"cuInit",
		"cuDriverGetVersion",
		"cuGetErrorName",
		"cuDeviceGet",
		"cuDeviceGetName",
		"cuDevicePrimaryCtxRetain",
		"cuCtxSetCurrent",
		"cuMemAlloc_v2",
		"cuMemFree_v2",
		"cuMemAllocHost_v2",
		"cuMemFreeHost",
		"cuMemcpyHtoD_v2",
		"cuMemcpyDtoH_v2",
		"cuMemsetD8_v2",
		"cuStreamCreate",
		"cuStreamDestroy_v2",
		"cuStreamSynchronize",
	};
	const char *why = "", *missing;
	CUdevice dev;
	void *lib;

	_Static_assert(sizeof(names) / sizeof(names[0]) ==
			       sizeof(kbcu) / sizeof(void *),
		       "one name per CUDA entry point");
	b->cuda = phx_default_kind(&why) == PHX_DEVICE_CUDA;
	if (b->cuda) {
		lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!lib)
			kb_die("libphoenix picked CUDA but libcuda.so.1 does not load: %s",
			       dlerror());
		missing = load_syms(lib, &kbcu, names,
				    sizeof(names) / sizeof(names[0]));
		if (missing)
			kb_die("libcuda.so.1 lacks %s: the driver is too old",
			       missing);
		CU_CHECK(kbcu.cuInit(0));
		CU_CHECK(kbcu.cuDeviceGet(&dev, 0));
		CU_CHECK(kbcu.cuDeviceGetName(b->gpu, sizeof(b->gpu), dev));
		/* the primary context: libphoenix's and cuFile's too */
		CU_CHECK(kbcu.cuDevicePrimaryCtxRetain(&kb_ctx, dev));
		CU_CHECK(kbcu.cuCtxSetCurrent(kb_ctx));
		CU_CHECK(kbcu.cuMemAllocHost_v2(&b->host, KB_HOST));
	} else {
		snprintf(b->gpu, sizeof(b->gpu), "no GPU (%s)",
			 why && *why ? why : "simulated device");
		b->host = aligned_alloc(4096, KB_HOST);
		if (!b->host)
			kb_die("out of host memory");
	}
	if (phx_device_open(NULL, &b->dev))
		kb_die("opening libphoenix's default device: %s",
		       phx_strerror_last());
	kb_thread_ctx();
}

void kb_thread_ctx(void)
{
	if (kb_ctx)
		kbcu.cuCtxSetCurrent(kb_ctx);
}

void kb_load_cufile(struct kb *b)
{
	static const char *const libs[] = {
		"libcufile.so.0",
		"libcufile.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0",
		"/usr/local/cuda/lib64/libcufile.so.0",
	};
	static const char *const names[] = {
		"cuFileDriverOpen",
		"cuFileDriverClose_v2",
		"cuFileHandleRegister",
		"cuFileHandleDeregister",
		"cuFileBufRegister",
		"cuFileBufDeregister",
		"cuFileRead",
		"cuFileWrite",
		"cuFileReadAsync",
		"cuFileWriteAsync",
		"cuFileStreamRegister",
		"cuFileStreamDeregister",
		"cuFileBatchIOSetUp",
		"cuFileBatchIOSubmit",
		"cuFileBatchIOGetStatus",
		"cuFileBatchIODestroy",
	};
	static char why[160];
	void *lib = NULL;
	const char *missing;

	_Static_assert(sizeof(names) / sizeof(names[0]) ==
			       sizeof(kbcf) / sizeof(void *),
		       "one name per cuFile entry point");
	if (!b->cuda) {
		b->cufile_why = "no CUDA device";
		return;
	}
	for (size_t i = 0; !lib && i < sizeof(libs) / sizeof(libs[0]); i++)
		lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		b->cufile_why = "libcufile.so not found";
		return;
	}
	missing =
		load_syms(lib, &kbcf, names, sizeof(names) / sizeof(names[0]));
	if (missing) {
		snprintf(why, sizeof(why), "libcufile.so lacks %s", missing);
		b->cufile_why = why;
	}
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
	void *lib;

	_Static_assert(sizeof(names) / sizeof(names[0]) ==
			       sizeof(kbpf) / sizeof(void *),
		       "one name per phxFile entry point");
	if (env)
		snprintf(path, sizeof(path), "%s", env);
	else
		snprintf(path, sizeof(path), "%.*slibphxfile.so",
			 slash ? (int)(slash - argv0 + 1) : 0, argv0);
	b->phxfile_path = path;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(why, sizeof(why),
			 "%s does not load (set PHX_PHXFILE_LIBRARY)", path);
		b->phxfile_why = why;
		return;
	}
	missing =
		load_syms(lib, &kbpf, names, sizeof(names) / sizeof(names[0]));
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

		CU_CHECK(kbcu.cuMemAlloc_v2(&p, size));
		m->dptr = p;
		return;
	}
	if (phx_buf_alloc(b->dev, size, 0, &m->buf))
		kb_die("allocating %" PRIu64 " MiB on %s: %s", size / MiB,
		       b->gpu, phx_strerror_last());
	m->dptr = phx_buf_dptr(m->buf);
}

void kb_dmem_free(struct kb *b, struct kb_dmem *m)
{
	if (b->cuda)
		kbcu.cuMemFree_v2(m->dptr);
	else
		phx_buf_free(m->buf);
	memset(m, 0, sizeof(*m));
}

void kb_dmem_to_host(struct kb *b, void *dst, const struct kb_dmem *m,
		     uint64_t off, uint64_t len)
{
	if (b->cuda)
		CU_CHECK(kbcu.cuMemcpyDtoH_v2(dst, m->dptr + off, len));
	else if (phx_memcpy_from_buf(dst, m->buf, off, len))
		kb_die("reading device memory back: %s", phx_strerror_last());
}

void kb_dmem_zero(struct kb *b, struct kb_dmem *m)
{
	if (b->cuda) {
		CU_CHECK(kbcu.cuMemsetD8_v2(m->dptr, 0, m->size));
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
		CU_CHECK(kbcu.cuMemcpyHtoD_v2(m->dptr + off, src, len));
	else if (phx_memcpy_to_buf(m->buf, off, src, len))
		kb_die("filling device memory: %s", phx_strerror_last());
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
		CU_CHECK(kbcu.cuStreamCreate(&cs, 1 /* non-blocking */));
		return cs;
	}
	if (phx_stream_create(b->dev, &s))
		kb_die("creating a stream on %s: %s", b->gpu,
		       phx_strerror_last());
	/* the wrapper stays alive as long as the process: it owns the native */
	return phx_stream_native(s);
}

void kb_stream_free(struct kb *b, void *native)
{
	if (b->cuda)
		kbcu.cuStreamDestroy_v2(native);
}

/* ---- the data file ------------------------------------------------------ */

#define KB_SEED 0x9e3779b97f4a7c15ULL

/* The 8 bytes at file offset 8 * @i: any range can be made and checked. */
uint64_t kb_gen_word(uint64_t i)
{
	uint64_t z = i * KB_SEED + KB_SEED;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void kb_fill(void *p, uint64_t file_off, uint64_t len)
{
	uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = kb_gen_word(file_off / 8 + i);
}

/* -1, or the file offset of the first wrong word. */
int64_t kb_check(const void *p, uint64_t file_off, uint64_t len)
{
	const uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		if (w[i] != kb_gen_word(file_off / 8 + i))
			return (int64_t)(file_off + i * 8);
	return -1;
}

/* Copy @len device bytes at @off back and check them as file bytes. */
void kb_check_dmem(struct kb *b, const char *what, const struct kb_dmem *m,
		   uint64_t off, uint64_t file_off, uint64_t len)
{
	for (uint64_t done = 0; done < len; done += KB_HOST) {
		uint64_t n = len - done < KB_HOST ? len - done : KB_HOST;
		int64_t bad;

		kb_dmem_to_host(b, b->host, m, off + done, n);
		bad = kb_check(b->host, file_off + done, n);
		if (bad >= 0)
			kb_die("%s: wrong bytes for file offset %" PRId64
			       "; the result does not count",
			       what, bad);
	}
}

static bool file_ok(struct kb *b)
{
	uint64_t probe[512];
	struct stat st;
	int fd = open(b->path, O_RDONLY);
	bool ok;

	if (fd < 0)
		return false;
	ok = !fstat(fd, &st) && (uint64_t)st.st_size == b->size;
	for (int i = 0; ok && i < 16; i++) {
		uint64_t off = (b->size - sizeof(probe)) / 15 * i & ~4095ULL;

		ok = pread(fd, probe, sizeof(probe), off) == sizeof(probe) &&
		     kb_check(probe, off, sizeof(probe)) < 0;
	}
	close(fd);
	return ok;
}

void kb_make_file(struct kb *b)
{
	double t0 = kb_now();
	int fd;

	if (file_ok(b))
		return;
	kb_note("creating %s (%" PRIu64 " MiB of generated bytes)...", b->path,
		b->size / MiB);
	fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		kb_die("cannot create %s: %s; pass a writable directory",
		       b->path, strerror(errno));
	for (uint64_t off = 0; off < b->size; off += KB_HOST) {
		uint64_t n = b->size - off < KB_HOST ? b->size - off : KB_HOST;

		kb_fill(b->host, off, n);
		if (pwrite(fd, b->host, n, off) != (ssize_t)n)
			kb_die("writing %s failed: %s (disk full?)", b->path,
			       strerror(errno));
	}
	if (fsync(fd) || close(fd))
		kb_die("writing %s failed: %s", b->path, strerror(errno));
	kb_note("created in %.1f s", kb_now() - t0);
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
		kb_die("cannot open %s: %s", b->path, strerror(errno));
	for (int i = 0; i < n; i++)
		for (uint64_t d = 0; d < len; d += KB_HOST) {
			uint64_t m = len - d < KB_HOST ? len - d : KB_HOST;

			if (pread(fd, b->host, m, offs[i] + d) < 0)
				kb_die("reading %s: %s", b->path,
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
		kb_die("queue depth %u is over %d", qd, KB_MAX_QD);
	for (unsigned int i = 0; i < qd; i++)
		free_slots[i] = qd - 1 - i;
	ret = io_uring_queue_init(qd < 8 ? 8 : qd, &ring, 0);
	if (ret)
		kb_die("io_uring_queue_init: %s", strerror(-ret));
	t0 = kb_now();
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
			start[s] = kb_now();
			next++;
			inflight++;
		}
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0)
			kb_die("io_uring_submit_and_wait: %s", strerror(-ret));
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			uint64_t data = io_uring_cqe_get_data64(cqe);
			unsigned int s = data & 0xffff;
			int i = (int)(data >> 16);

			if (cqe->res != (int)reqs[i].len)
				kb_die("raw io_uring %s of %" PRIu64
				       " bytes at %" PRIu64 ": %s",
				       write ? "write" : "read", reqs[i].len,
				       reqs[i].off,
				       cqe->res < 0 ? strerror(-cqe->res) :
						      "short transfer");
			if (lat)
				lat[i] = kb_now() - start[s];
			free_slots[nfree++] = s;
			inflight--;
			done++;
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	t0 = kb_now() - t0;
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
		kb_die("too many results");
	r = &results[nresults++];
	memset(r, 0, sizeof(*r));
	snprintf(r->group, sizeof(r->group), "%s", group);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	r->unit = unit;
	r->limit = limit;
	r->ours = ours;
	return r;
}

static int cmp_double(const void *a, const void *c)
{
	double x = *(const double *)a, y = *(const double *)c;

	return x < y ? -1 : x > y;
}

double kb_median(const double *v, int n)
{
	double s[KB_MAX_RUNS];

	if (!n)
		return NAN;
	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The @p quantile (0..1) of @v; sorts @v. */
double kb_percentile(double *v, int n, double p)
{
	int i;

	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	i = (int)ceil(p * n) - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static double group_ref(int first, int last, bool limit)
{
	for (int i = first; i < last; i++)
		if ((limit ? results[i].limit : results[i].ours) &&
		    results[i].n)
			return kb_median(results[i].v, results[i].n);
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
			med = kb_median(r->v, r->n);
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
				printf(" %9.1f %9.1f", kb_median(r->p50, r->n),
				       kb_median(r->p99, r->n));
			if (r->note[0])
				printf("  %s", r->note);
			printf("\n");
		}
	}
	fflush(stdout);
}
