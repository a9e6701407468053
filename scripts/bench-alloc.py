#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What making device memory costs, by PHX_ALLOC_CHUNK (the largest chunk
a buffer maps at once): a dense buffer of SIZE allocated and freed, each
chunk size in a fresh process, median of RUNS.  Prints ms and GB/s per
chunk size.  A measurement, not a test.

    scripts/bench-alloc.py [--size 2G] [--runs 3] [--chunks 16M,64M,256M,1G]
"""
import argparse
import os
import subprocess
import sys

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


if __name__ == "__main__":
    main()
