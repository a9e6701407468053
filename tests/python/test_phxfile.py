"""libphxfile.so driven the way LMCache drives it: ctypes, its argtypes."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import subprocess

import numpy as np
import pytest

import phxio
from conftest import random_file
from phxfile_abi import ABI, Op, handle, library_path, load_like_lmcache

pytestmark = pytest.mark.skipif(phxio.default_kind()[0] == "cuda",
                                reason="host views need the simulated device")


@pytest.fixture(scope="module")
def phx():
    lib = load_like_lmcache(library_path())
    assert lib.phxFileDriverOpen() == 0
    yield lib
    assert lib.phxFileDriverClose() == 0


@contextlib.contextmanager
def stream(lib, dev: phxio.Device):
    """A stream known to the library from registration to deregistration,
    as the ABI asks: a stream must outlive its registration."""
    with dev.stream() as s:
        assert lib.phxFileStreamRegister(ctypes.c_void_p(s.native)) == 0
        try:
            yield s
        finally:
            assert lib.phxFileStreamDeregister(ctypes.c_void_p(s.native)) == 0


def test_exports_exactly_the_abi():
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("nm not installed")
    out = subprocess.run([nm, "-D", "--defined-only", library_path()],
                         check=True, capture_output=True, text=True).stdout
    names = sorted(line.split()[-1] for line in out.splitlines()
                   if line.split()[1:2] and line.split()[1] in "TWDBR")
    assert names == sorted(ABI)


def test_buf_register(phx):
    dev = phxio.device()
    buf = dev.alloc(1 << 20)
    addr = ctypes.c_void_p(buf.dptr)
    assert phx.phxFileBufRegister(addr, 1 << 20) == 0
    assert phx.phxFileBufRegister(addr, 1 << 20) == -errno.EEXIST
    assert phx.phxFileBufRegister(None, 10) == -errno.EINVAL
    assert phx.phxFileBufDeregister(addr) == 0
    # LMCache deregisters bases it may not have registered
    assert phx.phxFileBufDeregister(addr) == 0
    assert phx.phxFileBufDeregister(ctypes.c_void_p(4096)) == 0
    assert phx.phxFileBufRegister(addr, 1 << 20) == 0
    assert phx.phxFileBufDeregister(addr) == 0


def test_read_and_write_on_a_stream(phx, scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    dev = phxio.device()
    buf = dev.alloc(1 << 20)
    fd = os.open(scratch / "f", os.O_RDONLY)
    wfd = os.open(scratch / "out", os.O_RDWR | os.O_CREAT, 0o644)
    fh, wfh = handle(phx, fd), handle(phx, wfd)
    with stream(phx, dev) as s:
        rd = Op(300000, 4096, 512)
        wr = Op(300000, 7, 512)
        assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                    *rd.args(), ctypes.c_void_p(s.native)) == 0
        # queued behind the read on the same stream: sees its data
        assert phx.phxFileWriteAsync(wfh, ctypes.c_void_p(buf.dptr),
                                     *wr.args(), ctypes.c_void_p(s.native)) == 0
        s.synchronize()
        assert rd.bytes_done.value == 300000
        assert wr.bytes_done.value == 300000
    assert buf.to_bytes(512, 300000) == data[4096:4096 + 300000]
    assert buf.to_bytes(0, 512) == bytes(512)
    assert (scratch / "out").read_bytes()[7:] == data[4096:4096 + 300000]
    assert phx.phxFileHandleDeregister(fh) == 0
    assert phx.phxFileHandleDeregister(wfh) == 0
    os.close(fd)
    os.close(wfd)


def test_values_changed_after_queueing_are_refused(phx, scratch, rng):
    """The values are read when the call is made, as on a cuFile stream
    with the three FIXED flags (how LMCache uses both): change them after
    queueing, while the stream is still busy with earlier work, and the
    transfer fails with -EINVAL, bringing the bytes of the values as
    queued or zeros, never others.
    The other ways of holding a stream read them when the stream gets
    there: the new values are used."""
    late = os.environ.get("PHX_STREAM_WAIT") in ("kernel", "host", "device")
    size = 16 << 20
    data = random_file(scratch / "f", size, rng)
    dev = phxio.device()
    blocker_dst = dev.alloc(size)
    buf = dev.alloc(1 << 20)
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(phx, fd)
    for attempt in range(6):
        buf.copy_from_host(b"\xa5" * 100)
        with stream(phx, dev) as s:
            blocker = phxio.read_into(scratch / "f", blocker_dst, stream=s)
            op = Op(10, 0, 0)
            assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                        *op.args(),
                                        ctypes.c_void_p(s.native)) == 0
            op.nbytes.value = 4096
            op.file_offset.value = 8192 + attempt
            op.buf_offset.value = 100
            still_busy = not blocker.done()
            assert blocker.wait() == size
        if still_busy and late:
            # changed before the stream reached the read: new values
            assert op.bytes_done.value == 4096
            assert buf.to_bytes(100, 4096) == \
                data[8192 + attempt:8192 + attempt + 4096]
            break
        if still_busy:
            # changed before the read was done: refused; the buffer has
            # the bytes of the values as queued, or zeros, nothing else
            assert op.bytes_done.value == -errno.EINVAL
            assert buf.to_bytes(0, 10) in (bytes(10), data[:10])
            assert buf.to_bytes(10, 90) == b"\xa5" * 90
            break
        # the read was done before the change: the old values were used
        assert op.bytes_done.value in (10, 4096 if late else -errno.EINVAL)
    else:
        pytest.skip("the blocking read always finished first")
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_bytes_done_written_at_completion(phx, scratch, rng):
    data = random_file(scratch / "f", 10000, rng)
    dev = phxio.device()
    buf = dev.alloc(1 << 16)
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(phx, fd)
    with stream(phx, dev) as s:
        short = Op(8192, 6000)
        past = Op(100, 50000)
        bad = Op(100, 0, -1)
        for op in (short, past, bad):
            assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                        *op.args(),
                                        ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert short.bytes_done.value == 4000
    assert buf.to_bytes(0, 4000) == data[6000:]
    assert past.bytes_done.value == 0
    assert bad.bytes_done.value == -errno.EINVAL
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_write_only_fd_fails_read_with_ebadf(phx, scratch):
    dev = phxio.device()
    buf = dev.alloc(4096)
    fd = os.open(scratch / "w", os.O_WRONLY | os.O_CREAT, 0o644)
    fh = handle(phx, fd)
    with stream(phx, dev) as s:
        op = Op(100, 0)
        assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                    *op.args(), ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert op.bytes_done.value == -errno.EBADF
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_ranges_that_do_not_fit_are_refused(phx, scratch):
    """A length past INT64_MAX, an end that wraps, or one past the end of
    a registered buffer: refused, nothing moved."""
    dev = phxio.device()
    buf = dev.alloc(4 << 20)
    addr = ctypes.c_void_p(buf.dptr)
    fd = os.open(scratch / "w", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    fh = handle(phx, fd)
    assert phx.phxFileBufRegister(addr, 4 << 20) == 0
    with stream(phx, dev) as s:
        for op in (Op(2**64 - 1, 0), Op(2**63 - 1, 10), Op(4096, 0, 4 << 20),
                   Op((4 << 20) + 1, 0)):
            for call in (phx.phxFileWriteAsync, phx.phxFileReadAsync):
                assert call(fh, addr, *op.args(),
                            ctypes.c_void_p(s.native)) == -errno.EINVAL
        s.synchronize()
    assert phx.phxFileBufDeregister(addr) == 0
    # unregistered: the library refuses the range when the stream gets there
    with stream(phx, dev) as s:
        ops = [Op(2**64 - 1, 0), Op(2**63 - 1, 10)]
        for op in ops:
            assert phx.phxFileWriteAsync(fh, addr, *op.args(),
                                         ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert [op.bytes_done.value for op in ops] == [-errno.EINVAL] * 2
    assert os.fstat(fd).st_size == 0
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_handle_deregistered_twice_is_refused(phx, scratch):
    fd = os.open(scratch / "h", os.O_RDWR | os.O_CREAT, 0o644)
    fh = handle(phx, fd)
    other = handle(phx, fd)
    assert phx.phxFileHandleDeregister(fh) == 0
    assert phx.phxFileHandleDeregister(fh) == -errno.EINVAL
    assert phx.phxFileHandleDeregister(None) == -errno.EINVAL
    assert phx.phxFileHandleDeregister(other) == 0
    os.close(fd)


def test_default_stream(phx, scratch, rng):
    data = random_file(scratch / "f", 100000, rng)
    buf = phxio.device().alloc(100000)
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(phx, fd)
    op = Op(100000, 0)
    assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr), *op.args(),
                                None) == 0
    # bytes_done is valid once the stream's work is done, not before: the
    # bytes may still be on their way into the buffer when it is written.
    # Deregistering a stream waits for what the library queued on it.
    assert phx.phxFileStreamDeregister(None) == 0
    assert op.bytes_done.value == 100000
    assert buf.to_bytes() == data
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_o_direct_fd(phx, scratch, rng):
    data = random_file(scratch / "f", 3 << 20, rng)
    try:
        fd = os.open(scratch / "f", os.O_RDONLY | os.O_DIRECT)
    except OSError:
        pytest.skip("this file system has no O_DIRECT")
    buf = phxio.device().alloc(3 << 20)
    fh = handle(phx, fd)
    with stream(phx, phxio.device()) as s:
        op = Op((2 << 20) + 3, 4095, 1)
        assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                    *op.args(), ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert op.bytes_done.value == (2 << 20) + 3
    assert buf.to_bytes(1, (2 << 20) + 3) == data[4095:4095 + (2 << 20) + 3]
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_many_ops_in_flight(phx, scratch, rng):
    data = random_file(scratch / "f", 4 << 20, rng)
    dev = phxio.device()
    buf = dev.alloc(4 << 20)
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(phx, fd)
    ops = []
    with stream(phx, dev) as s:
        for i in range(64):
            op = Op(65536, (63 - i) * 65536, i * 65536)
            ops.append(op)
            assert phx.phxFileReadAsync(fh, ctypes.c_void_p(buf.dptr),
                                        *op.args(),
                                        ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert all(op.bytes_done.value == 65536 for op in ops)
    got = np.frombuffer(buf.to_bytes(), np.uint8).reshape(64, 65536)
    ref = np.frombuffer(data, np.uint8).reshape(64, 65536)
    assert (got == ref[::-1]).all()
    phx.phxFileHandleDeregister(fh)
    os.close(fd)


def test_transfer_on_a_handle_that_is_not_live_is_refused(phx, scratch, rng):
    """A handle used after its deregistration, or a pointer that never
    was one (here: memory that looks like a handle of an open file), is
    -EINVAL: nothing queued, nothing moved, bytes_done untouched."""
    random_file(scratch / "f", 8192, rng)
    dev = phxio.device()
    buf = dev.alloc(8192)
    buf.copy_from_host(b"\x5a" * 8192)
    fd = os.open(scratch / "f", os.O_RDWR)
    gone = handle(phx, fd)
    assert phx.phxFileHandleDeregister(gone) == 0
    fake = ctypes.create_string_buffer(fd.to_bytes(4, "little") + bytes(12))
    with stream(phx, dev) as s:
        for fh in (gone, ctypes.c_void_p(ctypes.addressof(fake))):
            for call in (phx.phxFileReadAsync, phx.phxFileWriteAsync):
                op = Op(4096, 0)
                assert call(fh, ctypes.c_void_p(buf.dptr), *op.args(),
                            ctypes.c_void_p(s.native)) == -errno.EINVAL
                s.synchronize()
                assert op.bytes_done.value == Op(0, 0).bytes_done.value
    assert buf.to_bytes() == b"\x5a" * 8192
    assert os.fstat(fd).st_size == 8192
    os.close(fd)


def test_null_buffer_is_refused(phx, scratch, rng):
    """No device memory lives at address 0: a NULL buf_base is -EINVAL,
    whatever buf_offset points past it, and nothing is queued."""
    random_file(scratch / "f", 8192, rng)
    fd = os.open(scratch / "f", os.O_RDWR)
    fh = handle(phx, fd)
    with stream(phx, phxio.device()) as s:
        for call in (phx.phxFileReadAsync, phx.phxFileWriteAsync):
            for buf_offset in (0, 4096):
                op = Op(4096, 0, buf_offset)
                assert call(fh, None, *op.args(),
                            ctypes.c_void_p(s.native)) == -errno.EINVAL
                s.synchronize()
                assert op.bytes_done.value == Op(0, 0).bytes_done.value
    assert os.fstat(fd).st_size == 8192
    assert phx.phxFileHandleDeregister(fh) == 0
    os.close(fd)


def test_buf_register_range_that_wraps_is_refused(phx):
    """A length that runs past the end of the address space is -EINVAL,
    and nothing is recorded: the base can be registered afterwards."""
    buf = phxio.device().alloc(1 << 20)
    addr = ctypes.c_void_p(buf.dptr)
    for length in (2**64 - 1, 2**64 - buf.dptr + 1):
        assert phx.phxFileBufRegister(addr, length) == -errno.EINVAL
    # up to the last byte of the address space: no wrap
    assert phx.phxFileBufRegister(addr, 2**64 - buf.dptr) == 0
    assert phx.phxFileBufDeregister(addr) == 0
    assert phx.phxFileBufRegister(addr, 1 << 20) == 0
    assert phx.phxFileBufDeregister(addr) == 0


def test_buf_register_overlapping_is_refused(phx, scratch, rng):
    """A range that overlaps a registered one is -EEXIST, as its base
    would be, so which registration bounds a transfer never depends on
    the order they were made in; ranges that only touch are two."""
    data = random_file(scratch / "f", 1 << 20, rng)
    buf = phxio.device().alloc(1 << 20)
    base = buf.dptr
    assert phx.phxFileBufRegister(ctypes.c_void_p(base), 1 << 20) == 0
    for addr, length in ((base + 4096, 4096), (base - 4096, 8192),
                         (base + (1 << 20) - 1, 4096), (base - 1, 2)):
        assert phx.phxFileBufRegister(ctypes.c_void_p(addr),
                                      length) == -errno.EEXIST
    assert phx.phxFileBufRegister(ctypes.c_void_p(base + (1 << 20)),
                                  4096) == 0
    # bounded by the one registration that holds it
    fd = os.open(scratch / "f", os.O_RDONLY)
    fh = handle(phx, fd)
    with stream(phx, phxio.device()) as s:
        op = Op(8192, 0)
        assert phx.phxFileReadAsync(fh, ctypes.c_void_p(base + 4096),
                                    *op.args(),
                                    ctypes.c_void_p(s.native)) == 0
        s.synchronize()
    assert op.bytes_done.value == 8192
    assert buf.to_bytes(4096, 8192) == data[:8192]
    assert phx.phxFileBufDeregister(ctypes.c_void_p(base + (1 << 20))) == 0
    assert phx.phxFileBufDeregister(ctypes.c_void_p(base)) == 0
    assert phx.phxFileHandleDeregister(fh) == 0
    os.close(fd)
