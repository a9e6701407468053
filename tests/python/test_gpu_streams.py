"""Stream-ordered transfers on torch streams must never hang (GPU only).

What made the earlier ways of holding a stream hang on CUDA: a thread
inside cuStreamSynchronize() on the stream a transfer holds, and torch
kernels loaded lazily (a first launch waits for the GPU's queued work)
right behind the transfer.  Each round here has both, with a different
kernel torch has never launched in this process; the GPU script runs the
file in 20 fresh processes (tests/python/run.sh ... -k no_hang).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import phxio
from conftest import random_file

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or phxio.default_kind()[0] != "cuda",
    reason="needs torch with CUDA and PHX_DEVICE=cuda")

# Twenty kernels this process has not launched before: each first launch
# loads its module lazily, which waits for the GPU's queued work.
FIRSTS = [
    torch.sin, torch.cos, torch.exp, torch.log1p, torch.sqrt, torch.tanh,
    torch.sigmoid, torch.erf, torch.lgamma, torch.digamma,
    lambda x: torch.cumsum(x, 0), lambda x: torch.cumprod(x, 0),
    lambda x: torch.sort(x).values, lambda x: torch.argsort(x),
    lambda x: torch.flip(x, (0,)), lambda x: torch.roll(x, 3),
    lambda x: torch.topk(x, 5).values, torch.atan, torch.asinh,
    lambda x: torch.kthvalue(x.cpu(), 3).values.cuda(),
]


@pytest.mark.parametrize("mode", ["read", "write"])
def test_no_hang_with_a_synchronizing_thread_and_lazy_kernels(
        scratch, rng, mode):
    size = 32 << 20
    data = random_file(scratch / "f", size, rng)
    dev = phxio.device("cuda:0")
    t = torch.zeros(size, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    x = torch.rand(1 << 16, device="cuda") + 0.5
    stop = threading.Event()

    def synchronizer() -> None:
        while not stop.is_set():
            s.synchronize()

    th = threading.Thread(target=synchronizer)
    th.start()
    try:
        for i, first in enumerate(FIRSTS):
            if mode == "write":
                t.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                torch.cuda.synchronize()
            with torch.cuda.stream(s):
                a = torch.rand(2048, 2048, device="cuda")
                busy = a @ a  # the transfer queues behind real work
                if mode == "read":
                    tr = phxio.read_into(scratch / "f", t, stream=s)
                else:
                    tr = phxio.write_from(scratch / "out", t, stream=s)
                y = first(x)  # a first launch right behind it
                t.add_(1)
            assert tr.wait() == size, f"round {i}"
            s.synchronize()
            assert torch.isfinite(busy).all()
            assert y.numel() > 0
            got = t.cpu().numpy()
            want = (np.frombuffer(data, np.uint8) + 1).astype(np.uint8)
            assert got.tobytes() == want.tobytes(), f"round {i}"
            if mode == "write":
                assert (scratch / "out").read_bytes() == data, f"round {i}"
    finally:
        stop.set()
        th.join()
    del dev
