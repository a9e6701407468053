#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What modifying a large file costs on phxfs against tmpfs (CPU machine).

Mounts phxfs (simulated device) in each mode, times the first write into
it and into /dev/shm alone (set-up: phxfs makes its transfer engine
then), then on a 256 MiB file in each times, per operation (median,
mean and worst of N):
pwritev of 4 KiB, 64 KiB and 1 MiB at random offsets into a fully written
file and into a sparse one (ftruncate'd to 256 MiB first), ftruncate
shrinking by up to 8 MiB and growing back, and the issue's mix of both
(writes of 4 KiB to 1 MiB, one truncate in eight) into a sparse and a
fully written file.  Prints one table with the ratio to tmpfs.  A measurement, never a test: figures vary between runs.

Modes: "direct" is the default mount (requests through /dev/fuse),
"io_uring" the same mounted with -o io_uring, "writeback" the page-cached
mount.  Run as root, the fuse module's enable_uring parameter is switched
on for the run and back after (--keep-uring leaves it as it is); the
table's header says whether the kernel offered io_uring.

    scripts/bench-phxfs-modify.py [BUILD_DIR] [-n OPS]
        [--modes direct,io_uring,writeback] [--keep-uring]
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

SIZE = 256 << 20
URING = "/sys/module/fuse/parameters/enable_uring"


def timed(fn, *a):
    t = time.perf_counter()
    fn(*a)
    return time.perf_counter() - t


def mixed(fd, n, seed):
    """The issue's workload: random writes of 4 KiB to 1 MiB (sizes a
    power of two, each as likely) at random offsets, and one truncate in
    eight (shrinking by up to 8 MiB, or back to 256 MiB); per-op times."""
    blk = random.Random(0).randbytes(1 << 20)
    rng = random.Random(seed)
    times = []
    for _ in range(n):
        if rng.randrange(8):
            size = 4096 << rng.randrange(9)
            times.append(timed(os.pwritev, fd, [blk[:size]],
                               rng.randrange(0, SIZE - size)))
        elif rng.randrange(2):
            times.append(timed(os.ftruncate, fd,
                               SIZE - rng.randrange(4096, 8 << 20)))
        else:
            times.append(timed(os.ftruncate, fd, SIZE))
    return times


def first_write(d):
    """The first write into the file system, timed alone: on phxfs it
    pays the process's set-up (a transfer engine and its staging), which
    MEASURE.md has reported apart from the figures."""
    f = os.path.join(d, "bench-warmup")
    fd = os.open(f, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        return [timed(os.pwrite, fd, bytes(1 << 20), 0)]
    finally:
        os.close(fd)
        os.unlink(f)


def measure(d, n):
    f = os.path.join(d, "bench-modify")
    blk = random.Random(0).randbytes(1 << 20)
    rng = random.Random(1)
    out = {"first write (set-up)": first_write(d)}
    fd = os.open(f, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, SIZE)
        out["mixed, sparse"] = mixed(fd, 4 * n, 2)
        os.ftruncate(fd, 0)
        os.ftruncate(fd, SIZE)
        for size in (4096, 65536, 1 << 20):
            out["sparse write %dK" % (size >> 10)] = [
                timed(os.pwritev, fd, [blk[:size]],
                      rng.randrange(0, SIZE - size)) for _ in range(n)]
        for off in range(0, SIZE, 1 << 20):
            os.pwrite(fd, blk, off)
        os.fsync(fd)
        for size in (4096, 65536, 1 << 20):
            out["write %dK" % (size >> 10)] = [
                timed(os.pwritev, fd, [blk[:size]],
                      rng.randrange(0, SIZE - size)) for _ in range(n)]
        shrink, grow = [], []
        for _ in range(n):
            shrink.append(timed(os.ftruncate, fd,
                                SIZE - rng.randrange(4096, 8 << 20)))
            grow.append(timed(os.ftruncate, fd, SIZE))
        out["truncate shrink"], out["truncate grow"] = shrink, grow
        os.ftruncate(fd, SIZE)
        for off in range(0, SIZE, 1 << 20):
            os.pwrite(fd, blk, off)
        out["mixed, full"] = mixed(fd, 4 * n, 3)
    finally:
        os.close(fd)
        os.unlink(f)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--modes", default="direct,io_uring,writeback")
    ap.add_argument("--keep-uring", action="store_true")
    args = ap.parse_args()
    uring_was = None
    try:
        with open(URING) as f:
            uring_was = f.read().strip()
        if not args.keep_uring and uring_was != "Y" and os.geteuid() == 0:
            with open(URING, "w") as f:
                f.write("1")
    except OSError:
        pass
    try:
        return run(args)
    finally:
        if uring_was is not None and not args.keep_uring:
            try:
                with open(URING, "w") as f:
                    f.write("1" if uring_was == "Y" else "0")
            except OSError:
                pass


def uring_state():
    try:
        with open(URING) as f:
            return "on" if f.read().strip() == "Y" else "off"
    except OSError:
        return "not in this kernel"


def run(args):
    shm = tempfile.mkdtemp(prefix="phx-modify-", dir="/dev/shm")
    mp = tempfile.mkdtemp(prefix="phx-modify-mnt-")
    env = dict(os.environ, PHX_DEVICE="sim", PHX_SIM_DEVICES="1")
    phx = os.path.join(args.build, "phx")
    try:
        base = measure(shm, args.n)
        print("FUSE over io_uring (fuse.enable_uring): %s" % uring_state())
        print("%-11s %-18s %10s %10s %10s %8s" %
              ("mode", "operation", "median ms", "mean ms", "max ms",
               "x tmpfs"))
        for k, v in base.items():
            print("%-11s %-18s %10.3f %10.3f %10.3f %8s" %
                  ("tmpfs", k, statistics.median(v) * 1e3,
                   statistics.mean(v) * 1e3, max(v) * 1e3, "1.0"))
        for mode in args.modes.split(","):
            opts = mode if mode in ("writeback", "io_uring") else ""
            cmd = [phx, "mount"] + (["-o", opts] if opts else []) + [mp]
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            try:
                dev = os.path.join(mp, sorted(os.listdir(mp))[0])
                got = measure(dev, args.n)
            finally:
                subprocess.run([phx, "umount", mp], env=env, check=True)
            for k, v in got.items():
                print("%-11s %-18s %10.3f %10.3f %10.3f %8.1f" %
                      (mode, k, statistics.median(v) * 1e3,
                       statistics.mean(v) * 1e3, max(v) * 1e3,
                       statistics.mean(v) / statistics.mean(base[k])))
    finally:
        os.rmdir(shm)
        os.rmdir(mp)
    print("(ratios of means, so of totals for the mixes; a sparse write "
          "backs the granules it touches)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
