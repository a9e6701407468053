"""libphxfile.so replaying LMCache 0.5.6's "phx" backend call for call.

The released backend (lmcache/v1/gpu_connector/gds_backends/phx.py with
gds_context.py) never calls phxFileDriverOpen: the first native call is
phxFileHandleRegister at slab open, then phxFileStreamRegister, then
phxFileBufRegister on <= 16 MiB slices of a staging buffer; chunks are
cut at those slices' edges into phxFileReadAsync/WriteAsync calls on the
slice's base with buf_offset inside it; shutdown deregisters buffers
(some it never registered), the stream and the handle, and the last
owner calls phxFileDriverClose.

On the simulated device the Python package and libphxfile.so are two
copies of libphoenix, so a transfer queued by libphxfile is waited for
with a completion libphxfile documents: phxFileStreamDeregister returns
once everything it queued on the stream is done and bytes_done written.
"""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

import phxio
from conftest import random_file
from phxfile_abi import Op, handle, library_path, load_like_lmcache

pytestmark = pytest.mark.skipif(phxio.default_kind()[0] == "cuda",
                                reason="host views need the simulated device")

MAX_REGION = 16 << 20  # gds_context._MAX_GDS_REGION
ALIGN = 4096  # gds_context._GDS_ALIGNMENT


@pytest.fixture
def lib():
    """The library with no session: each test starts and ends one."""
    lib = load_like_lmcache(library_path())
    assert lib.phxFileDriverClose() == 0
    yield lib
    assert lib.phxFileDriverClose() == 0


class Staging:
    """A device buffer registered the way GDSContext.register_gpu_buffer
    does it: one registration per <= 16 MiB region, bases kept sorted."""

    def __init__(self, lib, dev: phxio.Device, size: int):
        self.lib = lib
        self.buf = dev.alloc(size)
        self.size = size
        self.bases = []
        for start in range(0, size, MAX_REGION):
            n = min(MAX_REGION, size - start)
            base = self.buf.dptr + start
            assert lib.phxFileBufRegister(ctypes.c_void_p(base), n) == 0
            self.bases.append((base, n))

    def segments(self, pos: int, nbytes: int):
        """GDSContext.transfer_async's cut: (base, offset in it, length)
        per registered region the chunk at @pos touches."""
        done = 0
        while done < nbytes:
            ptr = self.buf.dptr + pos + done
            base, n = max((b for b in self.bases if b[0] <= ptr),
                          key=lambda b: b[0])
            seg = min(nbytes - done, n - (ptr - base))
            yield base, ptr - base, seg
            done += seg

    def deregister(self):
        for base, _ in self.bases:
            assert self.lib.phxFileBufDeregister(ctypes.c_void_p(base)) == 0


