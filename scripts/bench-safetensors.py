#!/usr/bin/env python3
"""Benchmark phoenix.load_safetensors against safetensors.torch.load_file.

Writes a checkpoint of random bytes in mixed dtypes (default 4 GiB), checks
that both loaders return the same tensors bit for bit, then times each
loader cold (page cache dropped before every run; needs root) and hot
(file cached), median of --repeat runs after a warm-up, and prints one
table: case, loader, GB/s (median, min-max), ratio to safetensors.

    python3 scripts/bench-safetensors.py --dir /var/tmp --size-gib 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import phoenix  # noqa: E402

KINDS = [torch.bfloat16, torch.float16, torch.float32, torch.int8,
         torch.int64, torch.uint8]


def make_checkpoint(path: Path, gib: float) -> None:
    """Random bytes in layer-sized tensors of mixed dtypes."""
    g = torch.Generator().manual_seed(7)
    tensors, total, i = {}, 0, 0
    target = int(gib * (1 << 30))
    while total < target:
        kind = KINDS[i % len(KINDS)]
        size = torch.empty((), dtype=kind).element_size()
        nbytes = min(int(torch.randint(4 << 20, 96 << 20, (1,),
                                       generator=g)), target - total)
        nbytes = max(nbytes // (size * 1024), 1) * size * 1024
        raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8,
                            generator=g)
        tensors[f"model.layers.{i}.weight"] = raw.view(kind).reshape(-1,
                                                                     1024)
        total += nbytes
        i += 1
    save_file(tensors, str(path), metadata={"format": "pt"})


def drop_caches(path: Path) -> bool:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        return False


def same(a: dict, b: dict) -> None:
    assert set(a) == set(b), "different tensor names"
    for k in a:
        x, y = a[k], b[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert torch.equal(x.reshape(-1).view(torch.uint8),
                           y.reshape(-1).view(torch.uint8)), k


def timed(fn, path: Path, cold: bool) -> float:
    if cold:
        drop_caches(path)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(path)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del out
    torch.cuda.empty_cache()
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp", help="where the file goes")
    ap.add_argument("--size-gib", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--threads", default="1,4,8",
                    help="phoenix loader thread counts to time")
    ap.add_argument("--keep", action="store_true", help="keep the file")
    args = ap.parse_args()

    path = Path(args.dir) / f"phx-bench-{args.size_gib:g}g.safetensors"
    if not path.exists():
        print(f"writing {path} ({args.size_gib:g} GiB)...", flush=True)
        make_checkpoint(path, args.size_gib)
    size = path.stat().st_size
    dev = args.device

    loaders = {"safetensors.torch.load_file":
               lambda p: load_file(str(p), device=dev)}
    for n in args.threads.split(","):
        loaders[f"phoenix.load_safetensors threads={n}"] = \
            (lambda p, n=int(n): phoenix.load_safetensors(p, device=dev,
                                                          threads=n))

    print("checking that the loaders agree...", flush=True)
    ref = loaders["safetensors.torch.load_file"](path)
    for name, fn in loaders.items():
        same(ref, fn(path))
    del ref
    torch.cuda.empty_cache()

    can_drop = drop_caches(path)
    rows = []
    for case in ("cold", "hot"):
        for name, fn in loaders.items():
            if case == "hot":
                timed(fn, path, False)  # warm-up, fills the cache
            times = [timed(fn, path, case == "cold")
                     for _ in range(args.repeat)]
            rates = sorted(size / t / 1e9 for t in times)
            rows.append((case, name, statistics.median(rates), rates[0],
                         rates[-1]))
            print(f"  {case:4} {name:40} {rows[-1][2]:6.2f} GB/s",
                  flush=True)

    print()
    print(f"file {size / (1 << 30):.2f} GiB, {args.repeat} runs, device "
          f"{dev} ({torch.cuda.get_device_name(dev)}), torch "
          f"{torch.__version__}, libphoenix {phoenix.version()}")
    if not can_drop:
        print("cold: page cache dropped with posix_fadvise only (not root)")
    print(f"| case | loader | GB/s (median) | min-max | vs safetensors |")
    print("|---|---|---|---|---|")
    base = {r[0]: r[2] for r in rows if r[1].startswith("safetensors")}
    for case, name, med, lo, hi in rows:
        print(f"| {case} | {name} | {med:.2f} | {lo:.2f}-{hi:.2f} | "
              f"{med / base[case]:.2f}x |")
    if not args.keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
