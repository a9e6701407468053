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
 * The races of check 5 are in kmod_races.c.
 */
#include <liburing.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "guest.h"

#define WORKERS 4
#define ROUNDS 60

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
	EXPECT(all_free(info.size), "memory not back after close");
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
	EXPECT(all_free(info.size), "memory not back after the GROW file");
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
	EXPECT(all_free(info.size), "memory not back after munmap");
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
	EXPECT(all_free(info.size),
	       "memory not back after exit with a mapping");
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
	EXPECT(all_free(info.size), "memory not back after concurrent workers");
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
	EXPECT(all_free(info.size), "memory not back after the pin went");
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
	EXPECT(all_free(info.size), "reloaded module has memory in use");
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
	EXPECT(all_free(info.size), "rebound device has memory in use");
}

int main(void)
{
	int dev = dev_open(&info);
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