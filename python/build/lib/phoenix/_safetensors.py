"""A safetensors loader: parse the header, move all data in one batch.

The file's data section lands in one device allocation with one batched
transfer; the returned tensors are views into it, so the allocation lives
as long as any of them.  The result matches safetensors.torch.load_file()
bit for bit: same names, dtypes, shapes and bytes.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import threading
from dataclasses import dataclass
from typing import Any, Optional

from . import _core, _lib
from ._dtypes import DTYPES, DType

# Longest header the format allows (safetensors refuses larger ones).
_MAX_HEADER = 100 << 20
# Pieces the data section is split into, so the batch keeps the engine's
# queue full.
_PIECE = 64 << 20
_ALIGN = 4096


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int  # offsets in the data section
    end: int


def read_header(fd: int, path: str = "") -> tuple[int, list[TensorInfo],
                                                     dict[str, str]]:
    """(data section offset, tensors, metadata) of an open safetensors file."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, 8, 0)
    if len(head) < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", head)
    if n > _MAX_HEADER or 8 + n > size:
        raise SafetensorsError(f"{path}: header length {n} is invalid")
    raw = os.pread(fd, n, 8)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + n
    tensors = []
    for name, ent in header.items():
        try:
            dtype = DTYPES[ent["dtype"]]
            shape = tuple(int(s) for s in ent["shape"])
            begin, end = (int(x) for x in ent["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SafetensorsError(f"{path}: tensor {name!r}: bad entry "
                                   f"({exc})") from None
        if end < begin or end - begin != dtype.nbytes(shape) or \
                data_start + end > size:
            raise SafetensorsError(f"{path}: tensor {name!r}: data offsets "
                                   f"[{begin}, {end}) do not match its "
                                   "shape or the file size")
        tensors.append(TensorInfo(name, dtype, shape, begin, end))
    tensors.sort(key=lambda t: (t.begin, t.name))
    return data_start, tensors, metadata


def _framework(framework: str, dev: "_core.Device") -> str:
    if framework != "auto":
        return framework
    try:
        import torch  # noqa: F401

        return "pt"
    except ImportError:
        return "numpy" if dev.kind != "cuda" else "phoenix"


def load(path: Any, device: Any = None, framework: str = "auto",
         metadata: Optional[dict] = None,
         threads: Optional[int] = None) -> dict[str, Any]:
    """Load every tensor of a safetensors file into device memory.

    @device: "cuda:0", "cuda", an int, a torch.device, "sim0", a
    phoenix.Device, or None for the default device.
    @framework: "pt" (torch tensors), "numpy" (NumPy arrays; sim only),
    "phoenix" (DeviceArray), or "auto": torch when it is installed, else
    NumPy on sim and DeviceArray on CUDA.  BF16 and F8 arrays in NumPy use
    ml_dtypes when it is installed, else same-width unsigned integers.
    @metadata: a dict that receives the file's "__metadata__".
    @threads: batches run side by side, each on its own contiguous part of
    the file (default PHX_LOAD_THREADS, else 4; fewer for small files).
    """
    dev = device if isinstance(device, _core.Device) else \
        _core.device(device)
    fw = _framework(framework, dev)
    fd = os.open(os.fspath(path), os.O_RDONLY | os.O_CLOEXEC)
    try:
        data_start, tensors, meta = read_header(fd, os.fspath(path))
        if metadata is not None:
            metadata.update(meta)
        data_end = max((t.end for t in tensors), default=0)
        # Start at an aligned file offset so the file and the allocation
        # are congruent (what direct and peer-to-peer I/O want); the bytes
        # before the data section are read along and ignored.
        file_from = data_start // _ALIGN * _ALIGN
        lead = data_start - file_from
        total = lead + data_end
        buf = dev.alloc(max(total, 1))
        if data_end:
            _read_spans(dev, fd, buf, file_from, total, threads,
                        os.fspath(path))
    finally:
        os.close(fd)
    return _wrap(buf, lead, tensors, fw)


def _read_spans(dev: "_core.Device", fd: int, buf: "_core.Buffer",
                file_from: int, total: int, threads: Optional[int],
                path: str) -> None:
    """Read [file_from, file_from + total) into @buf at 0: one batch of
    pieces per thread, each thread on one contiguous span."""
    if threads is None:
        threads = int(os.environ.get("PHX_LOAD_THREADS", "4"))
    threads = max(1, min(threads, (total + _PIECE - 1) // _PIECE))
    span = (total + threads - 1) // threads
    span = (span + _ALIGN - 1) // _ALIGN * _ALIGN
    batches = []
    for start in range(0, total, span):
        end = min(start + span, total)
        pieces = range(start, end, _PIECE)
        ios = (_lib.IoStruct * len(pieces))()
        for i, off in enumerate(pieces):
            io = ios[i]
            io.op = _lib.PHX_OP_READ
            io.fd = fd
            io.file_off = file_from + off
            io.buf = buf.handle
            io.buf_off = off
            io.len = min(_PIECE, end - off)
        batches.append(ios)
    errors: list[BaseException] = []

    def run(ios: Any) -> None:
        try:
            _core.run_ios(dev, ios)
        except BaseException as exc:  # reported below, in this thread
            errors.append(exc)

    if len(batches) == 1:
        run(batches[0])
    else:
        workers = [threading.Thread(target=run, args=(b,)) for b in batches]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if errors:
        raise errors[0]
    for ios in batches:
        for io in ios:
            if io.result != io.len:
                err = -io.result if io.result < 0 else errno.EIO
                why = os.strerror(err) if io.result < 0 else \
                    "file shorter than its header says"
                raise _lib.PhoenixError(err, f"reading {path} at offset "
                                        f"{io.file_off} into {dev.name}: "
                                        f"{why}")


def _wrap(buf: "_core.Buffer", lead: int, tensors: list[TensorInfo],
          fw: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if fw == "pt":
        import torch

        from ._torch import retype

        base = torch.from_dlpack(buf)
        for t in tensors:
            out[t.name] = retype(base[lead + t.begin:lead + t.end], t.dtype,
                                 t.shape)
        return out
    for t in tensors:
        arr = _core.DeviceArray(buf, lead + t.begin, t.dtype, t.shape)
        if fw == "numpy":
            out[t.name] = arr.numpy()
        elif fw == "phoenix":
            out[t.name] = arr
        else:
            raise ValueError(f"unknown framework {fw!r}: use 'pt', 'numpy', "
                             "'phoenix' or 'auto'")
    return out
