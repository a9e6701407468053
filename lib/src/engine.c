/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the io_uring transfer engine.
 *
 * An engine owns one io_uring, a ring of pinned staging slots (registered
 * with io_uring as fixed buffers and with the device), a few copy streams
 * and an event per slot.  Each transfer (a "job") is cut into segments of
 * PHX_CHUNK_SIZE.  A read segment is read from the file into a slot and,
 * once the read completes, copied to the device asynchronously while
 * other slots are still reading, so disk and PCIe overlap.  Writes are the
 * mirror image: device-to-slot copy, then the file write.
 *
 * Data paths:
 *   staged    O_DIRECT reads of the block-aligned superset of the range,
 *             so any offset and length work without the page cache;
 *   buffered  page-cache reads (the file is mostly cached, O_DIRECT is
 *             refused, or PHX_DIRECT=off), punted to io_uring's workers so
 *             several copies out of the page cache run at once;
 *   p2p       the device memory is mapped (phx.ko) and aligned segments go
 *             straight between the file and the mapping, no staging.
 * Unaligned edges of writes go through the page cache, the middle O_DIRECT.
 *
 * Host memory is the staging ring, whatever the transfer size.  Engines
 * are pooled per device (phx_io_run) or owned by a batch.  An engine is
 * used by one thread at a time.
 */
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <liburing.h>

#include "internal.h"

#define PHX_DIO_ALIGN 4096ULL
#define PHX_MAX_ENGINES 4
#define PHX_NR_STREAMS 2
#define PHX_FD_CACHE 8

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct phx_cachestat_range {
	uint64_t off;
	uint64_t len;
};

struct phx_cachestat {
	uint64_t nr_cache;
	uint64_t nr_dirty;
	uint64_t nr_writeback;
	uint64_t nr_evicted;
	uint64_t nr_recently_evicted;
};

/* A file a job reads or writes, shared by the jobs on it while active. */
struct fd_entry {
	int user_fd;
	dev_t st_dev;
	ino_t st_ino;
	int accmode;
	int direct_fd; /* -1: not opened yet; -2: O_DIRECT impossible */
	int buffered_fd; /* -1: not opened yet */
	bool own_direct, own_buffered;
	uint64_t size; /* at the time of the first job */
	unsigned int users;
};

struct job_region {
	uint64_t from, to;
	bool direct;
};

struct job {
	struct phx_io *io;
	struct phx_buf *buf; /* NULL for raw device addresses */
	phx_dptr_t dptr; /* device address of file offset @start */
	struct fd_entry *fde;
	uint64_t start, end; /* the file range */
	struct job_region region[3];
	unsigned int nregions, cur;
	uint64_t pos; /* next offset to issue in region[cur] */
	bool p2p;
	unsigned int pending; /* segments in flight */
	uint64_t moved;
	uint64_t by_path[5];
	int err;
	bool eof;
	bool queued; /* on the engine's issue queue */
	TAILQ_ENTRY(job) issue; /* while it has segments to issue */
	STAILQ_ENTRY(job) done; /* once complete, until collected */
};

enum slot_state {
	SLOT_FREE,
	SLOT_IO, /* read or write in flight */
	SLOT_COPY, /* device copy in flight */
};

struct slot {
	enum slot_state state;
	struct job *job;
	char *mem;
	uint64_t foff; /* file offset of the I/O */
	uint64_t len; /* bytes of the I/O */
	uint64_t done; /* bytes of it completed so far */
	char *target; /* p2p: where the I/O goes instead of mem */
	bool direct;
	uint64_t copied; /* bytes of the job the copy moves */
	void *event;
	void *stream;
};

struct phx_engine {
	struct phx_device *dev;
	struct io_uring ring;
	unsigned int ring_entries; /* SQEs the ring holds: twice the slots */
	bool ring_ok, fixed, polled;
	bool broken; /* a step failed midway: never lend it again */
	uint64_t chunk;
	unsigned int nslots;
	char *staging;
	size_t staging_len;
	bool pinned;
	struct slot *slots;
	unsigned int nevents; /* slots[0..nevents) have an event */
	void *streams[PHX_NR_STREAMS];
	unsigned int inflight; /* SQEs submitted, CQE not yet seen */
	unsigned int to_submit; /* SQEs prepared, not submitted */
	/*
	 * Jobs queued and not yet complete; the ones with segments left to
	 * issue, oldest first; the completed ones not yet collected.
	 */
	unsigned int nactive;
	TAILQ_HEAD(, job) issue;
	STAILQ_HEAD(, job) done;
	struct fd_entry fds[PHX_FD_CACHE];
	struct phx_engine *next_free;
};

/* ---- files ---------------------------------------------------------- */

int phx_reopen(int fd, int flags)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, flags | O_CLOEXEC);
}

static void fd_put(struct fd_entry *f)
{
	if (--f->users)
		return;
	if (f->own_direct && f->direct_fd >= 0)
		close(f->direct_fd);
	if (f->own_buffered && f->buffered_fd >= 0)
		close(f->buffered_fd);
	memset(f, 0, sizeof(*f));
}

static int fd_get(struct phx_engine *e, int fd, enum phx_op op,
		  struct fd_entry **out)
{
	struct fd_entry *f, *free_slot = NULL;
	struct stat st;
	int fl, acc, i;
	uint64_t size;

	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fstat(fd, &st))
		return phx_err(EBADF, "fd %d is not an open file", fd);
	acc = fl & O_ACCMODE;
	if (op == PHX_OP_READ && acc == O_WRONLY)
		return phx_err(EBADF, "fd %d is not open for reading", fd);
	if (op == PHX_OP_WRITE && acc == O_RDONLY)
		return phx_err(EBADF, "fd %d is not open for writing", fd);
	if (S_ISREG(st.st_mode)) {
		size = (uint64_t)st.st_size;
	} else if (S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, &size))
			return phx_err(
				errno,
				"fd %d: cannot size the block device: %s", fd,
				strerror(errno));
	} else {
		return phx_err(EINVAL,
			       "fd %d is not a regular file or block device",
			       fd);
	}

	for (i = 0; i < PHX_FD_CACHE; i++) {
		f = &e->fds[i];
		if (!f->users) {
			free_slot = free_slot ? free_slot : f;
			continue;
		}
		if (f->user_fd == fd && f->st_dev == st.st_dev &&
		    f->st_ino == st.st_ino && f->accmode == acc) {
			f->users++;
			f->size = size;
			*out = f;
			return 0;
		}
	}
	if (!free_slot)
		return -EAGAIN; /* caller runs the engine and retries */
	f = free_slot;
	memset(f, 0, sizeof(*f));
	f->user_fd = fd;
	f->st_dev = st.st_dev;
	f->st_ino = st.st_ino;
	f->accmode = acc;
	f->size = size;
	f->users = 1;
	if (fl & O_DIRECT) {
		f->direct_fd = fd;
		f->buffered_fd = -1;
	} else {
		f->direct_fd = -1;
		f->buffered_fd = fd;
	}
	*out = f;
	return 0;
}

