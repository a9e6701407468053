#!/usr/bin/env python3
"""Benchmark phxio's safetensors loader and saver against the loaders a
user would pick instead, on one GPU.

Cases: a single file of random bytes in mixed dtypes (--size-gib, default
4) and a checkpoint written by transformers' save_pretrained (Llama-style,
about 1.6 GB in shards of at most 400 MB).  Loaders, each in its own
process (so its peak host RSS is its own): safetensors.torch.load_file,
phxio.load_safetensors (one worker, the default, and four; and one
whose first load comes after the device's set-up, to tell the first
load's set-up from the rest),
fastsafetensors (GDS on and off), runai-model-streamer's
SafetensorsStreamer and instanttensor's safe_open;
the ones not installed are reported and skipped.  Limits measured in the
same run: phx_read of the same files (hot) and the raw disk read into host
memory (cold: best of O_DIRECT with 8 threads and one buffered reader).

Hot runs read every file through the page cache right before the timed
load (loaders that use O_DIRECT leave files cold); cold runs drop the
page cache first (needs root).  The first load of each process is timed
apart; then --repeat runs of each, median and spread.  After timing,
every tensor of every loader is compared bit for bit with
safetensors.torch.load_file's.  Saving: phxio.save_safetensors against
safetensors.torch.save_file and phx_write of the same bytes (into a new
file, and into one sized first as the save sizes its files), each
followed by fsync, the files read back and compared; the writers run in
rounds, one run of each per round (a child each), so that the disk's
drift falls on all of them alike.  Prints one table
of ratios.  --save-sim compares the save with phx_write on the simulated
device, without a GPU, and --first-sim a fresh process's first load with
its later ones there (they and --overhead are in bench_safetensors_sim.py).

    python3 scripts/bench-safetensors.py --dir /var/tmp
    python3 scripts/bench-safetensors.py --cases sharded,save --repeat 3
    python3 scripts/bench-safetensors.py --overhead   # sim device, no GPU
    python3 scripts/bench-safetensors.py --save-sim   # sim device, no GPU
    python3 scripts/bench-safetensors.py --first-sim  # sim device, no GPU
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_safetensors_sim import (first_child, first_sim, fsync, overhead,
                                   rate, read_through_cache, save_sim,
                                   write_sized)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

LOADERS = ["safetensors", "phxio", "phxio-setup-apart", "phxio-4threads",
           "fastsafetensors-nogds",
           "fastsafetensors-gds", "runai-streamer", "instanttensor"]
SAVERS = ["phxio.save_safetensors", "safetensors.save_file", "phx_write",
          "phx_write-sized"]


# ---- checkpoints ------------------------------------------------------------

def make_single(path: Path, gib: float) -> None:
    """Random bytes in layer-sized tensors of mixed dtypes."""
    import torch
    from safetensors.torch import save_file

    kinds = [torch.bfloat16, torch.float16, torch.float32, torch.int8,
             torch.int64, torch.uint8]
    g = torch.Generator().manual_seed(7)
    tensors, total, i = {}, 0, 0
    target = int(gib * (1 << 30))
    while total < target:
        kind = kinds[i % len(kinds)]
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


def llama_config():
    from transformers import LlamaConfig

    # about 800 M parameters: 1.6 GB in bfloat16
    return LlamaConfig(hidden_size=2048, intermediate_size=5632,
                       num_hidden_layers=13, num_attention_heads=16,
                       num_key_value_heads=16, vocab_size=32000,
                       tie_word_embeddings=False)


def make_sharded(d: Path) -> None:
    """A transformers checkpoint: save_pretrained, shards <= 400 MB."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(llama_config()).to(torch.bfloat16)
    model.save_pretrained(str(d), max_shard_size="400MB")


def case_files(case: str, args) -> list[str]:
    """The files of @case, written first if missing ([] if that failed)."""
    base = Path(args.dir)
    if case == "single":
        path = base / f"phx-bench-{args.size_gib:g}g.safetensors"
        if not path.exists():
            print(f"writing {path} ({args.size_gib:g} GiB)...", flush=True)
            r = child(["--make", "single", str(path)], args)
            if "error" in r:
                print(f"  cannot write it: {r['error']}", flush=True)
        return [str(path)] if path.exists() else []
    d = base / "phx-bench-llama"
    if not (d / "model.safetensors.index.json").exists():
        print(f"writing a transformers checkpoint to {d}...", flush=True)
        r = child(["--make", "sharded", str(d)], args)
        if "error" in r:
            print(f"  cannot write it: {r['error']}", flush=True)
    return sorted(str(p) for p in d.glob("*.safetensors"))


# ---- page cache -------------------------------------------------------------

