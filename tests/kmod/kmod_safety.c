/* SPDX-License-Identifier: MIT */
/*
 * kmod_safety.c - check 5: phx.ko refuses bad input and survives misuse.
 *
 * Bad ioctl arguments and mmap requests fail with the documented errno;
 * closing twice, closing before munmap, exiting with live mappings,
 * concurrent allocation from several processes, freeing while O_DIRECT
 * I/O is in flight, rmmod while a mapping is alive and unbinding the
 * device under a mapping leave the module consistent: all memory comes
 * back.  The host scans the kernel log afterwards.
 *
 * Races run on their own, last, because the bugs they look for leave the
 * device unusable: "kmod_safety alloc-unbind" allocates while the device
 * is unbound, "kmod_safety copy-truncate" reads and writes range files
 * into mappings of other ranges while a GROW file is truncated,
 * "kmod_safety rmmod-race" unloads the module while a process drops its
 * last range files.
 */
#include <liburing.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "guest.h"

#define PAGE 4096ULL
#define WORKERS 4
#define ROUNDS 60
#define UNLOAD_ROUNDS 64

static struct phx_ioc_info info;

static int alloc_errno(int dev, uint64_t size, uint64_t offset, uint32_t flags)
{
	int fd = range_alloc(dev, size, offset, flags);

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return errno;
}

static uint64_t free_bytes(void)
{
	struct phx_ioc_info now = {};
	int dev = dev_open(&now);

	if (dev >= 0)
		close(dev);
	return now.free;
}

/* Freed memory may wait for pinned pages: give the module a moment. */
static int all_free(void)
{
	int i;

	/* a range is freed when its last reference goes, which can be late */
	for (i = 0; i < 1500; i++) {
		if (free_bytes() == info.size)
			return 1;
		usleep(20000);
	}
	return 0;
}

static void bad_ioctls(int dev)
{
	struct phx_ioc_alloc req = { .size = PAGE };

	EXPECT(alloc_errno(dev, 0, 0, 0) == EINVAL, "size 0");
	EXPECT(alloc_errno(dev, PAGE + 1, 0, 0) == EINVAL, "size not pages");
	EXPECT(alloc_errno(dev, ~0ULL - PAGE + 1, 0, 0) == ENOSPC,
	       "size 2^64 - 4096");
	EXPECT(alloc_errno(dev, info.size + PAGE, 0, 0) == ENOSPC,
	       "size past the BAR");
	EXPECT(alloc_errno(dev, PAGE, 100, PHX_ALLOC_FIXED) == EINVAL,
	       "misaligned offset");
	EXPECT(alloc_errno(dev, PAGE, info.size, PHX_ALLOC_FIXED) == ERANGE,
	       "offset at the end of the BAR");
	EXPECT(alloc_errno(dev, 2 * PAGE, info.size - PAGE, PHX_ALLOC_FIXED) ==
		       ERANGE,
	       "range across the end of the BAR");
	EXPECT(alloc_errno(dev, ~0ULL - PAGE + 1, PAGE, PHX_ALLOC_FIXED) ==
		       ERANGE,
	       "offset + size overflows");
	EXPECT(alloc_errno(dev, PAGE, 0, 1U << 7) == EINVAL, "unknown flag");
	req.reserved[1] = 1;
	EXPECT_ERR(ioctl(dev, PHX_IOC_ALLOC, &req), EINVAL, "reserved set");
	EXPECT_ERR(ioctl(dev, PHX_IOC_ALLOC, NULL), EFAULT, "NULL argument");
	EXPECT_ERR(ioctl(dev, PHX_IOC_INFO, (void *)16), EFAULT, "bad pointer");
	EXPECT_ERR(ioctl(dev, _IO(PHX_IOC_MAGIC, 99)), ENOTTY, "unknown ioctl");
	EXPECT_ERR(ioctl(dev, PHX_IOC_IMPORT, &(struct phx_ioc_import){}),
		   EOPNOTSUPP, "import on a BAR device");
}

