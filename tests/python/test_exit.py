"""No crash at exit, whatever order devices, streams and buffers go in.

Each case runs in a fresh interpreter and must end with status 0 and
nothing on stderr: a segmentation fault (status -11) or an exception
ignored in a finalizer fails it.  They run on the default device: sim
here, the GPU with PHX_DEVICE=cuda.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import phxio

PRELUDE = """
import atexit, gc, os, sys
import phxio
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(os.urandom(3 << 20))
"""

CASES = {
    # left to interpreter shutdown: module globals, newest first or not
    "globals": """
dev = phxio.Device()
s = dev.stream()
buf = dev.alloc(3 << 20)
tr = phxio.read_into(path, buf, stream=s)
assert tr.wait() == 3 << 20
w = dev.wrap_stream(s.native)
""",
    # the same through the shared devices and the stream cache
    "shared": """
dev = phxio.device()
s = dev.stream()
buf = dev.alloc(3 << 20)
phxio.read_into(path, buf, stream=s.native).wait()
phxio.read_into(path, buf, stream=s).wait()
""",
    # the device closed before its stream and buffer, which are used and
    # released afterwards
    "device-closed-first": """
dev = phxio.Device()
s = dev.stream()
buf = dev.alloc(3 << 20)
dev.close()
buf.copy_from_host(b"abcd")
assert buf.to_bytes(0, 4) == b"abcd"
try:
    phxio.read_into(path, buf)
except phxio.PhoenixError as exc:
    assert "is closed" in str(exc), exc
else:
    raise AssertionError("a closed device moved bytes")
s.synchronize()
s.close()
buf.free()
""",
    # the device dropped first, then the rest by reference counting
    "device-deleted-first": """
dev = phxio.Device()
s = dev.stream()
buf = dev.alloc(3 << 20)
del dev
del s
del buf
""",
    # a reference cycle that only the garbage collector frees
    "cycle": """
class Holder:
    pass
h = Holder()
h.dev = phxio.Device()
h.s = h.dev.stream()
h.buf = h.dev.alloc(3 << 20)
h.me = h
h.dev.me = h
del h
gc.collect()
dev = phxio.Device()
h2 = Holder()
h2.s = dev.stream()
h2.buf = dev.alloc(1 << 20)
h2.me = h2
del h2, dev
""",
    # released by an atexit handler that runs after phxio's own
    "atexit-late": """
keep = []
def late():
    keep.clear()
atexit.register(late)
dev = phxio.Device()
keep += [dev.stream(), dev.alloc(1 << 20), dev]
""",
    # released by an atexit handler that runs before phxio's own
    "atexit-early": """
dev = phxio.Device()
s = dev.stream()
buf = dev.alloc(1 << 20)
def early():
    global dev, s, buf
    dev.close()
    del dev, s, buf
atexit.register(early)
""",
    # a buffer's stream-ordered transfer still referenced at exit
    "transfer-pending": """
dev = phxio.Device()
s = dev.stream()
buf = dev.alloc(3 << 20)
tr = phxio.read_into(path, buf, stream=s)
""",
    # sys.exit from inside a with block, and os._exit's cousin: an
    # exception escaping to the top level
    "exception": """
with phxio.Device() as dev:
    s = dev.stream()
    buf = dev.alloc(1 << 20)
    raise SystemExit(0)
""",
}

TORCH_CASES = {
    # torch's stream wrapped (and cached) by phxio; torch and phxio both
    # shut down afterwards
    "torch-stream": """
import torch
t = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
for _ in range(3):
    phxio.read_into(path, t, stream=s).wait()
phxio.read_into(path, t, stream=torch.cuda.current_stream()).wait()
""",
    # the torch stream is gone before phxio's wrapper of it
    "torch-stream-gone": """
import torch
t = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
phxio.read_into(path, t, stream=s).wait()
del s
gc.collect()
s2 = torch.cuda.Stream()
phxio.read_into(path, t, stream=s2).wait()
""",
}


def _run(body: str, tmp_path) -> None:
    code = PRELUDE + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert r.returncode == 0 and not r.stderr.strip(), \
        f"exit status {r.returncode}, stderr:\n{r.stderr}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_crash_at_exit(case, tmp_path):
    _run(CASES[case], tmp_path)


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and phxio.default_kind()[0] == "cuda"


@pytest.mark.skipif(not _torch_cuda(),
                    reason="needs torch with CUDA and PHX_DEVICE=cuda")
@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_no_crash_at_exit_torch(case, tmp_path):
    _run(TORCH_CASES[case], tmp_path)
