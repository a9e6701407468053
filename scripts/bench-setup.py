#!/usr/bin/env python3
"""What a CUDA device's set-up is made of: in fresh processes (torch's
context made first, as a user's process has it), phxio's open and
prepare() of the device, and beside them the driver and kernel calls
the set-up makes, each timed alone on memory of the staging's size.

    bench-setup.py [--runs 3] [--size 64M]

Rows (milliseconds, median of the processes):
    open, prepare      phxio.device("cuda:0") and its Device.prepare()
    fault 2M / 4K      mmap + MADV_POPULATE_WRITE of the staging's size,
                       with huge pages asked for / not
    register 2M / 4K   cuMemHostRegister of that memory, and unregister
    streams, events    cuStreamCreate x2, cuEventCreate x16
    fault 2M xN        the same fault, the memory cut in N parts, a
                       thread a part
    register 2M xN     after that, each part registered on its own
                       thread at once (whether the driver registers in
                       parallel)
    fault+reg 2M xN    each thread faults its part and registers it
Nothing asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import statistics
import subprocess
import sys
import threading
import time

MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23


def size_of(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def aligned_map(size: int, libc, huge: bool):
    """@size bytes of fresh memory on a 2 MiB boundary: (map, address)."""
    m = mmap.mmap(-1, size + (2 << 20))
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    p = (base + (2 << 20) - 1) & ~((2 << 20) - 1)
    if huge:
        libc.madvise(p, size, MADV_HUGEPAGE)
    return m, p


def on_threads(n: int, fn) -> float:
    """Run fn(0..n-1) on n threads at once (ctypes lets the GIL go in
    each call); the seconds until all are done."""
    ts = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    t = time.perf_counter()
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    return time.perf_counter() - t


def parts(size: int, n: int, libc, cu, out: dict) -> None:
    """Fault in and register @size bytes cut in @n parts, a thread a
    part: first the fault then the registration, each on n threads at
    once; then both on each thread, on fresh memory."""
    part = size // n
    rcs = []
    ctx = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(ctx))  # torch's, made current here

    def fault(p):
        return lambda i: libc.madvise(p + i * part, part, MADV_POPULATE_WRITE)

    def register(p):
        def reg(i):
            cu.cuCtxSetCurrent(ctx)  # a new thread has no current context
            rcs.append(cu.cuMemHostRegister_v2(
                ctypes.c_void_p(p + i * part), ctypes.c_size_t(part), 0))
        return reg

    def unregister(p):
        for i in range(n):
            cu.cuMemHostUnregister(ctypes.c_void_p(p + i * part))

    m, p = aligned_map(size, libc, True)
    out[f"fault 2M x{n}"] = on_threads(n, fault(p))
    out[f"register 2M x{n}"] = on_threads(n, register(p))
    unregister(p)
    m.close()
    m, p = aligned_map(size, libc, True)
    f, r = fault(p), register(p)
    out[f"fault+reg 2M x{n}"] = on_threads(n, lambda i: (f(i), r(i)))
    unregister(p)
    m.close()
    if any(rcs):
        raise SystemExit(f"cuMemHostRegister: CUresult {max(rcs)}")


def child(size: int) -> dict:
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda:0")
    import phxio

    out = {}
    t = time.perf_counter()
    dev = phxio.device("cuda:0")
    out["open"] = time.perf_counter() - t
    t = time.perf_counter()
    dev.prepare()
    out["prepare"] = time.perf_counter() - t

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    cu = ctypes.CDLL("libcuda.so.1")
    for huge in (True, False):
        tag = "2M" if huge else "4K"
        m, p = aligned_map(size, libc, huge)
        t = time.perf_counter()
        if libc.madvise(p, size, MADV_POPULATE_WRITE):
            ctypes.memset(p, 0, size)
        out[f"fault {tag}"] = time.perf_counter() - t
        t = time.perf_counter()
        rc = cu.cuMemHostRegister_v2(ctypes.c_void_p(p),
                                     ctypes.c_size_t(size), 0)
        out[f"register {tag}"] = time.perf_counter() - t
        if rc:
            raise SystemExit(f"cuMemHostRegister: CUresult {rc}")
        t = time.perf_counter()
        cu.cuMemHostUnregister(ctypes.c_void_p(p))
        out[f"unregister {tag}"] = time.perf_counter() - t
        m.close()
    t = time.perf_counter()
    s = [ctypes.c_void_p() for _ in range(2)]
    for x in s:
        cu.cuStreamCreate(ctypes.byref(x), 1)
    out["streams"] = time.perf_counter() - t
    t = time.perf_counter()
    e = [ctypes.c_void_p() for _ in range(16)]
    for x in e:
        cu.cuEventCreate(ctypes.byref(x), 2)
    out["events"] = time.perf_counter() - t
    for n in (4, 8):
        parts(size, n, libc, cu, out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    size = size_of(args.size)
    if args.child:
        print(json.dumps(child(size)))
        return 0
    runs = []
    for _ in range(args.runs):
        p = subprocess.run([sys.executable, __file__, "--child", "--size",
                            args.size], capture_output=True, text=True,
                           timeout=120)
        if p.returncode:
            raise SystemExit(f"the child failed:\n{p.stderr[-2000:]}")
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"set-up of a CUDA device, {args.size} of staging, "
          f"{args.runs} fresh processes (median, min-max ms)")
    print("| step | ms | min-max |")
    print("|---|---|---|")
    for k in runs[0]:
        v = sorted(r[k] * 1e3 for r in runs)
        print(f"| {k} | {statistics.median(v):.2f} | "
              f"{v[0]:.2f}-{v[-1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