static void bad_ranges(int dev)
{
	struct phx_ioc_range r;
	struct stat st;
	char byte = 1;
	void *p;
	int fd, fd2;

	fd = range_alloc(dev, 4 * PAGE, 0, 0);
	EXPECT(fd >= 0, "alloc 16 KiB: %s", strerror(errno));
	if (fd < 0)
		return;
	EXPECT(!fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size == 4 * PAGE,
	       "not a regular file of 16 KiB");
	EXPECT(!ioctl(fd, PHX_IOC_RANGE, &r) && r.size == 4 * PAGE &&
		       r.contiguous && r.bus_addr == info.bus_addr + r.offset,
	       "PHX_IOC_RANGE");
	EXPECT(mmap(NULL, 5 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		    0) == MAP_FAILED &&
		       errno == EINVAL,
	       "mmap larger than the allocation");
	EXPECT(mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 4 * PAGE) ==
			       MAP_FAILED &&
		       errno == EINVAL,
	       "mmap past the end");
	EXPECT(mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 3 * PAGE) ==
			       MAP_FAILED &&
		       errno == EINVAL,
	       "mmap across the end");
	EXPECT(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) ==
			       MAP_FAILED &&
		       errno == EINVAL,
	       "private mapping");
	p = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, PAGE);
	EXPECT(p != MAP_FAILED, "mmap at page 1: %s", strerror(errno));
	if (p != MAP_FAILED) {
		((char *)p)[0] = 42;
		EXPECT(pread(fd, &byte, 1, PAGE) == 1 && byte == 42,
		       "offset mapping reads back %d", byte);
		EXPECT(mremap(p, 3 * PAGE, 8 * PAGE, 0) == MAP_FAILED,
		       "mapping grew with mremap");
		munmap(p, 3 * PAGE);
	}
	EXPECT(pread(fd, &byte, 1, 4 * PAGE) == 0, "read at EOF");
	EXPECT_ERR(pwrite(fd, &byte, 1, 4 * PAGE), ENOSPC, "write at EOF");
	EXPECT(pwrite(fd, "xy", 2, 4 * PAGE - 1) == 1, "short write at end");
	EXPECT(lseek(fd, 0, SEEK_END) == (off_t)(4 * PAGE), "SEEK_END");
	EXPECT(!fsync(fd), "fsync: %s", strerror(errno));
	EXPECT_ERR(ioctl(fd, PHX_IOC_ALLOC, &r), ENOTTY, "alloc on a range");

	/* A fixed range over a live one, then the BAR full. */
	if (!ioctl(fd, PHX_IOC_RANGE, &r))
		EXPECT(alloc_errno(dev, PAGE, r.offset, PHX_ALLOC_FIXED) ==
			       EBUSY,
		       "fixed range over a live allocation");
	fd2 = range_alloc(dev, info.size - 4 * PAGE, 0, PHX_ALLOC_NOCLEAR);
	EXPECT(fd2 >= 0, "rest of the BAR: %s", strerror(errno));
	EXPECT(alloc_errno(dev, PAGE, 0, 0) == ENOSPC, "BAR full");
	EXPECT(free_bytes() == 0, "free %llu with the BAR full",
	       (unsigned long long)free_bytes());
	close(fd2);

	/* Double free: the second close is refused by the VFS. */
	EXPECT(!close(fd), "close");
	EXPECT_ERR(close(fd), EBADF, "second close");
	EXPECT(all_free(), "memory not back after close");
}

/*
 * A descriptor of a GROW file reopened for reading only (through
 * /proc/self/fd, as any holder of the descriptor can) changes neither the
 * file nor its capacity.
 */
static void read_only_descriptor(int dev)
{
	struct phx_ioc_range r = {};
	char path[64];
	int fd, ro;

	fd = range_alloc(dev, 8 * PAGE, 0, PHX_ALLOC_GROW);
	EXPECT(fd >= 0, "alloc a GROW file: %s", strerror(errno));
	if (fd < 0)
		return;
	EXPECT(!ftruncate(fd, PAGE), "ftruncate: %s", strerror(errno));
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	EXPECT(ro >= 0, "reopen read-only: %s", strerror(errno));
	if (ro >= 0) {
		EXPECT_ERR(ioctl(ro, PHX_IOC_TRIM), EBADF,
			   "PHX_IOC_TRIM through a read-only descriptor");
		EXPECT_ERR(ftruncate(ro, 0), EINVAL,
			   "ftruncate through a read-only descriptor");
		EXPECT_ERR(write(ro, "x", 1), EBADF,
			   "write through a read-only descriptor");
		EXPECT(!ioctl(ro, PHX_IOC_RANGE, &r) && r.size == 8 * PAGE,
		       "capacity %llu after the read-only descriptor, want %llu",
		       (unsigned long long)r.size,
		       (unsigned long long)(8 * PAGE));
		close(ro);
	}
	EXPECT(!ioctl(fd, PHX_IOC_TRIM), "PHX_IOC_TRIM: %s", strerror(errno));
	EXPECT(!ioctl(fd, PHX_IOC_RANGE, &r) && r.size == PAGE,
	       "capacity %llu after PHX_IOC_TRIM, want %llu",
	       (unsigned long long)r.size, (unsigned long long)PAGE);
	close(fd);
	EXPECT(all_free(), "memory not back after the GROW file");
}

