/* SPDX-License-Identifier: MIT */
/*
 * stream_i.h - what the files of the stream layer share: streams, the
 * device's transfer workers and the requests they serve (stream.c), the
 * copy-kernel mode (kernel.c) and the copy mode's rings (copy.c).  Nothing
 * outside those files includes it.
 */
#ifndef PHX_STREAM_I_H
#define PHX_STREAM_I_H

#include <pthread.h>

#include "stream.h"

/* Workers of a device's stream-ordered transfers (worker.c). */
#define PHX_STREAM_WORKERS 4
/* Transfers a device can have queued at once in "device" mode. */
#define PHX_STREAM_FLAGS 4096

struct phx_stream {
	struct phx_device *dev;
	void *native;
	bool owned;
	unsigned int flags; /* PHX_STREAM_FIXED_* */
};

/*
 * Copy mode: the first PHX_STREAM_RINGS workers (1) own a ring each, the
 * staging budget split between them, each cut into PHX_RING_SLOTS slots
 * (16 of 4 MiB by default: as many requests in flight as phx_read()
 * has); transfers a ring can have queued.
 */
#define PHX_RING_SLOTS 16
#define PHX_RING_XFERS 1024

/*
 * "copy" mode: the words of mapped host memory through which a ring's
 * worker and the streams its transfers are queued on hand its slots over
 * (copy.c; ready and freed as struct phx_sink describes).  A stream waits
 * for done to reach t and then stores passed[t % PHX_RING_XFERS] = t,
 * its last touch of these words for t.
 */
struct phx_ring_words {
	uint32_t ready[PHX_RING_SLOTS];
	uint32_t freed[PHX_RING_SLOTS];
	uint32_t done;
	uint32_t pad[15]; /* passed[] on cache lines of its own */
	uint32_t passed[PHX_RING_XFERS];
};

/* Transfers a ring's worker gives its engine at once (copy mode). */
#define PHX_RING_WINDOW 64

struct phx_stream_mode;

struct phx_stream_req {
	const struct phx_stream_mode *mode; /* the one it is queued in */
	struct phx_device *dev;
	enum phx_op op;
	int fd;
	phx_dptr_t dptr;
	const uint64_t *len;
	const int64_t *file_off;
	const int64_t *buf_off;
	int64_t *bytes_done;
	uint32_t *flag; /* "device" mode: set when done; else NULL */
	bool done; /* protected by the worker lock */
	/* no host function will return the flag: the worker does */
	bool orphan; /* protected by the worker lock */
	/* a queued wait may still read the flag: never reuse it */
	bool keep_flag;
	/* "kernel" mode: the copy kernel's control block, and its index */
	struct phx_feed_ctl *ctl;
	unsigned int ctl_index;
	/*
	 * "copy" mode: the values read when queued; the transfer's number
	 * t and first sequence number on its ring; its segments, and those
	 * whose copies made it onto the stream (the rest are not waited
	 * for); a failure while queueing, reported through bytes_done.
	 */
	bool ring;
	uint64_t val_len;
	int64_t val_file_off, val_buf_off;
	uint32_t t, seq;
	unsigned int nsegs, live;
	int queue_err;
	bool queuing; /* its ops are being queued; protected by w->lock */
	bool passes; /* its stream will store passed[]; protected by w->lock */
	bool skip; /* nothing of it is on the stream; protected by w->lock */
	uint64_t g; /* its number among the rings' transfers of the device */
	struct phx_engine *engine; /* whose slots its ops copy (copy mode) */
	/* taken by its ring's worker: the engine's transfer, and its sink */
	struct phx_io io;
	struct phx_sink sink;
	bool started, finished; /* given to the engine; it is done */
	struct phx_stream_req *next;
};