def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def prepare(files: list[str], cold: bool) -> None:
    if cold:
        drop_caches()
    else:
        read_through_cache(files)


def raw_direct(files: list[str], threads: int = 8) -> None:
    """O_DIRECT reads of all files into host memory, @threads readers."""
    work = [(f, off) for f in files
            for off in range(0, os.path.getsize(f), 4 << 20)]
    lock = threading.Lock()

    def run() -> None:
        mem = mmap.mmap(-1, 4 << 20)
        fds: dict = {}
        while True:
            with lock:
                if not work:
                    break
                f, off = work.pop()
            if f not in fds:
                fds[f] = os.open(f, os.O_RDONLY | os.O_DIRECT)
            os.preadv(fds[f], [mem], off)
        for fd in fds.values():
            os.close(fd)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


# ---- loaders (in a child process) -------------------------------------------

def loader(name: str, files: list[str], dev: str):
    """A function that loads @files onto @dev and returns a dict."""
    if name == "safetensors":
        from safetensors.torch import load_file

        def load():
            out = {}
            for f in files:
                out.update(load_file(f, device=dev))
            return out
        return load
    if name.startswith("phxio"):
        import phxio

        index = Path(files[0]).parent / "model.safetensors.index.json"
        src = index if len(files) > 1 and index.exists() else files
        threads = 4 if name == "phxio-4threads" else None
        return lambda: phxio.load_safetensors(src, device=dev,
                                                threads=threads)
    if name.startswith("fastsafetensors"):
        from fastsafetensors import fastsafe_open

        nogds = name.endswith("nogds")

        def load():
            with fastsafe_open(filenames=list(files), nogds=nogds,
                               device=dev) as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        return load
    if name == "runai-streamer":
        from runai_model_streamer import SafetensorsStreamer

        def load():
            with SafetensorsStreamer() as s:
                s.stream_files(list(files), device=dev)
                return {k: (t if t.is_cuda else t.to(dev))
                        for k, t in s.get_tensors()}
        return load
    if name == "instanttensor":
        from instanttensor import safe_open

        def load():
            with safe_open(list(files), framework="pt",
                           device=int(dev.split(":")[1])) as f:
                return dict(f.tensors())
        return load
    raise ValueError(f"unknown loader {name}")


def same(ref: dict, got: dict) -> str:
    """'' when @got equals @ref bit for bit, else what differs."""
    import torch

    if set(ref) != set(got):
        return f"names differ ({len(ref)} vs {len(got)})"
    for k, r in ref.items():
        g = got[k]
        if g.dtype != r.dtype or tuple(g.shape) != tuple(r.shape):
            return f"{k}: {g.dtype}{list(g.shape)} vs {r.dtype}{list(r.shape)}"
        if str(g.device) != str(r.device):
            return f"{k}: on {g.device}, not {r.device}"
        if r.numel() and not torch.equal(g.reshape(-1).view(torch.uint8),
                                         r.reshape(-1).view(torch.uint8)):
            return f"{k}: bytes differ"
    return ""


def timed(fn, files: list[str], cold: bool) -> float:
    import torch

    prepare(files, cold)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del out
    torch.cuda.empty_cache()
    return dt


def child_load(name: str, files: list[str], args) -> dict:
    import torch

    torch.cuda.init()
    torch.empty(1, device=args.device)
    res: dict = {"name": name}
    if name == "versions":
        return versions(args)
    if name in ("phx_read", "raw"):
        return child_limit(name, files, args)
    try:
        fn = loader(name, files, args.device)
    except ImportError as exc:
        return {"name": name, "skip": f"not installed ({exc})"}
    if name == "phxio-setup-apart":
        # the first load with the device's set-up (staging, engine)
        # done before it: what of the first load's cost is set-up
        import phxio

        phxio.device(args.device).prepare()
    res["first"] = timed(fn, files, False)
    for case in ("cold", "hot"):
        res[case] = [timed(fn, files, case == "cold")
                     for _ in range(args.repeat)]
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    from safetensors.torch import load_file

    got = fn()
    ref = {}
    for f in files:
        ref.update(load_file(f, device=args.device))
    res["diff"] = same(ref, got)
    res["tensors"] = len(ref)
    return res


