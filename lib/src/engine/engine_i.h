/* SPDX-License-Identifier: MIT */
/*
 * engine_i.h - what the files of the transfer engine share: the file cache
 * (fdcache.c), jobs (job.c), the io_uring, slots and job pipeline
 * (pipeline.c), the slot consumers (staged.c, sink.c), the pool with the
 * synchronous and batch API (transfer.c), the staging made ready at open
 * (staging.c), host copies (hostcopy.c) and the device's engine state
 * (engine.c).  Nothing outside those files
 * includes it.
 */
#ifndef PHX_ENGINE_I_H
#define PHX_ENGINE_I_H

#include <sys/queue.h>
#include <sys/types.h>
#include <liburing.h>

#include "engine.h"

/*
 * Engines lent to synchronous callers before the next one waits
 * (transfer.c); copy streams of an engine; files an engine has open at
 * once (fdcache.c).
 */
#define PHX_MAX_ENGINES 4
#define PHX_NR_STREAMS 2
#define PHX_FD_CACHE 8

/*
 * Device copies of reads up to this size that complete in one round of
 * the pipeline go out together at its end (staged.c): for them the call
 * and the stream's op cost more than the bytes.  Larger ones start at
 * once.
 */
#define PHX_BATCH_COPY_MAX (256u << 10)

/*
 * A read served by the page cache, started on an idle engine, re-cuts its
 * staging into slots of PHX_HOT_CHUNK (phx_engine_fit): the page-cache
 * copies run on io_uring's workers one slot each, so more, smaller slots
 * are more CPUs copying at once, and a slot reaches the copy engine
 * sooner.  An io_uring has room for PHX_MAX_SLOTS slots, twice as many
 * entries.
 */
#define PHX_HOT_CHUNK (1u << 20)
#define PHX_MAX_SLOTS 128u

/* A file a job reads or writes, shared by the jobs on it while active. */
struct phx_fd {
	int user_fd;
	dev_t st_dev;
	ino_t st_ino;
	int accmode;
	int direct_fd; /* -1: not opened yet; -2: O_DIRECT impossible */
	int buffered_fd; /* -1: not opened yet */
	bool own_direct, own_buffered;
	/* when the first job of those active together on it began */
	uint64_t size;
	unsigned int users;
};

struct phx_job_region {
	uint64_t from, to;
	bool direct;
};

struct phx_job {
	struct phx_io *io;
	struct phx_buf *buf; /* NULL for raw device addresses */
	phx_dptr_t dptr; /* device address of file offset @start */
	struct phx_fd *fde;
	uint64_t start, end; /* the file range */
	unsigned int pending; /* segments in flight */
	uint64_t moved;
	uint64_t by_path[PHX_PATH_COUNT];
	int err;
	bool eof;
	bool queued; /* on the engine's issue queue */
	/* what the engine's slot consumer keeps of the job */
	union {
		/*
		 * staged.c: regions, the one issued, next offset in it; p2p;
		 * a probe (the first cold read of its file system): region 0
		 * O_DIRECT, region 1 the page cache, each timed from its first
		 * issue to its last read's end (reads in flight, ns), the next
		 * region held until they are all done; region 2 takes the
		 * faster way.
		 */
		struct {
			struct phx_job_region region[3];
			unsigned int nregions, cur;
			uint64_t pos;
			bool p2p;
			bool probe;
			unsigned int probe_reads[2];
			uint64_t probe_t0[2], probe_t1[2];
		};
		/* sink.c: the sink, segments issued and in all, O_DIRECT */
		struct {
			struct phx_sink *sink;
			unsigned int seg, nsegs;
			bool direct;
		};
	};
	TAILQ_ENTRY(phx_job) issue; /* while it has segments to issue */
	STAILQ_ENTRY(phx_job) done; /* once complete, until collected */
};

enum phx_slot_state {
	PHX_SLOT_FREE,
	PHX_SLOT_IO, /* read or write in flight */
	PHX_SLOT_COPY, /* with the consumer: a device copy, or the stream's */
};

