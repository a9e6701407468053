/* SPDX-License-Identifier: MIT */
/*
 * phoenix/settings.h - the settings, their PHX_* environment overrides
 * and the enums they choose between.
 *
 * A part of phoenix.h, which includes it: include <phoenix.h>, not this.
 */
#ifndef PHOENIX_H
#error "phoenix/settings.h is a part of phoenix.h: include <phoenix.h>"
#elif !defined(PHOENIX_SETTINGS_H)
#define PHOENIX_SETTINGS_H

/* O_DIRECT use (PHX_DIRECT). */
enum phx_direct {
	/*
	 * unless the range is mostly in the page cache, or the file system's
	 * first long cold read found the page cache faster there (it reads
	 * a staging's worth each way, the rest the faster way, and the
	 * process keeps the answer per file system)
	 */
	PHX_DIRECT_AUTO = -1,
	PHX_DIRECT_OFF = 0,
	PHX_DIRECT_ON = 1, /* fail where the file system refuses it */
};

/* How a stream is held during a stream-ordered transfer (PHX_STREAM_WAIT). */
enum phx_stream_wait {
	PHX_STREAM_WAIT_AUTO = -1, /* copy, or device on phx.ko devices */
	PHX_STREAM_WAIT_HOST = 0, /* a host function waits for the worker */
	PHX_STREAM_WAIT_DEVICE = 1, /* the stream waits on a flag */
	PHX_STREAM_WAIT_KERNEL = 2, /* the copy kernel holds the stream */
	PHX_STREAM_WAIT_COPY = 3, /* the stream's own copies, between waits */
};

/*
 * Tunables, each with an environment override read once at first use:
 *
 *   PHX_DEVICE         cuda | sim | kmod     default kind
 *   PHX_SIM_DEVICES    1                     number of simulated devices
 *   PHX_SIM_CAPACITY   4G                    bytes per simulated device
 *   PHX_STAGING_SIZE   64M                   pinned staging per engine
 *                                            (at most 16384 chunks)
 *   PHX_CHUNK_SIZE     4M                    bytes per staged I/O
 *                                            (at most 1G)
 *   PHX_QUEUE_DEPTH    16                    io_uring requests in flight
 *   PHX_ALLOC_CHUNK    64M                   largest device backing chunk
 *   PHX_DIRECT         auto | on | off       O_DIRECT use
 *   PHX_HOT_FRACTION   50                    % cached that counts as hot
 *   PHX_STREAM_WAIT    auto | copy | kernel | device | host
 *   PHX_STREAM_RINGS   1                     copy mode: rings (1-4) the
 *                                            staging is split into
 *   PHX_GATHER         auto | on | off       small copies of a batch in
 *                                            one kernel launch (cuda)
 *   PHX_HOT_READERS    16                    threads a long read the
 *                                            page cache serves runs on
 *                                            (0 or 1: the pipeline's)
 */
struct phx_settings {
	uint64_t staging_size;
	uint64_t chunk_size;
	unsigned int queue_depth;
	uint64_t alloc_chunk;
	enum phx_direct direct;
	unsigned int hot_fraction;
	unsigned int sim_devices;
	uint64_t sim_capacity;
	enum phx_stream_wait stream_wait; /* phx_io_enqueue() */
	unsigned int stream_rings; /* copy mode: rings sharing the staging */
	int gather; /* 0: off; 1: on; -1 (auto): batches of up to 32 */
	unsigned int hot_readers; /* threads of a long page-cache read */
};

/**
 * phx_settings_get() - the settings in force (defaults + environment).
 */
void phx_settings_get(struct phx_settings *out);

/**
 * phx_parse_size() - parse "4096", "64K", "4M", "1G", "2T" into bytes.
 * Returns 0 or -EINVAL.
 */
int phx_parse_size(const char *s, uint64_t *out);

#endif /* PHOENIX_SETTINGS_H */
