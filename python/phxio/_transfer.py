"""Transfers between files and device memory: where a target's bytes
live, one transfer (blocking or queued on a stream) and batches."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Union

from . import _dlpack
from . import _lib
from ._args import as_int
from ._buffer import Buffer, DeviceArray
from ._device import Device, Stream, device
from ._lib import PhoenixError, check, lib

PathOrFd = Union[str, "os.PathLike[str]", int, Any]


@dataclass
class _Target:
    device: Device
    dptr: int
    nbytes: int
    keep: Any


def _host_device() -> Device:
    """The device that moves bytes to host memory: a simulated one."""
    return device("sim:0")


def _target(obj: Any, source: bool = False) -> _Target:
    """Where the bytes of @obj live: device, address, size.  A @source
    (what a write moves to a file) may be read-only."""
    if isinstance(obj, Buffer):
        return _Target(obj.device, obj.dptr, obj.size, obj)
    if isinstance(obj, DeviceArray):
        return _Target(obj.device, obj.dptr, obj.nbytes, obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            t = _dlpack.inspect(obj)
        except BufferError:
            # NumPy exports no DLPack for ml_dtypes' types (bfloat16, the
            # float8s): its array interface tells the same
            if not hasattr(obj, "__array_interface__"):
                raise
            return _host_array(obj, source)
        if not t.contiguous:
            raise ValueError("transfer target must be contiguous")
        if t.readonly and not source:
            raise ValueError("transfer target is read-only")
        if t.device_type == _dlpack.KDL_CUDA:
            return _Target(device(f"cuda:{t.device_id}"), t.data, t.nbytes,
                           obj)
        if t.device_type in (_dlpack.KDL_CPU, _dlpack.KDL_CUDA_HOST):
            return _Target(_host_device(), t.data, t.nbytes, obj)
        raise ValueError(f"unsupported DLPack device type {t.device_type}")
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        from ._dtypes import nbytes_of_interface

        if cai.get("strides") not in (None, ()):
            raise ValueError("transfer target must be contiguous")
        dev = getattr(obj, "device", None)
        index = getattr(dev, "index", None) or getattr(dev, "id", None) or 0
        return _Target(device(f"cuda:{index}"), cai["data"][0],
                       nbytes_of_interface(cai), obj)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"cannot transfer into {type(obj).__name__}: it has "
                        "no DLPack, CUDA array interface or buffer") from None
    if not mv.contiguous:
        raise ValueError("transfer target must be contiguous")
    if mv.readonly:
        if not source:
            raise ValueError("transfer target is read-only")
        cbuf = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv.cast("B"))
    else:
        cbuf = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return _Target(_host_device(), ctypes.addressof(cbuf), mv.nbytes,
                   (obj, cbuf))


def _host_array(obj: Any, source: bool) -> _Target:
    """A NumPy array through its array interface."""
    ai = obj.__array_interface__
    addr, readonly = ai["data"]
    if readonly and not source:
        raise ValueError("transfer target is read-only")
    flags = getattr(obj, "flags", None)
    if ai.get("strides") is not None and not (
            flags is not None and flags["C_CONTIGUOUS"]):
        raise ValueError("transfer target must be contiguous")
    return _Target(_host_device(), addr, int(obj.nbytes), obj)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISBLK, "a block device"))


def open_data(path: str, flags: int, block_devices: bool = True) -> int:
    """os.open(@path, @flags) for a regular file (or block device, where
    @block_devices), which are what transfers move: anything else (a
    FIFO, which would block the open until a writer comes, a character
    device, a directory) is refused with OSError naming @path."""
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.EISDIR):
            raise
        fd = -1  # a FIFO with no reader, a directory opened to write
    try:
        st = os.stat(path) if fd < 0 else os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or
                (block_devices and stat.S_ISBLK(st.st_mode))):
            what = next((name for test, name in _KINDS
                         if test(st.st_mode)), "not a file")
            raise OSError(errno.EINVAL, f"{path}: {what}, not a regular "
                          "file")
        # back to blocking I/O: io_uring fails a read it would have to
        # wait for on an O_NONBLOCK file with EAGAIN
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


class _File:
    """A file descriptor for @src, closed on exit when we opened it."""

    def __init__(self, src: PathOrFd, write: bool, truncate: bool) -> None:
        self.owned = False
        if isinstance(src, int):
            self.fd = src
        elif hasattr(src, "fileno"):
            if hasattr(src, "flush"):
                src.flush()
            self.fd = src.fileno()
        else:
            flags = os.O_RDONLY
            if write:
                flags = os.O_WRONLY | os.O_CREAT
                if truncate:
                    flags |= os.O_TRUNC
            self.fd = open_data(os.fspath(src), flags)
            self.owned = True

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: Any) -> None:
        if self.owned:
            self.owned = False
            os.close(self.fd)


# Stream-ordered transfers not yet seen complete.  Each keeps its target,
# its file and the values the library reads when the stream gets there,
# also when the caller drops it; _transfer() lets go of finished ones.
_inflight: set["Transfer"] = set()
_inflight_lock = threading.Lock()


class Transfer:
    """A stream-ordered transfer; ``wait()`` gives the bytes moved."""

    def __init__(self, stream: Stream, keep: Any,
                 buf: Optional[Buffer] = None) -> None:
        self.stream = stream
        self._buf = buf  # the Buffer it moves, when it is one's
        self.len = ctypes.c_uint64()
        self.file_offset = ctypes.c_int64()
        self.buf_offset = ctypes.c_int64()
        self.bytes_done = ctypes.c_int64(-(1 << 62))
        self._keep = keep

    def done(self) -> bool:
        return self.bytes_done.value != -(1 << 62)

    def wait(self) -> int:
        """Synchronize the stream, then return the bytes moved."""
        self.stream.synchronize()
        self._settle()
        return check(self.bytes_done.value, "stream-ordered transfer")

    def _settle(self) -> None:
        self._keep[1].__exit__()
        with _inflight_lock:
            _inflight.discard(self)
            if self._buf is not None:
                self._buf._queued.discard(self)


def _settle_all(transfers: list[Transfer]) -> None:
    """Wait for @transfers (their streams synchronized once each) and let
    go of them."""
    synced: set[int] = set()
    for tr in transfers:
        if not tr.done() and not tr.stream.closed and \
                id(tr.stream._native) not in synced:
            tr.stream.synchronize()
            synced.add(id(tr.stream._native))
        tr._settle()


def _settle_done() -> None:
    """Let go of the transfers that completed."""
    with _inflight_lock:
        done = [tr for tr in _inflight if tr.done()]
    for tr in done:
        tr._settle()


def _finish_inflight() -> None:
    """At exit, before any finalizer frees what they move: wait for the
    transfers still queued."""
    with _inflight_lock:
        left = list(_inflight)
    for tr in left:
        try:
            if not tr.done() and not tr.stream.closed:
                tr.stream.synchronize()
            tr._settle()
        except Exception:
            pass


def _transfer(op: int, path: PathOrFd, obj: Any, file_offset: int,
              size: Optional[int], stream: Any) -> Any:
    t = _target(obj, source=op == _lib.PHX_OP_WRITE)
    n = t.nbytes if size is None else size
    if n > t.nbytes:
        raise ValueError(f"{n} bytes do not fit the {t.nbytes}-byte target")
    if n < 0 or file_offset < 0:
        raise ValueError(f"{_describe(op, path, t.device)}: negative "
                         f"{'size' if n < 0 else 'file offset'} "
                         f"{n if n < 0 else file_offset}")
    # the device and the stream before the file: a closed or bad one
    # creates or truncates nothing
    t.device.check_open()
    s = t.device.stream_of(stream) if stream is not None else None
    if s is not None:
        s.device.check_open()
        s.check_open()
    f = _File(path, op == _lib.PHX_OP_WRITE,
              truncate=(file_offset == 0 and size is None))
    fd = f.__enter__()
    if s is not None:
        if _inflight:
            _settle_done()
        owner = obj if isinstance(obj, Buffer) else \
            obj.owner if isinstance(obj, DeviceArray) else None
        tr = Transfer(s, (t, f), owner)
        tr.len.value = n
        tr.file_offset.value = file_offset
        try:
            check(lib().phx_io_enqueue(
                s.handle, op, fd, t.dptr, ctypes.byref(tr.len),
                ctypes.byref(tr.file_offset), ctypes.byref(tr.buf_offset),
                ctypes.byref(tr.bytes_done)), "queueing a transfer")
        except BaseException:
            f.__exit__()
            raise
        with _inflight_lock:
            _inflight.add(tr)
            if owner is not None:
                owner._queued.add(tr)
        return tr
    try:
        io = _lib.IoStruct(op=op, fd=fd, file_off=file_offset, len=n)
        _aim(io, obj, t)
        ret = lib().phx_io_run(t.device.handle, ctypes.byref(io))
        return check(ret, _describe(op, path, t.device))
    finally:
        f.__exit__()


def _aim(io: Any, obj: Any, t: _Target) -> None:
    """Point @io at @obj: through its Buffer where it has one, so that the
    engine backs what a read fills in a sparse buffer (and follows a
    resize); else at the raw address."""
    if isinstance(obj, Buffer):
        io.buf, io.buf_off = obj.handle, 0
    elif isinstance(obj, DeviceArray):
        io.buf, io.buf_off = obj.owner.handle, obj.offset
    else:
        io.buf, io.dptr = None, t.dptr


def _describe(op: int, path: Any, dev: Device) -> str:
    what = "reading" if op == _lib.PHX_OP_READ else "writing"
    where = path if not isinstance(path, int) else f"fd {path}"
    return f"{what} {where} on {dev.name}"


def read_into(src: PathOrFd, dest: Any, file_offset: int = 0, *,
              size: Optional[int] = None, stream: Any = None) -> Any:
    """Read from @src (path, fd or file object) into @dest.

    @dest is a Buffer, a DeviceArray, or any object with DLPack or the CUDA
    array interface (a torch/CuPy tensor; on sim, also NumPy arrays and
    writable buffers).  Reads @size bytes (default: all of @dest) from
    @file_offset; returns the bytes read, short only at end of file.  With
    @stream (a phxio Stream, torch.cuda.Stream or CUstream handle) the
    read is queued on it and a Transfer is returned instead.
    """
    return _transfer(_lib.PHX_OP_READ, src, dest, file_offset, size, stream)


def write_from(dst: PathOrFd, src: Any, file_offset: int = 0, *,
               size: Optional[int] = None, stream: Any = None) -> Any:
    """Write @src (as for read_into) to @dst at @file_offset.

    A path is created if missing, and truncated first when the whole
    object is written at offset 0.  Returns the bytes written.
    """
    return _transfer(_lib.PHX_OP_WRITE, dst, src, file_offset, size, stream)


def _entry(i: int, item: Any) -> tuple[int, int, Any]:
    """Batch entry @i as (file offset, size, target), refused in one line
    naming it where it is no triple or its offset or size is not a
    non-negative integer (or runs past the largest file offset)."""
    try:
        off, size, obj = item
    except (TypeError, ValueError):
        raise ValueError(f"batch entry {i}: {item!r} is not a (file offset, "
                         "size, target) triple") from None
    ints = []
    for name, v in (("file offset", off), ("size", size)):
        n = as_int(v)
        if n is None:
            raise TypeError(f"batch entry {i}: {name} {v!r} is not an int")
        if n < 0:
            raise ValueError(f"batch entry {i}: {name} {n} is negative")
        ints.append(n)
    off, size = ints
    if off + size > _MAX_OFF:
        raise ValueError(f"batch entry {i}: file offset {off} and size "
                         f"{size} end past the largest file offset "
                         "(2**63 - 1)")
    return off, size, obj


_MAX_OFF = (1 << 63) - 1


def _batch(op: int, path: PathOrFd,
           items: Iterable[tuple[int, int, Any]], depth: int) -> list[int]:
    # every entry checked before any target is looked at or the file
    # opened (a write creates it): a bad one moves nothing
    items = [_entry(i, item) for i, item in enumerate(items)]
    if not items:
        return []
    targets = [_target(dest, source=op == _lib.PHX_OP_WRITE)
               for _, _, dest in items]
    dev = targets[0].device
    for t in targets:
        if t.device.name != dev.name:
            raise ValueError("all batch targets must be on one device "
                             f"({dev.name} and {t.device.name} given)")
    dev.check_open()  # before the file is opened (a write creates it)
    ios = (_lib.IoStruct * len(items))()
    for i, ((off, size, _), t) in enumerate(zip(items, targets)):
        if size > t.nbytes:
            raise ValueError(f"batch entry {i}: {size} bytes do not fit the "
                             f"{t.nbytes}-byte target")
        ios[i].op = op
        ios[i].file_off = off
        _aim(ios[i], items[i][2], t)
        ios[i].len = size
    with _File(path, op == _lib.PHX_OP_WRITE, truncate=False) as fd:
        for i in range(len(items)):
            ios[i].fd = fd
        run_ios(dev, ios, depth)
    results = [ios[i].result for i in range(len(items))]
    for i, r in enumerate(results):
        if r < 0:
            raise PhoenixError(-r, f"batch entry {i} (offset {items[i][0]}, "
                               f"{items[i][1]} bytes) failed: "
                               f"{os.strerror(-r)}")
    return results


def run_ios(dev: Device, ios: Any, depth: int = 0) -> None:
    """Submit an array of IoStruct as one batch and wait for all of it."""
    n = len(ios)
    b = ctypes.c_void_p()
    check(lib().phx_batch_create(dev.handle, depth, 0, ctypes.byref(b)),
          f"creating a batch on {dev.name}")
    try:
        submitted = check(lib().phx_batch_submit(b, ios, n),
                          "submitting a batch")
        if submitted < n:
            raise PhoenixError(5, f"only {submitted} of {n} batch entries "
                               "could be started")
        done = 0
        while done < n:
            done += check(lib().phx_batch_wait(b, n - done, None, 0, -1),
                          "waiting for a batch")
    finally:
        lib().phx_batch_destroy(b)


def read_batch(src: PathOrFd, items: Iterable[tuple[int, int, Any]], *,
               depth: int = 0) -> list[int]:
    """Read many (file_offset, size, dest) triples from @src in one batch.

    All destinations must be on one device.  Returns the bytes read for
    each entry; a failed entry raises PhoenixError naming it.  An entry
    that is no triple, or whose offset or size is negative or not an
    integer, raises ValueError or TypeError naming it before any entry
    moves.
    """
    return _batch(_lib.PHX_OP_READ, src, items, depth)


def write_batch(dst: PathOrFd, items: Iterable[tuple[int, int, Any]], *,
                depth: int = 0) -> list[int]:
    """Write many (file_offset, size, source) triples to @dst in one batch;
    entries are checked as read_batch's are, before @dst is created."""
    return _batch(_lib.PHX_OP_WRITE, dst, items, depth)
