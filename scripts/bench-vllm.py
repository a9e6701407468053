#!/usr/bin/env python3
"""vLLM's load formats on one checkpoint, and phxio on staged files.

    bench-vllm.py write-ckpt DIR        a random-init Llama, ~1.64 B
                                        parameters, bf16, 4 shards + index,
                                        written by transformers
    bench-vllm.py compare DIR [--formats a,b] [--modes hot,cold]
                      [--repeat N] [--warmup FORMAT|none]
                                        each format in a fresh process (the
                                        first load of its process), hot
                                        (after a buffered read) and cold
                                        (after drop_caches); vLLM's own
                                        "Loading weights took" and "Model
                                        loading took" figures (the median
                                        of N rounds), ratios to the
                                        default loader, and the tokens of
                                        every run compared with the first.
                                        An untimed vLLM process (load
                                        format "dummy") runs first, so
                                        that no timed one is the first
                                        vLLM process on the machine; round
                                        r starts the list of formats at
                                        its r-th entry (the order is
                                        printed).  A format may carry its
                                        model_loader_extra_config:
                                        'phoenix{"direct":false}'
    bench-vllm.py staged DIR --mount M  the checkpoint copied onto phxfs
                                        (phx cp -r), then loaded from there
                                        (after the same warm-up; --formats
                                        and --repeat as for compare)
    bench-vllm.py staged-file --mount M [--size 4G]
                                        load_safetensors of one staged file:
                                        views, device-to-device copy, the
                                        same file from the page cache
    bench-vllm.py first-call DIR        load_safetensors(DIR) in fresh
                                        processes: the first and a later
                                        call, without and after
                                        prepare() (the vLLM loader's set-up
                                        beside model construction)
    bench-vllm.py streams [--size 1G]   read_into: synchronous, on a reused
                                        phxio.Stream, on a torch stream
                                        (one, reused), on a new torch
                                        stream per call, on a raw CUstream

Figures are printed as tables; nothing here asserts a time.  The token
comparison fails the run (exit 1) when any run differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

PROMPTS = [[1, 306, 4658, 278, 6593, 310, 2834], [1, 450, 4996, 17354],
           [1, 13, 29871, 29896, 29889]]
LOADING = re.compile(r"Loading weights took ([\d.]+) seconds")
PREPARED = re.compile(r"prepared in ([\d.]+) s .* waited ([\d.]+) s .* "
                      r"built (\d+) engines")
DIRECT = re.compile(r"direct: (\d+) tensors .* (\d+) tensors through "
                    r"the model's weight loaders, \d+ it left out; the pass "
                    r"took ([\d.]+) s, ([\d.]+) s of it waiting")
MODEL = re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and "
                   r"([\d.]+) seconds")


def write_ckpt(d: Path) -> None:
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=8,
        max_position_embeddings=2048, tie_word_embeddings=False,
        torch_dtype="bfloat16")
    t0 = time.perf_counter()
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(d, max_shard_size="1GB", safe_serialization=True)
    size = sum(f.stat().st_size for f in d.glob("*.safetensors"))
    print(f"wrote {d}: {n / 1e9:.2f} B parameters, "
          f"{len(list(d.glob('*.safetensors')))} shards, {size / 1e9:.2f} GB "
          f"in {time.perf_counter() - t0:.1f} s")


def _spec(label: str) -> tuple[str, str]:
    """(load format, extra config JSON or "") of 'NAME' or 'NAME{...}'."""
    name, brace, rest = label.partition("{")
    return name, (brace + rest if brace else "")


def _split(formats: str) -> list[str]:
    """The comma list of --formats; commas inside {...} stay."""
    out, depth, cur = [], 0, ""
    for ch in formats:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur] if cur else out


def child(model: str, fmt: str, extra: str) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kw = {"model_loader_extra_config": json.loads(extra)} if extra else {}
    t0 = time.perf_counter()
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="bfloat16",
              enforce_eager=True, max_model_len=256, max_num_seqs=4,
              gpu_memory_utilization=float(os.environ.get(
                  "PHX_VLLM_GPU_UTIL", "0.3")),
              seed=0, load_format=fmt, **kw)
    built = time.perf_counter() - t0
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
                        SamplingParams(temperature=0.0, max_tokens=16,
                                       ignore_eos=True, detokenize=False))
    print("RESULT " + json.dumps({
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "engine_s": built}), flush=True)


def _make(mode: str, d: Path) -> None:
    files = sorted(d.glob("*.safetensors"))
    if mode == "cold":
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    elif mode == "hot":
        for f in files:
            with open(f, "rb") as fh:
                while fh.read(16 << 20):
                    pass


def _one(model: Path, label: str, mode: str, limit: int) -> dict:
    fmt, extra = _spec(label)
    _make(mode, model)
    env = dict(os.environ, VLLM_USE_FLASHINFER_SAMPLER="0",
               VLLM_ENABLE_V1_MULTIPROCESSING="0")
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, __file__, "child", str(model),
                            fmt, extra], capture_output=True, text=True,
                           env=env, timeout=limit)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + \
            (e.stderr or b"").decode(errors="replace")
        rc = "timeout"
    res = {"format": label, "mode": mode, "rc": rc,
           "wall_s": time.perf_counter() - t0}
    m = LOADING.search(out)
    res["weights_s"] = float(m.group(1)) if m else None
    m = MODEL.search(out)
    res["model_s"] = float(m.group(2)) if m else None
    res["model_gib"] = float(m.group(1)) if m else None
    m = PREPARED.search(out)
    if m:
        res["prepared_s"], res["waited_s"] = float(m.group(1)), \
            float(m.group(2))
        res["load_built_engines"] = int(m.group(3))
    m = DIRECT.search(out)
    if m:
        res["direct_tensors"], res["loader_tensors"] = int(m.group(1)), \
            int(m.group(2))
        res["pass_s"], res["read_wait_s"] = float(m.group(3)), \
            float(m.group(4))
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")),
                None)
    res["tokens"] = json.loads(line[7:])["tokens"] if line else None
    if rc != 0 or line is None:
        res["tail"] = out[-3000:]
    print(f"  {label:28s} {mode:6s} rc={rc} weights={res['weights_s']} "
          f"model={res['model_s']} wall={res['wall_s']:.1f}s"
          + (f" prepared={res['prepared_s']} waited={res['waited_s']} "
             f"load_built={res['load_built_engines']}"
             if "prepared_s" in res else "")
          + (f" direct={res['direct_tensors']} "
             f"loaders={res['loader_tensors']} "
             f"pass={res['pass_s']} read_wait={res['read_wait_s']}"
             if "direct_tensors" in res
             else ""), flush=True)
    if "tail" in res:
        print(res["tail"], flush=True)
    return res


def _med(rs: list[dict], key: str) -> Optional[float]:
    vals = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _span(rs: list[dict], key: str) -> str:
    vals = [r[key] for r in rs if r.get(key) is not None]
    if len(vals) < 2:
        return ""
    return f" ({min(vals):.2f}–{max(vals):.2f})"


def _table(results: list[dict]) -> int:
    """One row per checkpoint and format: medians over its runs, ratios
    to the default loader's medians in the same mode."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["mode"], r["format"]), []).append(r)
    ref_any = next((r for r in results if r["tokens"]), None)
    print("\n| checkpoint | load format | runs | Loading weights took (s) "
          "| vs safetensors | Model loading took (s) | vs safetensors | "
          "tokens |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    for (mode, label), rs in groups.items():
        b = groups.get((mode, "safetensors")) or groups.get(
            ("hot", "safetensors"))
        w, m = _med(rs, "weights_s"), _med(rs, "model_s")
        bw = _med(b, "weights_s") if b else None
        bm = _med(b, "model_s") if b else None
        wr = f"{w / bw:.2f}×" if w and bw else "–"
        mr = f"{m / bm:.2f}×" if m and bm else "–"
        same = all(r["tokens"] is not None and ref_any is not None and
                   r["tokens"] == ref_any["tokens"] for r in rs)
        bad += sum(r["tokens"] is None or ref_any is None or
                   r["tokens"] != ref_any["tokens"] for r in rs)
        ws = f"{w:.3f}{_span(rs, 'weights_s')}" if w is not None else "–"
        ms = f"{m:.2f}{_span(rs, 'model_s')}" if m is not None else "–"
        print(f"| {mode} | `{label}` | {len(rs)} | {ws} | {wr} | {ms} | "
              f"{mr} | {'identical' if same else 'DIFFERENT or none'} |")
    print(f"\ntokens: {'identical in all runs' if not bad else f'{bad} runs differ or failed'}")
    return 1 if bad else 0


def _warmup(args: argparse.Namespace) -> None:
    """One untimed vLLM process, so that no timed one pays for being the
    first on the machine (cold caches of vLLM's and torch's own files)."""
    if args.warmup == "none":
        return
    t0 = time.perf_counter()
    env = dict(os.environ, VLLM_USE_FLASHINFER_SAMPLER="0",
               VLLM_ENABLE_V1_MULTIPROCESSING="0")
    fmt, extra = _spec(args.warmup)
    r = subprocess.run([sys.executable, __file__, "child", str(args.dir),
                        fmt, extra], capture_output=True, text=True,
                       env=env, timeout=args.limit)
    print(f"  warm-up: load format {args.warmup}, rc={r.returncode}, "
          f"{time.perf_counter() - t0:.1f} s (not timed)", flush=True)


def _rounds(formats: list[str], repeat: int) -> list[list[str]]:
    """Round r starts at the r-th format: each takes each place in turn."""
    n = len(formats)
    return [formats[r % n:] + formats[:r % n] for r in range(repeat)]


def compare(args: argparse.Namespace) -> int:
    formats = _split(args.formats)
    _warmup(args)
    results = []
    for mode in args.modes.split(","):
        for r, order in enumerate(_rounds(formats, args.repeat)):
            print(f"  {mode} round {r + 1}: {', '.join(order)}",
                  flush=True)
            for pos, label in enumerate(order):
                res = _one(args.dir, label, mode, args.limit)
                res["round"], res["position"] = r + 1, pos + 1
                results.append(res)
    Path(args.json).write_text(json.dumps(results)) if args.json else None
    return _table(results)


def staged(args: argparse.Namespace) -> int:
    dst = Path(args.mount) / args.dir.name
    phx = Path(args.phx)
    t0 = time.perf_counter()
    if not dst.exists():
        subprocess.run([str(phx), "cp", "-r", str(args.dir),
                        str(args.mount) + "/"], check=True)
    size = sum(f.stat().st_size for f in dst.glob("*.safetensors"))
    print(f"staged {dst}: {size / 1e9:.2f} GB in "
          f"{time.perf_counter() - t0:.1f} s")
    _warmup(args)
    results = []
    prev = []
    if args.json and Path(args.json).exists():
        prev = json.loads(Path(args.json).read_text())
    for r, order in enumerate(_rounds(_split(args.formats), args.repeat)):
        print(f"  staged round {r + 1}: {', '.join(order)}", flush=True)
        for pos, label in enumerate(order):
            res = _one(dst, label, "staged", args.limit)
            res["round"], res["position"] = r + 1, pos + 1
            results.append(res)
    return _table(prev + results)


def _bench(fn, n: int = 5) -> tuple[float, float, list[float]]:
    first = None
    times = []
    for i in range(n + 1):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        else:
            times.append(dt)
    return first, statistics.median(times), times


def staged_file(args: argparse.Namespace) -> int:
    import torch
    from safetensors.torch import save_file

    import phxio

    size = _parse(args.size)
    src = Path(args.scratch) / "staged4g.safetensors"
    if not src.exists():
        n = size // 4 // 4
        g = torch.Generator(device="cuda").manual_seed(0)
        sd = {f"t{i}": torch.randint(-2**31, 2**31 - 1, (n,),
                                     dtype=torch.int32, device="cuda",
                                     generator=g).cpu() for i in range(4)}
        save_file(sd, str(src))
        del sd
    dst = Path(args.mount) / src.name
    if not dst.exists():
        subprocess.run([args.phx, "cp", str(src), str(args.mount) + "/"],
                       check=True)
    nbytes = dst.stat().st_size
    with open(src, "rb") as fh:
        while fh.read(64 << 20):
            pass
    ref = phxio.load_safetensors(src, device="cuda:0")
    rows = []

    def sync(fn):
        def run():
            out = fn()
            torch.cuda.synchronize()
            return out
        return run

    peers = [
        ("views of the staged file", sync(lambda: phxio.load_safetensors(
            dst, device="cuda:0"))),
        ("device-to-device copy of it", sync(lambda: phxio.load_safetensors(
            dst, device="cuda:0", staged="copy"))),
        ("read through the mount", sync(lambda: phxio.load_safetensors(
            dst, device="cuda:0", staged="read"))),
        ("the same file from the page cache", sync(
            lambda: phxio.load_safetensors(src, device="cuda:0"))),
        ("open_file alone", lambda: phxio.open_file(dst).free()),
    ]
    for name, fn in peers:
        t0 = time.perf_counter()
        got = fn()
        first = time.perf_counter() - t0
        if isinstance(got, dict):
            assert all(torch.equal(got[k], ref[k]) for k in ref), name
        del got
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        rows.append((name, first, statistics.median(times), min(times),
                     max(times)))
    base = rows[0][2]
    print(f"\nload_safetensors of a staged {nbytes / 2**30:.2f} GiB file "
          "(the first call of each, then the median of 5; the page-cache "
          "row after the others)")
    print("| how | first (ms) | median (ms) | min–max (ms) | GB/s | vs views |")
    print("|---|---|---|---|---|---|")
    for name, first, med, lo, hi in rows:
        print(f"| {name} | {first * 1e3:.1f} | {med * 1e3:.1f} | "
              f"{lo * 1e3:.1f}–{hi * 1e3:.1f} | {nbytes / med / 1e9:.1f} | "
              f"{med / base:.2f}× |")
    return 0


def first_child(d: str, prepared: bool) -> None:
    import torch

    import phxio
    from phxio import _pipeline

    gpu = torch.cuda.is_available()  # else the simulated device
    if gpu:
        torch.empty(1, device="cuda")  # as in vLLM: torch's context is up
    out = {}
    t0 = time.perf_counter()
    dev = phxio.device("cuda:0" if gpu else "sim0")
    out["open_s"] = time.perf_counter() - t0
    if prepared:
        t0 = time.perf_counter()
        _pipeline.prepare(dev)
        out["prepare_s"] = time.perf_counter() - t0
    built = dev.engine_stats()["built"]
    for key in ("first_s", "second_s"):
        t0 = time.perf_counter()
        sd = phxio.load_safetensors(d, device=dev)
        if gpu:
            torch.cuda.synchronize()
        out[key] = time.perf_counter() - t0
        del sd
    out["load_built_engines"] = dev.engine_stats()["built"] - built
    print("RESULT " + json.dumps(out), flush=True)


def first_call(args: argparse.Namespace) -> int:
    _make("hot", args.dir)
    print("| case | device open | prepare() | first load | later load "
          "| engines the loads built |\n|---|---|---|---|---|---|")
    for case in ("plain", "prepared", "plain", "prepared"):
        r = subprocess.run([sys.executable, __file__, "first-child",
                            str(args.dir), case], capture_output=True,
                           text=True, timeout=args.limit)
        line = next((ln for ln in r.stdout.splitlines()
                     if ln.startswith("RESULT ")), None)
        if r.returncode or line is None:
            print(f"first-call {case}: rc={r.returncode}\n"
                  f"{(r.stdout + r.stderr)[-3000:]}")
            return 1
        o = json.loads(line[7:])
        prep = f"{o['prepare_s'] * 1e3:.1f} ms" if "prepare_s" in o else "-"
        print(f"| {case} | {o['open_s'] * 1e3:.1f} ms | {prep} | "
              f"{o['first_s'] * 1e3:.1f} ms | {o['second_s'] * 1e3:.1f} ms "
              f"| {o['load_built_engines']} |", flush=True)
    return 0


def _parse(s: str) -> int:
    units = {"K": 10, "M": 20, "G": 30}
    return int(s[:-1]) << units[s[-1].upper()] if s[-1].upper() in units \
        else int(s)


def streams(args: argparse.Namespace) -> int:
    import torch

    import phxio

    size = _parse(args.size)
    f = Path(args.scratch) / "stream1g.bin"
    if not f.exists() or f.stat().st_size != size:
        with open(f, "wb") as fh:
            for _ in range(size >> 26):
                fh.write(os.urandom(1 << 26))
    with open(f, "rb") as fh:
        while fh.read(64 << 20):
            pass
    t = torch.empty(size, dtype=torch.uint8, device="cuda")
    dev = phxio.device("cuda:0")
    ps = dev.stream()
    ts = torch.cuda.Stream()
    raw = torch.cuda.Stream()
    cases = [
        ("synchronous", lambda: phxio.read_into(f, t)),
        ("phxio.Stream, reused", lambda: phxio.read_into(
            f, t, stream=ps).wait()),
        ("torch.cuda.Stream, reused", lambda: phxio.read_into(
            f, t, stream=ts).wait()),
        ("torch.cuda.current_stream()", lambda: phxio.read_into(
            f, t, stream=torch.cuda.current_stream()).wait()),
        ("raw CUstream int", lambda: phxio.read_into(
            f, t, stream=raw.cuda_stream).wait()),
        ("a new torch.cuda.Stream per call", lambda: phxio.read_into(
            f, t, stream=torch.cuda.Stream()).wait()),
    ]
    rows = []
    for name, fn in cases:
        fn()
        _, med, times = _bench(fn, 7)
        rows.append((name, med, min(times), max(times)))
    base = rows[0][1]
    print(f"\nread_into of a hot {size / 2**30:.2f} GiB file into a torch "
          "tensor (median of 7 after a warm-up)")
    print("| stream | GB/s | min–max GB/s | vs synchronous |")
    print("|---|---|---|---|")
    for name, med, lo, hi in rows:
        print(f"| {name} | {size / med / 1e9:.1f} | {size / hi / 1e9:.1f}–"
              f"{size / lo / 1e9:.1f} | {base / med:.2f}× |")
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "first-child":
        first_child(sys.argv[2], sys.argv[3] == "prepared")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["write-ckpt", "compare", "staged",
                                     "staged-file", "streams", "first-call"])
    ap.add_argument("dir", nargs="?", type=Path)
    ap.add_argument("--formats",
                    default="phoenix,safetensors,fastsafetensors,"
                    "runai_streamer")
    ap.add_argument("--modes", default="hot,cold")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warmup", default="dummy")
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("--json", default="")
    ap.add_argument("--mount", default="/mnt/phx/gpu0")
    ap.add_argument("--phx", default="phx")
    ap.add_argument("--size", default="4G")
    ap.add_argument("--scratch", default="/var/tmp")
    args = ap.parse_args()
    if args.what == "write-ckpt":
        write_ckpt(args.dir)
        return 0
    return {"compare": compare, "staged": staged,
            "staged-file": staged_file, "streams": streams,
            "first-call": first_call}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
