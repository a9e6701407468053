"""read_into / write_from / batches: random data, offsets, destinations."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import phxio
from conftest import needs_host_views, random_file

SIZES = [1, 4095, 4096, 65537, 3 << 20]


@pytest.mark.parametrize("size", SIZES)
def test_read_into_buffer_random_offsets(dev, scratch, rng, size):
    data = random_file(scratch / "f", size + 9000, rng)
    buf = dev.alloc(size)
    for off in (0, 1, 4096, int(rng.integers(0, 9000))):
        got = phxio.read_into(scratch / "f", buf, off)
        assert got == size
        assert buf.to_bytes() == data[off:off + size]


def test_read_into_sparse_buffer_backs_what_it_fills(dev, scratch, rng):
    """A sparse buffer (as phxfs files are) is backed by the read itself,
    whole or through a view at an offset, and the bytes are written back
    out as they came in."""
    data = random_file(scratch / "f", 8 << 20, rng)
    buf = dev.alloc(16 << 20, sparse=True)
    assert buf.committed == 0
    assert phxio.read_into(scratch / "f", buf[4 << 20:12 << 20]) == 8 << 20
    assert 8 << 20 <= buf.committed < 16 << 20
    assert buf.to_bytes(4 << 20, 8 << 20) == data
    assert buf.to_bytes(0, 4096) == bytes(4096)
    phxio.write_from(scratch / "g", buf[4 << 20:12 << 20])
    assert (scratch / "g").read_bytes() == data
    assert phxio.read_batch(scratch / "f", [(0, 4096, buf[0:4096])]) == \
        [4096]
    assert buf.to_bytes(0, 4096) == data[:4096]


def test_read_into_short_at_eof(dev, scratch, rng):
    data = random_file(scratch / "f", 10000, rng)
    buf = dev.alloc(16384)
    assert phxio.read_into(scratch / "f", buf, 6000) == 4000
    assert buf.to_bytes(0, 4000) == data[6000:]
    assert phxio.read_into(scratch / "f", buf, 20000) == 0


def test_read_into_fd_and_file_object(dev, scratch, rng):
    data = random_file(scratch / "f", 100000, rng)
    buf = dev.alloc(50000)
    fd = os.open(scratch / "f", os.O_RDONLY)
    try:
        assert phxio.read_into(fd, buf, 777) == 50000
        assert buf.to_bytes() == data[777:50777]
        os.fstat(fd)  # still ours, still open
    finally:
        os.close(fd)
    with open(scratch / "f", "rb") as f:
        assert phxio.read_into(f, buf, 5, size=100) == 100
    assert buf.to_bytes(0, 100) == data[5:105]


@needs_host_views
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32,
                                   np.float64, np.complex64])
def test_read_into_numpy_arrays(scratch, rng, dtype):
    data = random_file(scratch / "f", 1 << 20, rng)
    arr = np.zeros((37, 91), dtype=dtype)
    off = int(rng.integers(0, 4096))
    assert phxio.read_into(scratch / "f", arr, off) == arr.nbytes
    assert arr.tobytes() == data[off:off + arr.nbytes]


@needs_host_views
def test_read_into_bytearray_and_views(dev, scratch, rng):
    data = random_file(scratch / "f", 200000, rng)
    ba = bytearray(1000)
    assert phxio.read_into(scratch / "f", ba, 3) == 1000
    assert bytes(ba) == data[3:1003]
    buf = dev.alloc(100000)
    window = buf[4096:8192]
    assert phxio.read_into(scratch / "f", window, 10) == 4096
    assert buf.to_bytes(4096, 4096) == data[10:4106]
    assert buf.to_bytes(0, 4096) == bytes(4096)
    v = buf.view("F32", (10, 10), 400)
    assert phxio.read_into(scratch / "f", v, 0) == 400
    assert np.asarray(v).tobytes() == data[:400]


@needs_host_views
def test_readonly_and_noncontiguous_targets_refused(scratch, rng):
    random_file(scratch / "f", 4096, rng)
    with pytest.raises(ValueError):
        phxio.read_into(scratch / "f", b"immutable", 0)
    arr = np.zeros((10, 10), np.uint8)
    with pytest.raises(ValueError):
        phxio.read_into(scratch / "f", arr[:, ::2], 0)
    with pytest.raises(TypeError):
        phxio.read_into(scratch / "f", object(), 0)
    with pytest.raises(ValueError):
        phxio.read_into(scratch / "f", arr, 0, size=101)


@needs_host_views
def test_readonly_array_is_not_read_into(scratch, rng):
    """A read-only NumPy array (its DLPack export says so) is refused as a
    target, alone or in a batch, and left as it was; it may be written
    from."""
    data = random_file(scratch / "f", 4096, rng)
    arr = np.zeros(64, np.uint8)
    arr.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        phxio.read_into(scratch / "f", arr)
    with pytest.raises(ValueError, match="read-only"):
        phxio.read_batch(scratch / "f", [(0, 64, arr)])
    assert not arr.any()
    src = np.frombuffer(data[:64], np.uint8)
    assert phxio.write_from(scratch / "out", src) == 64
    assert (scratch / "out").read_bytes() == data[:64]


@pytest.mark.parametrize("size", SIZES)
def test_write_from_round_trip(dev, scratch, rng, size):
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    buf = dev.alloc(size)
    buf.copy_from_host(data)
    assert phxio.write_from(scratch / "out", buf) == size
    assert (scratch / "out").read_bytes() == data
    # at an offset, into an existing file: the rest is kept
    assert phxio.write_from(scratch / "out", buf, 1000, size=1) == 1
    back = (scratch / "out").read_bytes()
    assert back[1000:1001] == data[:1]
    assert back[:1000] == data[:1000] or size <= 1000


@needs_host_views
def test_write_from_numpy_and_truncate(scratch, rng):
    (scratch / "out").write_bytes(b"x" * 100000)
    arr = rng.standard_normal(1000).astype(np.float32)
    assert phxio.write_from(scratch / "out", arr) == 4000
    assert (scratch / "out").read_bytes() == arr.tobytes()


def test_write_to_readonly_fd_is_ebadf(dev, scratch, rng):
    random_file(scratch / "f", 4096, rng)
    buf = dev.alloc(4096)
    fd = os.open(scratch / "f", os.O_RDONLY)
    try:
        with pytest.raises(phxio.PhoenixError) as ei:
            phxio.write_from(fd, buf)
        assert ei.value.errno == errno.EBADF
        assert f"fd {fd}" in str(ei.value)
    finally:
        os.close(fd)


def test_missing_file(dev, scratch):
    with pytest.raises(FileNotFoundError):
        phxio.read_into(scratch / "nope", dev.alloc(10))


def test_read_batch_random_triples(dev, scratch, rng):
    size = 4 << 20
    data = random_file(scratch / "f", size, rng)
    buf = dev.alloc(size)
    items, expect = [], []
    pos = 0
    for _ in range(200):
        n = int(rng.integers(1, 65536))
        off = int(rng.integers(0, size - n))
        if pos + n > size:
            break
        items.append((off, n, buf[pos:pos + n]))
        expect.append((pos, data[off:off + n]))
        pos += n
    got = phxio.read_batch(scratch / "f", items)
    assert got == [n for _, n, _ in items]
    for p, chunk in expect:
        assert buf.to_bytes(p, len(chunk)) == chunk


@needs_host_views
def test_read_batch_into_numpy_and_eof(scratch, rng):
    data = random_file(scratch / "f", 10000, rng)
    a, b = np.zeros(100, np.uint8), np.zeros(5000, np.uint8)
    got = phxio.read_batch(scratch / "f", [(0, 100, a), (9000, 5000, b)])
    assert got == [100, 1000]
    assert a.tobytes() == data[:100] and b[:1000].tobytes() == data[9000:]


def test_write_batch_round_trip(dev, scratch, rng):
    buf = dev.alloc(1 << 20)
    src = rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    buf.copy_from_host(src)
    items = [(i * 10000, 5000, buf[i * 5000:(i + 1) * 5000])
             for i in range(50)]
    assert phxio.write_batch(scratch / "out", items) == [5000] * 50
    out = (scratch / "out").read_bytes()
    for i in range(50):
        assert out[i * 10000:i * 10000 + 5000] == src[i * 5000:(i + 1) * 5000]


def test_batch_entry_error_names_entry(dev, scratch, rng):
    random_file(scratch / "f", 100, rng)
    buf = dev.alloc(100)
    with pytest.raises(ValueError) as ei:
        phxio.read_batch(scratch / "f", [(0, 10, buf), (-5, 10, buf)])
    assert "entry 1" in str(ei.value)
    assert phxio.read_batch(scratch / "f", []) == []
    assert phxio.read_batch(scratch / "f",
                            [(np.int64(5), np.uint32(10), buf)]) == [10]


@pytest.mark.parametrize("bad, err, what", [
    ((-4096, 4096), ValueError, "file offset -4096 is negative"),
    ((0, -1), ValueError, "size -1 is negative"),
    ((-1, -1), ValueError, "file offset -1 is negative"),
    ((1 << 63, 1), ValueError, f"file offset {1 << 63} "),
    (((1 << 63) - 1, 1), ValueError, f"file offset {(1 << 63) - 1} "),
    ((True, 10), TypeError, "file offset True is not an int"),
    ((0, 2.5), TypeError, "size 2.5 is not an int"),
    ((0, None), TypeError, "size None is not an int"),
    ((0,), ValueError, "not a (file offset, size, target) triple"),
])
def test_bad_batch_entries_are_refused_before_any_transfer(dev, scratch,
                                                           rng, bad, err,
                                                           what):
    """An entry with a negative, overflowing or non-integer file offset or
    size (or that is no triple) raises one line naming the entry and the
    value before anything moves: the good entries before it read nothing,
    a write creates or changes no file."""
    random_file(scratch / "f", 8192, rng)
    buf = dev.alloc(8192)
    mark = b"\xa5" * 8192
    buf.copy_from_host(mark)
    entry = (*bad, buf[4096:]) if len(bad) == 2 else bad
    items = [(0, 4096, buf[:4096]), entry]
    with pytest.raises(err) as ei:
        phxio.read_batch(scratch / "f", items)
    msg = str(ei.value)
    assert msg.startswith("batch entry 1") and what in msg, msg
    assert "\n" not in msg
    assert buf.to_bytes() == mark
    (scratch / "old").write_bytes(b"kept" * 1024)
    for out in ("old", "new"):
        with pytest.raises(err, match="batch entry 1"):
            phxio.write_batch(scratch / out, items)
    assert (scratch / "old").read_bytes() == b"kept" * 1024
    assert not (scratch / "new").exists()


def test_stream_ordered_read_into(dev, scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    buf = dev.alloc(1 << 20)
    with dev.stream() as s:
        tr = phxio.read_into(scratch / "f", buf, 4096, size=8192,
                               stream=s)
        assert isinstance(tr, phxio.Transfer)
        assert tr.wait() == 8192
        assert tr.done()
    assert buf.to_bytes(0, 8192) == data[4096:4096 + 8192]


def test_stream_ordered_on_default_stream(dev, scratch, rng):
    data = random_file(scratch / "f", 300000, rng)
    buf = dev.alloc(300000)
    with dev.default_stream() as s:
        assert s.native == dev.wrap_stream(None).native
        tr = phxio.read_into(scratch / "f", buf, stream=s)
        s.synchronize()
        assert tr.done() and tr.wait() == 300000
    assert buf.to_bytes() == data


def test_stream_ordered_write_from(dev, scratch, rng):
    src = rng.integers(0, 256, 100000, dtype=np.uint8).tobytes()
    buf = dev.alloc(100000)
    buf.copy_from_host(src)
    with dev.stream() as s:
        tr = phxio.write_from(scratch / "out", buf, stream=s)
        assert tr.wait() == 100000
    assert (scratch / "out").read_bytes() == src


def test_stream_handle_that_is_no_address_is_refused(dev, scratch, rng):
    """A raw stream handle is an address (or 0, the default stream): a
    negative number or a bool is refused before anything is queued."""
    random_file(scratch / "f", 8192, rng)
    buf = dev.alloc(8192)
    for bad in (-1, -(1 << 40), True):
        with pytest.raises((ValueError, TypeError), match="stream"):
            phxio.read_into(scratch / "f", buf, stream=bad)
        with pytest.raises((ValueError, TypeError), match="stream"):
            phxio.write_from(scratch / "out", buf, stream=bad)
    assert not (scratch / "out").exists()
    assert phxio.read_into(scratch / "f", buf) == 8192


def test_buffer_read_write_methods(dev, scratch, rng):
    data = random_file(scratch / "f", 20000, rng)
    buf = dev.alloc(20000)
    assert buf.read(scratch / "f", 100, offset=50, size=1000) == 1000
    assert buf.to_bytes(50, 1000) == data[100:1100]
    assert buf.write(scratch / "g", 0, offset=50, size=1000) == 1000
    assert (scratch / "g").read_bytes() == data[100:1100]


QUEUED_THEN_FREED = """
import os, sys
import phxio
path = sys.argv[1]
data = os.urandom(3 << 20)
with open(path, "wb") as f:
    f.write(data)
