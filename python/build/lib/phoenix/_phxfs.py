"""Files of a phxfs mount (/mnt/phx/gpu0/...) opened as device memory.

phxfs keeps every file in one device allocation.  Its owner can map that
allocation into this process: the file's xattr user.phx.handle names the
daemon's control socket and the inode; an "OPEN <ino>" line there is
answered with "OK <device> <size>" and the allocation's handles, which
phx_buf_recv() imports.  The result reads and writes the file's bytes in
place, without a copy.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from typing import Any

from . import _core
from ._lib import PhoenixError, check, lib

XATTR_HANDLE = "user.phx.handle"
XATTR_DEVICE = "user.phx.device"
XATTR_PATH = "user.phx.path"
_LINE_MAX = 4352


def _xattr(path: str, name: str) -> str:
    try:
        return os.getxattr(path, name).decode()
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            raise PhoenixError(exc.errno, f"{path}: not a file of a phxfs "
                               f"mount (no {name} attribute)") from None
        raise PhoenixError(exc.errno, f"{path}: reading {name}: "
                           f"{exc.strerror} (only the file's owner may open "
                           "it)" if exc.errno in (errno.EACCES, errno.EPERM)
                           else f"{path}: reading {name}: {exc.strerror}"
                           ) from None


def _read_line(sock: socket.socket) -> str:
    # Byte by byte: what follows the line is phx_buf_send()'s stream,
    # which phx_buf_recv() must see whole.
    out = bytearray()
    while len(out) < _LINE_MAX:
        b = sock.recv(1)
        if not b:
            raise PhoenixError(errno.EPIPE, "phxfs closed the control "
                               "connection")
        if b == b"\n":
            break
        out += b
    return out.decode(errors="replace")


def data_path(path: Any) -> str:
    """The data path that moved the last write of a phxfs file."""
    return _xattr(os.fspath(path), XATTR_PATH)


def open_file(path: Any) -> "_core.Buffer":
    """A Buffer mapping the device memory of the phxfs file at @path.

    Reads and writes go to the file's bytes in place (DLPack and the CUDA
    array interface work as for any Buffer).  It has the file's size at
    the time of the call, cannot grow, and stays valid after the file is
    removed until it is freed.  Only the file's owner (or root) may open it.
    """
    path = os.fspath(path)
    value = _xattr(path, XATTR_HANDLE)
    sock_path, _, ino = value.rpartition(" ")
    if not sock_path or not ino.isdigit():
        raise PhoenixError(errno.EPROTO, f"{path}: unexpected "
                           f"{XATTR_HANDLE} {value!r}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(sock_path)
            sock.sendall(f"OPEN {ino}\n".encode())
        except OSError as exc:
            raise PhoenixError(exc.errno or errno.ECONNREFUSED,
                               f"{path}: phxfs control socket {sock_path}: "
                               f"{exc.strerror}; is the daemon running?"
                               ) from None
        line = _read_line(sock)
        words = line.split(" ", 2)
        if words[0] == "ERR":
            err = int(words[1]) if len(words) > 1 and words[1].isdigit() \
                else errno.EPROTO
            raise PhoenixError(err, f"{path}: phxfs: "
                               f"{words[2] if len(words) > 2 else line}")
        if words[0] != "OK" or len(words) != 3:
            raise PhoenixError(errno.EPROTO, f"{path}: phxfs answered "
                               f"{line!r}")
        dev = _core.device(words[1])
        h = ctypes.c_void_p()
        check(lib().phx_buf_recv(dev.handle, sock.fileno(), ctypes.byref(h)),
              f"{path}: receiving the allocation from phxfs")
        return _core.Buffer._adopt(dev, h.value)
