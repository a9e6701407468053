"""Devices, buffers, streams and transfers over libphoenix."""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

from . import _dlpack
from . import _lib
from ._dtypes import DType, dtype_of
from ._lib import PhoenixError, check, lib

PathOrFd = Union[str, "os.PathLike[str]", int, Any]

# Native stream handles whose wrappers a Device keeps (Device.stream_of).
_WRAPPED_STREAMS = 64


@dataclass(frozen=True)
class DeviceInfo:
    """One device as libphoenix reports it."""
    name: str
    kind: str
    index: int
    model: str
    capacity: int
    used: int
    free: int
    numa_node: int


def _info(s: _lib.DeviceInfoStruct) -> DeviceInfo:
    return DeviceInfo(s.name.decode(), _lib.KIND_NAMES.get(s.kind, "?"),
                      s.index, s.model.decode(errors="replace"), s.capacity,
                      s.used, s.free, s.numa_node)


_KINDS = {"default": _lib.PHX_DEVICE_NONE, None: _lib.PHX_DEVICE_NONE,
          "cuda": _lib.PHX_DEVICE_CUDA, "sim": _lib.PHX_DEVICE_SIM,
          "kmod": _lib.PHX_DEVICE_KMOD}


def version() -> str:
    """libphoenix's version string."""
    return lib().phx_version().decode()


def default_kind() -> tuple[str, str]:
    """The device kind used when none is named, and why it was chosen."""
    why = ctypes.c_char_p()
    kind = lib().phx_default_kind(ctypes.byref(why))
    return (_lib.KIND_NAMES.get(kind, "none"),
            why.value.decode() if why.value else "")


def devices(kind: Optional[str] = None) -> list[DeviceInfo]:
    """The devices of @kind ("cuda", "sim", "kmod"; default: the default kind).

    An unusable backend (no driver, no GPU) gives an empty list.
    """
    k = _KINDS[kind]
    n = lib().phx_device_list(k, None, 0)
    if n == -19:  # ENODEV: backend unusable
        return []
    check(n, "listing devices")
    arr = (_lib.DeviceInfoStruct * max(n, 1))()
    n = check(lib().phx_device_list(k, arr, n), "listing devices")
    return [_info(arr[i]) for i in range(n)]


def _device_name(device: Any) -> Optional[str]:
    """Map torch-style names ("cuda", "cuda:1", 1, torch.device) to ours."""
    if device is None or isinstance(device, Device):
        return None if device is None else device.name
    if isinstance(device, int):
        return f"cuda:{device}"
    name = str(device)
    if name == "cuda":
        return "cuda:0"
    if name == "sim":
        return "sim:0"
    if name == "cpu":
        raise ValueError("device 'cpu' is host memory, not a phxio "
                         "device: use 'cuda:N' or 'simN'")
    return name


_exit_hooked = False


class _Native:
    """The library object behind a Device or Stream, released once.

    Release happens on close(), on garbage collection and at interpreter
    exit (weakref.finalize, which runs the live ones newest first), in
    whatever order those come.  A native device is closed only after
    every buffer and stream made from it was released: their finalizers
    hold it, so closing or collecting a Device first only drops its hold.
    """

    def __init__(self, handle: int, release: Any, *after: Any) -> None:
        global _exit_hooked
        self.handle = handle
        self._finalizer = weakref.finalize(self, release, handle, *after)
        if not _exit_hooked:
            # After weakref.finalize's own exit handler, so before it.
            _exit_hooked = True
            atexit.register(_finish_inflight)

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        self._finalizer()


def _close_device(handle: int, cdll: Any) -> None:
    cdll.phx_device_close(handle)


def _destroy_stream(handle: int, cdll: Any, dev: _Native) -> None:
    cdll.phx_stream_destroy(handle)