dev = phxio.Device()
s = dev.stream()
done = []
for i in range(20):
    a = dev.alloc(3 << 20)
    done.append(phxio.read_into(path, a, 0, stream=s))
    a.free()  # waits for the read queued into it
fresh = dev.alloc(3 << 20)
s.synchronize()
assert [tr.wait() for tr in done] == [3 << 20] * 20
assert not any(fresh.to_bytes()), "a fresh buffer holds old bytes"
# a window's owner waits too; so do resize and a write's source
b = dev.alloc(3 << 20)
phxio.read_into(path, b[4096:8192], 4096, stream=s)
b.resize(8 << 20)
assert b.to_bytes(4096, 4096) == data[4096:8192]
c = dev.alloc(1 << 20)
c.copy_from_host(data[:1 << 20])
phxio.write_from(path + ".out", c, stream=s)
c.free()
with open(path + ".out", "rb") as f:
    assert f.read() == data[:1 << 20]
"""


def test_free_and_resize_wait_for_queued_transfers(tmp_path):
    """A buffer freed or resized with a stream transfer still queued into
    or out of it waits for that stream first: no crash, no bytes landing
    in memory given to a later allocation (run in a fresh interpreter,
    where a crash is an exit status)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", QUEUED_THEN_FREED,
                        str(tmp_path / "f")], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    assert r.returncode == 0 and not r.stderr.strip(), \
        f"exit status {r.returncode}, stderr:\n{r.stderr}"


