/* SPDX-License-Identifier: MIT */
/*
 * loop.c - which FUSE worker takes the next request.
 *
 * libfuse's multi-threaded loop keeps a spare worker waiting in read() on
 * /dev/fuse while another serves a request, and the kernel hands each
 * request to the worker that has waited longest.  So a reader going
 * through a file one request at a time (cat) is served by the workers in
 * turn, each after sleeping for a whole request: on a virtual machine a
 * CPU idle that long is descheduled, and waking it costs about as much
 * as copying a 1 MiB reply (on the H200 machine, cat ran at 0.69-0.86x
 * /dev/shm with the stock loop and 0.82-1.00x with one worker).
 *
 * Here the worker that has just replied takes the next request first:
 * of the workers waiting, one (the reader) blocks in read() as before,
 * and at most one other (the watcher) waits in poll(), which the kernel
 * wakes for every request alongside the reader, and then reads without
 * blocking.  A worker back from a reply finds the reader's place taken
 * and watches; being the one most recently awake, it is usually first to
 * the request, and the reader goes back to sleep.  Workers beyond these
 * two wait here until a place frees, so a burst of requests still finds
 * a worker on each while the file system is busy (libfuse starts more
 * when none is left).  Each worker has its own clone of the /dev/fuse
 * descriptor, so one can block while another does not.
 *
 * Each worker's receive buffer, where a WRITE's data arrives, is pinned on
 * every device (phx_host_register()) the first time it comes here: the
 * data then goes from it to device memory directly instead of through
 * libphoenix's pinned staging, one copy fewer.  Where pinning is refused
 * (memlock limit), and past PIN_WORKERS workers, writes are staged as
 * before.
 *
 * Only with libfuse 3.17 and later, whose custom I/O can clone the
 * descriptor; older ones keep the stock loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "phxfs.h"

#if FUSE_USE_VERSION >= 317 && FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)

static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t place_free = PTHREAD_COND_INITIALIZER;
static bool reader_taken, watcher_taken; /* under loop_lock */
static unsigned int parked; /* workers waiting for a place, loop_lock */

enum role { ROLE_READER, ROLE_WATCHER };

/* The descriptor's mode, per worker: each has its own clone. */
static __thread int mode_fd = -1;
static __thread bool mode_nonblock;

static void set_nonblock(int fd, bool on)
{
	int fl;

	if (mode_fd == fd && mode_nonblock == on)
		return;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 ||
	    fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0)
		return; /* reads below cope with either mode */
	mode_fd = fd;
	mode_nonblock = on;
}

static void unlock(void *m)
{
	pthread_mutex_unlock(m);
}

static enum role take_place(void)
{
	enum role r;

	pthread_mutex_lock(&loop_lock);
	/* libfuse cancels workers waiting for requests when it stops */
	pthread_cleanup_push(unlock, &loop_lock);
	while (reader_taken && watcher_taken) {
		parked++;
		pthread_cond_wait(&place_free, &loop_lock);
		parked--;
	}
	pthread_cleanup_pop(0);
	r = reader_taken ? ROLE_WATCHER : ROLE_READER;
	if (r == ROLE_READER)
		reader_taken = true;
	else
		watcher_taken = true;
	pthread_mutex_unlock(&loop_lock);
	return r;
}

/* Off to serve a request (or to stop): a parked worker takes the place. */
static void leave_place(enum role r)
{
	pthread_mutex_lock(&loop_lock);
	if (r == ROLE_READER)
		reader_taken = false;
	else
		watcher_taken = false;
	if (parked && !reader_taken && !watcher_taken)
		pthread_cond_signal(&place_free);
	pthread_mutex_unlock(&loop_lock);
}

/*
 * Receive buffers pinned at once: pinning makes the whole buffer (the
 * largest request, 16 MiB by default) resident, so a burst that starts
 * many workers does not pin that much per worker; the others stage.
 */
#define PIN_WORKERS 4

static atomic_uint npinned;
/* This worker's receive buffer: pinned, or left as it is. */
static __thread void *pinned, *unpinned;
/* Its file system while one is pinned: unpin() runs when the worker exits. */
static pthread_key_t pin_key;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;

static void unpin(void *fs)
{
	struct phxfs *f = fs;
	unsigned int i;

	if (!pinned)
		return;
	for (i = 0; i < f->ndevs; i++)
		phx_host_unregister(f->devs[i].dev, pinned);
	pinned = NULL;
	atomic_fetch_sub(&npinned, 1);
}

static void pin_key_init(void)
{
	pthread_key_create(&pin_key, unpin);
}

static void pin(struct phxfs *fs, void *buf, size_t len)
{
	unsigned int i;

	if (buf == pinned || buf == unpinned)
		return;
	unpin(fs); /* libfuse gave this worker a new one */
	if (atomic_fetch_add(&npinned, 1) >= PIN_WORKERS) {
		atomic_fetch_sub(&npinned, 1);
		unpinned = buf;
		return;
	}
	pthread_once(&pin_once, pin_key_init);
	for (i = 0; i < fs->ndevs; i++)
		phx_host_register(fs->devs[i].dev, buf, len);
	pinned = buf;
	pthread_setspecific(pin_key, fs);
}

static ssize_t loop_read(int fd, void *buf, size_t len, void *userdata)
{
	enum role r = take_place();
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int err;

	pin(userdata, buf, len);
	set_nonblock(fd, r == ROLE_WATCHER);
	for (;;) {
		n = read(fd, buf, len);
		if (n >= 0 || errno != EAGAIN)
			break;
		/* another worker took it; wait for the next */
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			break;
	}
	err = errno;
	leave_place(r);
	errno = err;
	return n;
}

static ssize_t loop_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	return writev(fd, iov, count);
}

/* A worker's own descriptor on the session's connection. */
static int loop_clone(int master)
{
	uint32_t m = (uint32_t)master;
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (ioctl(fd, FUSE_DEV_IOC_CLONE, &m)) {
		close(fd);
		return -1;
	}
	return fd;
}

void phxfs_loop_setup(struct phxfs *fs)
{
	static const struct fuse_custom_io io = {
		.read = loop_read,
		.writev = loop_writev,
		.clone_fd = loop_clone,
	};

	/* the stock loop serves as before if libfuse refuses */
	if (fuse_session_custom_io(fs->se, &io, sizeof(io),
				   fuse_session_fd(fs->se)))
		fprintf(stderr,
			"phxfs: custom FUSE I/O refused; the stock loop serves\n");
}

#else

void phxfs_loop_setup(struct phxfs *fs)
{
	(void)fs;
}

#endif
