#!/usr/bin/env python3
"""Where a process's first load_safetensors spends what its later loads
do not: fresh processes, each timing its first load of a hot checkpoint
and then its later ones, after doing (untimed) a part of the set-up
beforehand.

    bench-first-load.py [--device cuda:0] [--size-gib 4] [--repeat 3]
                        [--profile] [FILE_OR_DIR...]

Without files, a 4 GiB single file and a 5-file sharded checkpoint with
its index are written under /var/tmp first (safetensors' own writer).
What each process does before its first, timed, load:

    none     nothing (torch's context only): what a user's process pays
    open     phxio.device(...) opened
    prepare  opened, and its set-up waited for (Device.prepare())
    alloc    prepared, and device memory the size of the checkpoint
             allocated and given back

--profile also runs one process under cProfile and prints what its first
and its second load spent, by function.  Ratios only; nothing asserts a
time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_safetensors_sim import read_through_cache

STEPS = ("none", "open", "prepare", "alloc")


def write_cases(size_gib: float) -> list[str]:
    import torch
    from safetensors.torch import save_file

    out = []
    single = f"/var/tmp/phx-first-{size_gib:g}g.safetensors"
    if not os.path.exists(single):
        n = int(size_gib * (1 << 30)) // 2 // (64 << 20)
        save_file({f"t{i}": torch.randn(64 << 20, dtype=torch.bfloat16)
                   for i in range(n)}, single)
    out.append(single)
    shards = "/var/tmp/phx-first-sharded"
    index = os.path.join(shards, "model.safetensors.index.json")
    if not os.path.exists(index):
        os.makedirs(shards, exist_ok=True)
        weight_map = {}
        for s in range(5):
            name = f"model-{s + 1:05d}-of-00005.safetensors"
            t = {f"layer{s}.w{i}": torch.randn(4096, 4096,
                                               dtype=torch.bfloat16)
                 for i in range(9)}
            save_file(t, os.path.join(shards, name))
            weight_map.update({k: name for k in t})
        with open(index, "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    out.append(index)
    return out


def files_of(path: str) -> list[str]:
    """The safetensors files of @path: itself, or its index's folder's."""
    if not path.endswith(".json"):
        return [path]
    d = os.path.dirname(path)
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.endswith(".safetensors"))


def nbytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in files_of(path))


def child(path: str, step: str, device: str, repeat: int,
          profile: bool) -> dict:
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.init()
        torch.empty(1, device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    import phxio

    res: dict = {}
    t0 = time.perf_counter()
    if step != "none":
        dev = phxio.device(device)
        if step in ("prepare", "alloc"):
            dev.prepare()
        if step == "alloc":
            dev.alloc(nbytes(path)).free()
    res["before_s"] = time.perf_counter() - t0

    def timed() -> float:
        sync()
        a = time.perf_counter()
        out = phxio.load_safetensors(path, device=device)
        sync()
        dt = time.perf_counter() - a
        del out
        return dt

    if profile:
        import cProfile
        import io
        import pstats

        for which in ("first", "second"):
            pr = cProfile.Profile()
            pr.enable()
            dt = timed()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
            print(f"== {which} load, {dt * 1e3:.1f} ms, by own time",
                  file=sys.stderr)
            print(s.getvalue(), file=sys.stderr)
        return res
    res["first_s"] = timed()
    # what the device's set-up took and what the first load waited for it
    dev = phxio.device(device)
    dev.prepare()
    st = dev.engine_stats()
    res["setup_s"] = st["setup_ns"] / 1e9
    res["waited_s"] = st["setup_wait_ns"] / 1e9
    res["later_s"] = [timed() for _ in range(repeat)]
    return res


def run_child(path: str, step: str, args, profile: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", path, "--step", step,
           "--device", args.device, "--repeat", str(args.repeat)]
    if profile:
        cmd.append("--profile")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if profile:
        print(p.stderr[-6000:])
        return {}
    if p.returncode:
        raise SystemExit(f"{path} ({step}): the child failed:\n"
                         f"{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--size-gib", type=float, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3,
                    help="fresh processes per row")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="which rows, of " + ",".join(STEPS))
    ap.add_argument("--child")
    ap.add_argument("--step", choices=STEPS, default="none")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.step, args.device,
                               args.repeat, args.profile)))
        return 0
    paths = args.paths or write_cases(args.size_gib)
    for path in paths:
        read_through_cache(files_of(path))  # hot
        n = nbytes(path)
        print(f"== {path}: {n / 1e9:.2f} GB, {args.runs} processes a row "
              "(medians)")
        print("| before the first load | time before (ms) | first (ms) "
              "| later (ms) | first GB/s | first vs later "
              "| set-up ran (ms) | first load waited for it (ms) |")
        print("|---|---|---|---|---|---|---|---|")
        for step in args.steps.split(","):
            if step not in STEPS:
                raise SystemExit(f"--steps: no step {step!r}")
            rs = [run_child(path, step, args) for _ in range(args.runs)]
            before = statistics.median(r["before_s"] for r in rs)
            first = statistics.median(r["first_s"] for r in rs)
            later = statistics.median(x for r in rs for x in r["later_s"])
            setup = statistics.median(r["setup_s"] for r in rs)
            waited = statistics.median(r["waited_s"] for r in rs)
            print(f"| {step} | {before * 1e3:.1f} | {first * 1e3:.1f} | "
                  f"{later * 1e3:.1f} | {n / first / 1e9:.2f} | "
                  f"{later / first:.2f}x | {setup * 1e3:.1f} | "
                  f"{waited * 1e3:.1f} |", flush=True)
        if args.profile:
            run_child(path, "none", args, profile=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
