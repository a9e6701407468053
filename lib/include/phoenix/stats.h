/* SPDX-License-Identifier: MIT */
/*
 * phoenix/stats.h - counters of what a device moved and of what its
 * engines cost.
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/stats.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_STATS_H)
#define PHOENIX_STATS_H

struct phx_stats {
	/* bytes moved, by enum phx_path (passthrough bytes never pass by) */
	uint64_t bytes[PHX_PATH_PASSTHROUGH];
	uint64_t ios; /* transfers completed */
	uint64_t errors; /* transfers that failed */
	uint64_t pinned_bytes; /* staging memory pinned now */
};

/**
 * phx_stats_get() - counters for @dev since it was opened.
 */
void phx_stats_get(struct phx_device *dev, struct phx_stats *out);

/*
 * The device's transfer engines (an io_uring, pinned staging, copy
 * streams each).  Synchronous transfers, batches and host copies borrow
 * them from a pool per device and give them back, so after the first
 * call none of them builds one; stream-ordered transfers have their own.
 */
struct phx_engine_stats {
	uint64_t built; /* engines built since the device opened */
	unsigned int alive; /* engines of the pool now, idle or lent */
	unsigned int idle; /* of those, waiting in the pool */
	uint64_t staging_bytes; /* host staging memory all engines hold */
	uint64_t threaded_reads; /* reads run on PHX_HOT_READERS threads */
	/*
	 * The set-up phx_device_open() starts (its staging mapped and
	 * pinned, the first engine built): how long it ran (0 while it
	 * runs), and how long transfers waited for it, summed over the
	 * threads that waited: the first transfer's tax, which
	 * phx_device_prepare() takes out of it (its own wait does not
	 * count).  A child of fork() sees its parent's figures.
	 */
	uint64_t setup_ns;
	uint64_t setup_wait_ns;
};

/**
 * phx_engine_stats_get() - what @dev's engines cost now.
 *
 * Returns 0.  Does not block on transfers.
 */
int phx_engine_stats_get(struct phx_device *dev, struct phx_engine_stats *out);

#endif /* PHOENIX_STATS_H */
