#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What making device memory costs, by PHX_ALLOC_CHUNK (the largest chunk
a buffer maps at once): a dense buffer of SIZE, and a sparse one backed
by writes of 256 MiB (as a phxfs file filled by `phx cp` is; the same
writes into a dense buffer taken off), each chunk size in a fresh
process, median of RUNS.  Prints ms and GB/s per chunk size.  A
measurement, not a test.

    scripts/bench-alloc.py [--size 2G] [--runs 3] [--chunks 64M,256M,1G]
"""
import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import sys, time
import phoenix
size, runs = int(sys.argv[1]), int(sys.argv[2])
dev = phoenix.Device()
zero = bytes(256 << 20)
dense, sparse, fill = [], [], []


def fill_in(b):
    for off in range(0, size, len(zero)):
        b.copy_from_host(zero[:min(len(zero), size - off)], off)


for _ in range(runs):
    t = time.perf_counter()
    b = dev.alloc(size)
    dense.append(time.perf_counter() - t)
    t = time.perf_counter()
    fill_in(b)
    fill.append(time.perf_counter() - t)
    b.free()
    t = time.perf_counter()
    b = dev.alloc(size, sparse=True)
    fill_in(b)
    sparse.append(time.perf_counter() - t)
    b.free()
med = lambda v: sorted(v)[len(v) // 2]
print(med(dense), med(sparse) - med(fill))
"""


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2G")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunks", default="16M,64M,256M,1G")
    a = ap.parse_args()
    size = parse_size(a.size)
    print("%-10s %12s %10s %18s %10s" % ("chunk", "dense ms", "GB/s",
                                         "sparse backing ms", "GB/s"))
    for c in a.chunks.split(","):
        env = dict(os.environ, PHX_ALLOC_CHUNK=c)
        r = subprocess.run([sys.executable, "-c", CHILD, str(size),
                            str(a.runs)], env=env, capture_output=True,
                           text=True, timeout=300)
        if r.returncode:
            print("%-10s failed: %s" % (c, r.stderr.strip().splitlines()[-1]
                                        if r.stderr.strip() else r.returncode))
            continue
        d, s = (float(x) for x in r.stdout.split())
        print("%-10s %12.2f %10.2f %18.2f %10.2f" % (c, d * 1e3, size / d / 1e9,
                                                     s * 1e3, size / s / 1e9))


if __name__ == "__main__":
    main()
