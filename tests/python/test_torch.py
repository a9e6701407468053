"""torch on the simulated device: CPU tensors viewing sim memory.

Runs wherever torch is installed, with or without a GPU."""

from __future__ import annotations

import pytest

import phxio
from conftest import random_file
from test_safetensors import KINDS, SHAPES, write_checkpoint

torch = pytest.importorskip("torch")


@pytest.fixture
def sim():
    d = phxio.Device("sim0")
    yield d
    d.close()


def test_from_dlpack_is_a_cpu_view(sim):
    buf = sim.alloc(4096)
    t = torch.from_dlpack(buf)
    assert t.device.type == "cpu" and t.numel() == 4096
    t[:3] = torch.tensor([1, 2, 3], dtype=torch.uint8)
    assert buf.to_bytes(0, 3) == b"\x01\x02\x03"
    bf = buf.view("BF16", (8, 8), 128).torch()
    assert bf.dtype == torch.bfloat16 and bf.shape == (8, 8)


def test_read_into_cpu_tensor(scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    t = torch.zeros((100, 100), dtype=torch.bfloat16)
    assert phxio.read_into(scratch / "f", t, 77) == 20000
    assert t.view(torch.uint8).numpy().tobytes() == data[77:20077]


def test_load_matches_safetensors_torch(sim, scratch, rng):
    from safetensors.torch import load_file

    names = {"bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8,
             "int16": torch.int16, "float16": torch.float16,
             "bfloat16": torch.bfloat16, "int32": torch.int32,
             "float32": torch.float32, "int64": torch.int64,
             "float64": torch.float64, "complex64": torch.complex64}
    for extra in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                  "float8_e5m2fnuz", "float8_e8m0fnu", "uint16", "uint32",
                  "uint64"):
        if hasattr(torch, extra):
            names[extra] = getattr(torch, extra)
    tensors = {f"{k}.{i}": (k, s) for k in names if k in KINDS
               for i, s in enumerate(SHAPES)}
    path = scratch / "m.safetensors"
    write_checkpoint(path, rng, tensors)
    try:
        ref = load_file(str(path))
    except Exception as exc:  # this safetensors lacks one of the types
        pytest.skip(f"safetensors.torch cannot load it: {exc}")
    ours = phxio.load_safetensors(path, device=sim, framework="pt")
    assert set(ours) == set(ref)
    for k, r in ref.items():
        o = ours[k]
        assert (o.dtype, o.shape, o.device) == (r.dtype, r.shape, r.device), k
        assert o.reshape(-1).view(torch.uint8).numpy().tobytes() == \
            r.reshape(-1).view(torch.uint8).numpy().tobytes(), k

