# SPDX-License-Identifier: MIT
"""The control socket's OPEN: another process maps a file's memory in
place.
"""
import ctypes
import os

import harness as T
from harness import MiB, rand, write, read, fresh


def test_share_in_place():
    """Another process maps a file's memory through the control socket."""
    L = T.lib()
    d, _ = fresh("share")
    data = rand(3 * MiB, 13)
    write(d + "/t", data)
    s, line = T.ctl_open(d + "/t")
    ok, devname, size = line.decode().split()
    assert ok == "OK" and int(size) == len(data), line
    dev, buf = ctypes.c_void_p(), ctypes.c_void_p()
    env_kind = os.environ.get("PHX_DEVICE", "sim")
    assert L.phx_device_open(devname.encode(), ctypes.byref(dev)) == 0, \
        L.phx_strerror_last()
    ret = L.phx_buf_recv(dev, s.fileno(), ctypes.byref(buf))
    assert ret == 0, L.phx_strerror_last()
    s.close()
    assert L.phx_buf_size(buf) == len(data)
    got = ctypes.create_string_buffer(len(data))
    assert L.phx_memcpy_from_buf(got, buf, 0, len(data)) == 0
    assert got.raw == data
    # a write through the shared mapping shows in the file: same memory
    assert L.phx_memcpy_to_buf(buf, 100, b"SHARED", 6) == 0
    assert read(d + "/t")[100:106] == b"SHARED"
    L.phx_buf_free(buf)
    L.phx_device_close(dev)
    assert env_kind
