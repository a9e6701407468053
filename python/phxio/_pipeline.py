"""Batched transfers fed from a queue, on worker threads.

The checkpoint loader and saver hand arrays of phx_io entries to a
Pipeline as soon as they are ready (a file's header parsed, a shard's
header written); each worker thread owns one libphoenix batch and keeps it
full, taking new entries while earlier ones are in flight.  So the next
file's header is read while the previous file's bytes move.  A batch
borrows one of the device's pooled engines (io_uring, pinned staging) for
its life and gives it back when destroyed, so after the first call a load
pays for no engine set-up; holding batches between calls would keep those
engines from synchronous transfers.  ctypes lets go of the GIL during
library calls, so the workers run side by side.

One worker is the default: its engine keeps PHX_QUEUE_DEPTH transfers in
flight across files, as phx_read() does within one, and on the H200 it
loaded a hot file at 0.92x phx_read against 0.83x with four.  Every
engine holds its own pinned staging (PHX_STAGING_SIZE by default), so
four workers of full depth held four times phx_read's staging (192 MiB
more peak RSS there); workers now get batches of fewer slots, which
together hold one engine's staging.
"""

from __future__ import annotations

import ctypes
import errno
import queue
import os
import threading
from typing import Any, Optional

from . import _lib
from ._args import as_int
from ._lib import PhoenixError, check, lib

# What an entry holds until a worker completes it: a failure elsewhere
# (or a worker that could not start) leaves it so.
NOT_RUN = -errno.ECANCELED


# The most workers a load or save takes.  Each holds a batch, which
# borrows one of the device's engines for its life (an io_uring, pinned
# staging of at least one PHX_CHUNK_SIZE slot and copy streams): past
# PHX_STAGING_SIZE / PHX_CHUNK_SIZE workers (16 by default) every one of
# them maps and pins staging of its own, and the pool keeps at most four
# idle afterwards.  One worker is the fastest measured; this leaves room
# for four times the staging's slots.
MAX_THREADS = 64


def threads_of(threads: Optional[int]) -> int:
    """Workers for a load or save: @threads, else PHX_LOAD_THREADS, else 1;
    an integer 1 to MAX_THREADS (TypeError for a bool or a non-integer,
    ValueError out of range, each naming the value)."""
    what = "threads"
    if threads is None:
        env = os.environ.get("PHX_LOAD_THREADS", "1")
        try:
            threads = int(env)
        except ValueError:
            raise ValueError(f"PHX_LOAD_THREADS={env!r}: give a number of "
                             "worker threads, such as 1") from None
        what = "PHX_LOAD_THREADS"
    n = as_int(threads)
    if n is None:
        raise TypeError(f"threads={threads!r}: give a whole number of "
                        "worker threads, such as 1")
    if n < 1:
        raise ValueError(f"{what}={n}: threads must be at least 1, not {n}")
    if n > MAX_THREADS:
        raise ValueError(f"{what}={n}: at most {MAX_THREADS} worker threads "
                         "(each borrows an engine: an io_uring and pinned "
                         "staging)")
    return n


