"""Batched transfers fed from a queue, on worker threads.

The checkpoint loader and saver hand arrays of phx_io entries to a
Pipeline as soon as they are ready (a file's header parsed, a shard's
header written); each worker thread owns one libphoenix batch and keeps it
full, taking new entries while earlier ones are in flight.  So the next
file's header is read while the previous file's bytes move.  Batches (and
the staging memory each holds) are kept per device between calls, so
after the first call a load pays for no batch set-up at all.  ctypes lets
go of the GIL during library calls, so the workers run side by side.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import queue
import threading
from typing import Any

from . import _core, _lib
from ._lib import PhoenixError, check, lib

# What an entry holds until a worker completes it: a failure elsewhere
# (or a worker that could not start) leaves it so.
NOT_RUN = -errno.ECANCELED

_EMPTY = object()

# Idle batches by device name, made on the process-wide shared Device (so
# the device stays open while they exist) and reused by later calls.
_idle: dict[str, list[int]] = {}
_idle_lock = threading.Lock()


def _take_batch(dev: Any, depth: int) -> int:
    """An idle batch of @dev, or a new one (raises PhoenixError)."""
    key = f"{dev.name}/{depth}"
    with _idle_lock:
        if _idle.get(key):
            return _idle[key].pop()
    shared = _core.device(dev.name)
    b = ctypes.c_void_p()
    check(lib().phx_batch_create(shared.handle, depth, 0, ctypes.byref(b)),
          f"creating a batch on {dev.name}")
    return b.value


def _give_batch(dev: Any, depth: int, b: int) -> None:
    with _idle_lock:
        _idle.setdefault(f"{dev.name}/{depth}", []).append(b)


@atexit.register
def _free_batches() -> None:
    with _idle_lock:
        for batches in _idle.values():
            for b in batches:
                lib().phx_batch_destroy(b)
        _idle.clear()


class Pipeline:
    """@threads workers, each with a batch of @depth entries on @dev."""

    def __init__(self, dev: Any, threads: int, depth: int = 0) -> None:
        self.dev = dev
        self.depth = depth
        self.errors: list[BaseException] = []
        self.failed = threading.Event()
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._keep: list[Any] = []
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
        the first error a worker met."""
        for _ in self._workers:
            self._queue.put(None)
        for w in self._workers:
            w.join()
        if self.errors:
            raise self.errors[0]

    def _work(self) -> None:
        state = {"stop": False}
        try:
            b = _take_batch(self.dev, self.depth)
        except BaseException as exc:  # reported by finish()
            self._fail(exc)
        else:
            try:
                self._loop(b, state)
            except BaseException as exc:
                self._fail(exc)
                # what is in flight completes before the buffers go
                lib().phx_batch_destroy(b)
            else:
                _give_batch(self.dev, self.depth, b)
        if not state["stop"]:
            self._drain()

    def _loop(self, b: int, state: dict) -> None:
        outstanding = 0
        stop = False
        while not stop or outstanding:
            item = _EMPTY
            if not stop:
                if outstanding:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        pass
                else:
                    item = self._queue.get()
            if item is None:
                stop = state["stop"] = True
                continue
            if item is not _EMPTY:
                if not self.failed.is_set():
                    n = len(item)
                    got = check(lib().phx_batch_submit(b, item, n),
                                f"submitting transfers on {self.dev.name}")
                    outstanding += got
                    if got < n:
                        raise PhoenixError(errno.EIO, f"only {got} of {n} "
                                           "transfers could be started on "
                                           f"{self.dev.name}")
                continue
            got = check(lib().phx_batch_wait(b, 1, None, 0, -1),
                        f"waiting for transfers on {self.dev.name}")
            if not got:
                raise PhoenixError(errno.EIO, f"{outstanding} transfers on "
                                   f"{self.dev.name} never completed")
            outstanding -= got

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
