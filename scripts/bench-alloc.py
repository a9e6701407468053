#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What making device memory costs, by PHX_ALLOC_CHUNK (the largest chunk
a buffer maps at once): a dense buffer of SIZE allocated and freed, each
chunk size in a fresh process, median of RUNS.  Prints ms and GB/s per
chunk size.  A measurement, not a test.

With --copy FILE (a file kept in the page cache), also what new device
memory costs the copy that fills it, in one process, rounds in turn,
median of RUNS: phx_read of FILE into

    used          a buffer this process has filled before (the peer)
    after a free  the same, right after a buffer of FILE's size was freed
    fresh         a dense buffer allocated just before (not timed)
    fresh, later  the same, allocated 0.2 s before
    sparse        a sparse buffer, its memory made by the read (timed)
    alloc + read  a dense buffer allocated and filled (both timed)

    scripts/bench-alloc.py [--size 2G] [--runs 3] [--chunks 16M,64M,256M,1G]
                           [--copy FILE]
"""
import argparse
import os
import subprocess
import sys

from bench_safetensors_sim import read_through_cache

CHILD = r"""
import sys, time
import phxio
size, runs = int(sys.argv[1]), int(sys.argv[2])
dev = phxio.Device()
times = []
for _ in range(runs):
    t = time.perf_counter()
    b = dev.alloc(size)
    times.append(time.perf_counter() - t)
    b.free()
print(sorted(times)[len(times) // 2])
"""

COPY = r"""
import os, statistics, sys, time
import phxio
f, runs = sys.argv[1], int(sys.argv[2])
n = os.path.getsize(f)
dev = phxio.Device()
used = dev.alloc(n)
phxio.read_into(f, used)
cases = ("used", "after a free", "fresh", "fresh, later", "sparse",
         "alloc + read")
res = {c: [] for c in cases}


def timed(case, fn):
    t = time.perf_counter()
    out = fn()
    res[case].append(time.perf_counter() - t)
    return out


for _ in range(runs):
    timed("used", lambda: phxio.read_into(f, used))
    dev.alloc(n).free()
    timed("after a free", lambda: phxio.read_into(f, used))
    b = dev.alloc(n)
    timed("fresh", lambda: phxio.read_into(f, b))
    b.free()
    b = dev.alloc(n)
    time.sleep(0.2)
    timed("fresh, later", lambda: phxio.read_into(f, b))
    b.free()
    b = dev.alloc(n, sparse=True)
    timed("sparse", lambda: phxio.read_into(f, b))
    b.free()

    def alloc_read():
        b = dev.alloc(n)
        phxio.read_into(f, b)
        return b

    timed("alloc + read", alloc_read).free()
    time.sleep(0.2)
peer = statistics.median(res["used"])
for c in cases:
    t = statistics.median(res[c])
    print("%-14s %10.2f %8.2f %8.3fx" % (c, t * 1e3, n / t / 1e9, peer / t))
"""


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2G")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunks", default="16M,64M,256M,1G")
    ap.add_argument("--copy", metavar="FILE")
    a = ap.parse_args()
    size = parse_size(a.size)
    print("%-10s %12s %10s" % ("chunk", "alloc ms", "GB/s"))
    for c in a.chunks.split(","):
        env = dict(os.environ, PHX_ALLOC_CHUNK=c)
        r = subprocess.run([sys.executable, "-c", CHILD, str(size),
                            str(a.runs)], env=env, capture_output=True,
                           text=True, timeout=300)
        if r.returncode:
            err = r.stderr.strip().splitlines()
            print("%-10s failed: %s" % (c, err[-1] if err else r.returncode))
            continue
        t = float(r.stdout)
        print("%-10s %12.2f %10.2f" % (c, t * 1e3, size / t / 1e9))
    if a.copy:
        read_through_cache([a.copy])
        print("\nphx_read of %s into device memory, median of %d"
              % (a.copy, a.runs))
        print("%-14s %10s %8s %9s" % ("into", "ms", "GB/s", "vs used"))
        sys.stdout.flush()
        r = subprocess.run([sys.executable, "-c", COPY, a.copy,
                            str(a.runs)], timeout=600)
        if r.returncode:
            sys.exit("the copy's process failed (%d)" % r.returncode)


if __name__ == "__main__":
    main()