class _Handle:
    """A libphoenix object that close() releases, as do the end of a
    ``with`` block, garbage collection and interpreter exit."""

    _native: Optional[_Native] = None

    def _gone(self) -> str:
        """The error message once the object is released."""
        raise NotImplementedError

    @property
    def handle(self) -> int:
        n = self._native
        if n is None or not n.alive:
            raise PhoenixError(9, self._gone())
        return n.handle

    @property
    def closed(self) -> bool:
        return self._native is None or not self._native.alive

    def close(self) -> None:
        n, self._native = self._native, None
        if n is not None:
            n.release()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Device(_Handle):
    """An open libphoenix device; buffers and streams are made from it.

    ``Device()`` opens device 0 of the default kind; ``Device("cuda:1")``,
    ``Device("gpu1")``, ``Device("sim0")`` name one.  Opening the same device
    twice gives two handles on one device.
    """

    def __init__(self, name: Any = None) -> None:
        cname = _device_name(name)
        h = ctypes.c_void_p()
        check(lib().phx_device_open(cname.encode() if cname else None,
                                    ctypes.byref(h)),
              f"opening device {cname or '(default)'}")
        self._native = _Native(h.value, _close_device, lib())
        self._streams: "OrderedDict[int, _Native]" = OrderedDict()
        self._streams_lock = threading.Lock()
        self.info = self.query()
        self.name: str = self.info.name
        self.kind: str = self.info.kind
        self.index: int = self.info.index

    def _gone(self) -> str:
        return f"device {self.name} is closed"

    def close(self) -> None:
        """Drop this handle; buffers and streams made from it keep the
        device open until they are released."""
        with self._streams_lock:
            self._streams.clear()
        self._native = None

    def query(self) -> DeviceInfo:
        """Current description, with capacity and bytes in use."""
        s = _lib.DeviceInfoStruct()
        check(lib().phx_device_info(self.handle, ctypes.byref(s)))
        return _info(s)

    @property
    def dlpack_device(self) -> tuple[int, int]:
        if self.kind == "cuda":
            return (_dlpack.KDL_CUDA, self.index)
        return (_dlpack.KDL_CPU, 0)

    def alloc(self, size: int, sparse: bool = False) -> "Buffer":
        """Allocate @size bytes of device memory (zero-filled)."""
        return Buffer(self, size, sparse)

    def stream(self) -> "Stream":
        """A new stream on this device."""
        return Stream(self)

    def wrap_stream(self, native: Any) -> "Stream":
        """Wrap a stream made elsewhere (a CUstream, torch.cuda.Stream).

        None or 0 is the device's default stream."""
        return Stream(self, native=_native_stream(native), _wrap=True)

    def stream_of(self, stream: Any) -> "Stream":
        """A Stream for @stream (a Stream, torch or CuPy stream, or a raw
        CUstream handle), wrapped once per native handle.

        A wrapper owns nothing but the handle, so one made for a stream
        that is gone and whose handle was reused by a new one serves the
        new one as well.  The last _WRAPPED_STREAMS handles are kept.
        """
        if isinstance(stream, Stream):
            return stream
        native = _native_stream(stream) or 0
        with self._streams_lock:
            n = self._streams.get(native)
            if n is not None and n.alive:
                self._streams.move_to_end(native)
                return Stream._of(self, n)
        s = Stream(self, native=native or None, _wrap=True)
        with self._streams_lock:
            self._streams[native] = s._native
            while len(self._streams) > _WRAPPED_STREAMS:
                self._streams.popitem(last=False)
        return s

    def default_stream(self) -> "Stream":
        """The device's default stream (where a NULL stream handle goes)."""
        return Stream(self, _wrap=True)

    def set_limit(self, limit: int) -> None:
        """Cap the bytes libphoenix may hold on this device (0: none)."""
        check(lib().phx_device_set_limit(self.handle, limit))

    def stats(self) -> dict[str, int]:
        """Bytes moved per data path, transfers, errors, pinned bytes."""
        s = _lib.StatsStruct()
        lib().phx_stats_get(self.handle, ctypes.byref(s))
        out = {name: s.bytes[i] for i, name in enumerate(_lib.PATH_NAMES)}
        out.update(ios=s.ios, errors=s.errors, pinned_bytes=s.pinned_bytes)
        return out

    def engine_stats(self) -> dict[str, int]:
        """The device's transfer engines: "built" since it opened, "alive"
        in its pool (idle or lent), "idle", and their "staging_bytes"."""
        s = _lib.EngineStatsStruct()
        check(lib().phx_engine_stats_get(self.handle, ctypes.byref(s)))
        return {"built": s.built, "alive": s.alive, "idle": s.idle,
                "staging_bytes": s.staging_bytes}

    def __repr__(self) -> str:
        return f"<phxio.Device {self.name} ({self.info.model})>"


