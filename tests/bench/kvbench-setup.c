/* SPDX-License-Identifier: MIT */
/*
 * kvbench-setup.c - what a process pays before its first bytes move:
 * loading the library, opening the driver, registering 16 MiB and 1 GiB
 * of GPU memory and a file, the first 4 KiB read (cold file), a second
 * one, and closing - through libphxfile (LMCache's path), libphoenix's
 * own API, and cuFile.
 *
 * Each stack runs in a fresh child process, so "first" is really the
 * first; the CUDA context, which every stack needs, is created and
 * timed before the stack starts and kept out of its rows.  The parent
 * never touches the GPU (CUDA does not survive fork).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvbench.h"

enum step {
	ST_CTX,
	ST_LOAD,
	ST_OPEN,
	ST_REG16,
	ST_REG1G,
	ST_HANDLE,
	ST_FIRST,
	ST_NEXT,
	ST_CLOSE,
	ST_N
};

static const char *const step_names[ST_N] = {
	"CUDA context (every stack)",
	"load the library",
	"driver/device open",
	"register 16 MiB",
	"register 1 GiB",
	"register the file",
	"first 4 KiB read (cold)",
	"next 4 KiB read",
	"close",
};

enum stack { SK_PHXFILE, SK_PHX, SK_CUFILE, SK_N };

static const char *const stack_names[SK_N] = { "phxFile (LMCache)",
					       "libphoenix", "cuFile" };

struct child_out {
	double t[ST_N]; /* seconds; NAN: not part of this stack */
	int cuda;
	char err[160];
};

/* GPU memory for the registrations, or host memory on the simulated
 * device (where device addresses are host addresses). */
static uint64_t mem_alloc(bool cuda, uint64_t size)
{
	CUdeviceptr p;
	void *h;

	if (cuda) {
		if (blcu.cuMemAlloc_v2(&p, size))
			bl_die("cuMemAlloc(%" PRIu64 " MiB) failed",
			       size / MiB);
		return p;
	}
	h = aligned_alloc(4096, size);
	if (!h)
		bl_die("out of host memory");
	return (uint64_t)(uintptr_t)h;
}

static void check_first(bool cuda, uint64_t dst)
{
	uint64_t host[512];

	if (cuda)
		blcu.cuMemcpyDtoH_v2(host, dst, sizeof(host));
	else
		memcpy(host, (void *)(uintptr_t)dst, sizeof(host));
	if (bl_check(host, 0, sizeof(host)) >= 0)
		bl_die("the first 4 KiB read moved wrong bytes");
}