static void close_before_munmap(int dev)
{
	char *p;
	int fd;

	fd = range_alloc(dev, 16 * PAGE, 0, 0);
	p = fd >= 0 ? range_map(fd, 16 * PAGE) : NULL;
	EXPECT(p, "alloc/mmap: %s", strerror(errno));
	if (!p)
		return;
	close(fd);
	memset(p, 0x5a, 16 * PAGE);
	EXPECT(p[16 * PAGE - 1] == 0x5a, "mapping dead after close");
	EXPECT(free_bytes() == info.size - 16 * PAGE,
	       "freed while still mapped");
	munmap(p, 16 * PAGE);
	EXPECT(all_free(), "memory not back after munmap");
}

static void exit_with_mapping(int dev)
{
	int status = -1;
	pid_t pid = fork();

	if (pid == 0) {
		int fd = range_alloc(dev, 32 * PAGE, 0, 0);
		char *p = fd >= 0 ? range_map(fd, 32 * PAGE) : NULL;

		if (p)
			memset(p, 1, 32 * PAGE);
		_exit(p ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "child failed");
	EXPECT(all_free(), "memory not back after exit with a mapping");
}

static int worker(int id)
{
	unsigned int seed = id * 7919 + 1;
	int i, bad = 0;

	for (i = 0; i < ROUNDS; i++) {
		uint64_t size = (rand_r(&seed) % 32 + 1) * PAGE;
		int dev = open("/dev/phx0", O_RDWR);
		int fd = range_alloc(dev, size, 0, 0);
		char *p = fd >= 0 ? range_map(fd, size) : NULL;

		close(dev);
		if (!p) {
			/* Others may hold the rest; that is not a bug. */
			bad += fd >= 0 || errno != ENOSPC;
			if (fd >= 0)
				close(fd);
			continue;
		}
		pat_fill(p, size, 100 + id, i * 8);
		if (rand_r(&seed) & 1)
			close(fd);
		bad += pat_check(p, size, 100 + id, i * 8) >= 0;
		munmap(p, size);
		close(fd);
	}
	return bad ? 1 : 0;
}

static void concurrent(void)
{
	pid_t pids[WORKERS];
	int i, status;

	for (i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(worker(i));
	}
	for (i = 0; i < WORKERS; i++) {
		waitpid(pids[i], &status, 0);
		EXPECT(WIFEXITED(status) && !WEXITSTATUS(status),
		       "worker %d saw wrong data or errors", i);
	}
	EXPECT(all_free(), "memory not back after concurrent workers");
}

/*
 * Close and unmap while the pages are pinned (io_uring fixed buffers pin
 * them long-term, as I/O in flight would): the memory must stay taken
 * until the pin goes, then come back.
 */
static void free_while_pinned(int dev)
{
	struct io_uring ring;
	struct iovec iov;
	int fd, ret;

	fd = range_alloc(dev, MIB, 0, 0);
	iov.iov_base = fd >= 0 ? range_map(fd, MIB) : NULL;
	iov.iov_len = MIB;
	EXPECT(iov.iov_base, "alloc/mmap: %s", strerror(errno));
	if (!iov.iov_base || io_uring_queue_init(4, &ring, 0))
		return;
	ret = io_uring_register_buffers(&ring, &iov, 1);
	EXPECT(!ret, "register a mapping as a fixed buffer: %s",
	       strerror(-ret));
	munmap(iov.iov_base, MIB);
	close(fd);
	if (!ret) {
		usleep(200000);
		EXPECT(free_bytes() == info.size - MIB,
		       "pinned memory was freed under the pin");
		io_uring_unregister_buffers(&ring);
	}
	io_uring_queue_exit(&ring);
	EXPECT(all_free(), "memory not back after the pin went");
}

static int write_sysfs(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, val, strlen(val));
	close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

static sigjmp_buf bus_jump;

static void on_sigbus(int sig)
{
	siglongjmp(bus_jump, 1);
}

/* A child holding a mapping until told to go; returns its pid. */
static pid_t holder(int *go, int *ready, int touch_after)
{
	int to_child[2], to_parent[2];
	pid_t pid;

	if (pipe(to_child) || pipe(to_parent))
		return -1;
	pid = fork();
	if (pid == 0) {
		int dev = open("/dev/phx0", O_RDWR);
		int fd = range_alloc(dev, 16 * PAGE, 0, 0);
		volatile char *p = fd >= 0 ? range_map(fd, 16 * PAGE) : NULL;
		char c = p ? 'y' : 'n';
		volatile int code = 0; /* survives siglongjmp */

		close(dev);
		if (p)
			p[0] = 7;
		if (write(to_parent[1], &c, 1) != 1 ||
		    read(to_child[0], &c, 1) != 1)
			_exit(3);
		if (!p)
			_exit(1);
		if (touch_after) {
			char byte;

			signal(SIGBUS, on_sigbus);
			if (sigsetjmp(bus_jump, 1) == 0) {
				p[1] = 1;
				code = 4; /* no SIGBUS: a stale mapping */
			}
			if (pread(fd, &byte, 1, 0) != -1 || errno != ENODEV)
				code = 5;
		}
		_exit(code);
	}
	close(to_child[0]);
	close(to_parent[1]);
	*go = to_child[1];
	*ready = to_parent[0];
	return pid;
}

static int reload_module(void)
{
	int fd = open("/phx.ko", O_RDONLY | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -1;
	ret = syscall(SYS_finit_module, fd, "", 0);
	close(fd);
	return ret;
}

/* A holder (touch_after as holder()'s) that has mapped its range. */
struct held {
	pid_t pid;
	int go, ready;
};

static struct held hold(int touch_after)
{
	struct held h;
	char c = 0;

	h.pid = holder(&h.go, &h.ready, touch_after);
	EXPECT(h.pid > 0 && read(h.ready, &c, 1) == 1 && c == 'y',
	       "holder did not map");
	return h;
}

/* The holder woken and reaped; its wait status. */
static int release(struct held *h)
{
	int status = -1;

	EXPECT(write(h->go, "x", 1) == 1, "wake holder");
	waitpid(h->pid, &status, 0);
	close(h->go);
	close(h->ready);
	return status;
}

static void rmmod_with_mapping(void)
{
	struct held h = hold(0);
	int status;

	EXPECT_ERR(syscall(SYS_delete_module, "phx", O_NONBLOCK), EWOULDBLOCK,
		   "rmmod with a mapping alive");
	status = release(&h);
	EXPECT(WIFEXITED(status) && !WEXITSTATUS(status), "holder failed");
	EXPECT(!syscall(SYS_delete_module, "phx", O_NONBLOCK),
	       "rmmod after the mapping went: %s", strerror(errno));
	EXPECT(access("/dev/phx0", F_OK) != 0, "/dev/phx0 still there");
	EXPECT(!reload_module(), "insmod again: %s", strerror(errno));
	EXPECT(all_free(), "reloaded module has memory in use");
}

static void unbind_with_mapping(void)
{
	struct held h = hold(1);
	int status;

	EXPECT(!write_sysfs("/sys/bus/pci/drivers/phx/unbind", info.pci_name),
	       "unbind: %s", strerror(errno));
	EXPECT(access("/dev/phx0", F_OK) != 0, "/dev/phx0 still there");
	status = release(&h);
	EXPECT(WIFEXITED(status) && !WEXITSTATUS(status),
	       "holder after unbind: status %#x (4: no SIGBUS, 5: no ENODEV)",
	       status);
	EXPECT(!write_sysfs("/sys/bus/pci/drivers/phx/bind", info.pci_name),
	       "bind: %s", strerror(errno));
	EXPECT(all_free(), "rebound device has memory in use");
}

/* A racing child, told by its parent when to go on. */
struct child {
	pid_t pid;
	int go, ready;
};

/*
 * Fork a child that runs @fn(@round, go, ready) and exits with what it
 * returns; once it says it is ready ('r'), the parent may race it.
 * Returns 0, or -1 where no pipe could be made.
 */
static int child_start(struct child *ch, int (*fn)(int, int, int), int round)
{
	int to_child[2], to_parent[2];
	char c = 0;

	if (pipe(to_child) || pipe(to_parent))
		return -1;
	ch->pid = fork();
	if (ch->pid == 0)
		_exit(fn(round, to_child[0], to_parent[1]));
	close(to_child[0]);
	close(to_parent[1]);
	ch->go = to_child[1];
	ch->ready = to_parent[0];
	EXPECT(read(ch->ready, &c, 1) == 1 && c == 'r',
	       "round %d: child not ready", round);
	return 0;
}

/* The child reaped; its wait status. */
static int child_end(struct child *ch)
{
	int status = -1;

	waitpid(ch->pid, &status, 0);
	close(ch->go);
	close(ch->ready);
	return status;
}

static void *idle_thread(void *arg)
{
	for (;;)
		pause();
	return NULL;
}

/*
 * Allocate one page once the parent is told, while it unbinds the device.
 * A second thread and a full table of 64 descriptors make the ioctl grow
 * the table, which waits for an RCU grace period, between taking the
 * memory and making the range's file.  Exit 0: refused with ENODEV; 10:
 * a range, which must be dead (ENODEV) and close cleanly after the unbind.
 */
static int alloc_child(int round, int go, int ready)
{
	struct phx_ioc_alloc req = { .size = PAGE,
				     .offset = BAR_SCRATCH,
				     .flags = PHX_ALLOC_FIXED };
	pthread_t thread;
	char c;
	int dev, i, fd = -1;

	dev = open("/dev/phx0", O_RDWR);
	if (dev < 0)
		return 1;
	for (i = 0; i < 64; i++)
		if (fcntl(i, F_GETFD) < 0 && dup2(dev, i) != i)
			return 2;
	if (pthread_create(&thread, NULL, idle_thread, NULL))
		return 3;
	if (write(ready, "r", 1) != 1)
		return 4;
	if (!ioctl(dev, PHX_IOC_ALLOC, &req))
		fd = req.fd;
	else if (errno != ENODEV)
		return 5;
	if (read(go, &c, 1) != 1)
		return 6;
	if (fd < 0)
		return 0;
	if (pread(fd, &c, 1, 0) != -1 || errno != ENODEV)
		return 7;
	return close(fd) ? 8 : 10;
}

static void alloc_during_unbind(void)
{
	int i, got = 0;

	for (i = 0; i < 10; i++) {
		struct child ch;
		int status;

		if (child_start(&ch, alloc_child, i))
			break;
		EXPECT(!write_sysfs("/sys/bus/pci/drivers/phx/unbind",
				    info.pci_name),
		       "unbind: %s", strerror(errno));
		EXPECT(write(ch.go, "g", 1) == 1, "wake child");
		status = child_end(&ch);
		EXPECT(WIFEXITED(status) && (WEXITSTATUS(status) == 0 ||
					     WEXITSTATUS(status) == 10),
		       "round %d: allocating child: status %#x", i, status);
		got += WIFEXITED(status) && WEXITSTATUS(status) == 10;
		EXPECT(!write_sysfs("/sys/bus/pci/drivers/phx/bind",
				    info.pci_name),
		       "bind: %s", strerror(errno));
	}
	printf("# %d of 10 allocations during unbind got a range\n", got);
	EXPECT(all_free(), "rebound device has memory in use");
}

struct truncator {
	int fd;
	volatile int stop;
	int err;
};

static void *truncate_loop(void *arg)
{
	struct truncator *t = arg;

	while (!t->stop)
		if (ftruncate(t->fd, 0) || ftruncate(t->fd, PAGE))
			t->err = errno;
	return NULL;
}

/*
 * preadv and pwritev of a range file whose buffer is 4 MiB of ordinary
 * memory followed by a page of a fresh mapping of another range, so the
 * copy faults on that mapping after a while; meanwhile a thread truncates
 * a GROW file of the same device.  Exit 0: every copy moved the right
 * bytes.
 */
static int copy_child(void)
{
	const uint64_t head = 4 * MIB;
	struct truncator t = {};
	struct iovec iov[2];
	pthread_t thread;
	int dev, src, buf, i, bad = 0;
	char *anon, *page;

	dev = open("/dev/phx0", O_RDWR);
	src = range_alloc(dev, 8 * MIB, BAR_SCRATCH, PHX_ALLOC_FIXED);
	buf = range_alloc(dev, PAGE, BAR_SCRATCH + 8 * MIB, PHX_ALLOC_FIXED);
	t.fd = range_alloc(dev, 2 * PAGE, BAR_SCRATCH + 8 * MIB + PAGE,
			   PHX_ALLOC_FIXED | PHX_ALLOC_GROW);
	anon = malloc(head);
	page = malloc(PAGE);
	if (dev < 0 || src < 0 || buf < 0 || t.fd < 0 || !anon || !page)
		return 2;
	memset(anon, 1, head);
	pat_fill(page, PAGE, SEED_FILE_WRITE, head);
	if (pwrite(src, page, PAGE, head) != PAGE)
		return 3;
	if (pthread_create(&thread, NULL, truncate_loop, &t))
		return 4;
	for (i = 0; i < 20; i++) {
		iov[0] = (struct iovec){ anon, head };
		iov[1] = (struct iovec){ range_map(buf, PAGE), PAGE };
		if (!iov[1].iov_base)
			return 5;
		bad += preadv(src, iov, 2, 0) != (ssize_t)(head + PAGE);
		bad += pat_check(iov[1].iov_base, PAGE, SEED_FILE_WRITE,
				 head) >= 0;
		munmap(iov[1].iov_base, PAGE);
		iov[1].iov_base = range_map(buf, PAGE);
		if (!iov[1].iov_base)
			return 5;
		bad += pwritev(src, iov, 2, 0) != (ssize_t)(head + PAGE);
		munmap(iov[1].iov_base, PAGE);
	}
	t.stop = 1;
	pthread_join(thread, NULL);
	bad += t.err != 0;
	return bad ? 1 : 0;
}

static void copy_while_truncating(void)
{
	int status = -1, i;
	pid_t pid = fork();

	if (pid == 0)
		_exit(copy_child());
	/* A deadlock leaves the child unkillable: only report it. */
	for (i = 0; i < 1200 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(100000);
	EXPECT(i < 1200, "read/write into a range mapping deadlocked "
			 "against a truncate");
	EXPECT(i == 1200 || (WIFEXITED(status) && !WEXITSTATUS(status)),
	       "copying child: status %#x", status);
	if (i < 1200)
		EXPECT(all_free(), "memory not back after the copies");
}

/*
 * Hold ranges of each kind (plain, GROW, a large one, a second open file
 * of one) and mappings until the parent says go, then drop them all; the
 * last reference goes in a way that depends on @round: a munmap, a close,
 * the exit, or the files go while io_uring still pins the pages.
 * Exit 0: nothing failed.
 */
static int unload_child(int round, int go, int ready)
{
	const uint64_t big = 4 * MIB;
	int dev, fd[4], i, kind = round % 4, bad = 0;
	struct io_uring ring;
	struct iovec iov;
	char path[64], c;
	char *p, *q;

	dev = open("/dev/phx0", O_RDWR);
	fd[0] = range_alloc(dev, 4 * PAGE, BAR_SCRATCH, PHX_ALLOC_FIXED);
	fd[1] = range_alloc(dev, 8 * PAGE, BAR_SCRATCH + MIB,
			    PHX_ALLOC_FIXED | PHX_ALLOC_GROW);
	fd[2] = range_alloc(dev, big, BAR_SCRATCH + 2 * MIB, PHX_ALLOC_FIXED);
	close(dev);
	if (fd[0] < 0 || fd[1] < 0 || fd[2] < 0 || ftruncate(fd[1], PAGE))
		return 2;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd[0]);
	fd[3] = open(path, O_RDWR | O_CLOEXEC);
	p = range_map(fd[2], big);
	q = range_map(fd[1], PAGE);
	if (fd[3] < 0 || !p || !q)
		return 3;
	memset(p, 0x5a, big);
	q[0] = 1;
	if (kind == 3) {
		iov = (struct iovec){ p, big };
		if (io_uring_queue_init(4, &ring, 0) ||
		    io_uring_register_buffers(&ring, &iov, 1))
			return 4;
	}
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 5;

	if (kind == 2) {
		/* Unmapped first: the last close is the last reference. */
		bad |= munmap(q, PAGE) | munmap(p, big);
		for (i = 0; i < 4; i++)
			bad |= close(fd[i]);
		return bad ? 6 : 0;
	}
	for (i = 0; i < 4; i++)
		bad |= close(fd[i]);
	bad |= munmap(q, PAGE);
	bad |= p[big - 1] != 0x5a;
	if (kind == 0)
		bad |= munmap(p, big);
	/* 1: the exit unmaps the last one; 3: the ring goes with the exit. */
	return bad ? 6 : 0;
}

/* Unload the module, retrying while it is in use; 0 or an errno. */
static int unload(void)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (syscall(SYS_delete_module, "phx", O_NONBLOCK)) {
		int err = errno;

		clock_gettime(CLOCK_MONOTONIC, &t);
		if (err != EWOULDBLOCK || t.tv_sec - t0.tv_sec > 60)
			return err;
	}
	return 0;
}

/*
 * Unload the module while a child drops its last range files and
 * mappings, round after round: a file's last close gives up its module
 * reference before the module's code evicts its inode, and the unload
 * must not land in between.  The window is short and may never be hit;
 * what is checked holds whatever the interleaving: the unload is refused
 * while the child holds a range and succeeds once it is done, and the
 * module then loads again and works.  The host scans the kernel log for
 * code run after the module went.
 */
static void rmmod_racing_close(void)
{
	int i, err, status;
	char *p;
	int dev, fd;

	for (i = 0; i < UNLOAD_ROUNDS && !test_failures; i++) {
		struct child ch;

		if (child_start(&ch, unload_child, i))
			break;
		EXPECT_ERR(syscall(SYS_delete_module, "phx", O_NONBLOCK),
			   EWOULDBLOCK, "rmmod while a child holds ranges");
		EXPECT(write(ch.go, "g", 1) == 1, "wake child");
		err = unload();
		EXPECT(!err, "round %d: rmmod: %s", i, strerror(err));
		status = child_end(&ch);
		EXPECT(WIFEXITED(status) && !WEXITSTATUS(status),
		       "round %d: child: status %#x", i, status);
		if (err)
			break;
		EXPECT(access("/dev/phx0", F_OK) != 0,
		       "round %d: /dev/phx0 still there", i);
		EXPECT(!reload_module(), "round %d: insmod again: %s", i,
		       strerror(errno));
	}
	printf("# %d rounds of rmmod against the last close\n", i);

	EXPECT(all_free(), "reloaded module has memory in use");
	dev = open("/dev/phx0", O_RDWR);
	fd = dev >= 0 ? range_alloc(dev, MIB, BAR_SCRATCH + 8 * MIB,
				    PHX_ALLOC_FIXED) :
			-1;
	p = fd >= 0 ? range_map(fd, MIB) : NULL;
	EXPECT(p, "reloaded module: alloc/mmap: %s", strerror(errno));
	if (p) {
		pat_fill(p, MIB, SEED_MAP_WRITE, 0);
		EXPECT(pat_check(p, MIB, SEED_MAP_WRITE, 0) < 0,
		       "reloaded module: mapping reads back wrong data");
		munmap(p, MIB);
	}
	if (fd >= 0)
		close(fd);
	if (dev >= 0)
		close(dev);
	EXPECT(all_free(), "memory not back on the reloaded module");
}

int main(int argc, char **argv)
{
	int dev;

	if (argc > 1) {
		dev = dev_open(&info);
		EXPECT(dev >= 0, "no /dev/phx0");
		if (dev < 0)
			return test_result(5, argv[1]);
		close(dev);
		if (!strcmp(argv[1], "alloc-unbind"))
			alloc_during_unbind();
		else if (!strcmp(argv[1], "copy-truncate"))
			copy_while_truncating();
		else if (!strcmp(argv[1], "rmmod-race"))
			rmmod_racing_close();
		else
			EXPECT(0, "unknown test %s", argv[1]);
		return test_result(5, argv[1]);
	}

	dev = dev_open(&info);
	EXPECT(dev >= 0, "no /dev/phx0");
	if (dev < 0)
		return test_result(5, "misuse is refused or survived");
	bad_ioctls(dev);
	bad_ranges(dev);
	read_only_descriptor(dev);
	close_before_munmap(dev);
	exit_with_mapping(dev);
	concurrent();
	free_while_pinned(dev);
	close(dev);
	rmmod_with_mapping();
	unbind_with_mapping();
	printf("# safety checks done, %d failures\n", test_failures);
	return test_result(5, "misuse is refused or survived");
}