_shared: dict[str, Device] = {}
_shared_lock = threading.Lock()


def device(name: Any = None) -> Device:
    """A process-wide shared Device for @name (opened once)."""
    key = _device_name(name) or ""
    with _shared_lock:
        dev = _shared.get(key)
        if dev is None or dev.closed:  # closed by someone: open anew
            dev = Device(key or None)
            _shared[key] = dev
            _shared[dev.name] = dev
        return dev


def _native_stream(s: Any) -> Optional[int]:
    if s is None:
        return None
    if isinstance(s, Stream):
        return s.native
    if isinstance(s, int):
        return s or None
    native = getattr(s, "cuda_stream", None)  # torch.cuda.Stream
    if native is not None:
        return int(native) or None
    native = getattr(s, "ptr", None)  # cupy
    if native is not None:
        return int(native) or None
    raise TypeError(f"not a stream: {s!r}")


class Stream(_Handle):
    """An ordered queue of device work; transfers can be queued on it."""

    def __init__(self, dev: Device, native: Optional[int] = None,
                 _wrap: bool = False) -> None:
        self.device = dev
        devn = dev._native
        h = ctypes.c_void_p()
        if native is not None or _wrap:
            check(lib().phx_stream_wrap(dev.handle, native, ctypes.byref(h)))
        else:
            check(lib().phx_stream_create(dev.handle, ctypes.byref(h)))
        self._native = _Native(h.value, _destroy_stream, lib(), devn)
        # A transfer's values are set before it is queued and never
        # change: the copy engine can move its bytes (phx_io_enqueue).
        check(lib().phx_stream_set_flags(h, _lib.PHX_STREAM_FIXED))

    @classmethod
    def _of(cls, dev: Device, native: _Native) -> "Stream":
        """Another Stream object on the library stream @native."""
        self = cls.__new__(cls)
        self.device = dev
        self._native = native
        return self

    def _gone(self) -> str:
        return "stream is destroyed"

    @property
    def native(self) -> int:
        """The backend's handle (CUstream on cuda)."""
        return lib().phx_stream_native(self.handle) or 0

    def synchronize(self) -> None:
        """Wait until everything queued on the stream is done."""
        check(lib().phx_stream_sync(self.handle))