/* Steps of the cuFile stack. */
static void stack_cufile(struct kb *b, struct child_out *o, bool cuda)
{
	uint64_t m16 = mem_alloc(cuda, 16 * MiB), m1g = mem_alloc(cuda, GiB);
	CUfileDescr_t d = { .type = 1 };
	CUfileError_t e;
	void *fh = NULL;
	double t;
	ssize_t r;

	if (!cuda)
		bl_die("cuFile needs a CUDA device");
	t = bl_now();
	kb_load_cufile(b);
	if (b->cufile_why)
		bl_die("%s", b->cufile_why);
	o->t[ST_LOAD] = bl_now() - t;
	t = bl_now();
	e = blcf.cuFileDriverOpen();
	o->t[ST_OPEN] = bl_now() - t;
	if (e.err)
		bl_die("cuFileDriverOpen: error %d", e.err);
	t = bl_now();
	e = blcf.cuFileBufRegister((void *)(uintptr_t)m16, 16 * MiB, 0);
	o->t[ST_REG16] = bl_now() - t;
	if (e.err)
		bl_die("cuFileBufRegister(16 MiB): error %d", e.err);
	t = bl_now();
	e = blcf.cuFileBufRegister((void *)(uintptr_t)m1g, GiB, 0);
	o->t[ST_REG1G] = bl_now() - t;
	if (e.err)
		snprintf(o->err, sizeof(o->err),
			 "cuFileBufRegister(1 GiB): error %d", e.err);
	d.handle.fd = open(b->path, O_RDONLY | O_DIRECT);
	if (d.handle.fd < 0)
		bl_die("open %s: %s", b->path, strerror(errno));
	t = bl_now();
	e = blcf.cuFileHandleRegister(&fh, &d);
	o->t[ST_HANDLE] = bl_now() - t;
	if (e.err)
		bl_die("cuFileHandleRegister: error %d (run bench-kv.sh as root for the udev data)",
		       e.err);
	t = bl_now();
	r = blcf.cuFileRead(fh, (void *)(uintptr_t)m16, 4096, 0, 0);
	o->t[ST_FIRST] = bl_now() - t;
	if (r != 4096)
		bl_die("first cuFileRead returned %zd", r);
	check_first(true, m16);
	t = bl_now();
	r = blcf.cuFileRead(fh, (void *)(uintptr_t)m16, 4096, 1 * MiB, 4096);
	o->t[ST_NEXT] = bl_now() - t;
	if (r != 4096)
		bl_die("cuFileRead returned %zd", r);
	t = bl_now();
	blcf.cuFileBufDeregister((void *)(uintptr_t)m16);
	if (!o->err[0])
		blcf.cuFileBufDeregister((void *)(uintptr_t)m1g);
	blcf.cuFileHandleDeregister(fh);
	blcf.cuFileDriverClose();
	o->t[ST_CLOSE] = bl_now() - t;
	close(d.handle.fd);
}

