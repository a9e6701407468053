/* SPDX-License-Identifier: MIT */
/*
 * kmod_fuse.c - the passthrough suite: phxfs over phx.ko in the guest.
 *
 *   kmod_fuse passthrough MNT   checks 1-4: phxfs with kind=kmod
 *   kmod_fuse daemon MNT        check 5: phxfs without the module (sim)
 *   kmod_fuse kill MNT PID      check 6: the daemon dies under open files
 *
 * cp, dd and phx cp run as the user would run them (busybox, static phx);
 * this program checks the bytes through the mount and the daemon's
 * request counters, and tells the host (HOSTCHECK lines) where in the
 * ivshmem BAR each file's pages are, from /proc/self/pagemap of a mapping
 * of the file.
 */
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>

#include "guest.h"

static const char *mnt;
static char dir[256];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run a shell command; its output lines go to the console as comments. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
	char cmd[1024], line[512];
	va_list ap;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p))
		printf("#   %s", line);
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void xattr(const char *path, const char *name, char *out, size_t len)
{
	ssize_t n = getxattr(path, name, out, len - 1);

	out[n > 0 ? n : 0] = '\0';
}

static unsigned long long requests(const char *which)
{
	char v[128];
	unsigned long long w = ~0ULL, r = ~0ULL;

	xattr(dir, "user.phx.requests", v, sizeof(v));
	sscanf(v, "write %llu read %llu", &w, &r);
	return !strcmp(which, "write") ? w : r;
}

/* The whole file must hold pattern @seed: through read() and mmap(). */
static void check_bytes(const char *path, uint64_t size, uint32_t seed)
{
	struct stat st;
	char *buf = malloc(size);
	int fd = open(path, O_RDONLY);
	ssize_t n;

	EXPECT(fd >= 0 && buf, "open %s: %s", path, strerror(errno));
	if (fd < 0 || !buf)
		goto out;
	EXPECT(!fstat(fd, &st) && (uint64_t)st.st_size == size,
	       "%s: size %lld, want %llu", path, (long long)st.st_size,
	       (unsigned long long)size);
	n = pread(fd, buf, size, 0);
	EXPECT(n == (ssize_t)size && pat_check(buf, size, seed, 0) < 0,
	       "%s: read back %zd bytes, differ", path, n);
	close(fd);
out:
	free(buf);
}

/* Tell the host where @path's pages are in the BAR (check @check). */
static void report_bar(int check, const char *path, uint64_t size,
		       uint32_t seed, uint64_t bus, uint64_t bar_size, bool dma)
{
	int fd = open(path, O_RDONLY), pagemap;
	uint64_t off, run = 0, run_phys = 0, phys = 0, entry;
	const volatile char *p;

	p = fd < 0 ? MAP_FAILED :
		     mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	EXPECT(p != MAP_FAILED, "mmap %s: %s", path, strerror(errno));
	if (p == MAP_FAILED)
		goto out;
	pagemap = open("/proc/self/pagemap", O_RDONLY);
	for (off = 0; off <= size; off += PAGE) {
		if (off < size) {
			(void)p[off];
			phys = 0;
			if (pread(pagemap, &entry, 8,
				  (off_t)((uintptr_t)(p + off) / PAGE * 8)) ==
				    8 &&
			    entry >> 63)
				phys = (entry & ((1ULL << 55) - 1)) * PAGE;
			EXPECT(phys >= bus && phys < bus + bar_size,
			       "%s: page %llu at %#llx, not in the BAR", path,
			       (unsigned long long)(off / PAGE),
			       (unsigned long long)phys);
		}
		if (off && (off == size || phys != run_phys + (off - run))) {
			uint64_t len = (off == size ? size : off) - run;

			printf("HOSTCHECK %d bar %llu %llu pattern %u %llu\n",
			       check, (unsigned long long)(run_phys - bus),
			       (unsigned long long)len, seed,
			       (unsigned long long)run);
			if (dma)
				printf("HOSTCHECK %d dma %llu %llu\n", check,
				       (unsigned long long)run_phys,
				       (unsigned long long)(len & ~(PAGE - 1)));
		}
		if (!off || phys != run_phys + (off - run)) {
			run = off;
			run_phys = phys;
		}
	}
	close(pagemap);
	munmap((void *)p, size);
out:
	if (fd >= 0)
		close(fd);
}