def versions(args) -> dict:
    import importlib.metadata as md

    import torch

    import phxio

    out = {"gpu": torch.cuda.get_device_name(args.device),
           "torch": torch.__version__, "libphoenix": phxio.version()}
    for pkg in ("safetensors", "transformers", "fastsafetensors",
                "runai-model-streamer", "instanttensor"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def child_limit(name: str, files: list[str], args) -> dict:
    """phx_read (each file whole into one buffer) or the raw disk read."""
    import torch

    res: dict = {"name": name}
    if name == "phx_read":
        import phxio

        dev = phxio.Device(args.device)
        bufs = [dev.alloc(os.path.getsize(f)) for f in files]

        def fn():
            for f, b in zip(files, bufs):
                phxio.read_into(f, b)
        for case in ("cold", "hot"):
            res[case] = [timed(fn, files, case == "cold")
                         for _ in range(args.repeat)]
    else:
        for how, fn in (("direct", lambda: raw_direct(files)),
                        ("buffered", lambda: read_through_cache(files))):
            res[f"cold-{how}"] = [timed(fn, files, True)
                                  for _ in range(args.repeat)]
        res["cold"] = min((res["cold-direct"], res["cold-buffered"]),
                          key=statistics.median)
        res["hot"] = [timed(lambda: read_through_cache(files), files, False)
                      for _ in range(args.repeat)]
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    del torch
    return res


def child_save(name: str, files: list[str], args) -> dict:
    """Time one writer on the tensors of @files, loaded on the GPU."""
    import torch
    from safetensors.torch import load_file, save_file

    import phxio

    sd = {}
    for f in files:
        sd.update(load_file(f, device=args.device))
    total = sum(t.numel() * t.element_size() for t in sd.values())
    out = Path(args.dir) / "phx-bench-save"
    out.mkdir(exist_ok=True)
    target = out / "model.safetensors"
    buf = None
    if name.startswith("phx_write"):
        # the same bytes, so that nothing is faster for being zeros
        buf = phxio.Device(args.device).alloc(total)
        flat = torch.from_dlpack(buf)
        at = 0
        for t in sd.values():
            n = t.numel() * t.element_size()
            flat[at:at + n].copy_(t.reshape(-1).view(torch.uint8))
            at += n
        torch.cuda.synchronize()
        del flat

    def fn():
        if name == "phxio.save_safetensors":
            phxio.save_safetensors(sd, target)
        elif name == "safetensors.save_file":
            save_file(sd, str(target))
        elif name == "phx_write-sized":
            write_sized(target, buf, total)
            return
        else:
            phxio.write_from(target, buf)
        fsync(target)

    res: dict = {"name": name, "bytes": total}
    fn()
    res["hot"] = []
    for _ in range(args.repeat):
        target.unlink()
        os.sync()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        res["hot"].append(time.perf_counter() - t0)
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    if not name.startswith("phx_write"):
        back = load_file(str(target), device=args.device)
        res["diff"] = same(sd, back)
    target.unlink()
    return res


# ---- the parent: one child per measurement ----------------------------------

def child(extra: list[str], args, repeat: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--dir", args.dir, "--repeat",
           str(repeat or args.repeat), "--device", args.device, "--size-gib",
           str(args.size_gib)] + extra
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=args.child_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.child_timeout} s"}
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp", help="where files go")
    ap.add_argument("--size-gib", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--cases", default="single,sharded,save")
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--child-timeout", type=int, default=300,
                    help="seconds one measurement may take")
    ap.add_argument("--overhead", action="store_true",
                    help="per-call cost on the simulated device")
    ap.add_argument("--save-sim", action="store_true",
                    help="save_safetensors against phx_write on the "
                    "simulated device (--size-gib, default 1 here)")
    ap.add_argument("--first-sim", action="store_true",
                    help="a fresh process's first load against its later "
                    "ones on the simulated device (--size-gib, default 0.5 "
                    "here)")
    ap.add_argument("--first-child", help=argparse.SUPPRESS)
    ap.add_argument("--make", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.overhead:
        return overhead(args)
    if args.save_sim:
        return save_sim(args)
    if args.first_sim:
        return first_sim(args)
    if args.first_child:
        return first_child(args.first_child)
    if args.make:
        (make_single(Path(args.make[1]), args.size_gib)
         if args.make[0] == "single" else make_sharded(Path(args.make[1])))
        return 0
    if args.child:
        kind, name = args.child
        fn = child_save if kind == "save" else child_load
        print(json.dumps(fn(name, args.files, args)))
        return 0

    rows = []
    cases = args.cases.split(",")
    versions = child(["--child", "load", "versions", "--files"], args)
    for case in [c for c in cases if c in ("single", "sharded")]:
        files = case_files(case, args)
        if not files:
            print(f"== {case}: no checkpoint could be written; skipped",
                  flush=True)
            continue
        nbytes = sum(os.path.getsize(f) for f in files)
        print(f"== {case}: {len(files)} files, {nbytes / 1e9:.2f} GB",
              flush=True)
        results = {}
        for name in ["phx_read", "raw"] + args.loaders.split(","):
            r = child(["--child", "load", name, "--files"] + files, args)
            results[name] = r
            print(f"  {name:24} {summary(r, nbytes)}", flush=True)
        rows.append((case, nbytes, results))
    if "save" in cases and case_files("sharded", args):
        files = case_files("sharded", args)
        results = {}
        # in rounds, one run of each writer per round: the disk's rate
        # drifts more between minutes than the writers differ
        for _ in range(args.repeat):
            for name in SAVERS:
                r = child(["--child", "save", name, "--files"] + files, args,
                          repeat=1)
                results[name] = merge_runs(results.get(name), r)
        for name in SAVERS:
            r = results[name]
            print(f"  save {name:24} {summary(r, r.get('bytes', 0))}",
                  flush=True)
        rows.append(("save", None, results))
    table(rows, args, versions)
    if not args.keep:
        base = Path(args.dir)
        for p in base.glob("phx-bench-*g.safetensors"):
            p.unlink()
        for d in ("phx-bench-llama", "phx-bench-save"):
            shutil.rmtree(base / d, ignore_errors=True)
    return 0


def merge_runs(acc, r: dict) -> dict:
    """One writer's rounds in one result: the times of all, the largest
    RSS, the first error or difference."""
    if acc is None:
        return r
    if "error" in acc or "error" in r:
        return acc if "error" in acc else r
    acc["hot"] = acc.get("hot", []) + r.get("hot", [])
    acc["rss"] = max(acc.get("rss", 0), r.get("rss", 0))
    if r.get("diff") and not acc.get("diff"):
        acc["diff"] = r["diff"]
    return acc


def summary(r: dict, nbytes: int) -> str:
    if "error" in r or "skip" in r:
        return r.get("error") or r["skip"]
    parts = []
    for case in ("hot", "cold"):
        if r.get(case):
            parts.append(f"{case} {rate(nbytes, r[case])[0]:6.2f} GB/s")
    if "rss" in r:
        parts.append(f"RSS {r['rss'] / (1 << 20):.0f} MiB")
    if r.get("diff"):
        parts.append(f"DIFFERS: {r['diff']}")
    return ", ".join(parts)


def table(rows, args, versions) -> None:
    print()
    print(f"device {args.device}, {args.repeat} runs per figure (median, "
          f"min-max), {time.strftime('%Y-%m-%d')}")
    print(", ".join(f"{k} {v}" for k, v in versions.items()))
    print("| case | peer | GB/s | min-max | vs limit | vs phxio | "
          "peak RSS MiB | bit for bit |")
    print("|---|---|---|---|---|---|---|---|")
    for case, nbytes, results in rows:
        if case == "save":
            limit_name, ours_name, kinds = ("phx_write",
                                            "phxio.save_safetensors",
                                            ("hot",))
        else:
            limit_name, ours_name, kinds = None, "phxio", ("hot", "cold")
        for kind in kinds:
            lim = results.get(limit_name or ("phx_read" if kind == "hot"
                                             else "raw"), {})
            ours = results.get(ours_name, {})
            for name, r in results.items():
                n = nbytes or r.get("bytes", 0)
                label = f"{case} {kind}" if case != "save" else "save"
                if not r.get(kind):
                    why = r.get("error") or r.get("skip") or "no result"
                    print(f"| {label} | {name} | - | - | - | - | - | {why} |")
                    continue
                med, lo, hi = rate(n, r[kind])
                vs_lim = med / rate(n, lim[kind])[0] if lim.get(kind) \
                    else 0
                vs_us = med / rate(n, ours[kind])[0] if ours.get(kind) \
                    else 0
                ok = "-" if "diff" not in r else \
                    ("yes" if not r["diff"] else f"NO: {r['diff']}")
                print(f"| {label} | {name} | {med:.2f} | {lo:.2f}-{hi:.2f} "
                      f"| {vs_lim:.2f}x | {vs_us:.2f}x | "
                      f"{r.get('rss', 0) / (1 << 20):.0f} | {ok} |")
    for case, nbytes, results in rows:
        for name, how in (("phxio", ""),
                          ("phxio-setup-apart", ", the device opened and "
                           "its set-up done before it")):
            r = results.get(name, {})
            if case == "save" or not r.get("first"):
                continue
            later = statistics.median(r["hot"]) if r.get("hot") else 0
            vs = f", {later / r['first']:.2f}x the later hot loads" \
                if later else ""
            print(f"phxio first load in its process ({case}{how}): "
                  f"{nbytes / r['first'] / 1e9:.2f} GB/s{vs}")
    print("raw cold = best of O_DIRECT (8 threads) and one buffered "
          "reader; limits: hot phx_read, cold raw, save phx_write")


if __name__ == "__main__":
    sys.exit(main())