def open_slab(path, size: int) -> int:
    """FileGDSBackend.open_slab: create, preallocate, reopen O_DIRECT."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    try:
        return os.open(path, os.O_RDWR | os.O_DIRECT)
    except OSError:
        return os.open(path, os.O_RDWR)  # tmpfs: LMCache's direct_io=False


def submit(lib, fn, fh, staging, pos, nbytes, slab_off, raw):
    """Every segment of one chunk, each with its own kept-alive Op."""
    ops = []
    done = 0
    for base, off, seg in staging.segments(pos, nbytes):
        op = Op(seg, slab_off + done, off)
        assert fn(fh, ctypes.c_void_p(base), *op.args(),
                  ctypes.c_void_p(raw)) == 0
        ops.append(op)
        done += seg
    return ops


@pytest.mark.parametrize("use_stream", [False, True],
                         ids=["default-stream", "stream"])
def test_lmcache_order(lib, scratch, rng, use_stream):
    dev = phxio.device()
    slab_size = 48 << 20
    # chunk sizes LMCache uses, placed so some cross a 16 MiB region edge
    chunks = [(16 << 10, 4096), (256 << 10, MAX_REGION - (100 << 10)),
              (4 << 20, 2 * MAX_REGION - (1 << 20) - 4096),
              (16 << 20, 300 << 10)]
    slab_offsets = [ALIGN * int(x) for x in
                    rng.permutation(slab_size // ALIGN // (16 << 8))[:4]
                    * (16 << 8)]
    src_bytes = random_file(scratch / "src", 40 << 20, rng)

    fd = open_slab(scratch / "lmcache_gds_slab.bin", slab_size)
    fh = handle(lib, fd)  # the first native call
    native = dev.stream() if use_stream else None
    raw = native.native if native else 0
    assert lib.phxFileStreamRegister(ctypes.c_void_p(raw)) == 0
    src = Staging(lib, dev, 40 << 20)
    dst = Staging(lib, dev, 40 << 20)
    src.buf.copy_from_host(src_bytes)

    writes = [submit(lib, lib.phxFileWriteAsync, fh, src, pos, n, off, raw)
              for (n, pos), off in zip(chunks, slab_offsets)]
    # queued behind the writes on the same stream: reads see their bytes
    reads = [submit(lib, lib.phxFileReadAsync, fh, dst, pos, n, off, raw)
             for (n, pos), off in zip(chunks, slab_offsets)]
    assert any(op.buf_offset.value for ops in writes + reads for op in ops)
    assert any(len(ops) > 1 for ops in reads)

    # the stream sync (documented completion), then
    # GDSContext.deregister_gpu_buffer: regions, then the stream
    assert lib.phxFileStreamDeregister(ctypes.c_void_p(raw)) == 0
    for ops in writes + reads:
        for op in ops:
            assert op.bytes_done.value == op.nbytes.value
    src.deregister()
    dst.deregister()
    assert lib.phxFileStreamDeregister(ctypes.c_void_p(raw)) == 0

    slab = (scratch / "lmcache_gds_slab.bin").read_bytes()
    for (n, pos), off in zip(chunks, slab_offsets):
        assert slab[off:off + n] == src_bytes[pos:pos + n]
        assert dst.buf.to_bytes(pos, n) == src_bytes[pos:pos + n]

    # GDSContext.close: its sweep deregisters again, then the slab handle,
    # then the last owner closes the driver it never opened
    src.deregister()
    dst.deregister()
    assert lib.phxFileHandleDeregister(fh) == 0
    os.close(fd)
    assert lib.phxFileDriverClose() == 0
    if native:
        native.close()


def test_session_ends_at_close_and_reopens(lib, scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    dev = phxio.device()
    buf = dev.alloc(1 << 20)
    addr = ctypes.c_void_p(buf.dptr)
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(lib, fd)

    assert lib.phxFileBufRegister(addr, 1 << 20) == 0  # opens a session
    ops = [Op(1 << 18, i << 18, i << 18) for i in range(4)]
    for op in ops:
        assert lib.phxFileReadAsync(fh, addr, *op.args(), None) == 0
    # ending the session waits for what it queued, forgets registrations
    assert lib.phxFileDriverClose() == 0
    assert [op.bytes_done.value for op in ops] == [1 << 18] * 4
    assert buf.to_bytes() == data
    assert lib.phxFileBufRegister(addr, 1 << 20) == 0
    assert lib.phxFileDriverClose() == 0
    assert lib.phxFileDriverClose() == 0  # no session: nothing to do

    # the handle outlives sessions; the next call opens a new one
    op = Op(1000, 5, 7)
    assert lib.phxFileReadAsync(fh, addr, *op.args(), None) == 0
    assert lib.phxFileStreamDeregister(None) == 0
    assert op.bytes_done.value == 1000
    assert buf.to_bytes(7, 1000) == data[5:1005]
    assert lib.phxFileHandleDeregister(fh) == 0
    os.close(fd)


def test_explicit_opens_are_counted(lib):
    buf = phxio.device().alloc(1 << 16)
    addr = ctypes.c_void_p(buf.dptr)
    for _ in range(3):  # three owners
        assert lib.phxFileDriverOpen() == 0
    assert lib.phxFileBufRegister(addr, 1 << 16) == 0
    for _ in range(2):
        assert lib.phxFileDriverClose() == 0
        # the session lives on: the registration is still there
        assert lib.phxFileBufRegister(addr, 1 << 16) == -errno.EEXIST
    assert lib.phxFileDriverClose() == 0  # the last owner
    assert lib.phxFileBufRegister(addr, 1 << 16) == 0
    assert lib.phxFileBufDeregister(addr) == 0


def test_bad_arguments_are_refused(lib):
    fh = ctypes.c_void_p()
    assert lib.phxFileHandleRegister(ctypes.byref(fh), 987654) == -errno.EBADF
    assert lib.phxFileHandleRegister(None, 0) == -errno.EINVAL
    assert lib.phxFileHandleDeregister(None) == -errno.EINVAL
    assert lib.phxFileBufRegister(None, 10) == -errno.EINVAL
    assert lib.phxFileBufRegister(ctypes.c_void_p(4096), 0) == -errno.EINVAL
    op = Op(10, 0)
    assert lib.phxFileReadAsync(None, ctypes.c_void_p(4096), *op.args(),
                                None) == -errno.EINVAL
    assert lib.phxFileStreamDeregister(ctypes.c_void_p(12345)) == 0


def test_gpu_script_imports_lmcache_backend():
    """The GPU test's import of LMCache's module, as far as this machine
    allows (it needs the wheel in .whl/; torch only on the GPU)."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    if not list(repo.glob(".whl/lmcache-0.5.6-*.whl")):
        pytest.skip("no lmcache 0.5.6 wheel in .whl/")
    build = Path(library_path()).parent
    out = subprocess.run([sys.executable, str(Path(__file__).parent /
                                              "lmcache_phx_gpu.py"),
                          "--check", "--build", str(build)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "import check passed" in out.stdout or "PASS" in out.stdout
