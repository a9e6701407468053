"""load_safetensors on a checkpoint staged on phxfs: its device memory is
used in place (views) or copied device to device, never read back
through the mount."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import phxio
from test_open_file import mount  # noqa: F401  (the fixture)

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _checkpoint(d, rng, shards=3, per=4):
    """A sharded checkpoint with its index; the tensors by name."""
    d.mkdir()
    want, wmap = {}, {}
    for s in range(shards):
        part = {}
        for i in range(per):
            name = f"layers.{s}.w{i}"
            shape = (int(rng.integers(1, 300)), 257)
            dt = [np.float32, np.float16, np.int8, np.int64][i % 4]
            part[name] = rng.integers(-100, 100, shape).astype(dt)
            wmap[name] = f"model-{s:05d}-of-{shards:05d}.safetensors"
        safetensors_numpy.save_file(part, str(d / wmap[name]))
        want.update(part)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": wmap}))
    return want


def _reads(dev_dir) -> int:
    st = phxio.phxfs_status(dev_dir)
    return sum(d["read_requests"] for d in st["devices"])


def _host(a):
    return a.cpu().numpy() if hasattr(a, "cpu") else np.asarray(a)


def _fw(mount) -> str:
    """NumPy views on sim; torch tensors on a GPU."""
    return "numpy" if phxio.device(mount.name).kind != "cuda" else "pt"


def _same(got, want):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        a = _host(got[k])
        assert a.dtype == v.dtype and a.shape == v.shape, k
        assert a.tobytes() == v.tobytes(), k


@pytest.mark.parametrize("staged", ["view", "copy"])
def test_staged_checkpoint_is_used_in_place(mount, rng, tmp_path, staged):
    want = _checkpoint(tmp_path / "ck", rng)
    dst = mount / f"ck-{staged}"
    shutil.copytree(tmp_path / "ck", dst)
    before = _reads(mount)
    fw = _fw(mount)
    if fw == "pt":
        pytest.importorskip("torch")
    got = phxio.load_safetensors(dst, framework=fw, staged=staged)
    # the index and headers are read through the mount, the data is not
    assert _reads(mount) - before <= 2 * 4
    _same(got, want)
    # a view writes the staged file; a copy does not
    name = "layers.1.w0"
    got[name].reshape(-1)[:1] = 7
    arr = _host(phxio.load_safetensors(dst, framework=fw, staged="read",
                                       select=[name])[name])
    assert (arr.reshape(-1)[0] == 7) == (staged == "view")
    shutil.rmtree(dst)


def test_staged_file_and_index_and_read(mount, rng, tmp_path):
    want = _checkpoint(tmp_path / "ck", rng, shards=2)
    dst = mount / "ck-read"
    shutil.copytree(tmp_path / "ck", dst)
    one = sorted(dst.glob("*.safetensors"))[0]
    fw = _fw(mount)
    if fw == "pt":
        pytest.importorskip("torch")
    got = phxio.load_safetensors(one, framework=fw)
    part = {k: v for k, v in want.items() if k.startswith("layers.0.")}
    _same(got, part)
    _same(phxio.load_safetensors(dst / "model.safetensors.index.json",
                                 framework=fw, select="layers.1."),
          {k: v for k, v in want.items() if k.startswith("layers.1.")})
    before = _reads(mount)
    _same(phxio.load_safetensors(dst, framework=fw, staged="read"),
          want)
    assert _reads(mount) > before  # "read" goes through the mount
    shutil.rmtree(dst)


def test_bad_staged_option():
    with pytest.raises(ValueError, match="staged="):
        phxio.load_safetensors("x", staged="maybe")


def _open_on(path) -> list[str]:
    """This process's descriptors open on @path."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                out.append(fd)
        except OSError:
            pass
    return out


def _after_header(monkeypatch, change):
    """Run @change(fd) once a staged file's header is read, before its
    memory is mapped."""
    from phxio import _safetensors

    real = _safetensors._staged_on

    def staged_on(fd):
        change(fd)
        return real(fd)

    monkeypatch.setattr(_safetensors, "_staged_on", staged_on)


@pytest.mark.parametrize("staged", ["view", "copy"])
def test_staged_file_replaced_while_loading(mount, rng, monkeypatch,
                                            staged):
    """A file renamed over the checkpoint's name after its header was
    read: the tensors are the opened file's, as a read would give."""
    want = {"a": rng.integers(-9, 9, (64, 33)).astype(np.float32),
            "b": rng.integers(-9, 9, (40,)).astype(np.int64)}
    other = {k: np.full_like(v, 7) for k, v in want.items()}
    f, new = mount / f"swap-{staged}.safetensors", mount / "swap-new"
    safetensors_numpy.save_file(want, str(f))
    safetensors_numpy.save_file(other, str(new))
    _after_header(monkeypatch, lambda fd: os.replace(new, f))
    fw = _fw(mount)
    if fw == "pt":
        pytest.importorskip("torch")
    got = phxio.load_safetensors(f, framework=fw, staged=staged)
    _same(got, want)
    del got
    f.unlink()


@pytest.mark.parametrize("staged", ["view", "copy"])
def test_staged_file_truncated_while_loading(mount, rng, monkeypatch,
                                             staged):
    want = {"a": rng.integers(-9, 9, (64, 33)).astype(np.float32)}
    f = mount / f"short-{staged}.safetensors"
    safetensors_numpy.save_file(want, str(f))
    _after_header(monkeypatch, lambda fd: os.truncate(f, 1000))
    fw = _fw(mount)
    if fw == "pt":
        pytest.importorskip("torch")
    with pytest.raises(phxio.SafetensorsError,
                       match=f"{f.name}: truncated: the file ends at byte "
                       "1000"):
        phxio.load_safetensors(f, framework=fw, staged=staged)
    assert _open_on(f) == []
    f.unlink()


def test_a_closed_device_loads_nothing(mount, rng, tmp_path):
    """load_safetensors into a Device that was closed says so in one line,
    for a staged file as for any other, whichever way staged= takes it:
    views of a staged file were handed out on the closed device."""
    want = {"a": rng.integers(-9, 9, (16, 8)).astype(np.float32)}
    f, plain = mount / "closed.safetensors", tmp_path / "closed.safetensors"
    safetensors_numpy.save_file(want, str(f))
    safetensors_numpy.save_file(want, str(plain))
    dev = phxio.Device(mount.name)
    dev.close()
    for path in (f, plain):
        for staged in ("view", "copy", "read"):
            with pytest.raises(phxio.PhoenixError) as ei:
                phxio.load_safetensors(path, device=dev, framework="phxio",
                                       staged=staged)
            msg = str(ei.value)
            assert f"device {dev.name} is closed" in msg, msg
            assert "\n" not in msg
    f.unlink()