/* Per-file descriptors for each mode, opened on first need. */
static int fd_direct(struct fd_entry *f)
{
	if (f->direct_fd == -1) {
		int acc = f->accmode == O_WRONLY ? O_RDWR : f->accmode;

		f->direct_fd = phx_reopen(f->user_fd, acc | O_DIRECT);
		if (f->direct_fd < 0 && f->accmode == O_WRONLY)
			f->direct_fd =
				phx_reopen(f->user_fd, O_WRONLY | O_DIRECT);
		if (f->direct_fd < 0)
			f->direct_fd = -2;
		else
			f->own_direct = true;
	}
	return f->direct_fd;
}

static int fd_buffered(struct fd_entry *f)
{
	if (f->buffered_fd == -1) {
		f->buffered_fd = phx_reopen(f->user_fd, f->accmode);
		if (f->buffered_fd < 0)
			return phx_err(
				errno,
				"fd %d: cannot reopen it without O_DIRECT for an unaligned edge: %s",
				f->user_fd, strerror(errno));
		f->own_buffered = true;
	}
	return f->buffered_fd;
}

/* Share of [off, off + len) of @fd in the page cache, in percent. */
static unsigned int cached_percent(int fd, uint64_t off, uint64_t len)
{
	struct phx_cachestat_range r = { off, len };
	struct phx_cachestat cs;
	uint64_t pages = (len + 4095) / 4096;

	if (!pages || syscall(__NR_cachestat, fd, &r, &cs, 0))
		return 0;
	return (unsigned int)phx_min(100, cs.nr_cache * 100 / pages);
}

/* ---- engine lifetime ------------------------------------------------ */

#define PHX_MPOL_PREFERRED 1

/*
 * Allocate staging memory on the host node nearest the device, so the
 * device's DMA does not cross the socket interconnect.  Single-node
 * machines (and unknown nodes) take the default policy.
 */
static void *staging_alloc(struct phx_device *dev, size_t len)
{
	unsigned long mask[16] = { 0 };
	int node = dev->numa_node;
	void *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (node >= 0 && node < 1024 &&
	    !access("/sys/devices/system/node/node1", F_OK)) {
		mask[node / 64] = 1UL << (node % 64);
		/* a preference, not a hard binding: best effort */
		syscall(SYS_mbind, p, len, PHX_MPOL_PREFERRED, mask, 1024UL,
			0U);
	}
	memset(p, 0, len); /* fault it in now, where the policy says */
	return p;
}

static void engine_destroy(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	unsigned int i;

	phx_device_bind(dev);
	for (i = 0; i < PHX_NR_STREAMS; i++)
		if (e->streams[i]) {
			dev->ops->stream_sync(dev, e->streams[i]);
			dev->ops->stream_destroy(dev, e->streams[i]);
		}
	for (i = 0; i < e->nevents; i++)
		dev->ops->event_destroy(dev, e->slots[i].event);
	if (e->ring_ok)
		io_uring_queue_exit(&e->ring);
	if (e->staging) {
		if (e->pinned) {
			dev->ops->host_unregister(dev, e->staging);
			atomic_fetch_sub(&dev->pinned, e->staging_len);
		}
		munmap(e->staging, e->staging_len);
		atomic_fetch_sub(&dev->staging, e->staging_len);
	}
	free(e->slots);
	free(e);
}

/* How an engine cuts its staging: @nslots slots of @chunk bytes. */
struct engine_shape {
	unsigned int nslots;
	uint64_t chunk;
};

/*
 * Synchronous engines favour big requests (a few large transfers);
 * batches favour depth (many small ones), in the same staging size.
 * @staging: bytes, 0 for the configured size.  @depth: slots of a batch,
 * 0 for the configured queue depth.
 */
static struct engine_shape shape_sync(size_t staging)
{
	const struct phx_settings *s = phx_settings();
	struct engine_shape sh = { .chunk = s->chunk_size };

	if (!staging)
		staging = s->staging_size;
	sh.nslots = (unsigned int)phx_max(staging / sh.chunk, 1);
	return sh;
}

static struct engine_shape shape_batch(unsigned int depth)
{
	const struct phx_settings *s = phx_settings();
	struct engine_shape sh;

	sh.nslots = depth ? phx_min(depth, 4096u) : s->queue_depth;
	sh.chunk = phx_align_down(s->staging_size / sh.nslots, 4096);
	sh.chunk = phx_min(phx_max(sh.chunk, 64 << 10), s->chunk_size);
	return sh;
}

/* Whether @e's staging and ring can take shape @sh without rebuilding. */
static bool engine_fits(const struct phx_engine *e, struct engine_shape sh)
{
	return sh.nslots * sh.chunk <= e->staging_len &&
	       sh.nslots * 2 <= e->ring_entries;
}

/*
 * Cut the staging into the slots of shape @sh, each with an event.  The
 * staging is one fixed buffer of the ring, so re-cutting it costs no
 * registration: only events for slots it never had.
 */
static int engine_slice(struct phx_engine *e, struct engine_shape sh)
{
	struct phx_device *dev = e->dev;
	unsigned int i;
	int ret;

	if (sh.nslots > e->nevents) {
		struct slot *slots =
			realloc(e->slots, sh.nslots * sizeof(*slots));

		if (!slots)
			return phx_err(ENOMEM,
				       "out of host memory for an engine");
		memset(slots + e->nevents, 0,
		       (sh.nslots - e->nevents) * sizeof(*slots));
		e->slots = slots;
		for (i = e->nevents; i < sh.nslots; i++) {
			ret = dev->ops->event_create(dev, &slots[i].event);
			if (ret)
				return ret;
			e->nevents++;
		}
	}
	for (i = 0; i < sh.nslots; i++) {
		struct slot *sl = &e->slots[i];

		sl->state = SLOT_FREE;
		sl->job = NULL;
		sl->target = NULL;
		sl->mem = e->staging + (size_t)i * sh.chunk;
		sl->stream = e->streams[i % PHX_NR_STREAMS];
	}
	e->nslots = sh.nslots;
	e->chunk = sh.chunk;
	return 0;
}

/* Build an engine of shape @sh: ring, staging (pinned), streams, events. */
static int engine_create(struct phx_device *dev, struct engine_shape sh,
			 struct phx_engine **out)
{
	struct phx_engine *e;
	struct iovec iov;
	unsigned int i;
	int ret;

