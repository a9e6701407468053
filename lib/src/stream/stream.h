/* SPDX-License-Identifier: MIT */
/*
 * stream.h - what the stream layer (lib/src/stream) offers the registry
 * above it: what a device's streams need when it opens and closes.  The
 * stream API itself (phx_stream_*, phx_io_enqueue) is in phoenix.h.
 */
#ifndef PHX_STREAM_H
#define PHX_STREAM_H

#include "engine.h"

/*
 * A device has just opened: make the stream layer's state of it (its
 * workers start at the first transfer) and load what its streams need
 * before any stream can be held (the copy kernel; loading waits for the
 * GPU).
 */
int phx_stream_device_open(struct phx_device *dev);

/* A device closes: its stream-ordered transfers' workers stop and go. */
void phx_stream_device_close(struct phx_device *dev);

/* How @dev's streams wait for transfers (never _AUTO). */
enum phx_stream_wait phx_stream_mode(const struct phx_device *dev);

#endif /* PHX_STREAM_H */
