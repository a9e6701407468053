/* SPDX-License-Identifier: MIT */
/*
 * modes.c - the stream modes by their PHX_STREAM_WAIT value, each in the
 * file of its name, for the stream core (stream.c) to pick from and the
 * workers (worker.c) to serve.
 */
#include "stream_i.h"

const struct phx_stream_mode *const phx_stream_modes[PHX_STREAM_MODES] = {
	[PHX_STREAM_WAIT_HOST] = &phx_stream_host,
	[PHX_STREAM_WAIT_DEVICE] = &phx_stream_device,
	[PHX_STREAM_WAIT_KERNEL] = &phx_stream_kernel,
	[PHX_STREAM_WAIT_COPY] = &phx_stream_copy,
};