	e = calloc(1, sizeof(*e));
	if (!e)
		return phx_err(ENOMEM, "out of host memory for an engine");
	e->dev = dev;
	TAILQ_INIT(&e->issue);
	STAILQ_INIT(&e->done);

	/* Room for batches of up to 64 slots to re-cut it without a new ring. */
	e->ring_entries = phx_max(sh.nslots, 64u) * 2;
	ret = io_uring_queue_init(e->ring_entries, &e->ring, 0);
	if (ret) {
		ret = phx_err(
			-ret,
			"%s: io_uring unavailable: %s; is io_uring disabled (kernel.io_uring_disabled)?",
			dev->name, strerror(-ret));
		goto out;
	}
	e->ring_ok = true;

	e->staging_len = (size_t)(sh.nslots * sh.chunk);
	e->staging = staging_alloc(dev, e->staging_len);
	if (!e->staging) {
		ret = phx_err(ENOMEM,
			      "%s: cannot allocate %zu bytes of staging memory",
			      dev->name, e->staging_len);
		goto out;
	}
	atomic_fetch_add(&dev->staging, e->staging_len);
	/*
	 * One fixed buffer for the whole staging saves a page pin per I/O
	 * whatever the slots; optional (memlock limits, io_uring's 1 GiB
	 * cap on a buffer).
	 */
	iov.iov_base = e->staging;
	iov.iov_len = e->staging_len;
	e->fixed = e->staging_len <= (1UL << 30) &&
		   !io_uring_register_buffers(&e->ring, &iov, 1);

	ret = phx_device_bind(dev);
	if (ret)
		goto out;
	if (!dev->ops->host_register(dev, e->staging, e->staging_len)) {
		e->pinned = true;
		atomic_fetch_add(&dev->pinned, e->staging_len);
	}
	for (i = 0; i < PHX_NR_STREAMS; i++) {
		ret = dev->ops->stream_create(dev, &e->streams[i]);
		if (ret)
			goto out;
	}
	ret = engine_slice(e, sh);
	if (ret)
		goto out;
	atomic_fetch_add(&dev->engines_built, 1);
	*out = e;
	return 0;
out:
	engine_destroy(e);
	return ret;
}

/* ---- jobs ----------------------------------------------------------- */

static void job_add_region(struct job *j, uint64_t from, uint64_t to,
			   bool direct)
{
	if (from >= to)
		return;
	j->region[j->nregions].from = from;
	j->region[j->nregions].to = to;
	j->region[j->nregions].direct = direct;
	j->nregions++;
}

/* Decide how a job moves its bytes and cut its file range into regions. */
static int job_plan(struct phx_engine *e, struct job *j)
{
	const struct phx_settings *s = phx_settings();
	struct phx_device *dev = e->dev;
	bool is_read = j->io->op == PHX_OP_READ;
	bool direct = s->direct != 0;
	uint64_t a_start = phx_align_down(j->start, PHX_DIO_ALIGN);
	uint64_t a_end = phx_align_up(j->end, PHX_DIO_ALIGN);
	int ret;

	/* Hot: most of what will be read (up to end of file) is cached. */
	if (direct && s->direct < 0 && is_read && s->hot_fraction <= 100 &&
	    j->start < j->fde->size &&
	    cached_percent(j->fde->user_fd, j->start,
			   phx_min(j->end, j->fde->size) - j->start) >=
		    s->hot_fraction)
		direct = false;
	if (direct && fd_direct(j->fde) < 0) {
		if (s->direct > 0)
			return phx_err(
				EINVAL,
				"fd %d cannot be opened with O_DIRECT (PHX_DIRECT=on): the file system refuses it",
				j->fde->user_fd);
		direct = false;
	}

	/* p2p: the device memory itself is DMA-able host-mapped memory. */
	if (direct && dev->ops->p2p && dev->ops->host_addr &&
	    (j->dptr - j->start) % PHX_DIO_ALIGN == 0)
		j->p2p = true;

	if (!direct) {
		ret = fd_buffered(j->fde);
		if (ret < 0)
			return ret;
		job_add_region(j, j->start, j->end, false);
		return 0;
	}
	if (is_read && !j->p2p) {
		/* The aligned superset; only the asked-for bytes are copied. */
		job_add_region(j, a_start, a_end, true);
		return 0;
	}
	/*
	 * p2p reads and all direct writes: the unaligned edges go through
	 * the page cache (a p2p read must not spill past the asked-for
	 * range into device memory), the aligned middle O_DIRECT.
	 */
	a_start = phx_align_up(j->start, PHX_DIO_ALIGN);
	a_end = phx_align_down(j->end, PHX_DIO_ALIGN);
	if (a_start >= a_end) {
		a_start = j->end;
		a_end = j->end;
	}
	if (j->start != a_start || j->end != a_end) {
		ret = fd_buffered(j->fde);
		if (ret < 0)
			return ret;
	}
	job_add_region(j, j->start, a_start, false);
	job_add_region(j, a_start, a_end, true);
	job_add_region(j, a_end, j->end, false);
	return 0;
}

static void job_complete(struct phx_engine *e, struct job *j)
{
	struct phx_device *dev = e->dev;
	unsigned int p, best = PHX_PATH_NONE;

	if (j->queued) {
		TAILQ_REMOVE(&e->issue, j, issue);
		j->queued = false;
	}
	e->nactive--;

	for (p = 1; p < 5; p++)
		if (j->by_path[p] > j->by_path[best])
			best = p;
	j->io->path = (enum phx_path)best;
	j->io->result = j->err ? j->err : (int64_t)j->moved;
	for (p = 1; p < 5; p++)
		atomic_fetch_add(&dev->bytes[p], j->by_path[p]);
	atomic_fetch_add(&dev->ios, 1);
	if (j->err)
		atomic_fetch_add(&dev->errors, 1);
	if (j->fde)
		fd_put(j->fde);
	STAILQ_INSERT_TAIL(&e->done, j, done);
}

static bool job_issuable(const struct job *j)
{
	return !j->err && !j->eof && j->cur < j->nregions;
}

static void job_fail(struct job *j, int err)
{
	if (!j->err)
		j->err = err;
}

