#!/usr/bin/env python3
"""LMCache's own "phx" backend, unmodified, driving libphxfile.so on a GPU.

Imports lmcache.v1.gpu_connector.gds_backends.phx from the released
lmcache 0.5.6 wheel and calls it with torch CUDA tensors in the order
LMCache's GDSContext does: slab open (phxFileHandleRegister, the first
native call: the driver is never opened), stream registration, staging
buffers registered in <= 16 MiB regions, chunks cut at region edges into
read_async/write_async with buf_offset inside a region, the stream
synchronized, every bytes_done and every byte checked, then buffers
deregistered twice (GDSContext.close sweeps again), the stream, the
slab and the driver released by the last of two owners.

Only what that module imports is loaded: the parent packages are given
as bare packages so their __init__ (which pulls in most of LMCache) does
not run; lmcache.logging, gds_backends._driver, ._file, .base and .phx
are the wheel's own files.

    python3 tests/python/lmcache_phx_gpu.py --build .gpu/lib

finds the wheel in .whl/ (pip download --no-deps lmcache==0.5.6),
installs it with pip --no-deps into a temporary folder (or uses an
lmcache already on PYTHONPATH), and prints PASS or the failing check.
Every step has its own time limit.  Without torch or a GPU, --check
imports as far as it can (the backend module needs torch) and stops.
"""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import glob
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULE = "lmcache.v1.gpu_connector.gds_backends.phx"
# Packages whose __init__ would import the rest of LMCache.
BARE = ["lmcache", "lmcache.v1", "lmcache.v1.gpu_connector"]
MAX_REGION = 16 << 20  # gds_context._MAX_GDS_REGION
STEP_SECONDS = 120


