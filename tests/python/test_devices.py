"""Devices, buffers, errors and DLPack export."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import phxio
from phxio import _dlpack
from conftest import PREFIX, needs_host_views

KIND = phxio.default_kind()[0]
NAME0 = PREFIX.get(KIND, "sim") + "0"


def test_version_and_devices():
    assert phxio.version().count(".") == 2
    kind, why = phxio.default_kind()
    assert kind in PREFIX and why
    devs = phxio.devices()
    assert devs and devs[0].name == NAME0 and devs[0].kind == kind
    assert devs[0].capacity > 0
    assert phxio.devices(kind)[0].name == NAME0


def test_device_open_close_and_names():
    with phxio.Device(NAME0) as d:
        assert d.name == NAME0 and d.kind == KIND and d.index == 0
        assert NAME0 in repr(d)
    with phxio.Device(f"{KIND}:0") as d:
        assert d.name == NAME0
    assert phxio.device(NAME0) is phxio.device(NAME0)


def test_bad_device_is_oserror_with_errno():
    bad = NAME0[:-1] + "99"
    with pytest.raises(phxio.PhoenixError) as ei:
        phxio.Device(bad)
    assert isinstance(ei.value, OSError)
    assert ei.value.errno in (errno.ENODEV, errno.EINVAL)
    assert bad in str(ei.value)


def test_out_of_memory_is_enospc(dev):
    with pytest.raises(phxio.PhoenixError) as ei:
        dev.alloc(dev.info.capacity + (1 << 30))
    assert ei.value.errno in (errno.ENOSPC, errno.EFBIG)
    assert ei.value.strerror


def test_alloc_zeroed_and_host_copy(dev, rng):
    buf = dev.alloc(1 << 20)
    assert buf.size == len(buf) == 1 << 20
    assert dev.query().used >= 1 << 20
    assert buf.to_bytes(0, 4096) == bytes(4096)
    data = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    buf.copy_from_host(data, 123)
    assert buf.to_bytes(123, 5000) == data
    buf.copy_from_host(bytearray(b"xyz"), 0)
    assert buf.to_bytes(0, 3) == b"xyz"
    buf.free()
    assert "freed" in repr(buf)
    with pytest.raises(phxio.PhoenixError):
        buf.size


def test_sparse_and_resize(dev):
    buf = dev.alloc(64 << 20, sparse=True)
    assert buf.committed < 64 << 20
    buf.copy_from_host(b"a" * 100, 10 << 20)
    assert buf.committed > 0
    buf.resize(128 << 20)
    assert buf.size == 128 << 20
    assert buf.to_bytes(10 << 20, 100) == b"a" * 100
    assert buf.to_bytes(100 << 20, 16) == bytes(16)


@needs_host_views
def test_numpy_from_dlpack_shares_memory(dev):
    buf = dev.alloc(4096)
    a = np.from_dlpack(buf)
    assert a.dtype == np.uint8 and a.shape == (4096,)
    buf.copy_from_host(b"\x07" * 10, 5)
    assert (a[5:15] == 7).all()
    a[100] = 42
    assert buf.to_bytes(100, 1) == b"\x2a"
    assert buf.__dlpack_device__() == (_dlpack.KDL_CPU, 0)
    assert not hasattr(buf, "__cuda_array_interface__")


@needs_host_views
def test_dlpack_keeps_buffer_alive(dev):
    buf = dev.alloc(8192)
    buf.copy_from_host(b"keep", 0)
    a = np.from_dlpack(buf.view("F32", (2, 1024)))
    del buf
    import gc

    gc.collect()
    assert a.view(np.uint8).ravel()[:4].tobytes() == b"keep"
    assert a.shape == (2, 1024) and a.dtype == np.float32


@needs_host_views
def test_dlpack_capsules_both_versions(dev):
    buf = dev.alloc(64)
    before = len(_dlpack._live)
    legacy = buf.__dlpack__()
    versioned = buf.__dlpack__(max_version=(1, 1))
    assert type(legacy).__name__ == "PyCapsule"
    del legacy, versioned  # unconsumed capsules release their tensor
    assert len(_dlpack._live) == before


@needs_host_views
def test_typed_views(dev, rng):
    buf = dev.alloc(1 << 16)
    ref = rng.standard_normal(100).astype(np.float64)
    buf.copy_from_host(ref.tobytes(), 800)
    v = buf.view(np.float64, (10, 10), 800)
    assert (v.numpy() == ref.reshape(10, 10)).all()
    assert (np.asarray(v) == ref.reshape(10, 10)).all()
    assert buf[800:808].numpy().tobytes() == ref[:1].tobytes()
    assert buf.view("BF16", (4,)).numpy().itemsize == 2
    with pytest.raises(ValueError):
        buf.view("F32", (1 << 16,))


def test_views_of_bad_shape_or_offset_are_refused(dev):
    """A view's shape and offset are non-negative integers: a negative
    dimension (two of them make a positive size), a float or a bool is a
    ValueError, not an array of a shape no consumer can use."""
    buf = dev.alloc(4096)
    for shape, offset in [((-1,), 0), ((-2, -4), 0), ((2.5,), 0),
                          ((True,), 0), ((4,), -4), ((4,), 1.5)]:
        with pytest.raises(ValueError, match="non-negative integers"):
            buf.view("F32", shape, offset)
    assert buf.view("F32", (0,), 4096).nbytes == 0
    assert buf.view("F32", (np.int64(2), 3)).shape == (2, 3)
    buf.free()


def test_host_copies_outside_the_buffer_are_refused(dev):
    buf = dev.alloc(64)
    buf.copy_from_host(b"abcd", 60)
    for call in (lambda: buf.copy_from_host(b"abcd", -1),
                 lambda: buf.copy_from_host(b"abcd", 61),
                 lambda: buf.to_bytes(-1),
                 lambda: buf.to_bytes(100),
                 lambda: buf.to_bytes(0, -5),
                 lambda: buf.to_bytes(8, 57)):
        with pytest.raises(ValueError, match="inside the 64-byte buffer"):
            call()
    assert buf.to_bytes(60) == b"abcd" and buf.to_bytes(64) == b""
    buf.free()


def test_bad_limits_are_refused(dev):
    """A negative limit (which wrapped to 2**64 - 1, no limit at all), one
    past 2**64 - 1, a bool or a non-integer is refused in one line naming
    it; the limit set before stays."""
    used = dev.query().used
    dev.set_limit(used + (1 << 20))
    try:
        for bad, err in ((-1, ValueError), (-(1 << 40), ValueError),
                         (1 << 64, ValueError), (True, TypeError),
                         (False, TypeError), (1.5, TypeError),
                         ("4096", TypeError), (None, TypeError)):
            with pytest.raises(err) as ei:
                dev.set_limit(bad)
            msg = str(ei.value)
            assert f"limit {bad!r}" in msg and "\n" not in msg, msg
        with pytest.raises(phxio.PhoenixError):
            dev.alloc(2 << 20)
        dev.set_limit(np.int64(used + (4 << 20)))
        dev.alloc(2 << 20).free()
    finally:
        dev.set_limit(0)


def test_stats(dev, scratch):
    s = dev.stats()
    assert set(s) >= {"staged", "buffered", "p2p", "ios", "errors"}


def _fresh(code: str, **env: str) -> subprocess.CompletedProcess:
    """@code in a fresh interpreter that imports phxio as these tests do."""
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=e,
                          capture_output=True, text=True, timeout=60)


def test_setup_stats_tell_the_first_calls_tax(tmp_path):
    """A fresh process: after prepare() the set-up's run is told and no
    transfer waited for it; a read then waits for nothing either.
    Without prepare(), whether the first read waits is the scheduler's,
    but never for longer than the read took."""
    f = tmp_path / "f"
    f.write_bytes(os.urandom(3 << 20))
    code = textwrap.dedent(f"""
        import json, time
        import phxio
        out = {{}}
        d = phxio.Device({NAME0!r})
        b = d.alloc(3 << 20)
        t0 = time.monotonic_ns()
        b.read({str(f)!r})
        out["took"] = time.monotonic_ns() - t0
        d.prepare()
        out["first"] = d.engine_stats()
        b.free(); d.close()
        d = phxio.Device({NAME0!r})
        d.prepare()
        out["prepared"] = d.engine_stats()
        b = d.alloc(3 << 20)
        b.read({str(f)!r})
        out["read"] = d.engine_stats()
        print(json.dumps(out))
    """)
    r = _fresh(code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["first"]["setup_ns"] > 0
    assert out["first"]["setup_wait_ns"] <= out["took"]
    assert out["prepared"]["setup_ns"] > 0
    assert out["prepared"]["setup_wait_ns"] == 0
    assert out["read"]["setup_wait_ns"] == 0


def test_library_nearby_loads_without_the_system_search():
    # find_library runs ldconfig or a compiler: a process's first call
    # must not pay for it when the copy phxio is pointed at (here
    # PHX_LIBRARY, else the wheel's or the build tree's) loads, nor for
    # libphxfsctl (the first staged open) when the copy beside it loads
    code = textwrap.dedent("""
        import ctypes.util
        def forbidden(name):
            raise AssertionError(f"find_library({name!r}) was called")
        ctypes.util.find_library = forbidden
        import phxio
        from phxio import _phxfs
        _phxfs.ctl()  # libphxfsctl, beside libphoenix
        print(phxio.devices()[0].name)
    """)
    r = _fresh(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_missing_library_is_one_clear_error(tmp_path):
    missing = tmp_path / "libphoenix.so"
    r = _fresh("import phxio; phxio.devices()", PHX_LIBRARY=str(missing))
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot load libphoenix" in last and str(missing) in last, last
    assert "PHX_LIBRARY" in last, last
