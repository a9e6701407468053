/* SPDX-License-Identifier: MIT */
/*
 * engine_i.h - what the files of the transfer engine share: the file cache
 * (fdcache.c), jobs (job.c), the ring, slots and job pipeline (engine.c),
 * the stream sink (sink.c), the pool with the synchronous and batch API
 * (transfer.c) and host copies (hostcopy.c).  Nothing outside those
 * files includes it.
 */
#ifndef PHX_ENGINE_I_H
#define PHX_ENGINE_I_H

#include <sys/queue.h>
#include <sys/types.h>
#include <liburing.h>

#include "engine.h"

#define PHX_MAX_ENGINES 4
#define PHX_NR_STREAMS 2
#define PHX_FD_CACHE 8

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
	uint64_t by_path[PHX_PATH_COUNT];
	int err;
	bool eof;
	bool queued; /* on the engine's issue queue */
	/* stream-ordered jobs: the sink, segments issued and in all, O_DIRECT */
	struct phx_sink *sink;
	unsigned int seg, nsegs;
	bool direct;
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
	unsigned int sidx; /* index of @stream in the engine's streams */
	struct slot *copy_next; /* in its stream's queue of copies */
	/* sink jobs: ring sequence number, segment index, its bytes in the slot */
	uint32_t seq;
	unsigned int seg;
	uint64_t seg_foff, seg_len;
	char *seg_mem;
};

struct phx_engine {
	struct phx_device *dev;
	struct io_uring ring;
	unsigned int ring_entries; /* SQEs the ring holds: twice the slots */
	bool ring_ok, fixed, polled;
	bool broken; /* a step failed midway: never lend it again */
	bool lent_sync; /* lent to a synchronous caller, not a batch */
	uint64_t chunk;
	unsigned int nslots;
	char *staging;
	size_t staging_len;
	bool pinned;
	struct slot *slots;
	unsigned int nevents; /* slots[0..nevents) have an event */
	void *streams[PHX_NR_STREAMS];
	/*
	 * Device copies in flight, per stream, in the order queued: a stream
	 * runs them in order, so only the oldest need be asked about.
	 */
	struct slot *copyq[PHX_NR_STREAMS], *copyq_tail[PHX_NR_STREAMS];
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
	bool sink_ring; /* a stream sink's ring: it runs only sink jobs */
	unsigned int sink_polls; /* polls of a sink with nothing moving */
};

/* How an engine cuts its staging: @nslots slots of @chunk bytes. */
struct engine_shape {
	unsigned int nslots;
	uint64_t chunk;
};

/* ---- the file cache (fdcache.c) ------------------------------------- */

/*
 * The entry of @cache for @fd, shared with the jobs already on it, or a
 * free one; -EAGAIN when all are busy (the caller runs the engine and
 * retries), -EBADF/-EINVAL with a message for unusable descriptors.
 */
int phx_fd_get(struct fd_entry *cache, int fd, enum phx_op op,
	       struct fd_entry **out);
void phx_fd_put(struct fd_entry *f);
/* The O_DIRECT descriptor (-2: impossible) and the page-cache one. */
int phx_fd_direct(struct fd_entry *f);
int phx_fd_buffered(struct fd_entry *f);
/* Share of [off, off + len) of @fd in the page cache, in percent. */
unsigned int phx_cached_percent(int fd, uint64_t off, uint64_t len);

/* ---- engines and their pipeline (engine.c) -------------------------- */

struct engine_shape phx_shape_sync(size_t staging);
struct engine_shape phx_shape_io(uint64_t len);
struct engine_shape phx_shape_batch(unsigned int depth);
int phx_engine_create(struct phx_device *dev, struct engine_shape sh,
		      struct phx_engine **out);
void phx_engine_destroy(struct phx_engine *e);
bool phx_engine_fits(const struct phx_engine *e, struct engine_shape sh);
int phx_engine_slice(struct phx_engine *e, struct engine_shape sh);

/* ---- jobs (job.c) --------------------------------------------------- */

/* Validate @io and turn it into a job for @e (-EAGAIN: see phx_fd_get). */
int phx_job_start(struct phx_engine *e, struct phx_io *io, struct job **out);
/* The same, its bytes moved by @sink's stream (NULL: by the engine). */
int phx_job_make(struct phx_engine *e, struct phx_io *io, struct phx_sink *sink,
		 struct job **out);
void phx_engine_queue(struct phx_engine *e, struct job *j);
/* Run @io to completion on @e, which nothing else uses meanwhile. */
int64_t phx_engine_run(struct phx_engine *e, struct phx_io *io);

/* What the sink's pipeline shares with the rest of it (engine.c). */
void phx_slot_prep_io(struct phx_engine *e, struct slot *sl);
void phx_slot_free(struct phx_engine *e, struct slot *sl);
void phx_slot_finish(struct phx_engine *e, struct slot *sl);
/* Whether O_DIRECT is the way for @j (the hot check, the file system). */
int phx_job_direct(struct phx_engine *e, struct job *j, bool *direct);

/* ---- the stream sink (sink.c) ---------------------------------------- */

/* Plan @j's segments and descriptors for @sink (from phx_job_start). */
int phx_sink_plan(struct phx_engine *e, struct job *j);
/* Give free slots to @j's next segments, in sequence. */
void phx_sink_fill(struct phx_engine *e, struct job *j);
/* @sl's I/O is over (or failed): hand its bytes to the stream. */
void phx_sink_publish(struct phx_engine *e, struct slot *sl);
/* Whether the stream is done with @sl. */
bool phx_sink_consumed(const struct phx_engine *e, const struct slot *sl);
/*
 * A job for @io that moves nothing and fails with @err: its segments
 * still take their slots in sequence and hand them to the stream (a
 * read's are zeros), since the stream waits for every one.  NULL when
 * out of host memory.
 */
struct job *phx_sink_failed_job(struct phx_engine *e, struct phx_io *io,
				struct phx_sink *sink, int err);
/* Nothing moved: wait a little for the stream or the disk. */
int phx_sink_idle(struct phx_engine *e);

/* ---- the pool (transfer.c) ------------------------------------------ */

int phx_engine_get(struct phx_device *dev, struct engine_shape sh, bool wait,
		   struct phx_engine **out);
void phx_engine_put(struct phx_device *dev, struct phx_engine *e);

#endif /* PHX_ENGINE_I_H */