def shared_depth(threads: int) -> int:
    """Each of @threads batches' depth, so that together they hold one
    engine's staging: a batch's engine has @depth slots of at most
    PHX_CHUNK_SIZE.  0 (the configured depth) for one; past
    PHX_STAGING_SIZE / PHX_CHUNK_SIZE workers (16) each needs one slot."""
    if threads <= 1:
        return 0
    s = _lib.SettingsStruct()
    lib().phx_settings_get(ctypes.byref(s))
    return max(1, s.staging_size // (s.chunk_size * threads))


def prepare(dev: Any, threads: Optional[int] = None) -> None:
    """Build, into @dev's engine pool, the engines a load or save of
    @threads workers borrows (each an io_uring, pinned staging and copy
    streams: the first call's set-up), so that the call builds none.  A
    batch of each worker's depth is created and given back at once;
    the engines stay pooled until the device closes (the library keeps
    at most four idle)."""
    n = threads_of(threads)
    depth = shared_depth(n)
    made = []
    try:
        for _ in range(n):
            b = ctypes.c_void_p()
            check(lib().phx_batch_create(dev.handle, depth, 0,
                                         ctypes.byref(b)),
                  f"preparing transfers on {dev.name}")
            made.append(b)
    finally:
        for b in made:
            lib().phx_batch_destroy(b)


class Pipeline:
    """@threads workers, each with a batch of @depth entries on @dev
    (default: the configured depth shared among the workers)."""

    def __init__(self, dev: Any, threads: int,
                 depth: Optional[int] = None) -> None:
        self.dev = dev
        self.depth = shared_depth(threads) if depth is None else depth
        self.errors: list[BaseException] = []
        self.failed = threading.Event()
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._keep: list[Any] = []
        self._ended = False
        self._workers = [threading.Thread(target=self._work, daemon=True,
                                          name=f"phx-pipeline-{i}")
                         for i in range(max(1, threads))]
        for w in self._workers:
            w.start()

    def put(self, ios: Any) -> None:
        """Queue an IoStruct array; it must not change until finish()."""
        for io in ios:
            io.result = NOT_RUN
        self._keep.append(ios)
        self._queue.put(ios)

    def cancel(self) -> None:
        """Start no more queued entries (those in flight still finish)."""
        self.failed.set()

    def finish(self) -> None:
        """Wait until every queued entry completed or was dropped; raise
        the first error a worker met.  May be called again (after an
        interruption): only then may the destinations be freed."""
        if not self._ended:
            self._ended = True
            for _ in self._workers:
                self._queue.put(None)
        for w in self._workers:
            w.join()
        if self.errors:
            raise self.errors[0]

    def abort(self) -> None:
        """On the way out of a failure: start nothing more and wait for
        what is in flight, so the destinations may be freed.  The workers'
        errors are dropped: the one being raised says what went wrong."""
        self.cancel()
        try:
            self.finish()
        except BaseException:
            pass

    def _work(self) -> None:
        state = {"stop": False}
        b = ctypes.c_void_p()
        try:
            check(lib().phx_batch_create(self.dev.handle, self.depth, 0,
                                         ctypes.byref(b)),
                  f"creating a batch on {self.dev.name}")
        except BaseException as exc:  # reported by finish()
            self._fail(exc)
        else:
            try:
                self._loop(b, state)
            except BaseException as exc:
                self._fail(exc)
            finally:
                # waits for what is in flight, before the buffers go
                lib().phx_batch_destroy(b)
        if not state["stop"]:
            self._drain()

    def _loop(self, b: ctypes.c_void_p, state: dict) -> None:
        outstanding = 0
        stop = False
        while not stop or outstanding:
            items = [] if stop else self._take(block=not outstanding)
            if items and items[-1] is None:
                items.pop()
                stop = state["stop"] = True
            if items:
                if not self.failed.is_set():
                    outstanding += self._start(b, items)
                continue
            if not outstanding:
                continue
            got = check(lib().phx_batch_wait(b, 1, None, 0, -1),
                        f"waiting for transfers on {self.dev.name}")
            if not got:
                raise PhoenixError(errno.EIO, f"{outstanding} transfers on "
                                   f"{self.dev.name} never completed")
            outstanding -= got

    def _take(self, block: bool) -> list[Any]:
        """The arrays queued by now, up to and including the end marker
        (at least one when @block).  A lone worker takes all of them, so
        that its engine starts them together (the readers of a cached
        checkpoint go from one file's pieces to the next's without
        stopping in between); several workers take one each, to share
        them."""
        items: list[Any] = []
        try:
            items.append(self._queue.get() if block
                         else self._queue.get_nowait())
            while items[-1] is not None and len(self._workers) == 1:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return items

    def _start(self, b: ctypes.c_void_p, items: list[Any]) -> int:
        """Queue @items' entries on @b and start them all with the last
        array; how many were started."""
        started = 0
        for i, item in enumerate(items):
            n = len(item)
            call = lib().phx_batch_submit if i == len(items) - 1 else \
                lib().phx_batch_queue
            got = check(call(b, item, n),
                        f"submitting transfers on {self.dev.name}")
            started += got
            if got < n:
                raise PhoenixError(errno.EIO, f"only {got} of {n} "
                                   "transfers could be started on "
                                   f"{self.dev.name}")
        return started

    def _drain(self) -> None:
        """After a failure: take what is left up to our end marker."""
        while self._queue.get() is not None:
            pass

    def _fail(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self.failed.set()


def ios(n: int) -> Any:
    """A zeroed array of @n IoStruct."""
    return (_lib.IoStruct * n)()