/* Validate @io and turn it into a job queued on @e. */
static int job_start(struct phx_engine *e, struct phx_io *io, struct job **out)
{
	struct phx_device *dev = e->dev;
	struct job *j;
	int ret;

	io->result = 0;
	io->path = PHX_PATH_NONE;
	if (io->op != PHX_OP_READ && io->op != PHX_OP_WRITE)
		return phx_err(EINVAL, "unknown transfer op %d", (int)io->op);
	if (io->buf) {
		if (io->buf->dev != dev)
			return phx_err(EINVAL, "buffer is on %s, not on %s",
				       io->buf->dev->name, dev->name);
		ret = phx_buf_check_range(io->buf, io->buf_off, io->len);
		if (ret)
			return ret;
	} else if (!io->dptr && io->len) {
		return phx_err(
			EFAULT,
			"transfer has neither a buffer nor a device address");
	}

	if (io->file_off < 0 || io->len > INT64_MAX ||
	    (uint64_t)io->file_off > (uint64_t)INT64_MAX - io->len)
		return phx_err(EINVAL, "file range %lld+%llu is invalid",
			       (long long)io->file_off,
			       (unsigned long long)io->len);
	j = calloc(1, sizeof(*j));
	if (!j)
		return phx_err(ENOMEM, "out of host memory for a transfer");
	j->io = io;
	j->buf = io->buf;
	j->start = (uint64_t)io->file_off;
	j->end = j->start + io->len;

	/* -EAGAIN: every file slot is busy; the caller drains and retries */
	ret = fd_get(e, io->fd, io->op, &j->fde);
	if (ret)
		goto out_free;

	if (io->buf) {
		/* Reads back the range; the lock orders it against resize. */
		pthread_mutex_lock(&io->buf->lock);
		if (io->op == PHX_OP_READ)
			ret = phx_buf_commit_locked(io->buf, io->buf_off,
						    io->len);
		j->dptr = io->buf->dptr + io->buf_off;
		pthread_mutex_unlock(&io->buf->lock);
		if (ret)
			goto out_put;
	} else {
		j->dptr = io->dptr;
	}
	if (io->len) {
		ret = job_plan(e, j);
		if (ret)
			goto out_put;
		if (j->nregions)
			j->pos = j->region[0].from;
	}
	*out = j;
	return 0;
out_put:
	fd_put(j->fde);
out_free:
	free(j);
	return ret;
}

/* ---- the pipeline --------------------------------------------------- */

/* The oldest job with segments to issue; drops the ones that have none. */
static struct job *next_issuable(struct phx_engine *e)
{
	struct job *j;

	while ((j = TAILQ_FIRST(&e->issue)) && !job_issuable(j)) {
		TAILQ_REMOVE(&e->issue, j, issue);
		j->queued = false;
	}
	return j;
}

static void slot_prep_io(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
	int fd = sl->direct ? j->fde->direct_fd : j->fde->buffered_fd;
	char *mem = (sl->target ? sl->target : sl->mem) + sl->done;
	unsigned int n = (unsigned int)(sl->len - sl->done);
	uint64_t off = sl->foff + sl->done;

	/* The ring has twice as many entries as slots: never NULL. */
	if (j->io->op == PHX_OP_READ) {
		if (e->fixed && !sl->target)
			io_uring_prep_read_fixed(sqe, fd, mem, n, off, 0);
		else
			io_uring_prep_read(sqe, fd, mem, n, off);
	} else {
		if (e->fixed && !sl->target)
			io_uring_prep_write_fixed(sqe, fd, mem, n, off, 0);
		else
			io_uring_prep_write(sqe, fd, mem, n, off);
	}
	/* Page-cache copies run in parallel on io_uring's workers. */
	if (!sl->direct)
		sqe->flags |= IOSQE_ASYNC;
	io_uring_sqe_set_data(sqe, sl);
	sl->state = SLOT_IO;
	e->to_submit++;
}

static void slot_free(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;

	sl->state = SLOT_FREE;
	sl->job = NULL;
	sl->target = NULL;
	if (--j->pending == 0 && !job_issuable(j))
		job_complete(e, j);
}

/* Account a finished segment and release the slot. */
static void slot_finish(struct phx_engine *e, struct slot *sl)
{
	struct job *j = sl->job;
	enum phx_path p = sl->target ? PHX_PATH_P2P :
			  sl->direct ? PHX_PATH_STAGED :
				       PHX_PATH_BUFFERED;

	j->moved += sl->copied;
	j->by_path[p] += sl->copied;
	slot_free(e, sl);
}

/* Start a device copy for @sl; the slot completes when its event fires. */
static void slot_copy(struct phx_engine *e, struct slot *sl, bool to_device)
{
	struct phx_device *dev = e->dev;
	struct job *j = sl->job;
	uint64_t cs, ce;
	int ret;

	if (to_device) {
		cs = phx_max(sl->foff, j->start);
		ce = phx_min(sl->foff + sl->done, j->end);
	} else {
		cs = sl->foff;
		ce = sl->foff + sl->len;
	}
	sl->copied = ce > cs ? ce - cs : 0;
	if (!sl->copied) {
		slot_finish(e, sl);
		return;
	}
	if (to_device)
		ret = dev->ops->copy_htod(dev, j->dptr + (cs - j->start),
					  sl->mem + (cs - sl->foff), sl->copied,
					  sl->stream);
	else if (j->buf)
		ret = phx_buf_copy_out(j->buf, j->io->buf_off + (cs - j->start),
				       sl->mem, sl->copied, sl->stream);
	else
		ret = dev->ops->copy_dtoh(dev, sl->mem,
					  j->dptr + (cs - j->start), sl->copied,
					  sl->stream);
	if (!ret)
		ret = dev->ops->event_record(dev, sl->event, sl->stream);
	if (ret) {
		job_fail(j, ret);
		sl->copied = 0;
		slot_free(e, sl);
		return;
	}
	sl->state = SLOT_COPY;
}

/* Give free slots to jobs with segments left. */
static void engine_fill(struct phx_engine *e)
{
	unsigned int i;

	for (i = 0; i < e->nslots; i++) {
		struct slot *sl = &e->slots[i];
		struct job_region *r;
		struct job *j;
		uint64_t seg_end;

		if (sl->state != SLOT_FREE)
			continue;
		j = next_issuable(e);
		if (!j)
			return;
		r = &j->region[j->cur];
		/* Segments end on chunk-aligned file offsets. */
		seg_end = phx_min(r->to,
				  phx_align_down(j->pos, e->chunk) + e->chunk);
		sl->job = j;
		sl->foff = j->pos;
		sl->len = seg_end - j->pos;
		sl->done = 0;
		sl->copied = 0;
		sl->direct = r->direct;
		sl->target = NULL;
		if (j->p2p && r->direct)
			sl->target = (char *)e->dev->ops->host_addr(e->dev,
								    j->dptr) +
				     (sl->foff - j->start);
		j->pos = seg_end;
		if (j->pos >= r->to && ++j->cur < j->nregions)
			j->pos = j->region[j->cur].from;
		j->pending++;

		if (j->io->op == PHX_OP_WRITE && !sl->target) {
			sl->len = seg_end - sl->foff;
			slot_copy(e, sl, false);
		} else {
			if (sl->target && j->io->op == PHX_OP_WRITE)
				sl->copied = sl->len;
			slot_prep_io(e, sl);
		}
	}
}

