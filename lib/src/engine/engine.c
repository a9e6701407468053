/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the engine layer's part of a device: its engine pool
 * (transfer.c), the staging its engines take (staging.c) and what host
 * copies keep (hostcopy.c), made when the device opens and destroyed,
 * idle engines and kept streams with them, when it closes.
 */
#include "engine_i.h"

int phx_engine_device_open(struct phx_device *dev)
{
	int ret = phx_engine_pool_open(dev);

	if (!ret)
		ret = phx_staging_open(dev);
	if (!ret)
		ret = phx_hostcopy_open(dev);
	if (ret)
		phx_engine_device_close(dev);
	return ret;
}

void phx_engine_device_close(struct phx_device *dev)
{
	phx_engine_pool_destroy(dev);
	phx_hostcopy_release(dev);
	phx_staging_close(dev);
}
