"""Sharded checkpoints: every input form of load_safetensors, the name
filter, every error, and round trips through save_safetensors."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors

import phxio
from conftest import needs_host_views
from test_safetensors import check_same, reference, write_checkpoint

MiB = 1 << 20


def sharded(d, rng, nshards=3, per=4, big=False, index=True) -> dict:
    """Shards written by safetensors plus a transformers-style index;
    returns name -> file name."""
    wmap = {}
    kinds = ["float32", "bfloat16", "int8", "float16", "int64", "uint8"]
    for s in range(nshards):
        fname = f"model-{s + 1:05d}-of-{nshards:05d}.safetensors"
        tensors = {}
        for i in range(per):
            name = f"model.layers.{s * per + i}.w"
            shape = (256, 1024) if big else (int(rng.integers(1, 9)), 37)
            tensors[name] = (kinds[(s + i) % len(kinds)], shape)
            wmap[name] = fname
        write_checkpoint(d / fname, rng, tensors, {"format": "pt"})
    if index:
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": 0}, "weight_map": wmap}))
    return wmap


def union(d, files) -> dict:
    out = {}
    for f in files:
        out.update(reference(d / f))
    return out


def same_as(ref: dict, got: dict) -> None:
    assert set(got) == set(ref)
    for name, (dtype, shape, data) in ref.items():
        assert got[name].tobytes() == data, name
        assert got[name].shape == shape, name


@needs_host_views
@pytest.mark.parametrize("form", ["dir", "index", "list", "dir-no-index"])
def test_every_input_form(scratch, rng, form):
    wmap = sharded(scratch, rng, index=form != "dir-no-index")
    files = sorted(set(wmap.values()))
    arg = {"dir": scratch, "dir-no-index": scratch,
           "index": scratch / "model.safetensors.index.json",
           "list": [scratch / f for f in files]}[form]
    meta: dict = {}
    got = phxio.load_safetensors(arg, framework="numpy", metadata=meta)
    same_as(union(scratch, files), got)
    assert meta == {"format": "pt"}


@needs_host_views
def test_single_file_and_str_path(scratch, rng):
    write_checkpoint(scratch / "one.safetensors", rng,
                     {"a": ("float32", (3, 3)), "b": ("int8", (5,))})
    got = phxio.load_safetensors(str(scratch / "one.safetensors"),
                                   framework="numpy")
    check_same(scratch / "one.safetensors", got)


@needs_host_views
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_big_shards_share_workers(scratch, rng, threads):
    wmap = sharded(scratch, rng, nshards=4, per=3, big=True)
    got = phxio.load_safetensors(scratch, framework="numpy",
                                   threads=threads)
    same_as(union(scratch, set(wmap.values())), got)


_STAGING_PROBE = """
import sys, phxio
dev = phxio.Device("sim0")
phxio.load_safetensors(sys.argv[1], dev, framework="phxio",
                         threads=int(sys.argv[2]))