static void engine_cqe(struct phx_engine *e, struct io_uring_cqe *cqe)
{
	struct slot *sl = io_uring_cqe_get_data(cqe);
	struct job *j = sl->job;
	int res = cqe->res;

	e->inflight--;
	if (res == -EINVAL && sl->direct) {
		/* O_DIRECT refused after all (FUSE, odd alignment): page cache */
		int bfd = fd_buffered(j->fde);

		if (bfd >= 0 && !sl->target) {
			sl->direct = false;
			slot_prep_io(e, sl);
			return;
		}
	}
	if (res == -EAGAIN || res == -EINTR) {
		slot_prep_io(e, sl);
		return;
	}
	if (res < 0) {
		job_fail(j, phx_err(-res, "%s fd %d at offset %llu: %s",
				    j->io->op == PHX_OP_READ ? "reading" :
							       "writing",
				    j->fde->user_fd,
				    (unsigned long long)(sl->foff + sl->done),
				    strerror(-res)));
		sl->copied = 0;
		slot_free(e, sl);
		return;
	}
	sl->done += (uint64_t)res;
	if (sl->done < sl->len) {
		if (j->io->op == PHX_OP_READ &&
		    (res == 0 || sl->foff + sl->done >= j->fde->size)) {
			j->eof = true; /* short read at end of file */
		} else if (res > 0) {
			slot_prep_io(e, sl);
			return;
		} else {
			job_fail(
				j,
				phx_err(EIO,
					"writing fd %d: no progress at offset %llu",
					j->fde->user_fd,
					(unsigned long long)(sl->foff +
							     sl->done)));
			sl->copied = 0;
			slot_free(e, sl);
			return;
		}
	}
	if (j->io->op == PHX_OP_READ) {
		if (sl->target) {
			sl->copied = phx_min(sl->foff + sl->done, j->end) -
				     phx_min(sl->foff, j->end);
			slot_finish(e, sl);
		} else {
			slot_copy(e, sl, true);
		}
	} else {
		slot_finish(e, sl);
	}
}

/* Progress copies whose events fired; returns how many did. */
static unsigned int engine_poll_copies(struct phx_engine *e)
{
	struct phx_device *dev = e->dev;
	unsigned int i, n = 0;

	for (i = 0; i < e->nslots; i++) {
		struct slot *sl = &e->slots[i];
		int ret;

		if (sl->state != SLOT_COPY)
			continue;
		ret = dev->ops->event_query(dev, sl->event);
		if (ret == -EAGAIN)
			continue;
		n++;
		if (ret) {
			job_fail(sl->job, ret);
			sl->copied = 0;
			slot_free(e, sl);
		} else if (sl->job->io->op == PHX_OP_WRITE) {
			slot_prep_io(e, sl);
		} else {
			slot_finish(e, sl);
		}
	}
	return n;
}

static struct slot *oldest_copy(struct phx_engine *e)
{
	unsigned int i;

	for (i = 0; i < e->nslots; i++)
		if (e->slots[i].state == SLOT_COPY)
			return &e->slots[i];
	return NULL;
}

/*
 * One round of the pipeline.  With @block it sleeps until something
 * happens (unless the engine is polled, which spins instead).
 */
static int engine_step_once(struct phx_engine *e, bool block)
{
	struct io_uring_cqe *cqe;
	unsigned int progressed = 0, head, seen;
	struct slot *sl;
	int ret;

	engine_fill(e);
	if (e->to_submit) {
		ret = io_uring_submit(&e->ring);
		if (ret < 0)
			return phx_err(-ret, "io_uring_submit: %s",
				       strerror(-ret));
		e->inflight += e->to_submit;
		e->to_submit = 0;
	}
	progressed += engine_poll_copies(e);

	seen = 0;
	io_uring_for_each_cqe(&e->ring, head, cqe) {
		engine_cqe(e, cqe);
		seen++;
	}
	io_uring_cq_advance(&e->ring, seen);
	progressed += seen;

	if (progressed || !block || e->polled || e->to_submit)
		return 0;

	/* Copies are short next to disk reads: wait on them first. */
	sl = oldest_copy(e);
	if (sl) {
		ret = e->dev->ops->event_sync(e->dev, sl->event);
		return ret;
	}
	if (e->inflight) {
		ret = io_uring_wait_cqe(&e->ring, &cqe);
		if (ret < 0 && ret != -EINTR)
			return phx_err(-ret, "io_uring_wait_cqe: %s",
				       strerror(-ret));
	}
	return 0;
}

/* A failed step leaves requests in flight: the engine is not lent again. */
static int engine_step(struct phx_engine *e, bool block)
{
	int ret = engine_step_once(e, block);

	if (ret)
		e->broken = true;
	return ret;
}

static bool engine_busy(const struct phx_engine *e)
{
	return e->nactive > 0;
}

/* Run until @j completes (and no request of it is left in flight). */
static int engine_run_job(struct phx_engine *e, struct job *j)
{
	int ret;

	while (engine_busy(e)) {
		ret = engine_step(e, true);
		if (ret)
			return ret;
	}
	return 0;
}

static void engine_queue(struct phx_engine *e, struct job *j)
{
	e->nactive++;
	if (!j->nregions) {
		job_complete(e, j); /* nothing to move */
		return;
	}
	TAILQ_INSERT_TAIL(&e->issue, j, issue);
	j->queued = true;
}

/* ---- the pool and synchronous transfers ----------------------------- */

/*
 * Lend an engine of shape @sh from @dev's pool: an idle one of that shape,
 * else an idle one re-cut to it, else a new one.  Synchronous calls
 * (@wait) wait while PHX_MAX_ENGINES are alive and none is idle.  Batches
 * never wait: a batch holds its engine for its life, so a thread holding
 * four batches would wait for itself; past the limit they build one that
 * is freed when it comes back.
 */