def test_buffer_windows_outside_are_refused_and_never_truncate(dev, scratch,
                                                               rng):
    data = random_file(scratch / "f", 10000, rng)
    buf = dev.alloc(4096)
    bad = [lambda: buf.write(scratch / "f", offset=5000),
           lambda: buf.write(scratch / "f", 0, 4000, 200),
           lambda: buf.read(scratch / "f", offset=-100, size=50),
           lambda: buf.read(scratch / "f", offset=4000, size=500),
           lambda: buf.read(scratch / "f", 0, 0, -1)]
    for call in bad:
        with pytest.raises(ValueError, match=r"f: offset .* outside the "
                                             r"4096-byte buffer"):
            call()
        assert (scratch / "f").read_bytes() == data
    with pytest.raises(ValueError, match="negative file offset -5"):
        buf.read(scratch / "f", -5)
    # a window writes its bytes and leaves the rest of the file alone
    buf.copy_from_host(b"\x07" * 4096)
    assert buf.write(scratch / "f", 0, 0, 100) == 100
    assert (scratch / "f").read_bytes() == b"\x07" * 100 + data[100:]
    assert buf.write(scratch / "f", 200, offset=4000) == 96
    assert (scratch / "f").read_bytes() == \
        b"\x07" * 100 + data[100:200] + b"\x07" * 96 + data[296:]
    # the whole buffer at offset 0 replaces the file, as write_from does
    assert buf.write(scratch / "f") == 4096
    assert (scratch / "f").read_bytes() == b"\x07" * 4096