/* cp and dd of /mnt/src.bin into @dir; returns dd write, read seconds. */
static void copy_in(const char *want_path, double *t_write, double *t_read)
{
	char path[320], v[64];
	double t;

	EXPECT(!run("cp /mnt/src.bin %s/cp.bin", dir), "cp failed");
	t = now_s();
	EXPECT(!run("dd if=/mnt/src.bin of=%s/dd.bin bs=1M 2>&1 | tail -n 1",
		    dir),
	       "dd failed");
	*t_write = now_s() - t;
	t = now_s();
	EXPECT(!run("dd if=%s/dd.bin of=/dev/null bs=1M 2>&1 | tail -n 1", dir),
	       "dd back failed");
	*t_read = now_s() - t;
	snprintf(path, sizeof(path), "%s/cp.bin", dir);
	check_bytes(path, FUSE_SRC_SIZE, SEED_FUSE_SRC);
	xattr(path, "user.phx.path", v, sizeof(v));
	EXPECT(!strcmp(v, want_path), "%s: user.phx.path %s, want %s", path, v,
	       want_path);
	snprintf(path, sizeof(path), "%s/dd.bin", dir);
	check_bytes(path, FUSE_SRC_SIZE, SEED_FUSE_SRC);
}

/* phx cp from the NVMe disk; returns the path it reported. */
static void phx_cp(const char *name, char *path, size_t len)
{
	char dst[320];

	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	EXPECT(!run("/phx cp /mnt/lib.bin %s 2>&1", dst), "phx cp failed");
	/* Before an open makes it "passthrough". */
	xattr(dst, "user.phx.path", path, len);
	printf("# phx cp: path %s\n", path);
	check_bytes(dst, FILE_LIB_SIZE, SEED_FILE_LIB);
}

/* Growth, truncate, rename, unlink while open, on passthrough files. */
static void semantics(void)
{
	char a[320], b[320], buf[8192], v[64];
	struct stat st;
	int fd, fd2;
	char *m;

	snprintf(a, sizeof(a), "%s/sem", dir);
	snprintf(b, sizeof(b), "%s/sem2", dir);
	fd = open(a, O_RDWR | O_CREAT | O_TRUNC, 0644);
	EXPECT(fd >= 0, "create %s: %s", a, strerror(errno));
	xattr(a, "user.phx.path", v, sizeof(v));
	EXPECT(!strcmp(v, "passthrough"), "new file path %s", v);
	memset(buf, 'x', sizeof(buf));
	EXPECT(pwrite(fd, buf, 100, 0) == 100, "write");
	EXPECT(!fstat(fd, &st) && st.st_size == 100, "size %lld after write",
	       (long long)st.st_size);
	/* Shrink and grow again: the cut bytes read as zeros. */
	EXPECT(!ftruncate(fd, 10) && !ftruncate(fd, 5000), "truncate");
	EXPECT(pread(fd, buf, 5000, 0) == 5000 && buf[9] == 'x' && !buf[10] &&
		       !buf[99] && !buf[4999],
	       "bytes after truncate down and up");
	/* Append: O_APPEND lands at the end the kernel keeps. */
	fd2 = open(a, O_WRONLY | O_APPEND);
	EXPECT(fd2 >= 0 && write(fd2, "tail", 4) == 4, "append");
	close(fd2);
	EXPECT(!stat(a, &st) && st.st_size == 5004, "size %lld after append",
	       (long long)st.st_size);
	/* A mapping sees write()s and the other way round. */
	m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	EXPECT(m != MAP_FAILED, "mmap: %s", strerror(errno));
	if (m != MAP_FAILED) {
		m[1] = 'M';
		EXPECT(pread(fd, buf, 2, 0) == 2 && buf[1] == 'M',
		       "mapping write not seen by read");
		munmap(m, 8192);
	}
	/* Past the capacity (16 MiB headroom in this guest): EFBIG. */
	errno = 0;
	EXPECT(pwrite(fd, buf, 1, 1ULL << 30) < 0 && errno == EFBIG,
	       "write past the capacity: %s", strerror(errno));
	/* Rename and unlink while open: the data stays until close. */
	EXPECT(!rename(a, b), "rename: %s", strerror(errno));
	EXPECT(!unlink(b), "unlink: %s", strerror(errno));
	EXPECT(pread(fd, buf, 4, 5000) == 4 && !memcmp(buf, "tail", 4),
	       "read after unlink");
	close(fd);
	/* Reopened for appending after its room was given back: it moves. */
	fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	EXPECT(fd >= 0 && write(fd, buf, 4096) == 4096, "write small");
	close(fd);
	fd = open(a, O_WRONLY | O_APPEND);
	memset(buf, 'y', sizeof(buf));
	EXPECT(fd >= 0 && write(fd, buf, 8192) == 8192, "regrow: %s",
	       strerror(errno));
	close(fd);
	EXPECT(!stat(a, &st) && st.st_size == 12288, "size %lld after regrow",
	       (long long)st.st_size);
	unlink(a);
}

static void bar_info(uint64_t *bus, uint64_t *size)
{
	struct phx_ioc_info info = {};
	int fd = dev_open(&info);

	if (fd >= 0)
		close(fd);
	*bus = info.bus_addr;
	*size = info.size;
	printf("HOSTCHECK 0 info %llu %llu\n", (unsigned long long)*bus,
	       (unsigned long long)*size);
}

