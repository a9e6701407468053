"""Device memory: Buffer, what libphoenix allocates, and DeviceArray, a
typed window of one that torch, CuPy and NumPy view without a copy."""

from __future__ import annotations

import ctypes
import operator
import weakref
from typing import TYPE_CHECKING, Any, Optional, Sequence

from . import _dlpack
from . import _lib
from ._device import Device, _Native
from ._dtypes import DType, dtype_of
from ._lib import PhoenixError, check, lib

if TYPE_CHECKING:
    from ._transfer import PathOrFd


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
        # Stream-ordered transfers queued into or out of this buffer and
        # not yet seen complete (_transfer.Transfer): free() and resize()
        # wait for their streams first, as cudaFree synchronizes.
        self._queued: set[Any] = set()
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
        """Grow or shrink, keeping contents; the address may change.
        Waits first for the streams with transfers queued into or out of
        the buffer."""
        handle = self.handle
        self._drain()
        check(lib().phx_buf_resize(handle, size))

    def free(self) -> None:
        """Release the memory now (views made from it become invalid).
        Waits first for the streams with transfers queued into or out of
        the buffer."""
        if self._handle is not None:
            self._drain()
            self._handle = None
            self._finalizer()

    def _drain(self) -> None:
        """Synchronize the streams of the transfers queued on this buffer
        that have not completed: the memory they move stays in place
        until they are done."""
        from ._transfer import _settle_all

        if self._queued:
            _settle_all(list(self._queued))

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    # host copies
    def copy_from_host(self, data: Any, offset: int = 0) -> None:
        """Copy a bytes-like object into the buffer at @offset."""
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        self._span("copy_from_host", offset, n)
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
            self._span("to_bytes", offset, 0)
            size = self.size - offset
        self._span("to_bytes", offset, size)
        out = ctypes.create_string_buffer(size)
        check(lib().phx_memcpy_from_buf(out, self.handle, offset, size))
        return out.raw

    def _span(self, what: str, offset: Any, size: Any) -> None:
        """ValueError unless [@offset, @offset + @size) lies in the
        buffer (non-negative integers)."""
        total = self.size
        if not all(type(v) is int and v >= 0 for v in (offset, size)) or \
                offset + size > total:
            raise ValueError(f"{what}: offset {offset!r} and size "
                             f"{size!r} are not non-negative integers "
                             f"inside the {total}-byte buffer")

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
    def _window(self, what: str, path: Any, offset: int,
                size: Optional[int]) -> tuple["DeviceArray", int]:
        """The bytes [offset, offset + size) of the buffer (to its end
        when @size is None), refused with ValueError where any of them
        lies outside it."""
        total = self.size
        for name, v in (("offset", offset), ("size", size)):
            if v is not None and (not isinstance(v, int) or
                                  isinstance(v, bool)):
                raise TypeError(f"{what} {_where(path)}: {name} must be an "
                                f"int, not {v!r}")
        n = total - offset if size is None else size
        if offset < 0 or n < 0 or offset + n > total:
            span = f"offset {offset}" if size is None else \
                f"offset {offset} and size {size}"
            raise ValueError(f"{what} {_where(path)}: {span} "
                             f"{'is' if size is None else 'are'} outside "
                             f"the {total}-byte buffer")
        return self.view("U8", (n,), offset), n

    def read(self, src: PathOrFd, file_offset: int = 0, offset: int = 0,
             size: Optional[int] = None) -> int:
        """Read from a file into the buffer at @offset, @size bytes (to
        the buffer's end by default); bytes read, short only at end of
        file.  A window outside the buffer raises ValueError."""
        from ._transfer import read_into

        win, n = self._window("reading", src, offset, size)
        return read_into(src, win, file_offset, size=n)

    def write(self, dst: PathOrFd, file_offset: int = 0, offset: int = 0,
              size: Optional[int] = None) -> int:
        """Write @size bytes of the buffer from @offset (to its end by
        default) to a file at @file_offset; bytes written.  A path is
        created if missing and truncated first only when the whole buffer
        is written at file offset 0; a window leaves the rest of the file
        as it is.  A window outside the buffer raises ValueError."""
        from ._transfer import write_from

        win, n = self._window("writing", dst, offset, size)
        whole = offset == 0 and size is None
        return write_from(dst, win, file_offset,
                          size=None if whole else n)

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


def _where(path: Any) -> str:
    return f"fd {path}" if isinstance(path, int) else str(path)


def _free_buf(handle: int, cdll: Any, dev: _Native) -> None:
    cdll.phx_buf_free(handle)


class DeviceArray:
    """A typed, C-contiguous array in device memory (a window of a Buffer).

    Exposes DLPack and, on CUDA, ``__cuda_array_interface__``; on sim also
    ``__array_interface__`` so ``numpy.asarray`` views it without a copy.
    """

    def __init__(self, owner: Buffer, offset: int, dtype: DType,
                 shape: tuple[int, ...]) -> None:
        try:
            if any(isinstance(v, bool) for v in (offset, *shape)):
                raise TypeError
            offset = operator.index(offset)
            shape = tuple(map(operator.index, shape))
            if offset < 0 or min(shape, default=0) < 0:
                raise TypeError
        except TypeError:
            raise ValueError(f"view at offset {offset!r} with shape "
                             f"{list(shape)!r}: they must be non-negative "
                             "integers") from None
        nbytes = dtype.nbytes(shape)
        if offset + nbytes > owner.size:
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
