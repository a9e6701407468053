"""load_safetensors against files the safetensors package itself wrote."""

from __future__ import annotations

import ctypes
import json
import struct

import numpy as np
import pytest
import safetensors

import phxio
from conftest import needs_host_views

# safetensors' serializer names -> bytes per element
KINDS = {
    "bool": 1, "int8": 1, "uint8": 1, "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "int16": 2, "uint16": 2, "float16": 2,
    "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "int64": 8,
    "uint64": 8, "float64": 8, "complex64": 8,
}
SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (64, 65), (0, 3)]


def _spec(kind: str, shape: tuple, data: bytes, keep: list):
    """A serializer entry in whichever form this safetensors takes."""
    if hasattr(safetensors, "TensorSpec"):
        cbuf = ctypes.create_string_buffer(data, max(len(data), 1))
        keep.append(cbuf)
        return safetensors.TensorSpec(dtype=kind, shape=list(shape),
                                      data_ptr=ctypes.addressof(cbuf),
                                      data_len=len(data))
    return {"dtype": kind, "shape": list(shape), "data": data}


def write_checkpoint(path, rng, tensors: dict, metadata=None) -> None:
    keep: list = []
    specs = {}
    for name, (kind, shape) in tensors.items():
        n = int(np.prod(shape)) * KINDS[kind]
        raw = rng.integers(0, 256, n, dtype=np.uint8)
        if kind == "bool":
            raw &= 1
        specs[name] = _spec(kind, shape, raw.tobytes(), keep)
    safetensors.serialize_file(specs, str(path), metadata)


def reference(path) -> dict:
    """name -> (dtype name, shape, bytes), straight from safetensors."""
    return {name: (v["dtype"], tuple(v["shape"]), bytes(v["data"]))
            for name, v in safetensors.deserialize(path.read_bytes())}


def check_same(path, got: dict) -> None:
    ref = reference(path)
    assert set(got) == set(ref)
    for name, (dtype, shape, data) in ref.items():
        arr = got[name]
        assert arr.tobytes() == data, name
        if dtype not in ("F4",):
            assert arr.shape == shape, name


@needs_host_views
def test_every_dtype_every_shape(scratch, rng):
    tensors = {f"{k}.{i}": (k, s) for k in KINDS
               for i, s in enumerate(SHAPES)}
    write_checkpoint(scratch / "m.safetensors", rng, tensors)
    got = phxio.load_safetensors(scratch / "m.safetensors",
                                   framework="numpy")
    check_same(scratch / "m.safetensors", got)


@needs_host_views
def test_matches_safetensors_numpy(scratch, rng):
    from safetensors.numpy import load_file

    tensors = {f"t{i}": (k, SHAPES[i % len(SHAPES)])
               for i, k in enumerate(["float32", "float16", "int64", "uint8",
                                      "bool", "float64", "int16", "int32",
                                      "complex64"])}
    write_checkpoint(scratch / "m.safetensors", rng, tensors)
    ref = load_file(scratch / "m.safetensors")
    got = phxio.load_safetensors(scratch / "m.safetensors", "sim0",
                                   framework="numpy")
    assert set(ref) == set(got)
    for k in ref:
        assert ref[k].dtype == got[k].dtype, k
        assert ref[k].shape == got[k].shape, k
        assert ref[k].tobytes() == got[k].tobytes(), k


@needs_host_views
def test_raw_views_for_types_numpy_lacks(scratch, rng):
    tensors = {"b": ("bfloat16", (3, 4)), "f8": ("float8_e4m3fn", (5,))}
    write_checkpoint(scratch / "m.safetensors", rng, tensors)
    got = phxio.load_safetensors(scratch / "m.safetensors",
                                   framework="numpy")
    assert got["b"].itemsize == 2 and got["b"].shape == (3, 4)
    assert got["f8"].itemsize == 1 and got["f8"].shape == (5,)
    check_same(scratch / "m.safetensors", got)


@needs_host_views
def test_packed_float4(scratch, rng):
    keep: list = []
    data = rng.integers(0, 256, 12, dtype=np.uint8).tobytes()
    try:
        spec = _spec("float4_e2m1fn_x2", (3, 4), data, keep)
        safetensors.serialize_file({"q": spec}, str(scratch / "m"), None)
    except Exception as exc:  # an older serializer without F4
        pytest.skip(f"safetensors cannot write F4: {exc}")
    got = phxio.load_safetensors(scratch / "m", framework="phxio")
    assert got["q"].dtype.name == "F4" and got["q"].shape == (3, 8)
    assert np.asarray(got["q"]).tobytes() == data
    assert reference(scratch / "m")["q"][2] == data