struct phx_slot {
	enum phx_slot_state state;
	struct phx_job *job;
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
	union {
		/*
		 * staged.c: the next in its stream's queue of copies (or in
		 * the round's held copies); the region of its job it reads;
		 * the slot whose event says its copy is done (itself, or the
		 * last of the batch it went out in); a held copy's bytes.
		 */
		struct {
			struct phx_slot *copy_next;
			unsigned int region;
			struct phx_slot *fence;
			struct phx_htod htod;
		};
		/* sink.c: ring sequence number, segment index, its bytes */
		struct {
			uint32_t seq;
			unsigned int seg;
			uint64_t seg_foff, seg_len;
			char *seg_mem;
		};
	};
};

/*
 * Who takes an engine's slots between their file I/O and their release:
 * the engine's own device copies (staged.c, phx_staged_consumer) or the
 * stream a stream-ordered transfer is queued on (sink.c,
 * phx_sink_consumer).  An engine has one, chosen when it is built; the
 * pipeline (pipeline.c) moves slots only through it.
 */
struct phx_slot_consumer {
	/* How @j moves its bytes: cut it (when the job is made). */
	int (*plan)(struct phx_engine *e, struct phx_job *j);
	/* Whether @j has segments left to give slots to. */
	bool (*issuable)(const struct phx_job *j);
	/* Give free slots to the queued jobs' next segments. */
	void (*fill)(struct phx_engine *e);
	/* @sl's bytes are in the slot (a read): hand them on. */
	void (*publish)(struct phx_engine *e, struct phx_slot *sl);
	/* Move on the slots handed on and done with; how many were. */
	unsigned int (*consumed)(struct phx_engine *e);
	/* Nothing moved this step: wait for the consumer or the disk. */
	int (*idle)(struct phx_engine *e);
	/*
	 * The round's completions are all published: hand on what publish
	 * held back for the others (NULL: it holds nothing).
	 */
	void (*flush)(struct phx_engine *e);
	/* Free what it keeps of @e, before @e goes (NULL: nothing). */
	void (*teardown)(struct phx_engine *e);
	/* A failed read's slot is still published: its reader waits on it. */
	bool publish_failed;
};

extern const struct phx_slot_consumer phx_staged_consumer;
extern const struct phx_slot_consumer phx_sink_consumer;

struct phx_engine {
	struct phx_device *dev;
	struct io_uring uring;
	unsigned int
		uring_entries; /* SQEs the io_uring holds: twice the slots */
	bool uring_ok, fixed, polled;
	bool broken; /* a step failed midway: never lend it again */
	bool lent_sync; /* lent to a synchronous caller, not a batch */
	uint64_t chunk;
	unsigned int nslots;
	char *staging;
	size_t staging_len;
	bool pinned;
	/*
	 * @staging is the device's block's (staging.c), in whole units: an
	 * engine re-cut smaller gives the units past its slots back, and
	 * takes them again, if still free, to grow back up to @staging_cap
	 * (the block's part its io_uring has registered).
	 */
	bool staging_lent;
	size_t staging_cap;
	struct phx_slot *slots;
	unsigned int nevents; /* slots[0..nevents) have an event */
	void *streams[PHX_NR_STREAMS];
	/*
	 * Device copies in flight, per stream, in the order queued: a stream
	 * runs them in order, so only the oldest need be asked about.
	 */
	struct phx_slot *copyq[PHX_NR_STREAMS], *copyq_tail[PHX_NR_STREAMS];
	/*
	 * Small reads' copies held until the round's end (staged.c), the
	 * room to describe them to the backend (one per slot), the stream
	 * the next batch goes on.
	 */
	struct phx_slot *held, *held_tail;
	struct phx_htod *htod;
	unsigned int batch_sidx;
	unsigned int inflight; /* SQEs submitted, CQE not yet seen */
	unsigned int to_submit; /* SQEs prepared, not submitted */
	/*
	 * Jobs queued and not yet complete; the ones with segments left to
	 * issue, oldest first; the completed ones not yet collected.
	 */
	unsigned int nactive;
	TAILQ_HEAD(, phx_job) issue;
	STAILQ_HEAD(, phx_job) done;
	struct phx_fd fds[PHX_FD_CACHE];
	struct phx_engine *next_free;
	pid_t owner; /* the process that built it: only it may use it */
	const struct phx_slot_consumer *consumer;
	unsigned int idle_polls; /* idle steps in a row (the sink polls) */
	struct phx_readers *readers; /* readers.c: made by its first read */
};