struct phx_stream_thread {
	struct phx_stream_pool *w;
	struct phx_engine *engine;
	pthread_t thread;
	/* "kernel" mode: PHX_FEED_SLOTS slots of pinned, mapped memory */
	unsigned char *feed_slots;
	uint64_t feed_slots_daddr;
	size_t slot_size;
	/*
	 * "copy" mode: the engine's slots are the ring; its words, mapped;
	 * the ring's transfers in sequence order, how many, the next
	 * sequence number and transfer number (protected by w->lock).
	 */
	struct phx_ring_words *words;
	uint64_t words_daddr;
	struct phx_stream_req *ring_head, *ring_tail;
	/* taken by the worker, in ring order, and how many (worker only) */
	struct phx_stream_req *act_head, *act_tail;
	unsigned int nact;
	/* done, their streams not yet past their last touch of the words */
	struct phx_stream_req *ring_passing;
	unsigned int ring_queued; /* from queued until passed */
	uint32_t ring_seq, ring_t;
	/*
	 * A ring starts with small slots, so that a process's first
	 * transfer does not wait for the whole staging to be pinned; the
	 * grower (copy.c) builds the full engine once a transfer is done.
	 * grow_to: its full staging, 0 once full; grown: the full engine,
	 * which transfers queued from then on use; the worker swaps it in
	 * at the first of them, and the small one is retired, for the
	 * grower to free (protected by w->lock).
	 */
	size_t grow_to;
	struct phx_engine *grown, *retired;
	bool served; /* it finished a transfer (protected by w->lock) */
};

struct phx_stream_pool {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct phx_stream_req *head, *tail; /* protected by lock */
	/* queued on a stream, host function not returned; protected by lock */
	unsigned int outstanding;
	unsigned int nthreads; /* protected by lock */
	bool stop;
	/* serialises starting threads; never taken by a host function */
	pthread_mutex_t spawn_lock;
	struct phx_stream_thread threads[PHX_STREAM_WORKERS];
	/* "device" mode: PHX_STREAM_FLAGS flags, mapped for the device */
	uint32_t *flags; /* made under spawn_lock */
	uint64_t flags_daddr;
	uint32_t free_flags[PHX_STREAM_FLAGS]; /* protected by lock */
	unsigned int nfree_flags; /* protected by lock */
	/*
	 * "kernel" mode: PHX_STREAM_FLAGS control blocks, mapped; free_flags
	 * lists the free ones (a process uses one mode).  feed_head: queued
	 * on streams, waiting for their kernel to start; protected by lock.
	 */
	struct phx_feed_ctl *ctls; /* made under spawn_lock */
	uint64_t ctls_daddr;
	struct phx_stream_req *feed_head;
	/*
	 * "copy" mode: transfers numbered on all rings, and the writes among
	 * them not yet retired (protected by lock); the thread growing the
	 * rings, once started.
	 */
	uint64_t ring_g;
	unsigned int ring_writes;
	struct phx_device *dev;
	pthread_t grower;
	bool grow_started; /* protected by lock */
	/* the modes, and the device's (phx_stream_mode()) */
	const struct phx_stream_mode *const *modes;
	enum phx_stream_wait mode;
};

/* ---- the stream modes (PHX_STREAM_WAIT), a file each ------------------ */

/* One per value of enum phx_stream_wait but _AUTO. */
#define PHX_STREAM_MODES 4

/*
 * How a mode holds the streams its transfers are queued on (host.c,
 * device.c, kernel.c, copy.c; modes.c lists them).  The stream core
 * (stream.c) and the workers (worker.c) call a mode only through these.
 */
struct phx_stream_mode {
	/*
	 * Queue @r (counted by phx_pool_reserve()) on @stream: 0 or -errno,
	 * @r the mode's either way; 1 when @r cannot take this mode, for
	 * the mode @fallback to queue.
	 */
	int (*enqueue)(struct phx_stream *stream, struct phx_stream_pool *w,
		       struct phx_stream_req *r);
	enum phx_stream_wait fallback;
	/*
	 * What worker @index needs before it starts, on the caller's thread;
	 * NULL: an engine of its share of the staging.  thread_undo: for a
	 * worker that then did not start (NULL: nothing to undo).
	 */
	int (*thread_start)(struct phx_device *dev, struct phx_stream_thread *t,
			    unsigned int index);
	void (*thread_undo)(struct phx_device *dev,
			    struct phx_stream_thread *t);
	/*
	 * A worker's turn (w->lock held, may be dropped meanwhile): move what
	 * the mode has for @t; a transfer for @t to run in *@claimed.
	 * Whether anything moved.  NULL: its transfers come through the
	 * pool's queue (phx_pool_queue_locked()).
	 */
	bool (*poll_locked)(struct phx_stream_thread *t,
			    struct phx_stream_req **claimed);
	/* Whether @t waits for streams to get somewhere (w->lock held). */
	bool (*waiting_locked)(const struct phx_stream_thread *t);
	/* Serve @r on worker @t, no lock held; @r is gone after. */
	void (*run)(struct phx_stream_thread *t, struct phx_stream_req *r);
	/* The workers have stopped: before their engines go (or NULL). */
	void (*stop)(struct phx_stream_pool *w);
	/* Free what the mode made for the device (or NULL). */
	void (*teardown)(struct phx_device *dev, struct phx_stream_pool *w);
};

