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
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvbench.h"

#define STR_(x) #x
#define STR(x) STR_(x)

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

/*
 * What a child reports, in memory it shares with the parent: filled in
 * as the child goes, so a child that dies (a signal, a library that
 * exits) still says which call it was in.
 */
struct child_out {
	double t[ST_N]; /* seconds; NAN: not part of this stack */
	int cuda;
	char call[64]; /* the call under way */
	bool closing; /* every step but the close is measured */
	char err[512]; /* why the child failed */
	char note[200]; /* what did not stop it */
};

#define CHILD_LIMIT_S 30 /* a child still running then is killed */
#define CHILD_NODEV 3 /* exit status: no CUDA device */

static struct child_out *cur; /* the child's own report */

/* In a child: say what failed, where the parent reads it, and leave at
 * once (no exit handlers: a library's may hang or crash on the way). */
static __attribute__((format(printf, 1, 2), noreturn)) void
child_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cur->err, sizeof(cur->err), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", program_invocation_short_name, cur->err);
	_exit(1);
}

/* In a child: @call starts; returns the time it starts at. */
static double child_call(const char *call)
{
	snprintf(cur->call, sizeof(cur->call), "%s", call);
	errno = 0;
	return bl_now();
}

/*
 * In a child: step @s, whose call began at @t (child_call()), is over;
 * @why, unless NULL, says how its call failed (then the child fails).
 */
static void child_step(struct child_out *o, enum step s, double t,
		       const char *why)
{
	o->t[s] = bl_now() - t;
	if (why)
		child_fail("%s: %s", cur->call, why);
}

/* GPU memory for the registrations, or host memory on the simulated
 * device (where device addresses are host addresses). */
static uint64_t mem_alloc(bool cuda, uint64_t size)
{
	CUdeviceptr p;
	CUresult r;
	void *h;

	if (cuda) {
		child_call("cuMemAlloc");
		r = blcu.cuMemAlloc_v2(&p, size);
		if (r)
			child_fail("cuMemAlloc(%" PRIu64 " MiB) failed: %s",
				   size / MiB, bl_cu_err(r));
		return p;
	}
	h = aligned_alloc(4096, size);
	if (!h)
		child_fail("out of host memory for %" PRIu64 " MiB",
			   size / MiB);
	return (uint64_t)(uintptr_t)h;
}

static void check_first(bool cuda, uint64_t dst, const char *who)
{
	uint64_t host[512];
	CUresult r;

	if (cuda) {
		r = blcu.cuMemcpyDtoH_v2(host, dst, sizeof(host));
		if (r)
			child_fail("copying %s's first 4 KiB back: %s", who,
				   bl_cu_err(r));
	} else {
		memcpy(host, (void *)(uintptr_t)dst, sizeof(host));
	}
	if (bl_check(host, 0, sizeof(host)) >= 0)
		child_fail("%s's first 4 KiB read moved wrong bytes", who);
}

/* A cuFile call that returned @e failed: its words and errno's. */
static const char *cf_err(CUfileError_t e, int errnum)
{
	static char buf[200];

	return bl_cufile_err(e, errnum, buf, sizeof(buf));
}

/*
 * The file for cuFileHandleRegister: O_DIRECT, as GDS mode needs; if
 * that registration fails, a plain descriptor (enough in compatibility
 * mode) tells whether O_DIRECT was the reason.
 */
