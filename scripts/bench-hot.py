#!/usr/bin/env python3
"""Hot file -> GPU: phxio.read_into and load_safetensors of one cached
safetensors file against the pinned host-to-device copy rate, in fresh
processes under each set of settings given (environment assignments).

    bench-hot.py [--file F] [--size-gib 2] [--repeat 7] [--pieces 8]
                 [SETTINGS...]
    bench-hot.py PHX_STAGING_SIZE=128M "PHX_QUEUE_DEPTH=64 PHX_CHUNK_SIZE=1M"

The file (F, default /var/tmp/phx-hot-<size>g.safetensors) is written
once with torch's bf16 tensors of 128 MiB, then read into the page cache.
Each figure is the median of @repeat calls after one untimed call; a
read_into lands in one torch tensor (whole, and in --pieces calls of
consecutive parts: what a call costs beyond its bytes), a load makes
fresh tensors.  Ratios
are against the pinned copy rate measured first in the same run (1 GiB
torch copies from pinned memory).  Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from pinned import pinned_rate


def child(path: str, repeat: int, pieces: int) -> dict:
    import torch
    import phxio

    n = os.path.getsize(path)
    t = torch.empty(n, dtype=torch.uint8, device="cuda")

    def timed(fn) -> float:
        fn()
        out = []
        for _ in range(repeat):
            torch.cuda.synchronize()
            a = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - a)
        return n / 1e9 / statistics.median(out)

    res = {"read_into": timed(lambda: phxio.read_into(path, t))}
    # the same bytes in @pieces calls: what a call costs beyond its bytes
    cut = -(-n // pieces)

    def in_pieces() -> None:
        for o in range(0, n, cut):
            phxio.read_into(path, t[o:o + cut], file_offset=o)
    res["pieces"] = timed(in_pieces)
    del t
    res["load_safetensors"] = timed(
        lambda: phxio.load_safetensors(path, device="cuda:0"))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file")
    ap.add_argument("--size-gib", type=float, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--pieces", type=int, default=8,
                    help="read_into of the file in this many calls too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("settings", nargs="*")
    args = ap.parse_args()
    path = args.file or f"/var/tmp/phx-hot-{args.size_gib:g}g.safetensors"
    if args.child:
        print(json.dumps(child(path, args.repeat, args.pieces)))
        return 0
    for s in args.settings:
        for kv in s.split():
            if "=" not in kv or not kv.split("=")[0].startswith("PHX_"):
                ap.error(f"{kv!r}: give settings as PHX_NAME=VALUE")
    if not os.path.exists(path):
        import torch
        from safetensors.torch import save_file

        n = max(1, int(args.size_gib * 16))
        save_file({f"t{i}": torch.randn(64 << 20, dtype=torch.bfloat16)
                   for i in range(n)}, path)
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass
    pin = pinned_rate()
    print(f"{path}: {os.path.getsize(path) / 1e9:.2f} GB, pinned "
          f"host-to-device {pin:.2f} GB/s; median of {args.repeat}")
    print(f"| settings | read_into GB/s | vs pinned | in {args.pieces} "
          "calls GB/s | vs one call | load_safetensors GB/s | vs pinned "
          "| vs read_into |")
    print("|---|---|---|---|---|---|---|---|")
    for s in [""] + args.settings:
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in s.split())
        r = subprocess.run([sys.executable, __file__, "--child", "--file",
                            path, "--repeat", str(args.repeat),
                            "--pieces", str(args.pieces)], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            err = (r.stderr.strip().splitlines() or ["?"])[-1]
            print(f"| {s or 'defaults'} | failed: {err} | | | | | | |")
            continue
        got = json.loads(r.stdout.strip().splitlines()[-1])
        rd, pc = got["read_into"], got["pieces"]
        ld = got["load_safetensors"]
        print(f"| {s or 'defaults'} | {rd:.2f} | {rd / pin:.2f}x | "
              f"{pc:.2f} | {pc / rd:.2f}x | {ld:.2f} | {ld / pin:.2f}x | "
              f"{ld / rd:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