extern const struct phx_stream_mode phx_stream_host, phx_stream_device,
	phx_stream_kernel, phx_stream_copy;
extern const struct phx_stream_mode *const phx_stream_modes[PHX_STREAM_MODES];

/* ---- the workers (worker.c) ------------------------------------------ */

/*
 * The device's workers (dev->streams), with the @modes table and the
 * device's @mode; they start at the first transfer (phx_pool_reserve()).
 */
int phx_pool_create(struct phx_device *dev,
		    const struct phx_stream_mode *const *modes,
		    enum phx_stream_wait mode);
/*
 * Count one more queued transfer; the first starts every worker.  Fails
 * only when no worker at all could be started.
 */
int phx_pool_reserve(struct phx_device *dev, struct phx_stream_pool *w);
/* A reserved transfer that was not queued after all: @r is freed. */
void phx_pool_unreserve(struct phx_stream_pool *w, struct phx_stream_req *r);
/* Hand @r to the workers (phx_pool_serve); the caller holds w->lock. */
void phx_pool_queue_locked(struct phx_stream_pool *w, struct phx_stream_req *r);
/* Serve a queued @r on @t's engine (the host and device modes' run). */
void phx_pool_serve(struct phx_stream_thread *t, struct phx_stream_req *r);
/* Stop the workers once every queued transfer is done; free it all. */
void phx_pool_destroy(struct phx_device *dev);

/*
 * The one check of a stream-ordered transfer's values, made by every
 * mode where it reads them, before a byte moves (a failure reaches the
 * caller through bytes_done): offsets not negative, @len at most
 * INT64_MAX, and neither end past INT64_MAX.  0 or -EINVAL.
 */
int phx_stream_range_check(uint64_t len, int64_t file_off, int64_t buf_off);

/* The end of a transfer's life: its flag or control block back, one less queued. */
void phx_pool_release_locked(struct phx_stream_pool *w,
			     struct phx_stream_req *r);
/* A free flag (or control block) index, or -EBUSY when all are in use. */
int phx_pool_take(struct phx_device *dev, struct phx_stream_pool *w,
		  unsigned int *index);
/*
 * Host memory the device reads and writes: @len bytes, zeroed, at *@out,
 * and at *@daddr for the device.
 */
int phx_mapped_alloc(struct phx_device *dev, size_t len, void **out,
		     uint64_t *daddr);
void phx_mapped_free(struct phx_device *dev, void *p, size_t len);
/*
 * A mode's PHX_STREAM_FLAGS entries of @size bytes each, mapped as
 * phx_mapped_alloc() maps, and every flag (or control block) free from
 * then on; the caller holds spawn_lock.
 */
int phx_pool_map_entries(struct phx_device *dev, struct phx_stream_pool *w,
			 size_t size, void **out, uint64_t *daddr);

/* ---- "kernel" mode (kernel.c) ---------------------------------------- */

/*
 * What the copy kernel does, played on the CPU (the simulated device's
 * feed_launch @play).
 */
phx_feed_play_fn phx_feed_emulate;

/*
 * The worker's side of a read: @n bytes of @fd at @file_off into the
 * buffer at @buf_off, through the slots at @slots (their host address; the
 * kernel was told their device address in ctl->slots).  Returns the bytes moved or -errno;
 * in both cases the kernel is told it is done, after *@bytes_done is set.
 */
int64_t phx_feed_read(struct phx_feed_ctl *ctl, unsigned char *slots, int fd,
		      uint64_t n, int64_t file_off, int64_t buf_off,
		      int64_t *bytes_done);

/*
 * The worker's side of a write: @n bytes of the buffer at @buf_off to @fd
 * at @file_off.  As phx_feed_read otherwise.
 */
int64_t phx_feed_write(struct phx_feed_ctl *ctl, unsigned char *slots, int fd,
		       uint64_t n, int64_t file_off, int64_t buf_off,
		       int64_t *bytes_done);

/* End a transfer before it moves anything: *@bytes_done = @err. */
void phx_feed_abort(struct phx_feed_ctl *ctl, int64_t err, int64_t *bytes_done);

/* Wait until every block of the kernel has left @ctl. */
void phx_feed_wait_exit(struct phx_feed_ctl *ctl);

#endif /* PHX_STREAM_I_H */
