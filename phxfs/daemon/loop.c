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
#include <stdlib.h>
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
 * Host memory pinned for requests' data, all threads together: pinning
 * makes a whole buffer resident (a receive buffer or an io_uring payload
 * is as large as the largest request, 16 MiB by default), so a burst that
 * starts many workers does not pin that much each; the rest stage.
 */
#define PIN_BUDGET (256ULL << 20)
/* io_uring payloads one ring thread keeps pinned (its queue's depth) */
#define PIN_PAYLOADS 16

static atomic_uint_fast64_t pinned_bytes;

/* What one thread has pinned: its receive buffer, its ring's payloads. */
struct pins {
	struct phxfs *fs;
	void *recv; /* pinned receive buffer, or NULL */
	size_t recv_len;
	void *recv_seen; /* the last one offered, pinned or not */
	unsigned int npayloads;
	struct {
		char *p;
		size_t len;
		bool pinned;
	} payload[PIN_PAYLOADS];
};

static __thread struct pins *my_pins;
static pthread_key_t pins_key; /* the same, for its destructor */
static pthread_once_t pins_once = PTHREAD_ONCE_INIT;

/* Pin [@p, @p + @len) on every device that takes it (memlock limits). */
static bool pin_range(struct phxfs *fs, void *p, size_t len)
{
	unsigned int i, n = 0;

	if (atomic_fetch_add(&pinned_bytes, len) + len > PIN_BUDGET) {
		atomic_fetch_sub(&pinned_bytes, len);
		return false;
	}
	for (i = 0; i < fs->ndevs; i++)
		n += !phx_host_register(fs->devs[i].dev, p, len);
	if (!n)
		atomic_fetch_sub(&pinned_bytes, len);
	return n;
}

static void unpin_range(struct phxfs *fs, void *p, size_t len)
{
	unsigned int i;

	for (i = 0; i < fs->ndevs; i++)
		phx_host_unregister(fs->devs[i].dev, p);
	atomic_fetch_sub(&pinned_bytes, len);
}

/* A thread exits (libfuse ends idle workers, the rings at unmount). */
static void pins_free(void *arg)
{
	struct pins *pn = arg;
	unsigned int i;

	if (pn->recv)
		unpin_range(pn->fs, pn->recv, pn->recv_len);
	for (i = 0; i < pn->npayloads; i++)
		if (pn->payload[i].pinned)
			unpin_range(pn->fs, pn->payload[i].p,
				    pn->payload[i].len);
	free(pn);
}

static void pins_key_init(void)
{
	pthread_key_create(&pins_key, pins_free);
}

static struct pins *pins_of(struct phxfs *fs)
{
	if (my_pins)
		return my_pins;
	pthread_once(&pins_once, pins_key_init);
	my_pins = calloc(1, sizeof(*my_pins));
	if (my_pins) {
		my_pins->fs = fs;
		pthread_setspecific(pins_key, my_pins);
	}
	return my_pins;
}

/* A WRITE arrived in this worker's receive buffer @buf: pin it once. */
static void pin_recv(struct phxfs *fs, void *buf, size_t len)
{
	struct pins *pn = pins_of(fs);

	if (!pn || buf == pn->recv_seen)
		return;
	if (pn->recv) /* libfuse gave this worker a new one */
		unpin_range(fs, pn->recv, pn->recv_len);
	pn->recv = NULL;
	pn->recv_seen = buf;
	if (pin_range(fs, buf, len)) {
		pn->recv = buf;
		pn->recv_len = len;
	}
}