def test_a_closed_devices_buffers_and_streams_move_nothing(scratch, rng):
    """After Device.close() its buffers and views are still copied to and
    from the host and freed (they hold the device open), and every
    transfer into or out of them, or on a stream made from it, alone, on
    a stream or in a batch, says in one line that the device is closed
    before the file is opened: a read fills nothing, a write creates,
    truncates or changes no file.  A transfer on a stream made from it
    moved the bytes; a write truncated an existing file, then failed."""
    f, old, new = scratch / "f", scratch / "old", scratch / "new"
    random_file(f, 8192, rng)
    old.write_bytes(b"kept" * 2048)
    d = phxio.Device()
    s = d.stream()
    buf = d.alloc(8192)
    view = buf[4096:]
    mark = b"\x5a" * 8192
    buf.copy_from_host(mark)
    other = phxio.Device()
    elsewhere = other.alloc(8192)
    d.close()
    for call in (lambda: phxio.read_into(f, buf),
                 lambda: phxio.read_into(f, view),
                 lambda: buf.read(f),
                 lambda: phxio.read_into(f, buf, stream=s),
                 lambda: phxio.read_into(f, view, stream=s),
                 lambda: phxio.read_into(f, elsewhere, stream=s),
                 lambda: phxio.read_batch(f, [(0, 4096, view)]),
                 lambda: phxio.write_from(old, buf),
                 lambda: phxio.write_from(new, view),
                 lambda: buf.write(old),
                 lambda: buf.write(new, 4096, size=10),
                 lambda: phxio.write_from(old, buf, stream=s),
                 lambda: phxio.write_from(new, elsewhere, stream=s),
                 lambda: phxio.write_batch(old, [(0, 4096, view)]),
                 lambda: phxio.write_batch(new, [(0, 4096, view)])):
        with pytest.raises(phxio.PhoenixError) as ei:
            call()
        msg = str(ei.value)
        assert ei.value.errno == errno.EBADF, msg
        assert f"device {d.name} is closed" in msg and "\n" not in msg
    assert old.read_bytes() == b"kept" * 2048 and not new.exists()
    assert buf.to_bytes() == mark and elsewhere.to_bytes() == bytes(8192)
    # what stays: host copies, the stream's own calls, freeing
    buf.copy_from_host(b"abcd", 4096)
    assert view.owner.to_bytes(4096, 4) == b"abcd"
    s.synchronize()
    s.close()
    buf.free()
    other.close()


def test_a_destroyed_stream_moves_nothing(dev, scratch):
    """A transfer on a Stream that was closed says so before the file is
    opened: a write to a new path left it created, one to an existing
    file left it truncated."""
    s = dev.stream()
    s.close()
    buf = dev.alloc(4096)
    (scratch / "old").write_bytes(b"kept")
    for where in (scratch / "new", scratch / "old"):
        with pytest.raises(phxio.PhoenixError, match="stream is destroyed"):
            phxio.write_from(where, buf, stream=s)
    assert not (scratch / "new").exists()
    assert (scratch / "old").read_bytes() == b"kept"
    buf.free()