/* Steps of the libphxfile stack, in the order LMCache calls it. */
static void stack_phxfile(struct kb *b, struct child_out *o, bool cuda,
			  const char *argv0)
{
	uint64_t m16 = mem_alloc(cuda, 16 * MiB), m1g = mem_alloc(cuda, GiB);
	size_t len = 4096;
	int64_t foff = 0, boff = 0, done = -1;
	void *fh = NULL;
	double t;
	int fd, ret;

	t = bl_now();
	kb_load_phxfile(b, argv0);
	if (b->phxfile_why)
		bl_die("%s", b->phxfile_why);
	o->t[ST_LOAD] = bl_now() - t;
	t = bl_now();
	ret = kbpf.DriverOpen();
	o->t[ST_OPEN] = bl_now() - t;
	if (ret)
		bl_die("phxFileDriverOpen: %s", strerror(-ret));
	t = bl_now();
	ret = kbpf.BufRegister((void *)(uintptr_t)m16, 16 * MiB);
	o->t[ST_REG16] = bl_now() - t;
	if (ret)
		bl_die("phxFileBufRegister(16 MiB): %s", strerror(-ret));
	t = bl_now();
	ret = kbpf.BufRegister((void *)(uintptr_t)m1g, GiB);
	o->t[ST_REG1G] = bl_now() - t;
	if (ret)
		bl_die("phxFileBufRegister(1 GiB): %s", strerror(-ret));
	fd = open(b->path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		bl_die("open %s: %s", b->path, strerror(errno));
	t = bl_now();
	ret = kbpf.HandleRegister(&fh, fd);
	o->t[ST_HANDLE] = bl_now() - t;
	if (ret)
		bl_die("phxFileHandleRegister: %s", strerror(-ret));
	/* a stream-ordered read on the default stream, and its wait */
	t = bl_now();
	ret = kbpf.ReadAsync(fh, (void *)(uintptr_t)m16, &len, &foff, &boff,
			     &done, NULL);
	if (!ret)
		ret = kbpf.StreamDeregister(NULL);
	o->t[ST_FIRST] = bl_now() - t;
	if (ret || done != 4096)
		bl_die("first phxFileReadAsync: %d, bytes_done %" PRId64, ret,
		       done);
	check_first(cuda, m16);
	foff = 1 * MiB;
	boff = 4096;
	t = bl_now();
	ret = kbpf.ReadAsync(fh, (void *)(uintptr_t)m16, &len, &foff, &boff,
			     &done, NULL);
	if (!ret)
		ret = kbpf.StreamDeregister(NULL);
	o->t[ST_NEXT] = bl_now() - t;
	if (ret || done != 4096)
		bl_die("phxFileReadAsync: %d, bytes_done %" PRId64, ret, done);
	t = bl_now();
	kbpf.BufDeregister((void *)(uintptr_t)m16);
	kbpf.BufDeregister((void *)(uintptr_t)m1g);
	kbpf.HandleDeregister(fh);
	kbpf.DriverClose();
	o->t[ST_CLOSE] = bl_now() - t;
	close(fd);
}

/* Steps of libphoenix's own API: no registration exists to be paid. */
static void stack_phx(struct kb *b, struct child_out *o, bool cuda)
{
	uint64_t m16 = mem_alloc(cuda, 16 * MiB);
	struct phx_device *dev;
	struct phx_io io = { .op = PHX_OP_READ, .len = 4096 };
	double t;

	t = bl_now();
	if (phx_device_open(NULL, &dev))
		bl_die("phx_device_open: %s", phx_strerror_last());
	o->t[ST_OPEN] = bl_now() - t;
	io.fd = open(b->path, O_RDONLY | O_DIRECT);
	if (io.fd < 0)
		bl_die("open %s: %s", b->path, strerror(errno));
	io.dptr = m16;
	t = bl_now();
	phx_io_run(dev, &io);
	o->t[ST_FIRST] = bl_now() - t;
	if (io.result != 4096)
		bl_die("first phx_io_run: %" PRId64 ": %s", io.result,
		       phx_strerror_last());
	check_first(cuda, m16);
	io.file_off = 1 * MiB;
	t = bl_now();
	phx_io_run(dev, &io);
	o->t[ST_NEXT] = bl_now() - t;
	t = bl_now();
	phx_device_close(dev);
	o->t[ST_CLOSE] = bl_now() - t;
	close(io.fd);
}

/* The CUDA context, unless the simulated device is asked for. */
static bool child_cuda(struct child_out *o)
{
	static const char *const names[] = {
		"cuInit",	   "cuDriverGetVersion",
		"cuGetErrorName",  "cuDeviceGet",
		"cuDeviceGetName", "cuDevicePrimaryCtxRetain",
		"cuCtxSetCurrent",
	};
	const char *env = getenv("PHX_DEVICE");
	CUcontext ctx;
	CUdevice dev;
	double t = bl_now();
	void *lib;

	if (env && strcmp(env, "cuda"))
		return false;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return false;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		void *sym = dlsym(lib, names[i]);

		if (!sym)
			return false;
		memcpy((char *)&blcu + i * sizeof(void *), &sym, sizeof(sym));
	}
	blcu.cuMemAlloc_v2 =
		(CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
	blcu.cuMemcpyDtoH_v2 = (CUresult(*)(void *, CUdeviceptr, size_t))dlsym(
		lib, "cuMemcpyDtoH_v2");
	if (!blcu.cuMemAlloc_v2 || !blcu.cuMemcpyDtoH_v2 || blcu.cuInit(0) ||
	    blcu.cuDeviceGet(&dev, 0) ||
	    blcu.cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    blcu.cuCtxSetCurrent(ctx))
		return false;
	o->t[ST_CTX] = bl_now() - t;
	return true;
}

static int run_child(struct kb *b, enum stack sk, const char *argv0,
		     struct child_out *out)
{
	int pfd[2], status;
	pid_t pid;
	ssize_t got;

	if (pipe(pfd))
		bl_die("pipe: %s", strerror(errno));
	kb_cold(b);
	pid = fork();
	if (pid < 0)
		bl_die("fork: %s", strerror(errno));
	if (!pid) {
		struct child_out o;
		bool cuda;

		close(pfd[0]);
		memset(&o, 0, sizeof(o));
		for (int i = 0; i < ST_N; i++)
			o.t[i] = NAN;
		cuda = child_cuda(&o);
		o.cuda = cuda;
		b->cuda = cuda;
		if (sk == SK_CUFILE && !cuda)
			_exit(3);
		if (sk == SK_PHXFILE)
			stack_phxfile(b, &o, cuda, argv0);
		else if (sk == SK_PHX)
			stack_phx(b, &o, cuda);
		else
			stack_cufile(b, &o, cuda);
		if (write(pfd[1], &o, sizeof(o)) != sizeof(o))
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	got = read(pfd[0], out, sizeof(*out));
	close(pfd[0]);
	waitpid(pid, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
		return -ENODEV;
	if (got != sizeof(*out) || !WIFEXITED(status) || WEXITSTATUS(status))
		return -EIO;
	return 0;
}

static void print_us(double v)
{
	if (isnan(v))
		printf(" %14s", "-");
	else if (v >= 1e-3)
		printf(" %11.2f ms", v * 1e3);
	else
		printf(" %11.1f us", v * 1e6);
}

void kb_mode_setup(struct kb *b, const struct kb_opts *o)
{
	static char argv0[4096];
	double med[SK_N][ST_N], runs[BL_MAX_RUNS];
	const char *why[SK_N] = { NULL };
	struct child_out out[SK_N][BL_MAX_RUNS];
	int n[SK_N] = { 0 };
	ssize_t l;

	(void)o;
	l = readlink("/proc/self/exe", argv0, sizeof(argv0) - 1);
	if (l <= 0)
		bl_die("readlink /proc/self/exe: %s", strerror(errno));
	argv0[l] = 0;
	for (int sk = 0; sk < SK_N; sk++) {
		for (int r = 0; r < b->runs; r++) {
			int ret = run_child(b, (enum stack)sk, argv0,
					    &out[sk][n[sk]]);

			if (ret == -ENODEV) {
				why[sk] = "no CUDA device";
				break;
			}
			if (ret) {
				why[sk] = "failed (see above)";
				break;
			}
			n[sk]++;
		}
		for (int st = 0; st < ST_N; st++) {
			for (int r = 0; r < n[sk]; r++)
				runs[r] = out[sk][r].t[st];
			med[sk][st] = n[sk] ? bl_median(runs, n[sk]) : NAN;
		}
	}

	printf("\nSet-up latency (median of %d fresh processes each; file cold before each)\n",
	       b->runs);
	printf("%-30s", "step");
	for (int sk = 0; sk < SK_N; sk++)
		printf(" %14s", stack_names[sk]);
	printf("\n");
	for (int st = 0; st < ST_N; st++) {
		printf("%-30s", step_names[st]);
		for (int sk = 0; sk < SK_N; sk++)
			print_us(med[sk][st]);
		printf("\n");
	}
	for (int sk = 0; sk < SK_N; sk++)
		if (why[sk])
			printf("%s: %s\n", stack_names[sk], why[sk]);
		else if (n[sk] && out[sk][0].err[0])
			printf("%s: %s\n", stack_names[sk], out[sk][0].err);
	if (n[SK_PHXFILE] && n[SK_CUFILE]) {
		double ours = med[SK_PHXFILE][ST_OPEN] +
			      med[SK_PHXFILE][ST_REG1G] +
			      med[SK_PHXFILE][ST_FIRST];

		printf("phxFile open + 1 GiB registration + first 4 KiB read = %.3f ms = %.2f%% of cuFileDriverOpen (%.1f ms)\n",
		       ours * 1e3, 100 * ours / med[SK_CUFILE][ST_OPEN],
		       med[SK_CUFILE][ST_OPEN] * 1e3);
	}
	fflush(stdout);
}