print(dev.stats()["pinned_bytes"])
"""


@needs_host_views
@pytest.mark.parametrize("threads", [1, 4])
def test_workers_share_the_staging(scratch, rng, threads):
    """However many workers a load has, together they pin at most one
    engine's staging (PHX_STAGING_SIZE), as phx_read does, each worker's
    engine its share of it; a fresh process, so no engine of an earlier
    test is reused.  A worker whose thread starts after another has given
    its engine back takes that one, so fewer engines may be built."""
    sharded(scratch, rng, nshards=4, per=3, big=True)
    env = dict(os.environ, PHX_STAGING_SIZE="16M", PHX_CHUNK_SIZE="1M",
               PHX_DEVICE="sim")
    r = subprocess.run([sys.executable, "-c", _STAGING_PROBE, str(scratch),
                        str(threads)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    pinned, share = int(r.stdout.split()[-1]), 16 * MiB // threads
    assert 0 < pinned <= 16 * MiB and pinned % share == 0, pinned


def test_bad_thread_counts_are_refused(scratch, rng, monkeypatch):
    sharded(scratch, rng, nshards=1, per=2)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        phxio.load_safetensors(scratch, threads=0)
    monkeypatch.setenv("PHX_LOAD_THREADS", "many")
    with pytest.raises(ValueError, match="PHX_LOAD_THREADS='many'"):
        phxio.load_safetensors(scratch)
    with pytest.raises(ValueError, match="PHX_LOAD_THREADS='many'"):
        phxio.save_safetensors({"a": np.ones(3)}, scratch / "o")
    assert not (scratch / "o").exists()


def test_thread_counts_past_the_bound_are_refused(scratch, rng,
                                                  monkeypatch):
    """More workers than 64 (each borrows an engine: an io_uring and
    pinned staging) and a bool are refused in one line naming the value,
    before anything is opened or written: 10**9 tried to start that many
    threads, True was taken for 1."""
    from phxio._pipeline import threads_of

    for bad in (65, 10**9):
        with pytest.raises(ValueError, match=f"threads={bad}: .*at most 64"):
            threads_of(bad)
    for bad in (True, False, 2.5, "2"):
        with pytest.raises(TypeError, match=f"threads={bad!r}"):
            threads_of(bad)
    assert threads_of(64) == 64 and threads_of(np.int64(3)) == 3
    sharded(scratch, rng, nshards=2, per=2)
    with pytest.raises(ValueError, match="threads=65: .*at most 64"):
        phxio.load_safetensors(scratch, threads=65)
    with pytest.raises(TypeError, match="threads=True"):
        phxio.load_safetensors(scratch, threads=True)
    with pytest.raises(ValueError, match="threads=1000000000: .*at most 64"):
        phxio.save_safetensors({"a": np.ones(3)}, scratch / "o",
                               threads=10**9)
    monkeypatch.setenv("PHX_LOAD_THREADS", str(10**9))
    for call in (lambda: phxio.load_safetensors(scratch),
                 lambda: phxio.save_safetensors({"a": np.ones(3)},
                                                scratch / "o")):
        with pytest.raises(ValueError) as ei:
            call()
        msg = str(ei.value)
        assert "PHX_LOAD_THREADS=1000000000" in msg and "at most 64" in msg
        assert "\n" not in msg
    assert not (scratch / "o").exists()


@needs_host_views
def test_select_prefix_predicate_names(dev, scratch, rng):
    wmap = sharded(scratch, rng, nshards=2, per=4, big=True)
    ref = union(scratch, set(wmap.values()))
    got = phxio.load_safetensors(scratch, framework="numpy",
                                   select="model.layers.1")
    assert set(got) == {n for n in ref if n.startswith("model.layers.1")}
    same_as({n: ref[n] for n in got}, got)
    odd = phxio.load_safetensors(
        scratch, framework="numpy",
        select=lambda n: int(n.split(".")[2]) % 2 == 1)
    assert set(odd) == {f"model.layers.{i}.w" for i in (1, 3, 5, 7)}
    same_as({n: ref[n] for n in odd}, odd)
    two = ["model.layers.2.w", "model.layers.5.w"]
    moved = sum(dev.stats()[p] for p in ("staged", "buffered", "p2p"))
    got = phxio.load_safetensors(scratch, framework="numpy", select=two)
    same_as({n: ref[n] for n in two}, got)
    # only the selected tensors' bytes were read (and the rest of the
    # 4 KiB blocks they start in), not the 6 others'
    moved = sum(dev.stats()[p] for p in ("staged", "buffered", "p2p")) - \
        moved
    want = sum(len(ref[n][2]) for n in two)
    assert want <= moved < want + 2 * 4096, (moved, want)


@needs_host_views
def test_select_skips_unneeded_shards(scratch, rng):
    wmap = sharded(scratch, rng, nshards=3, per=2)
    (scratch / "model-00003-of-00003.safetensors").unlink()
    got = phxio.load_safetensors(scratch, framework="numpy",
                                   select=["model.layers.0.w"])
    assert list(got) == ["model.layers.0.w"]
    with pytest.raises(FileNotFoundError, match="00003.*missing.*layers"):
        phxio.load_safetensors(scratch, framework="numpy")
    assert wmap


def test_select_unknown_name(scratch, rng):
    sharded(scratch, rng, nshards=2, per=2)
    with pytest.raises(phxio.SafetensorsError,
                       match="no tensor named 'nope'"):
        phxio.load_safetensors(scratch, framework="phxio",
                                 select=["model.layers.0.w", "nope"])


def held(dev) -> int:
    return dev.query().used


@contextlib.contextmanager
def refused(dev, exc, match=None):
    """The block raises @exc (matching @match) and leaves @dev holding
    what it held before; yields pytest.raises's ExceptionInfo."""
    before = held(dev)
    with pytest.raises(exc, match=match) as e:
        yield e
    assert held(dev) == before


