#!/usr/bin/env python3
"""How much does a compute-bound kernel lose while stream-ordered
transfers run on another stream of the same GPU?

A bf16 matmul loop runs on one torch stream, alone and then while a
thread moves a hot file into device memory over and over: stream-ordered
through phxio (the stream's own copy engine copies, PHX_STREAM_WAIT=copy,
the default), stream-ordered through the copy kernel
(PHX_STREAM_WAIT=kernel), and phx_read (synchronous) for reference.  Each
case runs in a fresh process.  Prints the matmul's TFLOP/s and its ratio
to running alone (goal: >= 0.90 for stream-ordered transfers), and the
transfers' GB/s meanwhile.

Usage, as root on a GPU machine with torch:
    python3 scripts/bench-stream-interference.py --dir /var/tmp [--size-gib 2]
        [--seconds 6] [--n 8192]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

CASES = [
    ("alone", None, "matmul alone (limit)"),
    ("copy", "copy", "+ phxio stream-ordered reads (copy engine)"),
    ("kernel", "kernel", "+ phxio stream-ordered reads (copy kernel)"),
    ("sync", "copy", "+ phx_read on a thread (synchronous)"),
]


def run_case(args: argparse.Namespace) -> dict:
    import torch

    import phxio

    n = args.n
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    mm = torch.cuda.Stream()
    with torch.cuda.stream(mm):
        for _ in range(3):
            c = a @ b
    torch.cuda.synchronize()
    dst = torch.empty(os.path.getsize(args.file), dtype=torch.uint8,
                      device="cuda")
    phxio.read_into(args.file, dst)  # opens the device, pins staging
    stop = threading.Event()
    moved = [0, 0.0]

    def mover() -> None:
        xs = torch.cuda.Stream()
        t0 = time.perf_counter()
        while not stop.is_set():
            if args.case == "sync":
                got = phxio.read_into(args.file, dst)
            else:
                got = phxio.read_into(args.file, dst, stream=xs).wait()
            assert got == dst.numel(), got
            moved[0] += got
        moved[1] = time.perf_counter() - t0

    th = None
    if args.case != "alone":
        th = threading.Thread(target=mover)
        th.start()
        time.sleep(0.5)  # the transfers are under way
    flops, secs = 0.0, 0.0
    t_end = time.perf_counter() + args.seconds
    while time.perf_counter() < t_end:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(mm):
            start.record()
            for _ in range(20):
                c = a @ b
            end.record()
        end.synchronize()
        secs += start.elapsed_time(end) / 1e3
        flops += 20 * 2.0 * n ** 3
    if th:
        stop.set()
        th.join()
    del c
    return {"tflops": flops / secs / 1e12,
            "gbps": moved[0] / moved[1] / 1e9 if moved[1] else 0.0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--size-gib", type=float, default=2)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        print(json.dumps(run_case(args)))
        return 0
    if not os.path.isdir(args.dir):
        print(f"bench-stream-interference: no directory {args.dir}",
              file=sys.stderr)
        return 2
    path = os.path.join(args.dir, "phx-interference.bin")
    size = int(args.size_gib * (1 << 30))
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
    with open(path, "rb") as f:  # hot: in the page cache
        while f.read(64 << 20):
            pass
    rows = []
    try:
        for case, mode, label in CASES:
            env = dict(os.environ)
            if mode:
                env["PHX_STREAM_WAIT"] = mode
            out = subprocess.run(
                [sys.executable, __file__, "--case", case, "--file", path,
                 "--seconds", str(args.seconds), "--n", str(args.n)],
                env=env, capture_output=True, text=True, timeout=300)
            if out.returncode:
                print(f"{label}: failed\n{out.stderr.strip()[-2000:]}",
                      file=sys.stderr)
                return 1
            rows.append((label, json.loads(out.stdout.strip().splitlines()[-1])))
    finally:
        os.unlink(path)
    alone = rows[0][1]["tflops"]
    print(f"bf16 matmul {args.n}x{args.n} on one stream; hot {args.size_gib:g} "
          f"GiB file moved on another, {args.seconds:g} s per case")
    print(f"{'case':<48} {'TFLOP/s':>8} {'vs alone':>9} {'transfers GB/s':>15}")
    for label, r in rows:
        print(f"{label:<48} {r['tflops']:8.1f} {r['tflops'] / alone:8.2f}x "
              f"{r['gbps']:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
