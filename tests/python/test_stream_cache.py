"""Streams given as native handles are wrapped once per handle."""

from __future__ import annotations

import gc

import phxio
from phxio import _device, _transfer
from conftest import random_file


def test_one_wrapper_per_native_stream(dev):
    s1, s2 = dev.stream(), dev.stream()
    a = dev.stream_of(s1.native)
    b = dev.stream_of(s1.native)
    c = dev.stream_of(s2.native)
    assert a.handle == b.handle
    assert a.handle != c.handle
    assert a.native == s1.native and c.native == s2.native
    assert dev.stream_of(s1) is s1
    # 0 and None are the device's default stream, wrapped once too
    assert dev.stream_of(0).handle == dev.stream_of(None).handle
    assert dev.stream_of(0).native == dev.default_stream().native


def test_closed_wrapper_is_replaced(dev):
    s = dev.stream()
    a = dev.stream_of(s.native)
    a.close()
    b = dev.stream_of(s.native)
    assert not b.closed and b.native == s.native
    b.synchronize()


def test_wrappers_are_bounded(dev):
    streams = [dev.stream() for _ in range(_device._WRAPPED_STREAMS + 8)]
    for s in streams:
        dev.stream_of(s.native)
    assert len(dev._streams) == _device._WRAPPED_STREAMS
    # the oldest were let go of: their wrappers are destroyed
    gc.collect()
    assert streams[0].native not in dev._streams
    assert streams[-1].native in dev._streams


def test_transfers_on_a_raw_handle_reuse_its_wrapper(dev, scratch, rng):
    data = random_file(scratch / "f", 1 << 20, rng)
    buf = dev.alloc(1 << 20)
    s = dev.stream()
    handles = set()
    for _ in range(4):
        tr = phxio.read_into(scratch / "f", buf, stream=s.native)
        handles.add(tr.stream.handle)
        assert tr.wait() == len(data)
        assert buf.to_bytes() == data
    assert len(handles) == 1


def test_dropped_transfer_keeps_its_target_until_done(dev, scratch, rng):
    data = random_file(scratch / "f", 2 << 20, rng)
    s = dev.stream()
    buf = dev.alloc(2 << 20)
    phxio.read_into(scratch / "f", buf, stream=s)  # never waited for
    del buf
    gc.collect()
    s.synchronize()
    # the next transfer lets go of the finished one and its file
    out = dev.alloc(2 << 20)
    assert phxio.read_into(scratch / "f", out, stream=s).wait() == len(data)
    assert out.to_bytes() == data
    assert not [tr for tr in _transfer._inflight if tr.stream.native == s.native]


def test_shared_device_reopens_after_close():
    d = phxio.device("sim0")
    buf = d.alloc(4096)
    d.close()
    again = phxio.device("sim0")
    assert again is not d and not again.closed
    assert again.alloc(4096).size == 4096
    buf.copy_from_host(b"x" * 4096)  # the closed handle's buffer still works
    assert buf.to_bytes(0, 1) == b"x"
