#!/usr/bin/env python3
"""Could the GPU's copy engine read a hot file straight out of the page
cache?  Maps the file read-only, registers the mapping with the CUDA
driver (cuMemHostRegister, CU_MEMHOSTREGISTER_READ_ONLY), copies it to
the device and unregisters it, whole or in windows spread over threads,
and prints each way's rate against the pinned host-to-device copy rate
of the same run, then checks the bytes.  An experiment for the hot read
path (docs/benchmarks.md, 2026-12-06), not a path libphoenix takes.

    python3 scripts/bench-register-pagecache.py FILE    (a GPU machine, torch)
"""
import ctypes
import os
import sys
import threading
import time

import torch

from pinned import pinned_rate

MiB = 1 << 20
PROT_READ, MAP_SHARED, MADV_POPULATE_READ = 1, 1, 22
RO = 0x08  # CU_MEMHOSTREGISTER_READ_ONLY


def main() -> int:
    if len(sys.argv) != 2 or not os.path.isfile(sys.argv[1]):
        print("usage: bench-register-pagecache.py FILE (at least 64 MiB)",
              file=sys.stderr)
        return 2
    path = sys.argv[1]
    size = os.path.getsize(path) & ~(64 * MiB - 1)
    if not size:
        print(f"{path}: smaller than 64 MiB", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_uint]
    cu.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
    cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_void_p]
    torch.cuda.init()
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    fd = os.open(path, os.O_RDONLY)
    with open(path, "rb") as f:  # hot: in the page cache
        while f.read(64 * MiB):
            pass

    pinned = pinned_rate(4)
    print(f"pinned host-to-device copy: {pinned:.2f} GB/s")

    def run(win: int, threads: int, populate: bool) -> None:
        a = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
        if a in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        t0 = time.perf_counter()
        if populate:
            libc.madvise(a, size, MADV_POPULATE_READ)
        nxt, lock, errs, reg = [0], threading.Lock(), [], [0.0]

        def work() -> None:
            torch.cuda.set_device(0)
            s = torch.cuda.Stream()
            while True:
                with lock:
                    off, nxt[0] = nxt[0], nxt[0] + win
                if off >= size or errs:
                    return
                r0 = time.perf_counter()
                r = cu.cuMemHostRegister_v2(a + off, win, RO)
                with lock:
                    reg[0] += time.perf_counter() - r0
                if r:
                    errs.append(r)
                    return
                cu.cuMemcpyHtoDAsync_v2(dst.data_ptr() + off, a + off, win,
                                        s.cuda_stream)
                s.synchronize()
                cu.cuMemHostUnregister(a + off)

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        libc.munmap(a, size)
        what = f"CUresult {errs[0]}" if errs else \
            f"{size / dt / 1e9:.2f} GB/s ({size / dt / 1e9 / pinned:.2f}x pinned)"
        print(f"{win // MiB:5d} MiB windows, {threads} threads"
              f"{', populated first' if populate else ''}: {what}, "
              f"registering {1e3 * reg[0]:.0f} ms of thread time")

    for win, threads, populate in ((size, 1, True), (64 * MiB, 4, False),
                                   (256 * MiB, 4, False),
                                   (64 * MiB, 8, False)):
        run(win, threads, populate)
    with open(path, "rb") as f:
        head = f.read(MiB)
    same = bytes(dst[:MiB].cpu().numpy().tobytes()) == head
    print(f"bytes equal: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
