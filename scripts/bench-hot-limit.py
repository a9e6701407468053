#!/usr/bin/env python3
"""What a hot read that goes through the CPU can reach on this machine.

A hot file reaches the GPU through the CPU's copy out of the page cache
into pinned memory, then the copy engine's copy out of that memory: two
passes over host memory for the first, one for the second.  This script
measures each alone and both at once, with no library of the project in
between:

  - the pinned host-to-device copy rate (1 GiB torch copies, in a loop);
  - the page cache's copy rate: THREADS threads, each pread()ing the
    file's next 2 MiB piece into a pinned buffer of its own, in a loop;
  - both at once: the same copies while each count of readers runs, each
    side's rate while the other goes on.

The figures say how far a reader-and-copy-engine path can go: if the
copy engine slows when the readers run, host memory is what they share.
Each phase runs for SECONDS; nothing here asserts a time.

    bench-hot-limit.py [--file F] [--size-gib 2] [--threads 4,8,16]
                       [--seconds 2]               (a GPU machine, torch)
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from bench_safetensors_sim import read_through_cache

MiB = 1 << 20
PIECE = 2 * MiB


def make_hot(path: str, size: int) -> None:
    """Writes @path (@size bytes) unless it is there, then reads it all
    so that it is in the page cache."""
    if not os.path.exists(path) or os.path.getsize(path) != size:
        block = os.urandom(64 * MiB)
        with open(path, "wb") as f:
            for off in range(0, size, len(block)):
                f.write(block[:min(len(block), size - off)])
    read_through_cache([path])


class Copier:
    """Host-to-device copies from pinned memory until stopped."""

    def __init__(self) -> None:
        import torch

        self.h = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
        self.d = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        self.d.copy_(self.h, non_blocking=True)
        torch.cuda.synchronize()

    def run(self, stop: threading.Event, out: list) -> None:
        import torch

        n = 0
        t0 = time.perf_counter()
        while not stop.is_set():
            for _ in range(2):
                self.d.copy_(self.h, non_blocking=True)
            torch.cuda.synchronize()
            n += 2
        out.append(n * (1 << 30) / 1e9 / (time.perf_counter() - t0))


def readers(path: str, size: int, nthreads: int, stop: threading.Event,
            out: list) -> None:
    """@nthreads threads pread() the file's pieces in turn (thread i
    takes pieces i, i + n, ...) into pinned buffers of their own."""
    import torch

    fd = os.open(path, os.O_RDONLY)
    pieces = size // PIECE
    bufs = [torch.empty(PIECE, dtype=torch.uint8).pin_memory()
            for _ in range(nthreads)]
    counts = [0] * nthreads

    def one(i: int) -> None:
        view = memoryview(bufs[i].numpy())
        k = i
        while not stop.is_set():
            got = os.preadv(fd, [view], (k % pieces) * PIECE)
            if got != PIECE:
                raise OSError(f"{path}: short read at piece {k % pieces}")
            counts[i] += got
            k += nthreads

    t0 = time.perf_counter()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.append(sum(counts) / 1e9 / (time.perf_counter() - t0))
    os.close(fd)


def phase(seconds: float, copier: Copier | None, path: str, size: int,
          nthreads: int) -> tuple[float | None, float | None]:
    """Runs the copier, the readers or both for @seconds; their rates."""
    stop = threading.Event()
    copied: list = []
    read: list = []
    ts = []
    if copier:
        ts.append(threading.Thread(target=copier.run, args=(stop, copied)))
    if nthreads:
        ts.append(threading.Thread(target=readers,
                                   args=(path, size, nthreads, stop, read)))
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return (copied[0] if copied else None, read[0] if read else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file")
    ap.add_argument("--size-gib", type=int, default=2)
    ap.add_argument("--threads", default="4,8,16")
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    size = a.size_gib << 30
    path = a.file or f"/var/tmp/phx-hot-limit-{a.size_gib}g.dat"
    counts = [int(x) for x in a.threads.split(",")]
    make_hot(path, size)
    copier = Copier()

    alone, _ = phase(a.seconds, copier, path, size, 0)
    print(f"hot limit: {path}, {size >> 20} MiB, {os.cpu_count()} CPUs, "
          f"{a.seconds:g} s a phase")
    print(f"{'phase':<34}{'copy engine GB/s':>18}{'readers GB/s':>14}"
          f"{'copy vs alone':>15}")
    print(f"{'pinned copies alone':<34}{alone:>18.2f}{'-':>14}{1.0:>15.2f}")
    for n in counts:
        _, r = phase(a.seconds, None, path, size, n)
        print(f"{f'{n} readers alone':<34}{'-':>18}{r:>14.2f}{'-':>15}")
    for n in counts:
        c, r = phase(a.seconds, copier, path, size, n)
        print(f"{f'{n} readers and the copies at once':<34}{c:>18.2f}"
              f"{r:>14.2f}{c / alone:>15.2f}")
    again, _ = phase(a.seconds, copier, path, size, 0)
    print(f"{'pinned copies alone, again':<34}{again:>18.2f}{'-':>14}"
          f"{again / alone:>15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