static int cufile_register(struct kb *b, void **fh, double *took)
{
	CUfileDescr_t d = { .type = CU_FILE_HANDLE_TYPE_OPAQUE_FD };
	CUfileError_t e, e2;
	int fd, fd2, errnum;
	double t;

	fd = open(b->path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		child_fail(
			"open %s with O_DIRECT: %s (cuFile needs it in GDS mode; put the file on a disk file system)",
			b->path, strerror(errno));
	d.handle.fd = fd;
	t = child_call("cuFileHandleRegister");
	e = blcf.cuFileHandleRegister(fh, &d);
	errnum = errno;
	*took = bl_now() - t;
	if (!e.err)
		return fd;
	fd2 = open(b->path, O_RDONLY);
	if (fd2 < 0)
		child_fail("cuFileHandleRegister(O_DIRECT fd of %s): %s",
			   b->path, cf_err(e, errnum));
	d.handle.fd = fd2;
	child_call("cuFileHandleRegister (plain fd)");
	e2 = blcf.cuFileHandleRegister(fh, &d);
	if (e2.err)
		child_fail(
			"cuFileHandleRegister(%s): %s with O_DIRECT, %s without; as root bench-kv.sh writes the udev data cuFile reads (/run/udev/data); cuFile's log of the run comes before the table",
			b->path, cf_err(e, errnum), cf_err(e2, errno));
	snprintf(
		cur->note, sizeof(cur->note),
		"cuFileHandleRegister failed with an O_DIRECT fd (%s) and worked with a plain one, which the rows use",
		cf_err(e, errnum));
	close(fd);
	return fd2;
}

/* Steps of the cuFile stack. */
static void stack_cufile(struct kb *b, struct child_out *o, bool cuda)
{
	uint64_t m16, m1g;
	CUfileError_t e;
	void *fh = NULL;
	double t;
	ssize_t r;
	int fd;
	char why[200];

	if (!cuda)
		child_fail("cuFile needs a CUDA device");
	m16 = mem_alloc(cuda, 16 * MiB);
	m1g = mem_alloc(cuda, GiB);
	t = child_call("dlopen libcufile");
	kb_load_cufile(b);
	if (b->cufile_why)
		child_fail("loading cuFile: %s", b->cufile_why);
	o->t[ST_LOAD] = bl_now() - t;
	t = child_call("cuFileDriverOpen");
	e = blcf.cuFileDriverOpen();
	child_step(o, ST_OPEN, t, e.err ? cf_err(e, errno) : NULL);
	t = child_call("cuFileBufRegister(16 MiB)");
	e = blcf.cuFileBufRegister((void *)(uintptr_t)m16, 16 * MiB, 0);
	child_step(o, ST_REG16, t, e.err ? cf_err(e, errno) : NULL);
	t = child_call("cuFileBufRegister(1 GiB)");
	e = blcf.cuFileBufRegister((void *)(uintptr_t)m1g, GiB, 0);
	o->t[ST_REG1G] = bl_now() - t;
	if (e.err) {
		/* cuFile may cap what it pins; the other steps still count */
		snprintf(o->note, sizeof(o->note),
			 "cuFileBufRegister(1 GiB) failed: %s",
			 cf_err(e, errno));
		o->t[ST_REG1G] = NAN;
		m1g = 0;
	}
	fd = cufile_register(b, &fh, &o->t[ST_HANDLE]);
	t = child_call("first cuFileRead(4 KiB)");
	r = blcf.cuFileRead(fh, (void *)(uintptr_t)m16, 4096, 0, 0);
	o->t[ST_FIRST] = bl_now() - t;
	if (r != 4096)
		child_fail("first cuFileRead(4 KiB at 0) returned %s",
			   bl_cufile_ret(r, errno, why, sizeof(why)));
	check_first(true, m16, "cuFileRead");
	t = child_call("second cuFileRead(4 KiB)");
	r = blcf.cuFileRead(fh, (void *)(uintptr_t)m16, 4096, 1 * MiB, 4096);
	o->t[ST_NEXT] = bl_now() - t;
	if (r != 4096)
		child_fail("cuFileRead(4 KiB at 1 MiB) returned %s",
			   bl_cufile_ret(r, errno, why, sizeof(why)));
	cur->closing = true;
	t = child_call("cuFileBufDeregister(16 MiB)");
	e = blcf.cuFileBufDeregister((void *)(uintptr_t)m16);
	if (e.err)
		child_fail("cuFileBufDeregister(16 MiB): %s", cf_err(e, errno));
	if (m1g) {
		child_call("cuFileBufDeregister(1 GiB)");
		e = blcf.cuFileBufDeregister((void *)(uintptr_t)m1g);
		if (e.err)
			child_fail("cuFileBufDeregister(1 GiB): %s",
				   cf_err(e, errno));
	}
	child_call("cuFileHandleDeregister");
	blcf.cuFileHandleDeregister(fh);
	child_call("cuFileDriverClose");
	e = blcf.cuFileDriverClose();
	child_step(o, ST_CLOSE, t, e.err ? cf_err(e, errno) : NULL);
	close(fd);
}

/*
 * The first (@first) or the next read step of the libphxfile stack: a
 * stream-ordered read of 4 KiB at @foff into @m16 + @boff on the default
 * stream, and its wait; *@done receives its bytes.
 */
static void phxfile_read(struct child_out *o, bool first, void *fh,
			 uint64_t m16, int64_t foff, int64_t boff,
			 int64_t *done)
{
	size_t len = 4096;
	double t;
	int ret;

	t = child_call(first ? "first phxFileReadAsync + stream wait" :
			       "second phxFileReadAsync + stream wait");
	ret = kbpf.ReadAsync(fh, (void *)(uintptr_t)m16, &len, &foff, &boff,
			     done, NULL);
	if (!ret)
		ret = kbpf.StreamDeregister(NULL);
	o->t[first ? ST_FIRST : ST_NEXT] = bl_now() - t;
	if (ret || *done != 4096)
		child_fail("%sphxFileReadAsync: %s, bytes_done %" PRId64,
			   first ? "first " : "", ret ? strerror(-ret) : "0",
			   *done);
}

/* Steps of the libphxfile stack, in the order LMCache calls it. */
static void stack_phxfile(struct kb *b, struct child_out *o, bool cuda,
			  const char *argv0)
{
	uint64_t m16 = mem_alloc(cuda, 16 * MiB), m1g = mem_alloc(cuda, GiB);
	int64_t done = -1;
	void *fh = NULL;
	double t;
	int fd, ret;

	t = child_call("dlopen libphxfile.so");
	kb_load_phxfile(b, argv0);
	if (b->phxfile_why)
		child_fail("%s", b->phxfile_why);
	o->t[ST_LOAD] = bl_now() - t;
	t = child_call("phxFileDriverOpen");
	ret = kbpf.DriverOpen();
	child_step(o, ST_OPEN, t, ret ? strerror(-ret) : NULL);
	t = child_call("phxFileBufRegister(16 MiB)");
	ret = kbpf.BufRegister((void *)(uintptr_t)m16, 16 * MiB);
	child_step(o, ST_REG16, t, ret ? strerror(-ret) : NULL);
	t = child_call("phxFileBufRegister(1 GiB)");
	ret = kbpf.BufRegister((void *)(uintptr_t)m1g, GiB);
	child_step(o, ST_REG1G, t, ret ? strerror(-ret) : NULL);
	fd = open(b->path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		child_fail("open %s with O_DIRECT: %s", b->path,
			   strerror(errno));
	t = child_call("phxFileHandleRegister");
	ret = kbpf.HandleRegister(&fh, fd);
	child_step(o, ST_HANDLE, t, ret ? strerror(-ret) : NULL);
	phxfile_read(o, true, fh, m16, 0, 0, &done);
	check_first(cuda, m16, "phxFileReadAsync");
	phxfile_read(o, false, fh, m16, 1 * MiB, 4096, &done);
	cur->closing = true;
	t = child_call("phxFile deregistration and close");
	kbpf.BufDeregister((void *)(uintptr_t)m16);
	kbpf.BufDeregister((void *)(uintptr_t)m1g);
	kbpf.HandleDeregister(fh);
	kbpf.DriverClose();
	o->t[ST_CLOSE] = bl_now() - t;
	close(fd);
}

/*
 * The first (@first) or the next read step of libphoenix's stack: @io,
 * 4 KiB, run on @dev.
 */
static void api_read(struct child_out *o, bool first, struct phx_device *dev,
		     struct phx_io *io)
{
	double t = child_call(first ? "first phx_io_run" : "second phx_io_run");

	phx_io_run(dev, io);
	o->t[first ? ST_FIRST : ST_NEXT] = bl_now() - t;
	if (io->result != 4096)
		child_fail("%sphx_io_run: %" PRId64 ": %s",
			   first ? "first " : "", io->result,
			   phx_strerror_last());
}

/* Steps of libphoenix's own API: no registration exists to be paid. */
static void stack_phx(struct kb *b, struct child_out *o, bool cuda)
{
	uint64_t m16 = mem_alloc(cuda, 16 * MiB);
	struct phx_device *dev;
	struct phx_io io = { .op = PHX_OP_READ, .len = 4096 };
	double t;
	int ret;

	t = child_call("phx_device_open");
	ret = phx_device_open(NULL, &dev);
	child_step(o, ST_OPEN, t, ret ? phx_strerror_last() : NULL);
	io.fd = open(b->path, O_RDONLY | O_DIRECT);
	if (io.fd < 0)
		child_fail("open %s with O_DIRECT: %s", b->path,
			   strerror(errno));
	io.dptr = m16;
	api_read(o, true, dev, &io);
	check_first(cuda, m16, "phx_io_run");
	io.file_off = 1 * MiB;
	api_read(o, false, dev, &io);
	cur->closing = true;
	t = child_call("phx_device_close");
	phx_device_close(dev);
	o->t[ST_CLOSE] = bl_now() - t;
	close(io.fd);
}

/*
 * The CUDA context, unless the simulated device is asked for (false,
 * with o->err empty) or CUDA is asked for and does not work (false, with
 * o->err saying why).
 */
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
	CUresult r;
	double t = bl_now();
	void *lib;

	if (env && strcmp(env, "cuda"))
		return false;
	child_call("dlopen libcuda.so.1");
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		if (env)
			snprintf(
				o->err, sizeof(o->err),
				"PHX_DEVICE=cuda but libcuda.so.1 does not load: %s",
				dlerror());
		return false;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		void *sym = dlsym(lib, names[i]);

		if (!sym) {
			snprintf(o->err, sizeof(o->err),
				 "libcuda.so.1 lacks %s: the driver is too old",
				 names[i]);
			return false;
		}
		memcpy((char *)&blcu + i * sizeof(void *), &sym, sizeof(sym));
	}
	blcu.cuMemAlloc_v2 =
		(CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
	blcu.cuMemcpyDtoH_v2 = (CUresult(*)(void *, CUdeviceptr, size_t))dlsym(
		lib, "cuMemcpyDtoH_v2");
	if (!blcu.cuMemAlloc_v2 || !blcu.cuMemcpyDtoH_v2) {
		snprintf(o->err, sizeof(o->err),
			 "libcuda.so.1 lacks cuMemAlloc_v2 or cuMemcpyDtoH_v2");
		return false;
	}
	child_call("cuInit + primary context");
	r = blcu.cuInit(0);
	if (!r)
		r = blcu.cuDeviceGet(&dev, 0);
	if (!r)
		r = blcu.cuDevicePrimaryCtxRetain(&ctx, dev);
	if (!r)
		r = blcu.cuCtxSetCurrent(ctx);
	if (r) {
		snprintf(o->err, sizeof(o->err),
			 "the CUDA context on device 0: %s", bl_cu_err(r));
		return false;
	}
	o->t[ST_CTX] = bl_now() - t;
	return true;
}

/* In the child: run stack @sk, filling @o. */
static void child_main(struct kb *b, enum stack sk, const char *argv0,
		       struct child_out *o, const char *cufile_log)
{
	bool cuda;

	cur = o;
	alarm(CHILD_LIMIT_S);
	if (sk == SK_CUFILE && cufile_log && !getenv("CUFILE_LOGFILE_PATH"))
		setenv("CUFILE_LOGFILE_PATH", cufile_log, 1);
	cuda = child_cuda(o);
	o->cuda = cuda;
	b->cuda = cuda;
	if (!cuda) {
		const char *env = getenv("PHX_DEVICE");

		/* CUDA asked for and broken, or a stack that needs it */
		if (sk == SK_CUFILE || (env && !strcmp(env, "cuda")))
			_exit(CHILD_NODEV);
		o->err[0] = 0; /* the simulated device, then */
	}
	if (sk == SK_PHXFILE)
		stack_phxfile(b, o, cuda, argv0);
	else if (sk == SK_PHX)
		stack_phx(b, o, cuda);
	else
		stack_cufile(b, o, cuda);
	o->call[0] = 0;
	_exit(0);
}

/*
 * One fresh process for stack @sk; @out is shared with it.  Returns 0,
 * -ENODEV (no CUDA device: out->err may say why), -EIO with out->err
 * saying what failed, in which call, or 1 when only the close failed
 * (out->err says how): the steps before it were measured.
 */
static int run_child(struct kb *b, enum stack sk, const char *argv0,
		     struct child_out *out, const char *cufile_log)
{
	int status;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < ST_N; i++)
		out->t[i] = NAN;
	kb_cold(b);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		bl_die("fork: %s", strerror(errno));
	if (!pid)
		child_main(b, sk, argv0, out, cufile_log);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			bl_die("waitpid: %s", strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_NODEV)
		return -ENODEV;
	if (WIFEXITED(status) && !WEXITSTATUS(status))
		return 0;
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);

		snprintf(
			out->err, sizeof(out->err),
			"killed by signal %d (%s)%s in %s", sig, strsignal(sig),
			sig == SIGALRM ? " after " STR(CHILD_LIMIT_S) " s" : "",
			out->call[0] ? out->call : "its start");
	} else if (!out->err[0]) {
		snprintf(out->err, sizeof(out->err),
			 "exited with status %d in %s without a word",
			 WEXITSTATUS(status),
			 out->call[0] ? out->call : "its start");
	}
	return out->closing ? 1 : -EIO;
}