static int passthrough(void)
{
	uint64_t bus, size;
	char path[320], v[64];
	double tw, tr;

	bar_info(&bus, &size);
	run("/phx status -a %s", mnt);

	/* 1: cp and dd go to device memory, the daemon sees no WRITE. */
	copy_in("passthrough", &tw, &tr);
	printf("# passthrough dd: write %.3f s, read %.3f s\n", tw, tr);
	EXPECT(requests("write") == 0, "daemon served %llu WRITE requests",
	       requests("write"));
	snprintf(path, sizeof(path), "%s/cp.bin", dir);
	report_bar(1, path, FUSE_SRC_SIZE, SEED_FUSE_SRC, bus, size, false);
	snprintf(path, sizeof(path), "%s/dd.bin", dir);
	report_bar(1, path, FUSE_SRC_SIZE, SEED_FUSE_SRC, bus, size, false);
	test_result(1, "cp and dd through the mount");

	/* 2: reads back are exact, and the daemon saw no READ. */
	test_failures = 0;
	snprintf(path, sizeof(path), "%s/cp.bin", dir);
	check_bytes(path, FUSE_SRC_SIZE, SEED_FUSE_SRC);
	EXPECT(requests("read") == 0, "daemon served %llu READ requests",
	       requests("read"));
	test_result(2, "read back");
	test_failures = 0;

	/* 3: phx cp is a DMA from the disk into the file's pages. */
	phx_cp("pcp.bin", v, sizeof(v));
	EXPECT(!strcmp(v, "p2p"), "phx cp path %s, want p2p", v);
	snprintf(path, sizeof(path), "%s/pcp.bin", dir);
	report_bar(3, path, FILE_LIB_SIZE, SEED_FILE_LIB, bus, size, true);
	test_result(3, "phx cp");

	/* 4: file semantics. */
	test_failures = 0;
	semantics();
	EXPECT(requests("write") == 0, "daemon served %llu WRITE requests",
	       requests("write"));
	run("/phx status -a %s", mnt);
	return test_result(4, "growth, truncate, rename, unlink");
}

static int daemon_path(void)
{
	char v[64];
	double tw, tr;

	run("/phx status -a %s", mnt);
	copy_in("memcpy", &tw, &tr);
	printf("# daemon dd: write %.3f s, read %.3f s\n", tw, tr);
	EXPECT(requests("write") >= 32, "daemon served only %llu WRITEs",
	       requests("write"));
	phx_cp("pcp.bin", v, sizeof(v));
	EXPECT(!strcmp(v, "staged") || !strcmp(v, "buffered"), "phx cp path %s",
	       v);
	EXPECT(!run("/phx status %s | grep -q 'passthrough.*off'", mnt),
	       "phx status does not say passthrough is off");
	return test_result(5, "daemon path without phx.ko");
}

static int kill_daemon(const char *pid)
{
	char path[320], buf[16];
	struct stat st;
	int fd;
	char *m;

	snprintf(path, sizeof(path), "%s/open.bin", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	EXPECT(fd >= 0 && pwrite(fd, "alive", 5, 0) == 5, "write %s", path);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	EXPECT(m != MAP_FAILED, "mmap: %s", strerror(errno));
	kill(atoi(pid), SIGKILL);
	/* the connection goes when the dying daemon's fd is closed */
	for (int i = 0; i < 300; i++) {
		errno = 0;
		if (stat(dir, &st) && errno == ENOTCONN)
			break;
		usleep(100000);
	}
	EXPECT(stat(dir, &st) && errno == ENOTCONN, "stat after kill: %s",
	       strerror(errno));
	/* The open file and the mapping hold the range: still usable. */
	printf("# after the kill: read %zd, mapping holds %.5s\n",
	       pread(fd, buf, 5, 0), m != MAP_FAILED ? m : "?");
	if (m != MAP_FAILED)
		munmap(m, 4096);
	close(fd);
	EXPECT(!run("umount -l %s", mnt), "umount");
	EXPECT(!run("/phxfs %s -o kind=kmod", mnt), "remount");
	snprintf(path, sizeof(path), "%s/again.bin", dir);
	fd = open(path, O_RDWR | O_CREAT, 0644);
	EXPECT(fd >= 0 && pwrite(fd, "again", 5, 0) == 5 &&
		       pread(fd, buf, 5, 0) == 5 && !memcmp(buf, "again", 5),
	       "a new mount works");
	close(fd);
	return test_result(6, "daemon killed under an open file");
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	mnt = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(dir, sizeof(dir), "%s/%s", mnt,
		 strcmp(argv[1], "daemon") ? "phx0" : "sim0");
	if (!strcmp(argv[1], "passthrough"))
		return passthrough();
	if (!strcmp(argv[1], "daemon"))
		return daemon_path();
	if (!strcmp(argv[1], "kill") && argc == 4)
		return kill_daemon(argv[3]);
	return 2;
}
