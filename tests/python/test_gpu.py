"""The same API on a CUDA device with torch (make test-gpu)."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import phxio
from conftest import random_file
from phxfile_abi import PENDING, Op, handle, library_path, \
    load_like_lmcache

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or phxio.default_kind()[0] != "cuda",
    reason="needs torch with CUDA and PHX_DEVICE=cuda")


def hold(stream: "torch.cuda.Stream") -> "torch.Tensor":
    """Hold @stream until the returned pinned flag is set to 1.

    A timed sleep on the stream races with whatever the first transfer
    sets up; a wait on host memory holds the stream for as long as the
    test needs.  Nothing may load a kernel while it holds: loading waits
    for the GPU to finish what is queued.
    """
    cuda = ctypes.CDLL("libcuda.so.1")
    flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    ret = cuda.cuStreamWaitValue32_v2(
        ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(flag.data_ptr()),
        ctypes.c_uint32(1), ctypes.c_uint(0))  # CU_STREAM_WAIT_VALUE_GEQ
    assert ret == 0, f"cuStreamWaitValue32: CUresult {ret}"
    return flag


def file_tensor(data: bytes, off: int, n: int) -> "torch.Tensor":
    return torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.uint8)


def test_buffer_is_a_cuda_tensor(dev):
    buf = dev.alloc(1 << 20)
    t = torch.from_dlpack(buf)
    assert t.is_cuda and t.dtype == torch.uint8 and t.numel() == 1 << 20
    assert t.data_ptr() == buf.dptr
    t.fill_(7)
    torch.cuda.synchronize()
    assert buf.to_bytes(0, 16) == b"\x07" * 16
    cai = buf.__cuda_array_interface__
    assert cai["data"][0] == buf.dptr
    t2 = torch.as_tensor(buf, device="cuda")
    assert t2.data_ptr() == buf.dptr
    v = buf.view("BF16", (16, 16), 4096).torch()
    assert v.dtype == torch.bfloat16 and v.shape == (16, 16)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16,
                                   torch.bfloat16, torch.float32,
                                   torch.int64])
def test_read_into_tensor(scratch, rng, dtype):
    data = random_file(scratch / "f", 8 << 20, rng)
    t = torch.empty((1000, 333), dtype=dtype, device="cuda")
    nbytes = t.numel() * t.element_size()
    for off in (0, 1, 4096, 12345):
        assert phxio.read_into(scratch / "f", t, off) == nbytes
        got = t.view(torch.uint8).reshape(-1).cpu()
        assert torch.equal(got, file_tensor(data, off, nbytes))


def test_write_from_tensor(scratch):
    t = torch.randint(0, 255, (3 << 20,), dtype=torch.uint8, device="cuda")
    assert phxio.write_from(scratch / "out", t) == 3 << 20
    assert (scratch / "out").read_bytes() == t.cpu().numpy().tobytes()


def test_read_batch_into_tensor_slices(scratch, rng):
    data = random_file(scratch / "f", 16 << 20, rng)
    t = torch.zeros(64 * 65536, dtype=torch.uint8, device="cuda")
    items = [((63 - i) * 262144, 65536, t[i * 65536:(i + 1) * 65536])
             for i in range(64)]
    assert phxio.read_batch(scratch / "f", items) == [65536] * 64
    got = t.cpu().numpy().reshape(64, 65536)
    ref = np.frombuffer(data, np.uint8)
    for i in range(64):
        o = (63 - i) * 262144
        assert got[i].tobytes() == ref[o:o + 65536].tobytes()


def test_read_into_on_a_torch_stream(scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    t = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    # Loading a kernel waits for the GPU to finish what is queued, so load
    # ours (the device opens) and torch's add before the stream is held.
    phxio.device("cuda:0")
    t.add_(1)  # the read overwrites all of it
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        flag = hold(s)  # the read waits behind this
        tr = phxio.read_into(scratch / "f", t, stream=s)
        t.add_(1)  # and this waits for the read
    assert not tr.done()
    flag[0] = 1
    assert tr.wait() == 1 << 20
    s.synchronize()
    ref = (np.frombuffer(data, np.uint8) + 1).astype(np.uint8)
    assert t.cpu().numpy().tobytes() == ref.tobytes()


def test_phxfile_on_torch_streams(scratch, rng):
    data = random_file(scratch / "f", 8 << 20, rng)
    lib = load_like_lmcache(library_path())
    assert lib.phxFileDriverOpen() == 0
    t = torch.zeros(4 << 20, dtype=torch.uint8, device="cuda")
    fd = os.open(scratch / "f", os.O_RDONLY)
    wfd = os.open(scratch / "out", os.O_RDWR | os.O_CREAT, 0o644)
    fh, wfh = handle(lib, fd), handle(lib, wfd)
    s = torch.cuda.Stream()
    native = ctypes.c_void_p(s.cuda_stream)
    assert lib.phxFileStreamRegister(native) == 0
    assert lib.phxFileBufRegister(ctypes.c_void_p(t.data_ptr()),
                                  t.numel()) == 0
    with torch.cuda.stream(s):
        flag = hold(s)
        # values fixed when queued, as LMCache keeps them
        rd = Op(2 << 20, 1 << 20, 4096)
        assert lib.phxFileReadAsync(fh, ctypes.c_void_p(t.data_ptr()),
                                    *rd.args(), native) == 0
        wr = Op(1 << 20, 0, 4096)
        assert lib.phxFileWriteAsync(wfh, ctypes.c_void_p(t.data_ptr()),
                                     *wr.args(), native) == 0
        assert rd.bytes_done.value == PENDING
    flag[0] = 1
    s.synchronize()
    assert rd.bytes_done.value == 2 << 20
    assert wr.bytes_done.value == 1 << 20
    got = t.cpu().numpy()
    assert got[4096:4096 + (2 << 20)].tobytes() == \
        data[1 << 20:(1 << 20) + (2 << 20)]
    assert not got[:4096].any()
    assert (scratch / "out").read_bytes() == data[1 << 20:2 << 20]
    assert lib.phxFileStreamDeregister(native) == 0
    assert lib.phxFileBufDeregister(ctypes.c_void_p(t.data_ptr())) == 0
    lib.phxFileHandleDeregister(fh)
    lib.phxFileHandleDeregister(wfh)
    os.close(fd)
    os.close(wfd)
    assert lib.phxFileDriverClose() == 0


def _checkpoint(path, gib: float, rng) -> None:
    from safetensors.torch import save_file

    kinds = [torch.float32, torch.bfloat16, torch.float16, torch.int8,
             torch.int64, torch.bool, torch.float64, torch.uint8]
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name):
            kinds.append(getattr(torch, name))
    tensors = {}
    total, i = 0, 0
    g = torch.Generator(device="cuda").manual_seed(1234)
    while total < gib * (1 << 30):
        kind = kinds[i % len(kinds)]
        rows = int(rng.integers(1, 4096))
        cols = int(rng.choice([1, 7, 128, 1024, 4096]))
        raw = torch.randint(0, 256, (rows * cols *
                                     torch.empty((), dtype=kind)
                                     .element_size(),),
                            dtype=torch.uint8, device="cuda", generator=g)
        if kind == torch.bool:
            raw &= 1
        tensors[f"layers.{i}.{str(kind)[6:]}"] = raw.view(kind).reshape(
            rows, cols).cpu()
        total += raw.numel()
        i += 1
    tensors["scalar"] = torch.tensor(3.5)
    tensors["empty"] = torch.empty((0, 5), dtype=torch.float16)
    save_file(tensors, str(path), metadata={"format": "pt"})


def test_load_safetensors_matches_safetensors(scratch, rng):
    from safetensors.torch import load_file

    gib = float(os.environ.get("PHX_TEST_CKPT_GIB", "2.5"))
    path = scratch / "model.safetensors"
    _checkpoint(path, gib, rng)
    ours = phxio.load_safetensors(path, device="cuda:0")
    ref = load_file(str(path), device="cuda:0")
    assert set(ours) == set(ref) and len(ref) > 10
    for k, r in ref.items():
        o = ours[k]
        assert o.device == r.device, k
        assert o.dtype == r.dtype, k
        assert o.shape == r.shape, k
        if r.numel():
            assert torch.equal(o.reshape(-1).view(torch.uint8),
                               r.reshape(-1).view(torch.uint8)), k
    path.unlink()
