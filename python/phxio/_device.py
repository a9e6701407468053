"""Devices and streams over libphoenix: opening, sharing and closing them."""

from __future__ import annotations

import atexit
import ctypes
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from . import _dlpack
from . import _lib
from ._args import as_int
from ._lib import PhoenixError, check, lib

if TYPE_CHECKING:
    from ._buffer import Buffer

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
            from ._transfer import _finish_inflight

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

    def check_open(self) -> None:
        """PhoenixError (EBADF) where the object was released."""
        self.handle

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

    def prepare(self) -> None:
        """Wait until the set-up that opening started is done: the
        staging pinned and the first transfer engine built with its
        reader threads (transfers
        never need this; it times the set-up apart from them).  Raises
        PhoenixError when the staging could not be made (transfers then
        pin their own)."""
        check(lib().phx_device_prepare(self.handle),
              f"preparing {self.name}")

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
        from ._buffer import Buffer

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
        """Cap the bytes libphoenix may hold on this device (0: none).
        @limit is an integer 0 to 2**64 - 1: a negative one, a bool or
        any other type is refused (ValueError, TypeError) and the limit
        stays as it was."""
        n = as_int(limit)
        if n is None:
            raise TypeError(f"set_limit: limit {limit!r} is not an integer "
                            "number of bytes (0: no limit)")
        if not 0 <= n < 1 << 64:
            raise ValueError(f"set_limit: limit {limit!r} is not a number of "
                             "bytes from 0 (no limit) to 2**64 - 1")
        check(lib().phx_device_set_limit(self.handle, n),
              f"setting a limit of {n} bytes on {self.name}")

    def stats(self) -> dict[str, int]:
        """Bytes moved per data path, transfers, errors, pinned bytes."""
        s = _lib.StatsStruct()
        lib().phx_stats_get(self.handle, ctypes.byref(s))
        out = {name: s.bytes[i] for i, name in enumerate(_lib.PATH_NAMES)}
        out.update(ios=s.ios, errors=s.errors, pinned_bytes=s.pinned_bytes)
        return out

    def engine_stats(self) -> dict[str, int]:
        """The device's transfer engines: "built" since it opened, "alive"
        in its pool (idle or lent), "idle", their "staging_bytes", and the
        "threaded_reads" that ran on reader threads (PHX_HOT_READERS).
        And the set-up that opening the device started (its staging
        pinned, the first engine built): "setup_ns", how long it ran (0
        while it runs), and "setup_wait_ns", how long transfers waited for
        it (the first call's tax; prepare()'s own wait is not counted)."""
        s = _lib.EngineStatsStruct()
        check(lib().phx_engine_stats_get(self.handle, ctypes.byref(s)))
        return {"built": s.built, "alive": s.alive, "idle": s.idle,
                "staging_bytes": s.staging_bytes,
                "threaded_reads": s.threaded_reads,
                "setup_ns": s.setup_ns, "setup_wait_ns": s.setup_wait_ns}

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
    if isinstance(s, bool):
        raise TypeError(f"not a stream: {s!r}")
    if isinstance(s, int):
        # an address (cudaStream_t), or 0: the device's default stream
        if s < 0:
            raise ValueError(f"stream handle {s} is not an address")
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