static int engine_get(struct phx_device *dev, struct engine_shape sh,
		      bool wait, struct phx_engine **out)
{
	struct phx_engine *e, **pp, **pick;
	int ret;

	pthread_mutex_lock(&dev->pool_lock);
	while (!dev->pool_free && dev->pool_count >= PHX_MAX_ENGINES && wait)
		pthread_cond_wait(&dev->pool_cond, &dev->pool_lock);
	if (!dev->pool_free) {
		dev->pool_count++;
		pthread_mutex_unlock(&dev->pool_lock);
		goto build;
	}
	pick = NULL;
	for (pp = &dev->pool_free; *pp; pp = &(*pp)->next_free) {
		if ((*pp)->nslots == sh.nslots && (*pp)->chunk == sh.chunk) {
			pick = pp;
			break;
		}
		if (!pick && engine_fits(*pp, sh))
			pick = pp;
	}
	if (!pick)
		pick = &dev->pool_free;
	e = *pick;
	*pick = e->next_free;
	dev->pool_idle--;
	pthread_mutex_unlock(&dev->pool_lock);

	if (e->nslots == sh.nslots && e->chunk == sh.chunk)
		goto lent;
	if (engine_fits(e, sh) && !engine_slice(e, sh))
		goto lent;
	/* Too small for this shape: build one in its place. */
	engine_destroy(e);
build:
	ret = engine_create(dev, sh, &e);
	if (ret) {
		pthread_mutex_lock(&dev->pool_lock);
		dev->pool_count--;
		pthread_cond_signal(&dev->pool_cond);
		pthread_mutex_unlock(&dev->pool_lock);
		return ret;
	}
lent:
	*out = e;
	return 0;
}

/* Return @e to the pool; broken engines and those past the limit go. */
static void engine_put(struct phx_device *dev, struct phx_engine *e)
{
	e->polled = false;
	pthread_mutex_lock(&dev->pool_lock);
	if (e->broken || dev->pool_count > PHX_MAX_ENGINES) {
		dev->pool_count--;
		pthread_cond_signal(&dev->pool_cond);
		pthread_mutex_unlock(&dev->pool_lock);
		engine_destroy(e);
		return;
	}
	e->next_free = dev->pool_free;
	dev->pool_free = e;
	dev->pool_idle++;
	pthread_cond_signal(&dev->pool_cond);
	pthread_mutex_unlock(&dev->pool_lock);
}

PHX_EXPORT int phx_engine_stats_get(struct phx_device *dev,
				    struct phx_engine_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&dev->pool_lock);
	out->alive = dev->pool_count;
	out->idle = dev->pool_idle;
	pthread_mutex_unlock(&dev->pool_lock);
	out->built = atomic_load(&dev->engines_built);
	out->staging_bytes = atomic_load(&dev->staging);
	return 0;
}

/*
 * Streams for host memory copies, reused: creating one per copy costs a
 * driver call (a thread on sim) for every FUSE request.
 */
static int stream_get(struct phx_device *dev, void **stream)
{
	pthread_mutex_lock(&dev->pool_lock);
	if (dev->nstreams) {
		*stream = dev->streams[--dev->nstreams];
		pthread_mutex_unlock(&dev->pool_lock);
		return 0;
	}
	pthread_mutex_unlock(&dev->pool_lock);
	return dev->ops->stream_create(dev, stream);
}

static void stream_put(struct phx_device *dev, void *stream)
{
	pthread_mutex_lock(&dev->pool_lock);
	if (dev->nstreams < sizeof(dev->streams) / sizeof(dev->streams[0])) {
		dev->streams[dev->nstreams++] = stream;
		stream = NULL;
	}
	pthread_mutex_unlock(&dev->pool_lock);
	if (stream)
		dev->ops->stream_destroy(dev, stream);
}

void phx_engine_pool_destroy(struct phx_device *dev)
{
	struct phx_engine *e;

	pthread_mutex_lock(&dev->pool_lock);
	while (dev->nstreams)
		dev->ops->stream_destroy(dev, dev->streams[--dev->nstreams]);
	free(dev->pinned_ranges);
	dev->pinned_ranges = NULL;
	dev->npinned_ranges = 0;
	while ((e = dev->pool_free)) {
		dev->pool_free = e->next_free;
		dev->pool_count--;
		dev->pool_idle--;
		engine_destroy(e);
	}
	pthread_mutex_unlock(&dev->pool_lock);
}

/* Run @io to completion on @e, which nothing else uses meanwhile. */
static int64_t engine_io(struct phx_engine *e, struct phx_io *io)
{
	struct job *j;
	int ret;

	ret = job_start(e, io, &j);
	if (ret) {
		atomic_fetch_add(&e->dev->errors, 1);
		return io->result = ret;
	}
	engine_queue(e, j);
	ret = engine_run_job(e, j);
	/* the job is on the done list now */
	STAILQ_INIT(&e->done);
	free(j);
	if (ret)
		return io->result = ret;
	if (io->result >= 0)
		phx_err_clear();
	return io->result;
}

PHX_EXPORT int64_t phx_io_run(struct phx_device *dev, struct phx_io *io)
{
	struct phx_engine *e;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return io->result = ret;
	ret = engine_get(dev, shape_sync(0), true, &e);
	if (ret)
		return io->result = ret;
	engine_io(e, io);
	engine_put(dev, e);
	return io->result;
}

/*
 * Engines outside the pool, for the stream-ordered workers (stream.c):
 * made and freed by their owner, used by one thread at a time.
 */
int phx_engine_new(struct phx_device *dev, size_t staging,
		   struct phx_engine **out)
{
	int ret = phx_device_bind(dev);

	return ret ? ret : engine_create(dev, shape_sync(staging), out);
}

void phx_engine_free(struct phx_engine *e)
{
	engine_destroy(e);
}

int64_t phx_engine_io(struct phx_engine *e, struct phx_io *io)
{
	int ret = phx_device_bind(e->dev);

	return ret ? io->result = ret : engine_io(e, io);
}

static int64_t buf_io(enum phx_op op, struct phx_buf *buf, uint64_t buf_off,
		      int fd, int64_t file_off, uint64_t len)
{
	struct phx_io io = {
		.op = op,
		.fd = fd,
		.file_off = file_off,
		.buf = buf,
		.buf_off = buf_off,
		.len = len,
	};

	return phx_io_run(buf->dev, &io);
}

PHX_EXPORT int64_t phx_read(struct phx_buf *buf, uint64_t buf_off, int fd,
			    int64_t file_off, uint64_t len)
{
	return buf_io(PHX_OP_READ, buf, buf_off, fd, file_off, len);
}

PHX_EXPORT int64_t phx_write(struct phx_buf *buf, uint64_t buf_off, int fd,
			     int64_t file_off, uint64_t len)
{
	return buf_io(PHX_OP_WRITE, buf, buf_off, fd, file_off, len);
}

/* ---- host memory copies --------------------------------------------- */

/*
 * Host ranges pinned through phx_host_register(): copies to and from them
 * go straight to the device; other host memory goes through the pinned
 * staging of a pooled engine.
 */