static ssize_t loop_read(int fd, void *buf, size_t len, void *userdata)
{
	enum role r = take_place();
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int err;

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
	/* the data goes to the device from here: pinned, it needs no staging */
	if (n >= (ssize_t)sizeof(struct fuse_in_header) &&
	    ((struct fuse_in_header *)buf)->opcode == FUSE_WRITE)
		pin_recv(userdata, buf, len);
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

/*
 * FUSE over io_uring (-o io_uring; Linux 6.14, libfuse 3.18): the kernel
 * keeps a queue per CPU, and libfuse a thread per queue bound to that CPU,
 * which serves the requests made there.  A request is then served on the
 * CPU that made it, where the caller has just gone to sleep, instead of
 * waking an idle CPU and the caller's again for the reply (tens of
 * microseconds on a virtual machine, several times a small request's
 * work).  Large sequential reads lose by it: each is served whole on one
 * thread, device copy then the kernel's copy out of the payload, where
 * /dev/fuse overlaps the two (read-ahead), so it is asked for, not the
 * default.  The kernel offers it only while the fuse module's
 * enable_uring parameter is on.
 */
#define URING_PARAM "/sys/module/fuse/parameters/enable_uring"

static void uring_off(struct phxfs *fs, const char *why)
{
	fs->uring = false;
	snprintf(fs->uring_why, sizeof(fs->uring_why), "%s", why);
	if (fs->opts.io_uring)
		fprintf(stderr,
			"phxfs: FUSE over io_uring off, requests go through /dev/fuse: %s\n",
			why);
}

#define URING_NOT_ASKED "not asked for (-o io_uring)"

#if FUSE_USE_VERSION >= 317 && FUSE_VERSION >= FUSE_MAKE_VERSION(3, 18)

int phxfs_uring_args(struct phxfs *fs, struct fuse_args *args)
{
	char val = 0;
	int fd;

	if (!fs->opts.io_uring) {
		uring_off(fs, URING_NOT_ASKED);
		return 0;
	}
	fd = open(URING_PARAM, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		uring_off(
			fs,
			"the kernel has none (needs Linux 6.14 with CONFIG_FUSE_IO_URING)");
		return 0;
	}
	if (read(fd, &val, 1) != 1)
		val = 0;
	close(fd);
	if (val != 'Y' && val != '1') {
		uring_off(fs,
			  "switched off in the kernel (echo 1 > " URING_PARAM
			  ")");
		return 0;
	}
	fs->uring = true; /* unless the kernel says no in init */
	return fuse_opt_add_arg(args, "-oio_uring");
}

void phxfs_uring_init(struct phxfs *fs, struct fuse_conn_info *conn)
{
	if (fs->uring && !fuse_get_feature_flag(conn, FUSE_CAP_OVER_IO_URING))
		uring_off(fs, "the kernel did not offer it in FUSE init");
}

void *phxfs_req_payload(fuse_req_t req, size_t *size)
{
	struct phxfs *fs = fuse_req_userdata(req);
	struct pins *pn;
	unsigned int i;
	size_t len;
	char *p;
	void *mr;

	if (!fuse_req_is_uring(req) || fuse_req_get_payload(req, &p, &len, &mr))
		return NULL;
	pn = pins_of(fs);
	if (!pn)
		return NULL;
	for (i = 0; i < pn->npayloads && pn->payload[i].p != p; i++)
		;
	if (i == pn->npayloads) {
		if (i == PIN_PAYLOADS)
			return NULL; /* deeper queues than that stage */
		pn->payload[i].p = p;
		pn->payload[i].len = len;
		pn->payload[i].pinned = pin_range(fs, p, len);
		pn->npayloads++;
	}
	if (!pn->payload[i].pinned)
		return NULL;
	if (size)
		*size = len;
	return p;
}

#else

int phxfs_uring_args(struct phxfs *fs, struct fuse_args *args)
{
	char why[64];

	(void)args;
	snprintf(why, sizeof(why), "built with libfuse %d.%d (needs 3.18)",
		 FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
	uring_off(fs, fs->opts.io_uring ? why : URING_NOT_ASKED);
	return 0;
}

void phxfs_uring_init(struct phxfs *fs, struct fuse_conn_info *conn)
{
	(void)fs;
	(void)conn;
}

void *phxfs_req_payload(fuse_req_t req, size_t *size)
{
	(void)req;
	(void)size;
	return NULL;
}

#endif