/* How an engine cuts its staging: @nslots slots of @chunk bytes. */
struct phx_engine_shape {
	unsigned int nslots;
	uint64_t chunk;
};

/* ---- the file cache (fdcache.c) ------------------------------------- */

/*
 * Whether @fd may be used for @op: open for it (O_PATH allows nothing)
 * and, to be written, not O_APPEND.  Its F_GETFL flags, or a negative
 * errno with a message.
 */
int phx_fd_check(int fd, enum phx_op op);

/*
 * The entry of @cache for @fd, shared with the jobs already on it, or a
 * free one; -EAGAIN when all are busy (the caller runs the engine and
 * retries), -EBADF/-EINVAL with a message for unusable descriptors.
 */
int phx_fd_get(struct phx_fd *cache, int fd, enum phx_op op,
	       struct phx_fd **out);
void phx_fd_put(struct phx_fd *f);
/* The O_DIRECT descriptor (-2: impossible) and the page-cache one. */
int phx_fd_direct(struct phx_fd *f);
int phx_fd_buffered(struct phx_fd *f);
/* Share of [off, off + len) of @fd in the page cache, in percent. */
unsigned int phx_cached_percent(int fd, uint64_t off, uint64_t len);

/* ---- engines and their pipeline (pipeline.c) ------------------------ */

struct phx_engine_shape phx_shape_sync(size_t staging);
struct phx_engine_shape phx_shape_io(uint64_t len);
struct phx_engine_shape phx_shape_batch(unsigned int depth);
/* An engine of shape @sh whose slots go to @consumer. */
int phx_engine_create(struct phx_device *dev, struct phx_engine_shape sh,
		      const struct phx_slot_consumer *consumer,
		      struct phx_engine **out);
bool phx_engine_fits(const struct phx_engine *e, struct phx_engine_shape sh);
int phx_engine_slice(struct phx_engine *e, struct phx_engine_shape sh);
/* Before idle @e starts @j: the hot cut for a page-cache read, else @home. */
void phx_engine_fit(struct phx_engine *e, const struct phx_job *j,
		    struct phx_engine_shape home);

/* Queue @j on @e; a job with nothing to move completes at once. */
void phx_engine_queue(struct phx_engine *e, struct phx_job *j);
/* The oldest job with segments to issue; drops the ones that have none. */
struct phx_job *phx_engine_next_job(struct phx_engine *e);
/* Nothing to do but wait for the disk: for a completion, if any is due. */
int phx_engine_wait_io(struct phx_engine *e);
/*
 * Whether a completion waits to be reaped, without a system call unless
 * *@run_tw: then completions the kernel flags as its task work for this
 * thread are run into the ring first, and *@run_tw cleared where that
 * brought none (the work is another thread's: it runs it).
 */
bool phx_engine_io_ready(struct phx_engine *e, bool *run_tw);

/* What the consumers share of the pipeline. */
void phx_job_fail(struct phx_job *j, int err);
/* @j, queued on @e, is done: its result and the device's counts. */
void phx_job_complete(struct phx_engine *e, struct phx_job *j);
void phx_slot_prep_io(struct phx_engine *e, struct phx_slot *sl);
void phx_slot_free(struct phx_engine *e, struct phx_slot *sl);
void phx_slot_finish(struct phx_engine *e, struct phx_slot *sl);

/* ---- jobs (job.c) --------------------------------------------------- */

/* A transfer's file range: -EINVAL with a message where it cannot be. */
int phx_file_range_check(int64_t file_off, uint64_t len);

/*
 * Validate @io and turn it into a job for @e, its bytes moved by @sink's
 * stream (sink engines) or by @e itself (NULL); -EAGAIN: see phx_fd_get.
 */
int phx_job_make(struct phx_engine *e, struct phx_io *io, struct phx_sink *sink,
		 struct phx_job **out);