static bool host_pinned(struct phx_device *dev, const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;
	bool found = false;
	unsigned int i;

	pthread_mutex_lock(&dev->pool_lock);
	for (i = 0; i < dev->npinned_ranges && !found; i++)
		found = a >= dev->pinned_ranges[i].start &&
			a - dev->pinned_ranges[i].start + len <=
				dev->pinned_ranges[i].len;
	pthread_mutex_unlock(&dev->pool_lock);
	return found;
}

PHX_EXPORT int phx_host_register(struct phx_device *dev, void *p, size_t len)
{
	struct phx_host_range *r;
	int ret = phx_device_bind(dev);

	if (ret)
		return ret;
	if (!p || !len)
		return phx_err(EINVAL, "%s: nothing to pin", dev->name);
	ret = dev->ops->host_register(dev, p, len);
	if (ret)
		return ret;
	pthread_mutex_lock(&dev->pool_lock);
	r = realloc(dev->pinned_ranges,
		    (dev->npinned_ranges + 1) * sizeof(*r));
	if (r) {
		dev->pinned_ranges = r;
		r[dev->npinned_ranges].start = (uintptr_t)p;
		r[dev->npinned_ranges].len = len;
		dev->npinned_ranges++;
	}
	pthread_mutex_unlock(&dev->pool_lock);
	/* Untracked, copies from it only take the staged way: still right. */
	return 0;
}

PHX_EXPORT void phx_host_unregister(struct phx_device *dev, void *p)
{
	unsigned int i;

	if (phx_device_bind(dev))
		return;
	pthread_mutex_lock(&dev->pool_lock);
	for (i = 0; i < dev->npinned_ranges; i++)
		if (dev->pinned_ranges[i].start == (uintptr_t)p) {
			dev->pinned_ranges[i] =
				dev->pinned_ranges[--dev->npinned_ranges];
			break;
		}
	pthread_mutex_unlock(&dev->pool_lock);
	dev->ops->host_unregister(dev, p);
}

/* Whether a copy of [@p, @p + @len) should go through pinned staging. */
static bool host_staged(struct phx_device *dev, const void *p, uint64_t len)
{
	return dev->ops->pinned_copies && !host_pinned(dev, p, len);
}

/* Wait for every slot copy of @e still in flight; the first error. */
static int slots_drain(struct phx_engine *e)
{
	unsigned int i;
	int ret = 0, r;

	for (i = 0; i < e->nslots; i++) {
		struct slot *sl = &e->slots[i];

		if (sl->state != SLOT_COPY)
			continue;
		r = e->dev->ops->event_sync(e->dev, sl->event);
		if (!ret)
			ret = r;
		sl->state = SLOT_FREE;
	}
	return ret;
}

/*
 * Host -> device through the staging of a pooled engine: each slot is
 * filled by the CPU while the device copies the slots before it.
 */
static int staged_copy_in(struct phx_device *dev, phx_dptr_t dptr,
			  const char *src, uint64_t len)
{
	struct phx_engine *e;
	uint64_t done = 0, n;
	unsigned int i = 0;
	int ret, r;

	ret = engine_get(dev, shape_sync(0), true, &e);
	if (ret)
		return ret;
	while (!ret && done < len) {
		struct slot *sl = &e->slots[i++ % e->nslots];

		if (sl->state == SLOT_COPY) {
			sl->state = SLOT_FREE;
			ret = dev->ops->event_sync(dev, sl->event);
			if (ret)
				break;
		}
		n = phx_min(len - done, e->chunk);
		memcpy(sl->mem, src + done, n);
		ret = dev->ops->copy_htod(dev, dptr + done, sl->mem, n,
					  sl->stream);
		if (!ret)
			ret = dev->ops->event_record(dev, sl->event,
						     sl->stream);
		if (!ret)
			sl->state = SLOT_COPY;
		done += n;
	}
	r = slots_drain(e);
	if (r) {
		ret = ret ? ret : r;
		e->broken = true;
	}
	engine_put(dev, e);
	return ret;
}

/* Device -> host, the mirror image: copies run ahead of the CPU's. */
static int staged_copy_out(struct phx_buf *buf, uint64_t off, char *dst,
			   uint64_t len)
{
	struct phx_device *dev = buf->dev;
	struct phx_engine *e;
	uint64_t issued = 0, drained = 0;
	unsigned int head = 0, tail = 0;
	int ret, r;

	ret = engine_get(dev, shape_sync(0), true, &e);
	if (ret)
		return ret;
	while (!ret && drained < len) {
		struct slot *sl;

		while (!ret && issued < len && head - tail < e->nslots) {
			sl = &e->slots[head++ % e->nslots];
			sl->foff = issued;
			sl->copied = phx_min(len - issued, e->chunk);
			ret = phx_buf_copy_out(buf, off + issued, sl->mem,
					       sl->copied, sl->stream);
			if (!ret)
				ret = dev->ops->event_record(dev, sl->event,
							     sl->stream);
			if (!ret)
				sl->state = SLOT_COPY;
			issued += sl->copied;
		}
		if (ret)
			break;
		sl = &e->slots[tail++ % e->nslots];
		sl->state = SLOT_FREE;
		ret = dev->ops->event_sync(dev, sl->event);
		if (!ret)
			memcpy(dst + sl->foff, sl->mem, sl->copied);
		drained += sl->copied;
	}
	r = slots_drain(e);
	if (r) {
		ret = ret ? ret : r;
		e->broken = true;
	}
	engine_put(dev, e);
	return ret;
}

/* Start a synchronous copy: this thread on @dev, a pooled stream. */
static int copy_begin(struct phx_device *dev, void **stream)
{
	int ret = phx_device_bind(dev);

	return ret ? ret : stream_get(dev, stream);
}

/*
 * End a synchronous copy queued on a pooled stream: wait for it unless
 * queueing failed, return the stream, count @memcpy_bytes when it worked.
 */
static int copy_finish(struct phx_device *dev, void *stream, int ret,
		       uint64_t memcpy_bytes)
{
	if (!ret)
		ret = dev->ops->stream_sync(dev, stream);
	stream_put(dev, stream);
	if (!ret)
		atomic_fetch_add(&dev->bytes[PHX_PATH_MEMCPY], memcpy_bytes);
	return ret;
}