/* The last lines cuFile logged, if it logged any, under the table. */
static void print_cufile_log(const char *path)
{
	char line[512], *lines[12] = { NULL };
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		free(lines[n % 12]);
		lines[n % 12] = strdup(line);
		n++;
	}
	fclose(f);
	if (n)
		printf("cuFile's log (%s), its last %d of %d lines:\n", path,
		       n < 12 ? n : 12, n);
	for (int i = n < 12 ? 0 : n - 12; i < n; i++)
		if (lines[i % 12])
			printf("  %s", lines[i % 12]);
	for (int i = 0; i < 12; i++)
		free(lines[i]);
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
	char tmpdir[] = "/tmp/phx-kvbench-XXXXXX", cflog[64];
	double med[SK_N][ST_N], runs[BL_MAX_RUNS];
	const char *why[SK_N] = { NULL }, *close_why[SK_N] = { NULL };
	struct child_out(*out)[BL_MAX_RUNS];
	int n[SK_N] = { 0 };
	ssize_t l;

	(void)o;
	l = readlink("/proc/self/exe", argv0, sizeof(argv0) - 1);
	if (l <= 0)
		bl_die("readlink /proc/self/exe: %s", strerror(errno));
	argv0[l] = 0;
	if (!mkdtemp(tmpdir))
		bl_die("mkdtemp %s: %s", tmpdir, strerror(errno));
	snprintf(cflog, sizeof(cflog), "%s/cufile.log", tmpdir);
	/* shared with the children, so a dead one still tells its call */
	out = mmap(NULL, sizeof(*out) * SK_N, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (out == MAP_FAILED)
		bl_die("mmap: %s", strerror(errno));
	for (int sk = 0; sk < SK_N; sk++) {
		for (int r = 0; r < b->runs; r++) {
			struct child_out *c = &out[sk][n[sk]];
			int ret = run_child(b, (enum stack)sk, argv0, c,
					    sk == SK_CUFILE ? cflog : NULL);

			if (ret == -ENODEV) {
				why[sk] = c->err[0] ? c->err : "no CUDA device";
				break;
			}
			if (ret) {
				printf("%s, run %d: %s\n", stack_names[sk],
				       r + 1, c->err);
				if (ret < 0) {
					why[sk] = c->err;
					break;
				}
				/*
				 * The close failed: the other steps count;
				 * no more runs (a hung close costs the
				 * child's whole time limit each run).
				 */
				close_why[sk] = c->err;
				n[sk]++;
				break;
			}
			n[sk]++;
		}
		for (int st = 0; st < ST_N; st++) {
			int m = 0;

			for (int r = 0; r < n[sk]; r++)
				if (!isnan(out[sk][r].t[st]))
					runs[m++] = out[sk][r].t[st];
			med[sk][st] = m ? bl_median(runs, m) : NAN;
		}
	}

	/* what cuFile said about itself (its mode) and about a failure */
	print_cufile_log(getenv("CUFILE_LOGFILE_PATH") ?
				 getenv("CUFILE_LOGFILE_PATH") :
				 cflog);
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
	printf("%-30s", "runs measured");
	for (int sk = 0; sk < SK_N; sk++)
		printf(" %14d", n[sk]);
	printf("\n");
	for (int sk = 0; sk < SK_N; sk++)
		if (why[sk])
			printf("%s: %s\n", stack_names[sk], why[sk]);
		else if (n[sk] && out[sk][0].note[0])
			printf("%s: %s\n", stack_names[sk], out[sk][0].note);
	for (int sk = 0; sk < SK_N; sk++)
		if (close_why[sk])
			printf("%s: its close failed (the other steps count): %s\n",
			       stack_names[sk], close_why[sk]);
	/* the goal: open + 1 GiB + first read <= 1 % of cuFile's open */
	if (n[SK_CUFILE]) {
		double cf = med[SK_CUFILE][ST_OPEN];
		double cfall = cf + med[SK_CUFILE][ST_REG1G] +
			       med[SK_CUFILE][ST_HANDLE] +
			       med[SK_CUFILE][ST_FIRST];
		double pf = med[SK_PHXFILE][ST_OPEN] +
			    med[SK_PHXFILE][ST_REG1G] +
			    med[SK_PHXFILE][ST_FIRST];
		double px = med[SK_PHX][ST_OPEN] + med[SK_PHX][ST_FIRST];

		if (n[SK_PHXFILE])
			printf("phxFile open + 1 GiB registration + first 4 KiB read = %.3f ms = %.2f%% of cuFileDriverOpen (%.1f ms)\n",
			       pf * 1e3, 100 * pf / cf, cf * 1e3);
		if (n[SK_PHX])
			printf("libphoenix device open + first 4 KiB read = %.3f ms = %.2f%% of cuFileDriverOpen\n",
			       px * 1e3, 100 * px / cf);
		printf("cuFile driver open + 1 GiB + file registration + first 4 KiB read = %.3f ms\n",
		       cfall * 1e3);
	}
	fflush(stdout);
	unlink(cflog);
	rmdir(tmpdir);
	munmap(out, sizeof(*out) * SK_N);
}
