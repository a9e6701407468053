"""Shared fixtures: the simulated device, scratch files of random bytes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import phxio

BUILD = Path(os.environ.get("PHX_BUILD_DIR",
                            Path(__file__).resolve().parents[2] / "build"))


def scratch_dirs() -> list[Path]:
    """Where test files go: the build's scratch folder (a real disk, so
    O_DIRECT works) and the system temporary folder (often tmpfs)."""
    dirs = []
    env = os.environ.get("PHX_TEST_DIR")
    if env:
        dirs.append(Path(env))
    dirs.append(Path(tempfile.gettempdir()))
    return dirs


@pytest.fixture(params=range(len(scratch_dirs())),
                ids=[d.name or str(d) for d in scratch_dirs()])
def scratch(request) -> Path:
    base = scratch_dirs()[request.param]
    base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="phx-py-", dir=base))
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


@pytest.fixture
def rng(request) -> np.random.Generator:
    return np.random.default_rng(abs(hash(request.node.nodeid)) % (1 << 32))


@pytest.fixture
def dev() -> phxio.Device:
    """The default device (sim0 without a GPU)."""
    d = phxio.Device()
    yield d
    d.close()


def random_file(path: Path, size: int, rng: np.random.Generator) -> bytes:
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


# Tests that look at device memory from the host (NumPy views, host
# arrays as targets) need the simulated device; the rest run on any.
needs_host_views = pytest.mark.skipif(
    phxio.default_kind()[0] == "cuda",
    reason="host views need the simulated device")

# The directory prefix of each device kind: gpu0, sim0, phx0.
PREFIX = {"cuda": "gpu", "sim": "sim", "kmod": "phx"}


def host_visible(dev: phxio.Device) -> bool:
    return dev.kind != "cuda"


def phxfs_built() -> bool:
    return (BUILD / "phx").is_file() and (BUILD / "phxfs").is_file()


@contextlib.contextmanager
def phxfs_mount(env: dict, prefix: str, check):
    """phxfs (256 MiB) mounted by the build's phx on a new temporary
    folder: yields its first device directory, unmounts after.  A failed
    mount leaves no folder; check(result) sees the mount's result first
    (and skips or fails the test where it failed)."""
    phx = BUILD / "phx"
    mp = Path(tempfile.mkdtemp(prefix=prefix))
    r = subprocess.run([str(phx), "mount", "-o", "size=256M", str(mp)],
                       env=env, capture_output=True, text=True)
    if r.returncode:
        mp.rmdir()
    check(r)
    try:
        yield mp / sorted(os.listdir(mp))[0]
    finally:
        subprocess.run([str(phx), "umount", str(mp)], env=env,
                       capture_output=True)
        mp.rmdir()
