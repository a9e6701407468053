/* SPDX-License-Identifier: MIT */
/*
 * kmod_races.c - check 5's races: phx.ko stays consistent when misuse
 * races its own teardown.
 *
 * Each runs on its own, after every other check, because the bugs it
 * looks for leave the device unusable or a process hung:
 * "kmod_races alloc-unbind" allocates while the device is unbound,
 * "kmod_races copy-truncate" reads and writes range files into mappings
 * of other ranges while a GROW file is truncated, "kmod_races rmmod-race"
 * unloads the module while a process drops its last range files, and
 * "kmod_races unbind-pin" unbinds the device while io_uring holds a
 * long-term pin on its pages.  The host scans the kernel log afterwards.
 */
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "guest.h"

#define UNLOAD_ROUNDS 64

static struct phx_ioc_info info;

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
	EXPECT(all_free(info.size), "rebound device has memory in use");
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
		EXPECT(all_free(info.size), "memory not back after the copies");
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

	EXPECT(all_free(info.size), "reloaded module has memory in use");
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
	EXPECT(all_free(info.size), "memory not back on the reloaded module");
}

/*
 * Register a mapping of a range as an io_uring fixed buffer (a long-term
 * pin, which the kernel offers no way to revoke), drop the range file and
 * hold the pin until the parent says go; then unregister it.  Exit 0:
 * the pin was taken and given back.
 */
static int pin_child(int round, int go, int ready)
{
	struct io_uring ring;
	struct iovec iov;
	int dev, fd;
	char c;

	dev = open("/dev/phx0", O_RDWR);
	fd = range_alloc(dev, MIB, BAR_SCRATCH, PHX_ALLOC_FIXED);
	close(dev);
	iov.iov_base = fd >= 0 ? range_map(fd, MIB) : NULL;
	iov.iov_len = MIB;
	if (!iov.iov_base || io_uring_queue_init(4, &ring, 0))
		return 2;
	if (io_uring_register_buffers(&ring, &iov, 1))
		return 3;
	close(fd);
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 4;
	if (io_uring_unregister_buffers(&ring))
		return 5;
	io_uring_queue_exit(&ring);
	munmap(iov.iov_base, MIB);
	return 0;
}

struct unbinder {
	pthread_t thread;
	int err; /* the unbind's errno, 0 once it returned */
	atomic_bool returned;
};

static void *unbind_thread(void *arg)
{
	struct unbinder *u = arg;

	u->err = write_sysfs("/sys/bus/pci/drivers/phx/unbind", info.pci_name) ?
			 errno :
			 0;
	atomic_store(&u->returned, true);
	return NULL;
}

/*
 * Unbind the device while a child holds a long-term pin on its pages:
 * the unbind takes /dev/phx0 away at once (phx_dev_kill() deregisters it
 * first) and then waits, the memory still pinned, until the child
 * unregisters the buffer; then it returns and all memory comes back.
 * Whether the unbind has returned is looked at only once /dev/phx0 is
 * gone, when a correct module is certain to be waiting.
 */
static void unbind_while_pinned(void)
{
	struct unbinder u = { .err = -1 };
	struct child ch;
	int i, status;

	if (child_start(&ch, pin_child, 0))
		return;
	atomic_init(&u.returned, false);
	if (pthread_create(&u.thread, NULL, unbind_thread, &u)) {
		EXPECT(0, "unbind thread: %s", strerror(errno));
		return;
	}
	/* /dev/phx0 goes first: give the unbind up to a minute for that */
	for (i = 0; i < 6000 && !access("/dev/phx0", F_OK); i++)
		usleep(10000);
	EXPECT(access("/dev/phx0", F_OK) != 0, "/dev/phx0 still there");
	EXPECT(!atomic_load(&u.returned),
	       "the unbind returned while io_uring pinned the pages");
	EXPECT(write(ch.go, "g", 1) == 1, "wake child");
	status = child_end(&ch);
	EXPECT(WIFEXITED(status) && !WEXITSTATUS(status),
	       "pinning child: status %#x", status);
	pthread_join(u.thread, NULL);
	EXPECT(!u.err, "unbind: %s", strerror(u.err));
	EXPECT(!write_sysfs("/sys/bus/pci/drivers/phx/bind", info.pci_name),
	       "bind: %s", strerror(errno));
	EXPECT(all_free(info.size), "rebound device has memory in use");
}

int main(int argc, char **argv)
{
	int dev = dev_open(&info);

	EXPECT(argc == 2, "usage: kmod_races "
			  "alloc-unbind|copy-truncate|rmmod-race|unbind-pin");
	if (argc != 2)
		return test_result(5, "races");
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
	else if (!strcmp(argv[1], "unbind-pin"))
		unbind_while_pinned();
	else
		EXPECT(0, "unknown test %s", argv[1]);
	return test_result(5, argv[1]);
}
