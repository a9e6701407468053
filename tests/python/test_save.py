"""save_safetensors over an earlier checkpoint and when it fails: what is
left in the directory afterwards."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import phxio
import phxio._save
from conftest import needs_host_views
from test_safetensors import reference


def layers(n: int, fill: int = 0) -> dict:
    """@n tensors of 128 KiB each."""
    return {f"layer.{i}.w": np.full(128 * 256, fill + i, np.float32)
            for i in range(n)}


def same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, arr in want.items():
        assert got[name].tobytes() == arr.tobytes(), name


@needs_host_views
def test_unsharded_save_over_sharded_removes_the_old_index(scratch):
    phxio.save_safetensors(layers(4), scratch, max_shard_size="300KB")
    assert len(os.listdir(scratch)) == 3
    new = {"x": np.arange(10, dtype=np.int16)}
    assert phxio.save_safetensors(new, scratch) == \
        [str(scratch / "model.safetensors")]
    assert os.listdir(scratch) == ["model.safetensors"]
    same(phxio.load_safetensors(scratch, framework="numpy"), new)


@needs_host_views
@pytest.mark.parametrize("before,after", [(4, 2), (2, 4), (3, 3)])
def test_reshard_leaves_no_orphan_shards(scratch, before, after):
    phxio.save_safetensors(layers(2 * before), scratch,
                           max_shard_size=2 * 128 * 1024)
    new = layers(2 * after, fill=100)
    files = phxio.save_safetensors(new, scratch,
                                   max_shard_size=2 * 128 * 1024)
    assert len(files) == after + 1
    assert sorted(os.listdir(scratch)) == sorted(
        os.path.basename(f) for f in files)
    same(phxio.load_safetensors(scratch, framework="numpy"), new)
    # safetensors' own parser agrees with the new index, shard by shard
    doc = json.loads((scratch / "model.safetensors.index.json").read_text())
    for f in files[:-1]:
        for name, (_, _, data) in reference(scratch / f).items():
            assert doc["weight_map"][name] == os.path.basename(f)
            assert data == new[name].tobytes()


@needs_host_views
def test_sharded_save_over_one_file_and_other_files_kept(scratch):
    phxio.save_safetensors(layers(1), scratch)
    (scratch / "notes.txt").write_text("mine")
    (scratch / "other.safetensors").write_bytes(
        (scratch / "model.safetensors").read_bytes())
    (scratch / "model-1-of-2.safetensors").write_text("not a shard name")
    new = layers(4, fill=7)
    files = phxio.save_safetensors(new, scratch, max_shard_size="300KB")
    assert sorted(os.listdir(scratch)) == sorted(
        [os.path.basename(f) for f in files] +
        ["notes.txt", "other.safetensors", "model-1-of-2.safetensors"])
    same(phxio.load_safetensors(scratch / "model.safetensors.index.json",
                                framework="numpy"), new)


@needs_host_views
def test_failed_index_write_leaves_nothing(scratch, monkeypatch):
    first = layers(2)
    phxio.save_safetensors(first, scratch, max_shard_size="200KB")
    before = {f: (scratch / f).read_bytes() for f in os.listdir(scratch)}
    names = []

    def full(tmp, doc):
        names.append(tmp)
        with open(tmp, "w") as f:
            f.write("{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)

    monkeypatch.setattr(phxio._save, "_write_index", full)
    with pytest.raises(OSError) as e:
        phxio.save_safetensors(layers(6, fill=50), scratch,
                               max_shard_size="300KB")
    assert e.value.errno == errno.ENOSPC
    # every temporary file is gone, the earlier checkpoint is untouched
    assert {f: (scratch / f).read_bytes() for f in os.listdir(scratch)} \
        == before
    # temporary names are the process's own and differ between saves
    assert f".tmp{os.getpid()}." in names[0]
    with pytest.raises(OSError):
        phxio.save_safetensors(layers(6), scratch, max_shard_size="300KB")
    assert names[1] != names[0]
    monkeypatch.undo()
    same(phxio.load_safetensors(scratch, framework="numpy"), first)


@needs_host_views
def test_what_load_returns_saves_back(scratch, rng):
    """BF16 and F8 arrays come from the NumPy loader as ml_dtypes arrays
    (which NumPy exports no DLPack for), else as raw integers."""
    from test_safetensors import write_checkpoint

    kinds = {"b": ("bfloat16", (3, 4)), "f8": ("float8_e4m3fn", (5,)),
             "f": ("float32", (2, 2)), "e": ("float8_e5m2", ())}
    write_checkpoint(scratch / "in.safetensors", rng, kinds)
    got = phxio.load_safetensors(scratch / "in.safetensors",
                                 framework="numpy")
    phxio.save_safetensors(got, scratch / "out.safetensors")
    ref, out = (reference(scratch / f"{n}.safetensors")
                for n in ("in", "out"))
    assert {k: v[1:] for k, v in out.items()} == \
        {k: v[1:] for k, v in ref.items()}
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        return  # saved as same-width integers: the bytes are the same
    assert out == ref


@needs_host_views
def test_scalars_and_read_only_arrays_save(scratch):
    src = {"s": np.float32(3), "i": np.int64(-5),
           "r": np.frombuffer(b"abcd", np.uint8)}
    phxio.save_safetensors(src, scratch / "m.safetensors")
    ref = reference(scratch / "m.safetensors")
    assert ref["s"] == ("F32", (), np.float32(3).tobytes())
    assert ref["i"] == ("I64", (), np.int64(-5).tobytes())
    assert ref["r"] == ("U8", (4,), b"abcd")
    assert phxio.write_from(scratch / "b", b"bytes") == 5
    assert (scratch / "b").read_bytes() == b"bytes"


@needs_host_views
@pytest.mark.parametrize("make", [lambda a: a[:, ::2], lambda a: a.T])
def test_non_contiguous_names_the_tensor(scratch, make):
    bad = make(np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="tensor 'odd': .*contiguous") as e:
        phxio.save_safetensors({"ok": np.zeros(3), "odd": bad},
                               scratch / "m.safetensors")
    assert "\n" not in str(e.value)
    assert os.listdir(scratch) == []