class Buffer:
    """Device memory owned by libphoenix.

    It exports DLPack (``torch.from_dlpack(buf)``, ``numpy.from_dlpack(buf)``
    on sim) and, on CUDA, ``__cuda_array_interface__``: a flat uint8 array.
    ``buf[a:b]`` and ``buf.view(dtype, shape, offset)`` give typed windows.
    """

    def __init__(self, dev: Device, size: int, sparse: bool = False) -> None:
        h = ctypes.c_void_p()
        flags = _lib.PHX_BUF_SPARSE if sparse else 0
        check(lib().phx_buf_alloc(dev.handle, size, flags, ctypes.byref(h)),
              f"allocating {size} bytes on {dev.name}")
        self._own(dev, h.value)

    @classmethod
    def _adopt(cls, dev: Device, handle: int) -> "Buffer":
        """Wrap a phx_buf made elsewhere (phx_buf_recv); frees it when
        collected."""
        self = cls.__new__(cls)
        self._own(dev, handle)
        return self

    def _own(self, dev: Device, handle: int) -> None:
        # The finalizer holds the native device, so the memory is freed
        # before the device closes, whichever of the two goes first.
        self.device = dev
        self._handle: Optional[int] = handle
        self._finalizer = weakref.finalize(self, _free_buf, handle, lib(),
                                           dev._native)

    @property
    def handle(self) -> int:
        if self._handle is None or not self._finalizer.alive:
            raise PhoenixError(9, "buffer is freed")
        return self._handle

    @property
    def size(self) -> int:
        return lib().phx_buf_size(self.handle)

    nbytes = size

    def __len__(self) -> int:
        return self.size

    @property
    def committed(self) -> int:
        return lib().phx_buf_committed(self.handle)

    @property
    def dptr(self) -> int:
        """The device address (valid until resize or free)."""
        return lib().phx_buf_dptr(self.handle)

    @property
    def host_address(self) -> Optional[int]:
        """A host pointer to the memory (sim and kmod), else None."""
        return lib().phx_buf_host_view(self.handle) or None

    def resize(self, size: int) -> None:
        """Grow or shrink, keeping contents; the address may change."""
        check(lib().phx_buf_resize(self.handle, size))

    def free(self) -> None:
        """Release the memory now (views made from it become invalid)."""
        if self._handle is not None:
            self._handle = None
            self._finalizer()

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    # host copies
    def copy_from_host(self, data: Any, offset: int = 0) -> None:
        """Copy a bytes-like object into the buffer at @offset."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        if mv.readonly:
            src = ctypes.c_char_p(bytes(mv))
            addr = ctypes.cast(src, ctypes.c_void_p).value
        else:
            src = (ctypes.c_char * n).from_buffer(mv)
            addr = ctypes.addressof(src)
        check(lib().phx_memcpy_to_buf(self.handle, offset, addr, n))

    def to_bytes(self, offset: int = 0, size: Optional[int] = None) -> bytes:
        """Copy [offset, offset + size) back into host memory."""
        if size is None:
            size = self.size - offset
        out = ctypes.create_string_buffer(size)
        check(lib().phx_memcpy_from_buf(out, self.handle, offset, size))
        return out.raw

    # typed windows
    def view(self, dtype: Any, shape: Sequence[int], offset: int = 0
             ) -> "DeviceArray":
        """A typed, C-contiguous window of the buffer."""
        return DeviceArray(self, offset, dtype_of(dtype), tuple(shape))

    def __getitem__(self, key: slice) -> "DeviceArray":
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("Buffer supports contiguous byte slices only")
        start, stop, _ = key.indices(self.size)
        return self.view("U8", (max(stop - start, 0),), start)

    def numpy(self) -> Any:
        """The whole buffer as a NumPy uint8 array (sim and kmod only)."""
        return self.view("U8", (self.size,)).numpy()

    # transfers
    def read(self, src: PathOrFd, file_offset: int = 0, offset: int = 0,
             size: Optional[int] = None) -> int:
        """Read from a file into the buffer at @offset; bytes read."""
        return read_into(src, self[offset:offset + size if size is not None
                                   else None], file_offset)

    def write(self, dst: PathOrFd, file_offset: int = 0, offset: int = 0,
              size: Optional[int] = None) -> int:
        """Write the buffer from @offset to a file; bytes written."""
        return write_from(dst, self[offset:offset + size if size is not None
                                    else None], file_offset)

    # interchange
    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device.dlpack_device

    def __dlpack__(self, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:
        return self[:].__dlpack__(stream=stream, max_version=max_version,
                                  dl_device=dl_device, copy=copy)

    @property
    def __cuda_array_interface__(self) -> dict:
        return self[:].__cuda_array_interface__

    def __repr__(self) -> str:
        state = "freed" if self._handle is None else f"{self.size} bytes"
        return f"<phxio.Buffer {state} on {self.device.name}>"


def _free_buf(handle: int, cdll: Any, dev: _Native) -> None:
    cdll.phx_buf_free(handle)


class DeviceArray:
    """A typed, C-contiguous array in device memory (a window of a Buffer).

    Exposes DLPack and, on CUDA, ``__cuda_array_interface__``; on sim also
    ``__array_interface__`` so ``numpy.asarray`` views it without a copy.
    """

    def __init__(self, owner: Buffer, offset: int, dtype: DType,
                 shape: tuple[int, ...]) -> None:
        nbytes = dtype.nbytes(shape)
        if offset < 0 or offset + nbytes > owner.size:
            raise ValueError(f"view of {nbytes} bytes at {offset} is outside "
                             f"the {owner.size}-byte buffer")
        self.owner = owner
        self.offset = offset
        self.dtype = dtype
        self.shape = shape
        self.nbytes = nbytes

    @property
    def device(self) -> Device:
        return self.owner.device

    @property
    def dptr(self) -> int:
        return self.owner.dptr + self.offset

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device.dlpack_device

    def __dlpack__(self, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:
        if copy:
            raise BufferError("phxio arrays export without copying only")
        if dl_device is not None and tuple(dl_device) != \
                self.__dlpack_device__():
            raise BufferError(f"array lives on {self.device.name}")
        if self.dtype.dlpack is None:
            raise BufferError(f"DLPack has no type for {self.dtype.name}")
        if self.device.kind == "cuda":
            addr = self.dptr
        else:
            addr = self.owner.host_address
            if addr is None:
                raise BufferError(f"{self.device.name} memory is not "
                                  "host-visible")
            addr += self.offset
        return _dlpack.export(self, addr, self.__dlpack_device__(),
                              self.dtype.dlpack, self.dtype.dl_shape(
                                  self.shape), max_version)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device.kind != "cuda":
            raise AttributeError("__cuda_array_interface__: "
                                 f"{self.device.name} is not a CUDA device")
        return {"shape": self.shape, "typestr": self.dtype.typestr_or_void,
                "data": (self.dptr, False), "version": 3, "strides": None}

    @property
    def __array_interface__(self) -> dict:
        addr = None if self.device.kind == "cuda" else self.owner.host_address
        if addr is None:
            raise AttributeError("__array_interface__: "
                                 f"{self.device.name} memory is not "
                                 "host-visible")
        shape, typestr, descr = self.dtype.numpy_layout(self.shape)
        out = {"shape": shape, "typestr": typestr,
               "data": (addr + self.offset, False), "version": 3,
               "strides": None}
        if descr is not None:
            out["descr"] = descr
        return out

    def numpy(self) -> Any:
        """A NumPy view (sim/kmod); BF16 and F8 need ml_dtypes, else raw."""
        import numpy

        arr = numpy.asarray(self)
        want = self.dtype.numpy_dtype()
        return arr if arr.dtype == want else arr.view(want)

    def torch(self) -> Any:
        """A torch tensor viewing the same memory (no copy)."""
        from ._torch import as_tensor

        return as_tensor(self)

    def __repr__(self) -> str:
        return (f"<phxio.DeviceArray {self.dtype.name}{list(self.shape)} "
                f"on {self.device.name}>")


# ---- transfer targets ----------------------------------------------------

@dataclass
class _Target:
    device: Device
    dptr: int
    nbytes: int
    keep: Any


def _host_device() -> Device:
    """The device that moves bytes to host memory: a simulated one."""
    return device("sim:0")


def _target(obj: Any) -> _Target:
    """Where the bytes of @obj live: device, address, size."""
    if isinstance(obj, Buffer):
        return _Target(obj.device, obj.dptr, obj.size, obj)
    if isinstance(obj, DeviceArray):
        return _Target(obj.device, obj.dptr, obj.nbytes, obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        t = _dlpack.inspect(obj)
        if not t.contiguous:
            raise ValueError("transfer target must be contiguous")
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
        raise ValueError("transfer target is read-only")
    cbuf = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return _Target(_host_device(), ctypes.addressof(cbuf), mv.nbytes,
                   (obj, cbuf))


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
            self.fd = os.open(os.fspath(src), flags | os.O_CLOEXEC, 0o644)
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

    def __init__(self, stream: Stream, keep: Any) -> None:
        self.stream = stream
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
    t = _target(obj)
    n = t.nbytes if size is None else size
    if n > t.nbytes:
        raise ValueError(f"{n} bytes do not fit the {t.nbytes}-byte target")
    f = _File(path, op == _lib.PHX_OP_WRITE,
              truncate=(file_offset == 0 and size is None))
    fd = f.__enter__()
    if stream is not None:
        s = t.device.stream_of(stream)
        if _inflight:
            _settle_done()
        tr = Transfer(s, (t, f))
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


def _batch(op: int, path: PathOrFd,
           items: Iterable[tuple[int, int, Any]], depth: int) -> list[int]:
    items = list(items)
    if not items:
        return []
    targets = [_target(dest) for _, _, dest in items]
    dev = targets[0].device
    for t in targets:
        if t.device.name != dev.name:
            raise ValueError("all batch targets must be on one device "
                             f"({dev.name} and {t.device.name} given)")
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
    each entry; a failed entry raises PhoenixError naming it.
    """
    return _batch(_lib.PHX_OP_READ, src, items, depth)


def write_batch(dst: PathOrFd, items: Iterable[tuple[int, int, Any]], *,
                depth: int = 0) -> list[int]:
    """Write many (file_offset, size, source) triples to @dst in one batch."""
    return _batch(_lib.PHX_OP_WRITE, dst, items, depth)