/*
 * Whether O_DIRECT is the way for @j (the hot check, the file system and
 * what a probe found faster on it); *@probe: it is a cold read whose file
 * system has not been probed yet, long enough to probe it (see struct
 * phx_job).  @probe may be NULL.
 */
int phx_job_direct(struct phx_engine *e, struct phx_job *j, bool *direct,
		   bool *probe);
/* The probe's bytes of each way: at least this, and the staging's. */
uint64_t phx_probe_len(const struct phx_engine *e);
/* Record what a probe of @st_dev found: O_DIRECT faster (or not). */
void phx_probe_record(dev_t st_dev, bool direct_faster);

/* ---- the engine's own copies (staged.c) ------------------------------ */

/* Run @io to completion on @e, which nothing else uses meanwhile. */
int64_t phx_engine_run(struct phx_engine *e, struct phx_io *io);

/* ---- reader threads (readers.c) ------------------------------------- */

/*
 * For the staged consumer (staged.c): while @e has nothing in flight,
 * run each next job that is a long read the page cache serves, not yet
 * started, on @e's reader threads and the calling one (PHX_HOT_READERS),
 * to its completion; the pipeline runs the rest.
 */
void phx_readers_take(struct phx_engine *e);
/*
 * Make @e's reader threads, streams and events now, before its first
 * long read (the engine built at a device's open): those that could be
 * made, as its first such read would.
 */
void phx_readers_prepare(struct phx_engine *e);
/* Stop and free @e's readers, if it has any. */
void phx_readers_destroy(struct phx_engine *e);

/* ---- the pool (transfer.c) ------------------------------------------ */

/*
 * The pool's state of a device (engine.c makes and destroys it).  With
 * @prebuild the device's staging thread builds its first engine
 * (phx_engine_pool_prebuild(), handed to phx_staging_open()), and until
 * then a caller that finds no idle engine waits for that one.
 */
int phx_engine_pool_open(struct phx_device *dev, bool prebuild);
void phx_engine_pool_prebuild(struct phx_device *dev, bool run);
void phx_engine_pool_destroy(struct phx_device *dev);

int phx_engine_get(struct phx_device *dev, struct phx_engine_shape sh,
		   bool wait, struct phx_engine **out);
void phx_engine_put(struct phx_device *dev, struct phx_engine *e);

/* ---- staging (staging.c) ------------------------------------------- */

/*
 * The device's staging block, pinned in the background from the moment
 * it opens (engine.c makes and frees it); the same thread then calls
 * @then(dev, true), or @then(dev, false) when it stops early or never
 * ran, exactly once either way.  phx_staging_take() lends @len bytes of
 * it, pinned, after waiting for it to be ready, or NULL (no room,
 * smaller than a chunk, not ready in this process); phx_staging_room()
 * says whether it would: 1 yes, 0 not now (no room), -1 never (it lends
 * nothing of that size here); phx_staging_take_at() lends the units
 * under [@p, @p + @len) if they are all free (an engine growing back
 * into what it gave back); phx_staging_give() takes units back.
 * phx_staging_stop() stops the thread and waits for it (the first step
 * of a close), phx_staging_close() frees the block.
 */
int phx_staging_open(struct phx_device *dev,
		     void (*then)(struct phx_device *dev, bool run));
void phx_staging_stop(struct phx_device *dev);
void phx_staging_close(struct phx_device *dev);
int phx_staging_room(struct phx_device *dev, size_t len);
void *phx_staging_take(struct phx_device *dev, size_t len);
bool phx_staging_take_at(struct phx_device *dev, void *p, size_t len);
void phx_staging_give(struct phx_device *dev, void *p, size_t len);
/* @len bytes of staging of an engine's own, faulted in near the device. */
void *phx_staging_alloc(struct phx_device *dev, size_t len);
/* @len bytes of host memory, faulted in, in huge pages where it can. */
void *phx_host_map(size_t len);

/* ---- host copies (hostcopy.c) --------------------------------------- */

/* What host copies keep of a device (engine.c makes and frees it). */
int phx_hostcopy_open(struct phx_device *dev);
void phx_hostcopy_release(struct phx_device *dev);

#endif /* PHX_ENGINE_I_H */