def test_missing_shard_names_file_and_tensor(dev, scratch, rng):
    sharded(scratch, rng, nshards=3, per=2, big=True)
    (scratch / "model-00002-of-00003.safetensors").unlink()
    with refused(dev, FileNotFoundError) as e:
        phxio.load_safetensors(scratch, framework="phxio")
    assert "model-00002-of-00003.safetensors" in str(e.value)
    assert "model.layers.2.w" in str(e.value)


def test_name_listed_twice(dev, scratch, rng):
    write_checkpoint(scratch / "a.safetensors", rng,
                     {"x": ("float32", (64, 1024)),
                      "y": ("int8", (3,))})
    write_checkpoint(scratch / "b.safetensors", rng,
                     {"z": ("float32", (4,)), "x": ("int8", (2,))})
    with refused(dev, phxio.SafetensorsError,
                 match=r"'x' is listed twice: in .*a\.safetensors "
                       r"and in .*b\.safetensors"):
        phxio.load_safetensors(scratch, framework="phxio")


def test_index_lists_tensor_not_in_shard(dev, scratch, rng):
    wmap = sharded(scratch, rng, nshards=2, per=2)
    wmap["ghost"] = "model-00001-of-00002.safetensors"
    (scratch / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": wmap}))
    with refused(dev, phxio.SafetensorsError,
                 match="00001-of-00002.safetensors: tensor 'ghost'"):
        phxio.load_safetensors(scratch, framework="phxio")


def test_truncated_shard(dev, scratch, rng):
    sharded(scratch, rng, nshards=3, per=2, big=True)
    f = scratch / "model-00003-of-00003.safetensors"
    os.truncate(f, f.stat().st_size - 100)
    with refused(dev, phxio.SafetensorsError,
                 match=r"00003-of-00003.safetensors: tensor "
                       r"'model.layers.[45].w': truncated"):
        phxio.load_safetensors(scratch, framework="phxio")


def test_truncated_header(scratch):
    (scratch / "x.safetensors").write_bytes(struct.pack("<Q", 500) + b"{")
    with pytest.raises(phxio.SafetensorsError,
                       match="x.safetensors: truncated: the header says "
                             "500 bytes"):
        phxio.load_safetensors(scratch / "x.safetensors",
                                 framework="phxio")


def test_bad_header_in_second_file(dev, scratch, rng):
    write_checkpoint(scratch / "a.safetensors", rng,
                     {"x": ("float32", (256, 1024))})
    (scratch / "b.safetensors").write_bytes(struct.pack("<Q", 4) + b"nope")
    with refused(dev, phxio.SafetensorsError,
                 match="b.safetensors: bad header: not JSON"):
        phxio.load_safetensors([scratch / "a.safetensors",
                                  scratch / "b.safetensors"],
                                 framework="phxio")


def test_bad_index(scratch):
    (scratch / "model.safetensors.index.json").write_text('{"x": 1}')
    with pytest.raises(phxio.SafetensorsError, match="no \"weight_map\""):
        phxio.load_safetensors(scratch, framework="phxio")
    (scratch / "model.safetensors.index.json").write_text("{")
    with pytest.raises(phxio.SafetensorsError, match="not JSON"):
        phxio.load_safetensors(scratch, framework="phxio")


def test_empty_inputs(scratch):
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        phxio.load_safetensors(scratch, framework="phxio")
    with pytest.raises(ValueError, match="list of files is empty"):
        phxio.load_safetensors([], framework="phxio")
    with pytest.raises(FileNotFoundError):
        phxio.load_safetensors(scratch / "none.safetensors",
                                 framework="phxio")


def test_out_of_device_memory_frees_earlier_files(scratch, rng):
    sharded(scratch, rng, nshards=3, per=2, big=True)
    with phxio.Device() as dev:
        before = held(dev)
        dev.set_limit(before + 3 * MiB)  # room for the first shard only
        try:
            with pytest.raises(phxio.PhoenixError) as e:
                phxio.load_safetensors(scratch, dev, framework="phxio")
            assert e.value.errno == 28
            assert held(dev) == before
        finally:
            dev.set_limit(0)


# ---- save ------------------------------------------------------------------

def arrays(rng) -> dict:
    return {"emb": rng.standard_normal((300, 77)).astype(np.float32),
            "b": rng.integers(-9, 9, 1001, dtype=np.int64),
            "mask": rng.integers(0, 2, (4, 5)).astype(bool),
            "h": rng.standard_normal(12345).astype(np.float16),
            "empty": np.zeros((0, 3), np.float32),
            "scalar": np.array(7, np.int32)}


@needs_host_views
def test_save_round_trip(scratch, rng):
    src = arrays(rng)
    out = phxio.save_safetensors(src, scratch / "m.safetensors",
                                   metadata={"format": "pt"})
    assert out == [str(scratch / "m.safetensors")]
    ref = reference(scratch / "m.safetensors")  # the safetensors parser
    for name, arr in src.items():
        assert ref[name][1] == arr.shape and ref[name][2] == arr.tobytes()
    from safetensors.numpy import load_file

    theirs = load_file(scratch / "m.safetensors")
    for name, arr in src.items():
        assert theirs[name].dtype == arr.dtype
        assert np.array_equal(theirs[name], arr)
    meta: dict = {}
    back = phxio.load_safetensors(scratch / "m.safetensors",
                                    framework="numpy", metadata=meta)
    assert meta == {"format": "pt"}
    for name, arr in src.items():
        assert back[name].tobytes() == arr.tobytes() and \
            back[name].shape == arr.shape


@needs_host_views
def test_save_merges_tensors_that_follow_each_other(dev, scratch, rng):
    """Tensors loaded from one file lie in a row in device memory, as in
    the file (safetensors orders them by alignment, then name), and are
    saved in that order as one transfer; a tensor elsewhere splits the
    row.  The bytes come back identical either way."""
    write_checkpoint(scratch / "in.safetensors", rng,
                     {"a": ("float32", (300, 77)), "b": ("int64", (1001,)),
                      "c": ("bfloat16", (64, 4096))})
    loaded = phxio.load_safetensors(scratch / "in.safetensors", dev,
                                      framework="phxio")
    other = phxio.load_safetensors(scratch / "in.safetensors", dev,
                                     framework="phxio", select=["b"])
    before = dev.stats()["ios"]
    phxio.save_safetensors(loaded, scratch / "one.safetensors")
    assert dev.stats()["ios"] - before == 1
    assert reference(scratch / "one.safetensors") == \
        reference(scratch / "in.safetensors")
    before = dev.stats()["ios"]
    phxio.save_safetensors(dict(loaded, b=other["b"]),
                             scratch / "three.safetensors")
    assert dev.stats()["ios"] - before == 2  # b (elsewhere) | a c
    assert reference(scratch / "three.safetensors") == \
        reference(scratch / "in.safetensors")


@needs_host_views
def test_save_device_arrays(dev, scratch, rng):
    write_checkpoint(scratch / "in.safetensors", rng,
                     {"w": ("bfloat16", (512, 1024)),
                      "q": ("float8_e4m3fn", (33,)),
                      "i": ("int32", (7, 9))})
    loaded = phxio.load_safetensors(scratch / "in.safetensors", dev,
                                      framework="phxio")
    phxio.save_safetensors(loaded, scratch / "out.safetensors")
    assert reference(scratch / "out.safetensors") == \
        reference(scratch / "in.safetensors")


@needs_host_views
@pytest.mark.parametrize("limit", [300 << 10, "300KB", "0.3MB"])
def test_save_sharded_with_index(scratch, rng, limit):
    src = {f"layer.{i}.w": rng.standard_normal(128 * 256).astype(np.float32)
           for i in range(8)}  # 128 KiB each
    files = phxio.save_safetensors(src, scratch, max_shard_size=limit,
                                     metadata={"who": "phxio"})
    index = scratch / "model.safetensors.index.json"
    assert files[-1] == str(index)
    shards = files[:-1]
    assert len(shards) == 4 and shards[0].endswith(
        "model-00001-of-00004.safetensors")
    doc = json.loads(index.read_text())
    assert doc["metadata"]["total_size"] == 8 * 128 * 1024
    assert set(doc["weight_map"]) == set(src)
    for f in shards:
        assert os.path.getsize(f) <= 300_000 + 4096
        for name, (_, _, data) in reference(scratch / f).items():
            assert doc["weight_map"][name] == os.path.basename(f)
            assert data == src[name].tobytes()
    back = phxio.load_safetensors(scratch, framework="numpy")
    for name, arr in src.items():
        assert back[name].tobytes() == arr.tobytes()
    assert sorted(os.listdir(scratch)) == sorted(
        [os.path.basename(f) for f in files])


def test_save_errors_leave_nothing(scratch, rng):
    src = {"a": np.ones(10, np.float32)}
    with pytest.raises(ValueError, match="metadata must map strings"):
        phxio.save_safetensors(src, scratch / "m.safetensors",
                                 metadata={"n": 1})
    with pytest.raises(ValueError, match="reserved"):
        phxio.save_safetensors({"__metadata__": src["a"]},
                                 scratch / "m.safetensors")
    with pytest.raises(TypeError, match="tensor 'x': cannot save"):
        phxio.save_safetensors({"x": [1, 2]}, scratch / "m.safetensors")
    with pytest.raises(ValueError, match="max_shard_size 'lots'"):
        phxio.save_safetensors(src, scratch, max_shard_size="lots")
    with pytest.raises(FileNotFoundError):
        phxio.save_safetensors(src, scratch / "no" / "m.safetensors")
    assert os.listdir(scratch) == []


@needs_host_views
def test_save_replaces_only_when_complete(scratch, rng):
    first = {"a": np.arange(100, dtype=np.int16)}
    phxio.save_safetensors(first, scratch / "m.safetensors")
    with pytest.raises(ValueError):
        phxio.save_safetensors({"a": np.ones(3), "b": np.ones(3)},
                                 scratch / "m.safetensors",
                                 metadata={"bad": 2})
    assert reference(scratch / "m.safetensors")["a"][2] == \
        first["a"].tobytes()
    assert os.listdir(scratch) == ["m.safetensors"]


@needs_host_views
def test_safetensors_torch_format_is_read(scratch, rng):
    """A file safetensors wrote, saved again by us, is identical data."""
    write_checkpoint(scratch / "in.safetensors", rng,
                     {f"t{i}": ("float32", (i + 1, 3)) for i in range(20)})
    got = phxio.load_safetensors(scratch / "in.safetensors",
                                   framework="numpy")
    phxio.save_safetensors(got, scratch / "out.safetensors")
    ours = safetensors.deserialize((scratch / "out.safetensors").read_bytes())
    theirs = safetensors.deserialize((scratch / "in.safetensors")
                                     .read_bytes())
    assert len(ours) == 20 and dict(ours) == dict(theirs)


def test_file_shrinking_during_the_load(dev, scratch, rng):
    """A file cut short after its header was checked: the short read is
    reported with the tensor it hit, and nothing is left allocated."""
    wmap = sharded(scratch, rng, nshards=2, per=3, big=True, index=False)
    victim = scratch / "model-00002-of-00002.safetensors"
    cut = victim.stat().st_size - (200 << 10)

    def shrink(name: str) -> bool:
        # called for the second file's tensors once its header is read
        if wmap[name] == victim.name and victim.stat().st_size > cut:
            os.truncate(victim, cut)
        return True

    with refused(dev, phxio.SafetensorsError,
                 match=r"00002-of-00002.safetensors: tensor "
                       r"'model.layers.\d.w': truncated: the file "
                       r"ends at byte"):
        phxio.load_safetensors(scratch, framework="phxio",
                                 select=shrink)
