"""The simulated-device modes of bench-safetensors.py, which need no GPU:
--overhead (what a load_safetensors call costs beyond moving its bytes),
--save-sim (save_safetensors against phx_write) and --first-sim (the
first load of a fresh process against its later ones); and the timing
and file helpers the script shares with them."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 8 << 20


def read_through_cache(files: list[str]) -> None:
    """Read every byte through the page cache, so the files are hot."""
    buf = bytearray(CHUNK)
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            while os.readv(fd, [buf]) > 0:
                pass
        finally:
            os.close(fd)


def rate(nbytes: int, times: list[float]) -> tuple[float, float, float]:
    rates = sorted(nbytes / t / 1e9 for t in times)
    return statistics.median(rates), rates[0], rates[-1]


# ---- per-call cost on the simulated device ----------------------------------

def overhead(args) -> int:
    """Time load_safetensors against phx_read of the same bytes on sim,
    hot, for a single 128 MiB tensor and for many small tensors: what a
    call costs beyond moving the bytes."""
    import tempfile

    import numpy as np
    import safetensors
    from safetensors.numpy import save_file

    import phxio

    dev = phxio.Device("sim0")
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        cases = {
            "one 128 MiB tensor": {"w": rng.integers(
                0, 255, 128 << 20, dtype=np.uint8)},
            "1000 tensors of 4 KiB": {f"t{i}": rng.integers(
                0, 255, 4096, dtype=np.uint8) for i in range(1000)},
            "8 shards of 16 MiB": None,
        }
        print(f"per-call cost on sim0, hot, median of {max(args.repeat, 9)}"
              f" (safetensors {safetensors.__version__})")
        print("| case | phx_read (ms) | alloc + phx_read (ms) | "
              "load_safetensors (ms) | vs alloc + phx_read | "
              "extra per call (ms) |")
        print("|---|---|---|---|---|---|")
        for label, tensors in cases.items():
            if tensors is None:
                files = []
                for s in range(8):
                    f = os.path.join(d, f"s{s}.safetensors")
                    save_file({f"s{s}.w": rng.integers(
                        0, 255, 16 << 20, dtype=np.uint8)}, f)
                    files.append(f)
            else:
                files = [os.path.join(d, "m.safetensors")]
                save_file(tensors, files[0])
            read_through_cache(files)
            bufs = [dev.alloc(os.path.getsize(f)) for f in files]
            n = max(args.repeat, 9)

            def raw():
                for f, b in zip(files, bufs):
                    phxio.read_into(f, b)

            def alloc_raw():
                for f in files:
                    b = dev.alloc(os.path.getsize(f))
                    phxio.read_into(f, b)
                    b.free()

            def load():
                return phxio.load_safetensors(
                    files if len(files) > 1 else files[0], dev,
                    framework="phxio")

            t_raw = median_time(raw, n)
            t_alloc = median_time(alloc_raw, n)
            t_load = median_time(load, n)
            ntens = len(load())
            print(f"| {label} | {t_raw * 1e3:.2f} | {t_alloc * 1e3:.2f} | "
                  f"{t_load * 1e3:.2f} | {t_load / t_alloc:.2f}x | "
                  f"{(t_load - t_alloc) * 1e3:.2f} ({ntens} tensors) |")
            for f in files:
                os.unlink(f)
    return 0


def save_sim(args) -> int:
    """Time save_safetensors against phx_write of the same bytes (one
    device buffer) on sim0, runs interleaved, each up to fsync with the
    page cache flushed before: what saving costs beyond moving bytes."""
    import numpy as np

    import phxio

    size = args.size_gib if "--size-gib" in sys.argv else 1.0
    dev = phxio.Device("sim0")
    rng = np.random.default_rng(3)
    # A Llama-like state dict (hidden 2048, bfloat16 stored as 2-byte
    # ints): embeddings, per layer 4 attention, 3 MLP and 2 norm tensors,
    # plus a few odd-sized ones whose ends fall off 4 KiB boundaries.
    hid, inter, vocab = 2048, 5632, 32000
    shapes = {"model.embed_tokens.weight": (vocab, hid)}
    layer = [("self_attn.q_proj", (hid, hid)), ("self_attn.k_proj",
             (hid, hid)), ("self_attn.v_proj", (hid, hid)),
             ("self_attn.o_proj", (hid, hid)), ("mlp.gate_proj",
             (inter, hid)), ("mlp.up_proj", (inter, hid)),
             ("mlp.down_proj", (hid, inter)), ("input_layernorm", (hid,)),
             ("post_attention_layernorm", (hid,))]
    per_layer = sum(int(np.prod(s)) * 2 for _, s in layer)
    for i in range(max(1, int((size * (1 << 30) - vocab * hid * 4) //
                              per_layer))):
        for name, shape in layer:
            shapes[f"model.layers.{i}.{name}.weight"] = shape
        shapes[f"model.layers.{i}.odd.bias"] = (1000 + i,)
    shapes["lm_head.weight"] = (vocab, hid)
    # Random bytes, never zeros: one file holds every tensor in a row;
    # each tensor gets its own allocation (as a framework's would), and
    # the peer one buffer of all of them.
    src = Path(args.dir) / "phx-bench-save-src.bin"
    offs = {}
    with open(src, "wb") as f:
        for name, shape in shapes.items():
            offs[name] = f.tell()
            f.write(rng.integers(-30000, 30000, shape,
                                 dtype=np.int16).tobytes())
    total = src.stat().st_size
    flat = dev.alloc(total)
    phxio.read_into(src, flat)
    sd = {}
    for name, shape in shapes.items():
        arr = phxio.DeviceArray(dev.alloc(int(np.prod(shape)) * 2), 0,
                                  phxio.DTYPES["I16"], shape)
        phxio.read_into(src, arr, offs[name])
        sd[name] = arr
    src.unlink()
    out = Path(args.dir) / "phx-bench-save-sim"
    out.mkdir(exist_ok=True)
    target = out / "model.safetensors"
    raw = out / "raw.bin"

    def ours():
        phxio.save_safetensors(sd, target)
        fsync(target)

    def theirs():
        phxio.write_from(raw, flat)
        fsync(raw)

    def theirs_sized():
        write_sized(raw, flat, total)

    n = max(args.repeat, 5)
    times: dict = {"phx_write": [], "phx_write, file sized first": [],
                   "save_safetensors": []}
    for _ in range(n + 1):  # the first round warms up
        for name, fn, f in (("phx_write", theirs, raw),
                            ("phx_write, file sized first", theirs_sized,
                             raw),
                            ("save_safetensors", ours, target)):
            if f.exists():
                f.unlink()
            os.sync()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    back = phxio.load_safetensors(target, dev, framework="numpy")
    bad = [k for k, a in sd.items() if back[k].tobytes() !=
           a.numpy().tobytes()]
    shutil.rmtree(out, ignore_errors=True)
    print(f"save on sim0: {len(sd)} tensors, {total / 1e9:.2f} GB, median "
          f"of {n} interleaved runs, up to fsync; read back: "
          f"{'identical' if not bad else 'DIFFERS in ' + bad[0]}")
    print("| writer | GB/s | min-max | vs phx_write |")
    print("|---|---|---|---|")
    lim = rate(total, times["phx_write"][1:])[0]
    for name, t in times.items():
        med, lo, hi = rate(total, t[1:])
        print(f"| {name} | {med:.2f} | {lo:.2f}-{hi:.2f} | "
              f"{med / lim:.2f}x |")
    return 1 if bad else 0


def first_sim(args) -> int:
    """The first load_safetensors of a fresh process against the later
    loads of the same files in that process, on sim0, hot: what a
    process's first call builds that the later ones reuse.  One file of
    mixed tensors and the same bytes as four shards with an index; each
    process opens the device inside its first timed load, as a loader
    does, after importing phxio.  Then the same with the device opened
    and its set-up done before the first load: what is left of the first
    load's cost once set-up is out of it."""
    import numpy as np
    from safetensors.numpy import save_file

    size = args.size_gib if "--size-gib" in sys.argv else 0.5
    rng = np.random.default_rng(5)
    d = Path(args.dir) / "phx-bench-first"
    shutil.rmtree(d, ignore_errors=True)
    (d / "sharded").mkdir(parents=True)
    kinds = [np.float32, np.float16, np.int8, np.int64, np.uint8]
    tensors, total, i = {}, 0, 0
    while total < size * (1 << 30):
        kind = kinds[i % len(kinds)]
        n = int(rng.integers(4 << 20, 48 << 20)) // 4096 * 4096
        tensors[f"model.layers.{i}.weight"] = rng.integers(
            0, 100, n // np.dtype(kind).itemsize).astype(kind)
        total += n
        i += 1
    single = d / "model.safetensors"
    save_file(tensors, str(single))
    names = list(tensors)
    wmap = {}
    for s in range(4):
        part = names[s::4]
        f = f"model-{s + 1:05d}-of-00004.safetensors"
        save_file({k: tensors[k] for k in part}, str(d / "sharded" / f))
        wmap.update({k: f for k in part})
    with open(d / "sharded" / "model.safetensors.index.json", "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
                  fh)
    del tensors
    n = max(args.repeat, 5)
    print(f"first load on sim0 (simulated device: CPU-side figures only), "
          f"{total / 1e9:.2f} GB hot, {n} fresh processes; later = median "
          "of the 3 loads after the first in the same process")
    print("| case | first (ms) | later (ms) | first / later speed |")
    print("|---|---|---|---|")
    summary = []
    for case, src, how in (("single", single, "plain"),
                           ("sharded", d / "sharded", "plain"),
                           ("single, set-up apart", single, "apart"),
                           ("sharded, set-up apart", d / "sharded", "apart")):
        files = [str(single)] if src == single else sorted(
            str(p) for p in (d / "sharded").glob("*.safetensors"))
        firsts, laters = [], []
        for _ in range(n):
            read_through_cache(files)
            r = subprocess.run([sys.executable, sys.argv[0],
                                "--first-child", f"{how}:{src}"],
                               capture_output=True, text=True, timeout=300)
            line = [ln for ln in r.stdout.splitlines()
                    if ln.startswith("{")]
            if r.returncode or not line:
                print(f"child failed: {r.stderr.strip()[-2000:]}")
                return 1
            o = json.loads(line[-1])
            firsts.append(o["first"])
            laters.append(o["later"])
            print(f"| {case} | {o['first'] * 1e3:.1f} | "
                  f"{o['later'] * 1e3:.1f} | "
                  f"{o['later'] / o['first']:.2f}x |", flush=True)
        f, later = statistics.median(firsts), statistics.median(laters)
        summary.append(f"| {case}, median | {f * 1e3:.1f} | "
                       f"{later * 1e3:.1f} | {later / f:.2f}x |")
    print("\n".join(summary))
    shutil.rmtree(d, ignore_errors=True)
    return 0


def first_child(arg: str) -> int:
    """One fresh process of first_sim: the first load, then three more;
    "apart:" before the path: the device opened and its set-up done
    (phx_device_prepare) before the first load."""
    import phxio

    how, src = arg.split(":", 1)
    if how == "apart":
        phxio.device("sim0").prepare()
    t0 = time.perf_counter()
    sd = phxio.load_safetensors(src, "sim0", framework="phxio")
    first = time.perf_counter() - t0
    del sd
    later = []
    for _ in range(3):
        t0 = time.perf_counter()
        sd = phxio.load_safetensors(src, "sim0", framework="phxio")
        later.append(time.perf_counter() - t0)
        del sd
    print(json.dumps({"first": first, "later": statistics.median(later)}))
    return 0


def write_sized(path, buf, total: int) -> None:
    """phx_write into a file truncated to its final size first (as
    save_safetensors does), up to fsync."""
    import phxio

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total)
        phxio.write_from(fd, buf, size=total)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def median_time(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
