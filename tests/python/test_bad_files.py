"""Files and indexes the safetensors format does not allow are refused
as the safetensors library refuses them, each with one line that names
the file (and the tensor), leaving no device memory or descriptor
behind; so are files that are not regular files."""

from __future__ import annotations

import gc
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import safetensors

import phxio
from test_safetensors import write_checkpoint


def F32(n, begin, shape=None):
    return {"dtype": "F32", "shape": [n] if shape is None else shape,
            "data_offsets": [begin, begin + 4 * n]}


def js(obj) -> bytes:
    return json.dumps(obj).encode()


# (id, header bytes, data bytes, what the message says)
BAD = [
    ("overlap", js({"a": F32(2, 0), "b": F32(2, 4)}), 12, "overlap"),
    ("aliased", js({"a": F32(2, 0), "b": F32(2, 0)}), 8, "overlap"),
    ("gap", js({"a": F32(2, 0), "b": F32(2, 12)}), 20,
     r"bytes \[8, 12\) .* belong to no tensor"),
    ("trailing", js({"a": F32(2, 0)}), 12,
     "4 bytes after the data of its last tensor"),
    ("float-shape", js({"a": F32(2, 0, [2.0])}), 8, "'a'.*shape"),
    ("str-shape", js({"a": F32(2, 0, ["2"])}), 8, "'a'.*shape"),
    ("bool-shape", js({"a": F32(1, 0, [True])}), 4, "'a'.*shape"),
    ("float-offset", js({"a": {"dtype": "F32", "shape": [2],
                               "data_offsets": [0, 8.0]}}), 8,
     "'a'.*data_offsets"),
    ("negative-dims", js({"a": F32(4, 0, [-2, -2])}), 16, "'a'.*shape"),
    ("huge-dim", js({"a": {"dtype": "F32", "shape": [0, 2**70],
                           "data_offsets": [0, 0]}}), 0, "'a'.*shape"),
    ("infinity", b'{"a":{"dtype":"F32","shape":[2],'
                 b'"data_offsets":[0,Infinity]}}', 8, "not JSON"),
    ("1e400", b'{"a":{"dtype":"F32","shape":[1e400],'
              b'"data_offsets":[0,8]}}', 8, "'a'.*shape"),
    ("utf16", json.dumps({"a": F32(2, 0)}).encode("utf-16"), 8,
     "not (UTF-8|JSON)"),
    ("bom", b"\xef\xbb\xbf" + js({"a": F32(2, 0)}), 8, "not JSON"),
    ("deep", b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}", 0,
     "nested too deeply"),
    ("metadata-str", js({"__metadata__": "abc", "a": F32(2, 0)}), 8,
     "__metadata__"),
    ("metadata-int", js({"__metadata__": {"k": 1}, "a": F32(2, 0)}), 8,
     "__metadata__"),
    ("half-byte", js({"q": {"dtype": "F4", "shape": [3],
                            "data_offsets": [0, 2]}}), 2,
     "'q'.*inside a byte"),
    ("entry-list", js({"a": [1, 2]}), 0, "'a'.*not a JSON object"),
    ("no-dtype", js({"a": {"shape": [], "data_offsets": [0, 0]}}), 0,
     "'a'.*no 'dtype'"),
    ("zero-length", b"", 0, "length 0 is too short"),
]


def _raw(path, header: bytes, data: int) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header +
                     b"\0" * data)


def _open_on(path) -> list:
    """This process's descriptors open on @path (the library opens
    descriptors of its own, io_uring's among them, as it goes)."""
    out = []
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + n) == str(path):
                out.append(n)
        except FileNotFoundError:
            pass  # the listing's own descriptor, closed since
    return out


def _one_line(e, path) -> None:
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_refused_as_safetensors_refuses(dev, scratch, case):
    _, header, data, match = case
    f = scratch / "bad.safetensors"
    _raw(f, header, data)
    with pytest.raises(Exception):  # the library agrees: not a valid file
        safetensors.deserialize(f.read_bytes())
    gc.collect()  # earlier tests' buffers go now, not during the load
    used = dev.query().used
    meta: dict = {}
    with pytest.raises(phxio.SafetensorsError, match=match) as e:
        phxio.load_safetensors(f, dev, framework="phxio", metadata=meta)
    _one_line(e, f)
    assert dev.query().used == used
    assert not _open_on(f)
    with pytest.raises(phxio.SafetensorsError, match=match):
        next(phxio.iter_safetensors(f, dev))


