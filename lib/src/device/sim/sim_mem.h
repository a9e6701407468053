/* SPDX-License-Identifier: MIT */
/*
 * sim_mem.h - the simulated device's memory (sim_mem.c): address-space
 * reservations and the chunks mapped into them, the device ops sim.c
 * puts in its table.
 */
#ifndef PHX_SIM_MEM_H
#define PHX_SIM_MEM_H

#include "device.h"

int phx_sim_locate(phx_dptr_t dptr);
int phx_sim_va_reserve(struct phx_device *dev, uint64_t size, phx_dptr_t *out);
void phx_sim_va_release(struct phx_device *dev, phx_dptr_t va, uint64_t size);
int phx_sim_chunk_create(struct phx_device *dev, uint64_t size,
			 phx_chunk_t *out);
void phx_sim_chunk_release(struct phx_device *dev, phx_chunk_t chunk,
			   uint64_t size);
int phx_sim_chunk_map(struct phx_device *dev, phx_dptr_t at, uint64_t size,
		      phx_chunk_t chunk);
int phx_sim_chunk_map_bare(struct phx_device *dev, phx_dptr_t at, uint64_t size,
			   phx_chunk_t chunk);
int phx_sim_range_access(struct phx_device *dev, phx_dptr_t at, uint64_t size);
int phx_sim_chunk_export(struct phx_device *dev, phx_chunk_t chunk,
			 uint64_t size, int *fd);
int phx_sim_chunk_import(struct phx_device *dev, int fd, uint64_t size,
			 phx_chunk_t *out);

#endif /* PHX_SIM_MEM_H */
