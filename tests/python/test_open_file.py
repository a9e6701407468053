"""open_file(): a phxfs file's device memory, mapped in place."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import phxio
from conftest import phxfs_built, phxfs_mount, random_file


def _mounted(r):
    if r.returncode:
        pytest.skip(f"phx mount failed: {r.stderr.strip()}")


@pytest.fixture(scope="module")
def mount():
    if not phxfs_built():
        pytest.skip("phxfs is not built")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    env = dict(os.environ)
    env.setdefault("PHX_DEVICE", "sim")
    with phxfs_mount(env, "phx-py-mnt-", _mounted) as d:
        yield d


def test_open_file_maps_in_place(mount, rng):
    data = rng.integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    f = mount / "buf1"
    f.write_bytes(data)
    buf = phxio.open_file(f)
    assert buf.size == len(data)
    assert buf.device.name == os.getxattr(f, "user.phx.device").decode()
    assert buf.to_bytes() == data
    if buf.device.kind != "cuda":
        a = np.from_dlpack(buf)
        a[:4] = [1, 2, 3, 4]
        with open(f, "rb") as fh:
            assert fh.read(4) == bytes([1, 2, 3, 4])
    buf.free()
    f.unlink()


def test_read_into_a_phxfs_file(mount, rng, tmp_path):
    src = tmp_path / "src"
    data = random_file(src, 1 << 20, rng)
    f = mount / "dst"
    f.write_bytes(bytes(1 << 20))
    buf = phxio.open_file(f)
    assert phxio.read_into(src, buf) == 1 << 20
    assert f.read_bytes() == data
    buf.free()
    f.unlink()


def test_mapping_outlives_unlink(mount, rng):
    f = mount / "gone"
    f.write_bytes(b"still here")
    buf = phxio.open_file(f)
    f.unlink()
    assert buf.to_bytes() == b"still here"
    buf.free()


def test_not_a_phxfs_file(tmp_path):
    (tmp_path / "plain").write_bytes(b"x")
    with pytest.raises(phxio.PhoenixError) as ei:
        phxio.open_file(tmp_path / "plain")
    assert ei.value.errno in (errno.ENODATA, errno.ENOTSUP)
    assert "phxfs" in str(ei.value)


def test_status_names_are_exact_bytes(mount):
    """Names that could forge a protocol line come back whole, as bytes."""
    names = [b"aab\nDEV fake sim 999 0 0 none 0 0 0 0 evil", b"aaa\nEND",
             b"tab\there", b"esc\x1b[31m", b"bad\xff\xfe", b"back\\x41",
             "h\u00e9llo".encode(), b"sp ace"]
    for n in names:
        with open(os.path.join(os.fsencode(mount), n), "wb") as fh:
            fh.write(b"x")
    try:
        st = phxio.phxfs_status(mount)
        dev = mount.name
        assert [d["name"] for d in st["devices"]] == \
            sorted(os.listdir(mount.parent))
        got = {f["name"] for f in st["files"] if f["device"] == dev}
        want = {b"/" + dev.encode() + b"/" + n for n in names}
        assert want <= got, (want - got, got)
        assert st["mountpoint"] == str(mount.parent)
    finally:
        for n in names:
            os.unlink(os.path.join(os.fsencode(mount), n))