@needs_host_views
def test_many_tensors_one_allocation(dev, scratch, rng):
    kinds = list(KINDS)
    tensors = {}
    for i in range(300):
        shape = tuple(int(x) for x in rng.integers(1, 40, rng.integers(1, 4)))
        tensors[f"layer.{i}.w"] = (kinds[i % len(kinds)], shape)
    write_checkpoint(scratch / "m.safetensors", rng, tensors,
                     {"format": "pt", "who": "phxio"})
    used = dev.query().used
    meta: dict = {}
    got = phxio.load_safetensors(scratch / "m.safetensors", dev,
                                   framework="numpy", metadata=meta)
    assert meta == {"format": "pt", "who": "phxio"}
    check_same(scratch / "m.safetensors", got)
    # every array is a view of one device allocation
    size = (scratch / "m.safetensors").stat().st_size
    addrs = [a.__array_interface__["data"][0] for a in got.values()]
    assert max(addrs) - min(addrs) < size
    assert dev.query().used - used < size + (2 << 20)


@needs_host_views
@pytest.mark.parametrize("threads", [1, 3])
def test_large_checkpoint_crosses_pieces(scratch, rng, threads):
    tensors = {"big": ("float32", (40 << 20,)), "tail": ("int8", (12345,)),
               "mid": ("bfloat16", (3000, 1000))}
    write_checkpoint(scratch / "m.safetensors", rng, tensors)
    got = phxio.load_safetensors(scratch / "m.safetensors",
                                   framework="numpy", threads=threads)
    check_same(scratch / "m.safetensors", got)


@needs_host_views
def test_phoenix_arrays(scratch, rng):
    write_checkpoint(scratch / "m.safetensors", rng,
                     {"x": ("float32", (4, 4))})
    got = phxio.load_safetensors(scratch / "m.safetensors",
                                   framework="phxio")
    x = got["x"]
    assert isinstance(x, phxio.DeviceArray)
    assert x.dtype.name == "F32" and x.shape == (4, 4)
    assert np.from_dlpack(x).tobytes() == reference(
        scratch / "m.safetensors")["x"][2]


def test_empty_checkpoint(scratch, rng):
    write_checkpoint(scratch / "m.safetensors", rng, {})
    assert phxio.load_safetensors(scratch / "m.safetensors",
                                    framework="phxio") == {}


def _raw_file(path, header: bytes, data: bytes = b"") -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


@pytest.mark.parametrize("header,data", [
    (b"not json", b""),
    (b"[]", b""),
    (json.dumps({"x": {"dtype": "F32", "shape": [4],
                       "data_offsets": [0, 8]}}).encode(), b"\0" * 8),
    (json.dumps({"x": {"dtype": "F32", "shape": [4],
                       "data_offsets": [0, 16]}}).encode(), b"\0" * 8),
    (json.dumps({"x": {"dtype": "Q9", "shape": [1],
                       "data_offsets": [0, 1]}}).encode(), b"\0"),
])
def test_bad_files_are_rejected(scratch, header, data):
    _raw_file(scratch / "bad", header, data)
    with pytest.raises(phxio.SafetensorsError):
        phxio.load_safetensors(scratch / "bad", framework="phxio")


def test_truncated_file(scratch):
    (scratch / "bad").write_bytes(b"\x10\0\0")
    with pytest.raises(phxio.SafetensorsError):
        phxio.load_safetensors(scratch / "bad", framework="phxio")


@needs_host_views
def test_unaligned_header_from_another_writer(scratch, rng):
    # a header whose length is not a multiple of 8 (allowed by the format)
    header = json.dumps({"a": {"dtype": "F32", "shape": [3],
                               "data_offsets": [0, 12]},
                         "b": {"dtype": "I16", "shape": [2],
                               "data_offsets": [12, 16]}}).encode()
    header += b" " * ((8 - len(header) % 8) % 8 + 3)
    data = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    _raw_file(scratch / "odd", header, data)
    got = phxio.load_safetensors(scratch / "odd", framework="numpy")
    assert got["a"].tobytes() == data[:12]
    assert got["b"].tobytes() == data[12:]