PHX_EXPORT int phx_memcpy_to_buf(struct phx_buf *buf, uint64_t off,
				 const void *src, uint64_t len)
{
	struct phx_device *dev = buf->dev;
	void *stream;
	phx_dptr_t dptr;
	int ret;

	ret = phx_buf_check_range(buf, off, len);
	if (ret || !len)
		return ret;
	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	pthread_mutex_lock(&buf->lock);
	ret = phx_buf_commit_locked(buf, off, len);
	dptr = buf->dptr;
	pthread_mutex_unlock(&buf->lock);
	if (ret)
		return ret;
	if (host_staged(dev, src, len)) {
		ret = staged_copy_in(dev, dptr + off, src, len);
		if (!ret)
			atomic_fetch_add(&dev->bytes[PHX_PATH_MEMCPY], len);
		return ret;
	}
	ret = stream_get(dev, &stream);
	if (ret)
		return ret;
	ret = dev->ops->copy_htod(dev, dptr + off, src, len, stream);
	return copy_finish(dev, stream, ret, len);
}

PHX_EXPORT int phx_memcpy_from_buf(void *dst, struct phx_buf *buf, uint64_t off,
				   uint64_t len)
{
	struct phx_device *dev = buf->dev;
	void *stream;
	int ret;

	ret = phx_buf_check_range(buf, off, len);
	if (ret || !len)
		return ret;
	if (host_staged(dev, dst, len)) {
		ret = phx_device_bind(dev);
		if (!ret)
			ret = staged_copy_out(buf, off, dst, len);
		if (!ret)
			atomic_fetch_add(&dev->bytes[PHX_PATH_MEMCPY], len);
		return ret;
	}
	ret = copy_begin(dev, &stream);
	if (ret)
		return ret;
	ret = phx_buf_copy_out(buf, off, dst, len, stream);
	return copy_finish(dev, stream, ret, len);
}

PHX_EXPORT int phx_memcpy_buf(struct phx_buf *dst, uint64_t dst_off,
			      struct phx_buf *src, uint64_t src_off,
			      uint64_t len)
{
	struct phx_device *dev = dst->dev;
	uint64_t done = 0;
	void *stream;
	int ret;

	if (dst->dev->ops != src->dev->ops)
		return phx_err(EXDEV,
			       "cannot copy between a %s and a %s device",
			       dst->dev->ops->name, src->dev->ops->name);
	ret = phx_buf_check_range(dst, dst_off, len);
	if (!ret)
		ret = phx_buf_check_range(src, src_off, len);
	if (ret || !len)
		return ret;
	ret = copy_begin(dev, &stream);
	if (ret)
		return ret;
	/*
	 * Walk the source chunk by chunk: data is copied (backing the
	 * destination as needed), holes only clear what the destination
	 * already backs, so a sparse file stays sparse when it moves.
	 */
	pthread_mutex_lock(&src->lock);
	while (!ret && done < len) {
		uint64_t off = src_off + done;
		const struct phx_buf_chunk *c = phx_buf_chunk_at(src, off);
		uint64_t n = phx_min(len - done, c->off + c->size - off);

		if (dst != src)
			pthread_mutex_lock(&dst->lock);
		if (c->mapped) {
			ret = phx_buf_commit_locked(dst, dst_off + done, n);
			if (!ret)
				ret = dev->ops->copy_dtod(
					dev, dst->dptr + dst_off + done,
					src->dptr + off, n, stream);
		} else {
			ret = phx_buf_zero_locked(dst, dst_off + done, n,
						  stream);
		}
		if (dst != src)
			pthread_mutex_unlock(&dst->lock);
		done += n;
	}
	pthread_mutex_unlock(&src->lock);
	return copy_finish(dev, stream, ret, 0);
}

/* ---- batches -------------------------------------------------------- */

struct phx_batch {
	struct phx_device *dev;
	struct phx_engine *engine;
};

PHX_EXPORT int phx_batch_create(struct phx_device *dev, unsigned int depth,
				unsigned int flags, struct phx_batch **out)
{
	struct phx_batch *b;
	int ret;

	ret = phx_device_bind(dev);
	if (ret)
		return ret;
	b = calloc(1, sizeof(*b));
	if (!b)
		return phx_err(ENOMEM, "out of host memory for a batch");
	b->dev = dev;
	ret = engine_get(dev, shape_batch(depth), false, &b->engine);
	if (ret) {
		free(b);
		return ret;
	}
	b->engine->polled = flags & PHX_BATCH_POLL;
	*out = b;
	return 0;
}

PHX_EXPORT int phx_batch_submit(struct phx_batch *b, struct phx_io *ios,
				unsigned int n)
{
	struct phx_engine *e = b->engine;
	unsigned int i;
	int ret;

	ret = phx_device_bind(b->dev);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		struct job *j;

		while ((ret = job_start(e, &ios[i], &j)) == -EAGAIN &&
		       engine_busy(e)) {
			/* all file slots busy: let transfers finish */
			ret = engine_step(e, true);
			if (ret)
				return i ? (int)i : ret;
		}
		if (ret) {
			/* A bad entry completes with its own error. */
			j = calloc(1, sizeof(*j));
			if (!j)
				return i ? (int)i :
					   phx_err(ENOMEM,
						   "out of host memory");
			j->io = &ios[i];
			j->err = ret;
		}
		engine_queue(e, j);
	}
	/* get the I/O going before returning */
	ret = engine_step(e, false);
	return ret ? ret : (int)n;
}

PHX_EXPORT int phx_batch_wait(struct phx_batch *b, unsigned int min,
			      struct phx_io **done, unsigned int max,
			      int timeout_ms)
{
	struct phx_engine *e = b->engine;
	struct timespec t0, now;
	unsigned int n = 0;
	int ret;

	ret = phx_device_bind(b->dev);
	if (ret)
		return ret;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		while (!STAILQ_EMPTY(&e->done) && (!done || n < max)) {
			struct job *j = STAILQ_FIRST(&e->done);

			STAILQ_REMOVE_HEAD(&e->done, done);
			if (done)
				done[n] = j->io;
			n++;
			free(j);
		}
		if (n >= min || !engine_busy(e) || (done && n >= max))
			break;
		if (timeout_ms >= 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) * 1000 +
				    (now.tv_nsec - t0.tv_nsec) / 1000000 >=
			    timeout_ms)
				break;
		}
		ret = engine_step(e, timeout_ms != 0);
		if (ret)
			return ret;
	}
	return (int)n;
}

PHX_EXPORT void phx_batch_destroy(struct phx_batch *b)
{
	struct phx_engine *e;

	if (!b)
		return;
	e = b->engine;
	phx_device_bind(b->dev);
	while (engine_busy(e))
		if (engine_step(e, true))
			break;
	while (!STAILQ_EMPTY(&e->done)) {
		struct job *j = STAILQ_FIRST(&e->done);

		STAILQ_REMOVE_HEAD(&e->done, done);
		free(j);
	}
	engine_put(b->dev, e);
	free(b);
}
