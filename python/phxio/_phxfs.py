"""Files of a phxfs mount (/mnt/phx/gpu0/...) opened as device memory.

phxfs keeps every file in one device allocation.  Its owner can map that
allocation into this process through the daemon's control socket.  The
protocol has one client, libphxfsctl (phxfs/client/phxfs_client.h), which this
module calls through ctypes; the allocation's handles then go to
libphoenix's phx_buf_recv().  The result reads and writes the file's bytes
in place, without a copy.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Iterator

from . import _core
from ._lib import (PhoenixError, check, lib, load_first, loaded_once,
                   system_candidates)

XATTR_HANDLE = "user.phx.handle"
XATTR_DEVICE = "user.phx.device"
XATTR_PATH = "user.phx.path"


def _ctl_candidates() -> Iterator[str]:
    """Where libphxfsctl may be, nearest first (the system's library
    search last, as for libphoenix)."""
    env = os.environ.get("PHX_CTL_LIBRARY")
    if env:
        yield env
        return
    # next to the libphoenix in use (a build tree or an install prefix)
    yield str(Path(getattr(lib(), "_phx_path", "")).resolve().parent /
              "libphxfsctl.so")
    yield from system_candidates("phxfsctl")


@loaded_once
def ctl() -> ctypes.CDLL:
    """The loaded libphxfsctl, with its prototypes declared."""
    handle, _ = load_first("libphxfsctl", _ctl_candidates(),
                           "`make install-phxfs`", "PHX_CTL_LIBRARY")
    c = ctypes
    handle.phxfs_open_handle.restype = c.c_int
    handle.phxfs_open_handle.argtypes = [
        c.c_char_p, c.c_char_p, c.c_size_t,
        c.POINTER(c.c_uint64), c.c_char_p, c.c_size_t]
    handle.phxfs_status_get.restype = c.c_int
    handle.phxfs_status_get.argtypes = [
        c.c_char_p, c.POINTER(c.POINTER(_Status))]
    handle.phxfs_status_free.restype = None
    handle.phxfs_status_free.argtypes = [c.POINTER(_Status)]
    return handle


class _StatusDev(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("kind", ctypes.c_char * 16),
                ("path", ctypes.c_char * 16), ("model", ctypes.c_char * 128),
                ("capacity", ctypes.c_uint64), ("used", ctypes.c_uint64),
                ("moved", ctypes.c_uint64), ("bytes_in", ctypes.c_uint64),
                ("bytes_out", ctypes.c_uint64), ("reserve", ctypes.c_uint64),
                ("write_requests", ctypes.c_uint64),
                ("read_requests", ctypes.c_uint64),
                ("files", ctypes.c_uint)]


class _StatusFile(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char * 32), ("path", ctypes.c_char * 16),
                ("size", ctypes.c_uint64), ("held", ctypes.c_uint64),
                ("name_len", ctypes.c_size_t),
                ("name", ctypes.POINTER(ctypes.c_char))]


class _Status(ctypes.Structure):
    _fields_ = [("ndevs", ctypes.c_uint), ("nfiles", ctypes.c_uint),
                ("devs", ctypes.POINTER(_StatusDev)),
                ("files", ctypes.POINTER(_StatusFile)),
                ("passthrough", ctypes.c_bool),
                ("passthrough_why", ctypes.c_char * 256),
                ("mountpoint", ctypes.c_char * 4096),
                ("uring", ctypes.c_bool),
                ("uring_why", ctypes.c_char * 256)]


def _xattr(path: str, name: str) -> str:
    try:
        return os.getxattr(path, name).decode()
    except OSError as exc:
        raise PhoenixError(exc.errno, f"{path}: reading {name}: "
                           f"{exc.strerror}") from None


def data_path(path: Any) -> str:
    """The data path that moved the last write of a phxfs file."""
    return _xattr(os.fspath(path), XATTR_PATH)


def status(path: Any) -> dict:
    """What the phxfs mount holding @path holds, as ``phx status -a``.

    ``{"devices": [{"name", "kind", "capacity", "used", "files", ...}],
    "files": [{"device", "size", "held", "path", "name"}], "mountpoint",
    "passthrough", "io_uring"}``; file names are ``bytes`` (the mount's
    exact names).
    """
    path = os.fspath(path)
    st = ctypes.POINTER(_Status)()
    ret = ctl().phxfs_status_get(os.fsencode(path), ctypes.byref(st))
    if ret:
        raise PhoenixError(-ret, f"{path}: reading phxfs's status: "
                           f"{os.strerror(-ret)}")
    try:
        s = st.contents
        devs = [{k: (getattr(d, k).decode() if isinstance(getattr(d, k),
                                                          bytes)
                     else getattr(d, k)) for k, _ in _StatusDev._fields_}
                for d in s.devs[:s.ndevs]]
        files = [{"device": f.device.decode(), "path": f.path.decode(),
                  "size": f.size, "held": f.held,
                  "name": ctypes.string_at(f.name, f.name_len)}
                 for f in s.files[:s.nfiles]]
        return {"devices": devs, "files": files,
                "mountpoint": os.fsdecode(s.mountpoint),
                "passthrough": bool(s.passthrough),
                "io_uring": bool(s.uring)}
    finally:
        ctl().phxfs_status_free(st)


def open_file(path: Any) -> "_core.Buffer":
    """A Buffer mapping the device memory of the phxfs file at @path.

    Reads and writes go to the file's bytes in place (DLPack and the CUDA
    array interface work as for any Buffer).  It has the file's size at
    the time of the call, cannot grow, and stays valid after the file is
    removed until it is freed.  Only the file's owner (or root) may open it.
    """
    path = os.fspath(path)
    return _open(path, path)


def open_fd(fd: int, path: str) -> "_core.Buffer":
    """open_file() of the phxfs file open as @fd (named @path in errors):
    the file that descriptor reads, also when @path was removed or now
    names another file."""
    proc = f"/proc/self/fd/{fd}"
    return _open(proc if os.path.exists(proc) else path, path)


def _open(where: str, path: str) -> "_core.Buffer":
    name = ctypes.create_string_buffer(32)
    why = ctypes.create_string_buffer(512)
    size = ctypes.c_uint64()
    fd = ctl().phxfs_open_handle(os.fsencode(where), name, len(name),
                                 ctypes.byref(size), why, len(why))
    if fd < 0:
        raise PhoenixError(-fd, why.value.decode(errors="replace")
                           .replace(where, path))
    try:
        dev = _core.device(name.value.decode())
        h = ctypes.c_void_p()
        check(lib().phx_buf_recv(dev.handle, fd, ctypes.byref(h)),
              f"{path}: receiving the allocation from phxfs")
        return _core.Buffer._adopt(dev, h.value)
    finally:
        os.close(fd)
