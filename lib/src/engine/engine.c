/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the engine layer's part of a device: its engine pool
 * (transfer.c), the staging its engines take (staging.c) and what host
 * copies keep (hostcopy.c), made when the device opens and destroyed,
 * idle engines and kept streams with them, when it closes.
 *
 * Where transfers stage through pinned memory (cuda, sim), the staging
 * thread goes on to build the pool's first engine (io_uring, fixed
 * buffer, copy streams, events) out of the block it pinned: a process's
 * first transfer borrows it as every later one does, and one that comes
 * before it is ready waits for it rather than building another.
 */
#include "engine_i.h"

int phx_engine_device_open(struct phx_device *dev)
{
	bool prebuild = dev->ops->pinned_copies;
	int ret = phx_engine_pool_open(dev, prebuild);

	if (!ret)
		ret = phx_hostcopy_open(dev);
	if (!ret)
		ret = phx_staging_open(
			dev, prebuild ? phx_engine_pool_prebuild : NULL);
	if (ret)
		phx_engine_device_close(dev);
	return ret;
}

void phx_engine_device_close(struct phx_device *dev)
{
	/* the staging thread may be adding to the pool: it goes first */
	phx_staging_stop(dev);
	phx_engine_pool_destroy(dev);
	phx_hostcopy_release(dev);
	phx_staging_close(dev);
}