@pytest.mark.parametrize("n", [100_000_001, 100 << 20, 1 << 62])
def test_header_length_over_the_limit(scratch, n):
    f = scratch / "big.safetensors"
    f.write_bytes(struct.pack("<Q", n) + b"{}")
    with pytest.raises(phxio.SafetensorsError,
                       match="over the format's limit of 100000000") as e:
        phxio.load_safetensors(f, framework="phxio")
    _one_line(e, f)


def test_save_refuses_a_header_over_the_limit(scratch, monkeypatch):
    import phxio._save

    monkeypatch.setattr(phxio._save, "MAX_HEADER", 4096)
    src = {f"t{i}": np.zeros(1, np.float32) for i in range(100)}
    with pytest.raises(ValueError, match="over the format's limit of 4096"):
        phxio.save_safetensors(src, scratch / "m.safetensors")
    assert os.listdir(scratch) == []


def _index(d, wmap: dict) -> None:
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": wmap}))


@pytest.mark.parametrize("where", ["../outside/e.safetensors", "ABS",
                                   "sub/e.safetensors", "", ".."])
def test_index_entries_stay_in_the_directory(tmp_path, rng, where):
    d = tmp_path / "ckpt"
    (d / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    for f in (tmp_path / "outside" / "e.safetensors",
              d / "sub" / "e.safetensors", d / "e.safetensors"):
        write_checkpoint(f, rng, {"e": ("float32", (2,))})
    if where == "ABS":
        where = str(tmp_path / "outside" / "e.safetensors")
    _index(d, {"e": where})
    with pytest.raises(phxio.SafetensorsError,
                       match="tensor 'e' is in .*not a file name in the "
                             "index's directory") as e:
        phxio.load_safetensors(d, framework="phxio")
    _one_line(e, d / "model.safetensors.index.json")
    with pytest.raises(phxio.SafetensorsError, match="not a file name"):
        next(phxio.iter_safetensors(d, "sim0"))


def test_index_entry_naming_a_directory(scratch, rng):
    (scratch / "sub.safetensors").mkdir()
    try:
        _index(scratch, {"e": "sub.safetensors"})
        with pytest.raises(OSError, match="sub.safetensors: a directory, "
                                          "not a regular file") as e:
            phxio.load_safetensors(scratch, framework="phxio")
        assert "\n" not in str(e.value)
    finally:
        (scratch / "sub.safetensors").rmdir()


def test_index_bad_json(scratch):
    (scratch / "model.safetensors.index.json").write_text(
        '{"weight_map":' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(phxio.SafetensorsError, match="bad index: nested"):
        phxio.load_safetensors(scratch, framework="phxio")


def test_iter_checks_what_the_index_lists(scratch, rng):
    write_checkpoint(scratch / "a.safetensors", rng,
                     {"x": ("float32", (4,))})
    _index(scratch, {"x": "a.safetensors", "ghost": "a.safetensors"})
    for call in (lambda: phxio.load_safetensors(scratch, framework="phxio"),
                 lambda: next(phxio.iter_safetensors(scratch, "sim0"))):
        with pytest.raises(phxio.SafetensorsError,
                           match=r"a.safetensors: tensor 'ghost', which "
                                 r".*index.json puts in this file"):
            call()


def test_fifo_and_devices_are_refused(dev, scratch):
    fifo = scratch / "p.safetensors"
    os.mkfifo(fifo)
    # a writer held open: a regression would fail rather than hang here
    hold = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        buf = dev.alloc(64)
        for call in (lambda: phxio.load_safetensors(fifo, framework="phxio"),
                     lambda: next(phxio.iter_safetensors(fifo, dev)),
                     lambda: phxio.read_into(fifo, buf),
                     lambda: phxio.write_from(fifo, buf),
                     lambda: buf.read(fifo)):
            with pytest.raises(OSError, match="p.safetensors: a FIFO, not "
                                              "a regular file"):
                call()
        with pytest.raises(OSError, match="/dev/zero: a character device"):
            phxio.load_safetensors("/dev/zero", framework="phxio")
    finally:
        os.close(hold)
        fifo.unlink()


def test_fifo_with_no_writer_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "p")
    code = ("import sys, phxio\n"
            "try:\n"
            "    phxio.load_safetensors(sys.argv[1], framework='phxio')\n"
            "except OSError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert "a FIFO, not a regular file" in r.stdout, r.stderr