def say(msg: str) -> None:
    print(f"lmcache-phx: {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"lmcache-phx: FAIL: {msg}", flush=True)
    sys.exit(1)


class step:
    """A named step that dumps every thread's stack and exits if it takes
    longer than its limit (a hang fails the run instead of blocking it)."""

    def __init__(self, name: str, seconds: int = STEP_SECONDS):
        self.name, self.seconds = name, seconds

    def __enter__(self):
        say(f"{self.name} ...")
        self.t0 = time.monotonic()
        faulthandler.dump_traceback_later(self.seconds, exit=True)

    def __exit__(self, *exc):
        faulthandler.cancel_dump_traceback_later()
        if exc[0] is None:
            say(f"{self.name}: ok ({time.monotonic() - self.t0:.2f} s)")


def find_wheel(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(glob.glob(str(REPO / ".whl" / "lmcache-0.5.6-*.whl")))
    if not found:
        fail("no lmcache 0.5.6 wheel in .whl/; run `python3 -m pip download "
             "--no-deps -d .whl lmcache==0.5.6` where there is a package "
             "index and carry .whl")
    same = [w for w in found if f"-{tag}-" in w]
    return Path((same or found)[0])


def lmcache_dir(args) -> Path:
    """The folder of the lmcache package: already importable, else the
    wheel installed with --no-deps (or, where pip refuses the wheel's
    Python tag, its files unpacked as they are)."""
    spec = importlib.util.find_spec("lmcache")
    if spec and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    wheel = find_wheel(args.wheel)
    site = Path(tempfile.mkdtemp(prefix="phx-lmcache-"))
    atexit.register(shutil.rmtree, site, True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
           "--no-index", "--no-compile", "--target", str(site), str(wheel)]
    if subprocess.run(pip, capture_output=True).returncode != 0:
        say(f"pip refused {wheel.name} for this Python; unpacking it")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site, [n for n in z.namelist()
                                if n.startswith("lmcache/")])
    sys.path.insert(0, str(site))
    return site / "lmcache"


def import_backend(root: Path, torch_needed: bool):
    for name in BARE:
        mod = types.ModuleType(name)
        mod.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = mod
    if not torch_needed:
        # what imports without torch, and the rest compiled
        importlib.import_module("lmcache.logging")
        importlib.import_module(
            "lmcache.v1.gpu_connector.gds_backends._driver")
        for f in ("base", "_file", "phx"):
            path = root / "v1/gpu_connector/gds_backends" / f"{f}.py"
            compile(path.read_text(), str(path), "exec")
        return None
    return importlib.import_module(MODULE)


def loaded_phxfile() -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            if "libphxfile" in line:
                return line.split()[-1]
    return ""


def regions(t):
    """GDSContext.register_gpu_buffer's slices: views of <= 16 MiB."""
    n = t.numel()
    return [t[s:min(s + MAX_REGION, n)] for s in range(0, n, MAX_REGION)]


def cut(regs, pos: int, nbytes: int):
    """GDSContext.transfer_async: (base, offset in it, length) per region
    the chunk at @pos of the staging buffer touches."""
    base0 = regs[0].data_ptr()
    done = 0
    while done < nbytes:
        ptr = base0 + pos + done
        r = max((r for r in regs if r.data_ptr() <= ptr),
                key=lambda r: r.data_ptr())
        seg = min(nbytes - done, r.numel() - (ptr - r.data_ptr()))
        yield r.data_ptr(), ptr - r.data_ptr(), seg
        done += seg


def transfer(chunks, regs, call, raw_stream):
    """GDSContext's calls for each (length, position, slab offset) of
    @chunks: @call (read_async or write_async) once per region piece,
    in order; returns (submission, piece length) for each."""
    subs = []
    for n, pos, off in chunks:
        done = 0
        for base, boff, seg in cut(regs, pos, n):
            subs.append((call(base, seg, off + done, boff, raw_stream), seg))
            done += seg
    return subs


def replay(torch, backend, handle, fd, raw_stream, stream, rng_seed):
    """One staging-buffer lifetime on @raw_stream; returns submissions."""
    g = torch.Generator(device="cuda").manual_seed(rng_seed)
    size = 40 << 20
    src = torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda",
                        generator=g)
    dst = torch.zeros(size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    src_regs, dst_regs = regions(src), regions(dst)
    # chunk size, position in the staging buffer (some cross a region
    # edge), offset in the slab (4 KiB aligned, LMCache's alignment)
    chunks = [(16 << 10, 4096, 0), (256 << 10, MAX_REGION - (100 << 10),
                                    1 << 20),
              (4 << 20, 2 * MAX_REGION - (1 << 20) - 4096, 3 << 20),
              (16 << 20, 300 << 10, 8 << 20),
              (16 << 10, 7 << 20, 25 << 20)]
    subs = []
    with step("register the stream and the staging regions"):
        backend.register_stream(raw_stream)
        for r in src_regs + dst_regs:
            backend.register_buffer(r)
    with step("write_async, then read_async on the same stream"):
        with torch.cuda.stream(stream):
            subs += transfer(chunks, src_regs, handle.write_async,
                             raw_stream)
            subs += transfer(chunks, dst_regs, handle.read_async,
                             raw_stream)
    with step("synchronize the stream (LMCache's wait)"):
        stream.synchronize()
    with step("check every bytes_done and the data"):
        for sub, seg in subs:
            if sub.bytes_done != seg:
                fail(f"bytes_done {sub.bytes_done}, expected {seg}")
        if not any(s.buf_offset.value for s, _ in subs):
            fail("no call had buf_offset != 0")
        host = src.cpu()
        # LMCache's descriptor is O_DIRECT (aligned reads only): check the
        # slab through a buffered descriptor of the same file
        check_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            for n, pos, off in chunks:
                if not torch.equal(dst[pos:pos + n], src[pos:pos + n]):
                    fail(f"read-back of {n} bytes at slab {off} differs")
                disk = os.pread(check_fd, n, off)
                if bytes(host[pos:pos + n].numpy()) != disk:
                    fail(f"slab bytes at {off} ({n}) differ from the tensor")
        finally:
            os.close(check_fd)
    with step("deregister the regions (twice, as close sweeps) and stream"):
        for r in src_regs + dst_regs:
            backend.deregister_buffer(r)
        for r in src_regs + dst_regs:
            backend.deregister_buffer(r)
        backend.deregister_stream(raw_stream)
    return len(subs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="folder holding libphxfile.so (default: build)")
    ap.add_argument("--wheel", help="the lmcache wheel (default: .whl/)")
    ap.add_argument("--dir", default="/var/tmp/phx-lmcache",
                    help="where the slab file goes (a disk, for O_DIRECT)")
    ap.add_argument("--check", action="store_true",
                    help="import as far as possible without torch or GPU")
    args = ap.parse_args()

    build = Path(args.build).resolve()
    lib = build / "libphxfile.so"
    if not lib.is_file():
        fail(f"{lib} not found; build it with `make` "
             "(or scripts/gpu-bundle.sh for .gpu/bin)")
    # find_library("phxfile") falls back to dlopen("libphxfile.so"),
    # which searches LD_LIBRARY_PATH as the process started with it.
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if str(build) not in paths:
        env = dict(os.environ, LD_LIBRARY_PATH=":".join([str(build)] +
                                                        [p for p in paths
                                                         if p]))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    try:
        import torch
    except ImportError:
        torch = None
    gpu = torch is not None and torch.cuda.is_available()
    with step("import the backend module from the wheel"):
        root = lmcache_dir(args)
        phx = import_backend(root, torch_needed=torch is not None)
    if phx is not None:
        mods = sorted(m for m in sys.modules if m.startswith("lmcache"))
        say("lmcache modules loaded: " + ", ".join(mods))
    if not gpu:
        why = "no torch" if torch is None else "no CUDA device"
        if args.check:
            say(f"import check passed ({why}: the GPU part did not run)")
            return
        fail(f"{why}; this test needs torch with a CUDA GPU")

    os.environ.setdefault("PHX_DEVICE", "cuda")
    torch.cuda.set_device(0)
    os.makedirs(args.dir, exist_ok=True)
    owner, other = phx.Backend(), phx.Backend()
    owner.validate_environment()
    with step("open the slab (first native call: phxFileHandleRegister)"):
        handle = owner.open_slab(args.dir, 64 << 20, direct_io=True)
    where = loaded_phxfile()
    if not where or Path(where).resolve().parent != lib.resolve().parent:
        fail(f"LMCache loaded {where or 'nothing'}, not the one in {build}:"
             " another libphxfile.so is installed; remove it or set --build")
    say(f"LMCache loaded {where}")
    with step("a second owner opens its own slab"):
        handle2 = other.open_slab(os.path.join(args.dir, "second"),
                                  64 << 20, direct_io=True)
    n = replay(torch, owner, handle, handle.fd, 0,
               torch.cuda.default_stream(), 1)
    s = torch.cuda.Stream()
    n += replay(torch, owner, handle, handle.fd, s.cuda_stream, s, 2)
    with step("close the slab; the first owner releases the driver"):
        handle.close()
        owner.close_driver()
    # the other owner still holds the session: its slab still works
    n += replay(torch, other, handle2, handle2.fd, 0,
                torch.cuda.default_stream(), 3)
    with step("the last owner closes the driver (phxFileDriverClose)"):
        handle2.close()
        other.close_driver()
    say(f"PASS: {n} submissions through LMCache's own backend, every "
        "bytes_done and every byte checked")


if __name__ == "__main__":
    main()
