"""The safetensors format: a file's header, checked as the safetensors
library checks it, and a sharded checkpoint's index.

A header is a little-endian u64 length, then that many bytes of UTF-8
JSON: an object mapping each tensor's name to its "dtype", "shape" (non-
negative integers) and "data_offsets" ([begin, end) in the data section
that follows), and an optional "__metadata__" of strings to strings.
The tensors, in offset order, cover the data section exactly: no gaps,
no overlaps, no bytes after the last one.  Anything else is refused with
one line naming the file (and the tensor).
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from ._dtypes import DTYPES, DType

# Longest header the format allows (safetensors refuses larger ones).
MAX_HEADER = 100_000_000
# Bytes read at once for a header: most fit, so one read does.
HEAD_READ = 64 << 10
INDEX_NAME = "model.safetensors.index.json"
# Largest dimension: what NumPy and torch can index.
_MAX_DIM = (1 << 63) - 1


class SafetensorsError(ValueError):
    """A file or index is not a valid safetensors checkpoint."""


class TensorInfo(NamedTuple):
    """One tensor of a header (a tuple: cheap to make by the thousand)."""
    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int  # offsets in the data section
    end: int


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes, path: str, what: str) -> Any:
    """@raw as strict UTF-8 JSON (no NaN or Infinity); SafetensorsError
    "@path: bad @what: ..." otherwise."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 (byte {exc.start})"
    except RecursionError:
        why = "nested too deeply"
    except ValueError as exc:  # JSONDecodeError among them
        why = f"not JSON ({str(exc).splitlines()[0]})"
    raise SafetensorsError(f"{path}: bad {what}: {why}")


def parse_header(path: str, size: int, head: bytes, fd: int
                 ) -> tuple[int, dict]:
    """(data section offset, header object) from the first bytes @head of
    a @size-byte file open as @fd."""
    if len(head) < 8:
        raise SafetensorsError(f"{path}: truncated: {size} bytes is too "
                               "short for a safetensors file")
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER:
        raise SafetensorsError(f"{path}: bad header: length {n} is over "
                               f"the format's limit of {MAX_HEADER}")
    if n < 2:
        raise SafetensorsError(f"{path}: bad header: length {n} is too "
                               "short for a JSON object")
    if 8 + n > size:
        raise SafetensorsError(f"{path}: truncated: the header says {n} "
                               f"bytes but the file has {size}")
    raw = head[8:8 + n] if 8 + n <= len(head) else os.pread(fd, n, 8)
    if len(raw) < n:
        raise SafetensorsError(f"{path}: truncated: the file ends inside "
                               "its header")
    if not raw.startswith(b"{"):
        raise SafetensorsError(f"{path}: bad header: not JSON (it does "
                               "not start with '{')")
    header = parse_json(raw, path, "header")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: bad header: not a JSON object")
    return 8 + n, header


def _uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def metadata_of(path: str, header: dict) -> dict[str, str]:
    """Pop the header's "__metadata__" (str -> str, or absent or null)."""
    meta = header.pop("__metadata__", None)
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(
            isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{path}: bad header: \"__metadata__\" is "
                               "not an object of strings")
    return meta


def _entry(path: str, name: str, ent: Any) -> TensorInfo:
    def bad(why: str) -> SafetensorsError:
        return SafetensorsError(f"{path}: tensor {name!r}: bad header "
                                f"entry: {why}")

    if not isinstance(ent, dict):
        raise bad("not a JSON object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in ent:
            raise bad(f"no {key!r}")
    dtype = DTYPES.get(ent["dtype"]) if isinstance(ent["dtype"], str) \
        else None
    if dtype is None:
        raise bad(f"unknown dtype {ent['dtype']!r}")
    shape, offs = ent["shape"], ent["data_offsets"]
    if not isinstance(shape, list) or not all(
            _uint(s) and s <= _MAX_DIM for s in shape):
        raise bad(f"shape {shape!r} is not a list of non-negative "
                  "integers")
    if not isinstance(offs, list) or len(offs) != 2 or \
            not all(map(_uint, offs)):
        raise bad(f"data_offsets {offs!r} are not two non-negative "
                  "integers")
    bits = dtype.bits
    for s in shape:
        bits *= s
    if bits % 8:
        raise bad(f"{dtype.name}{shape} ends inside a byte")
    begin, end = offs
    if end < begin or end - begin != bits // 8:
        raise SafetensorsError(f"{path}: tensor {name!r}: bad header: "
                               f"data offsets [{begin}, {end}) do not "
                               f"match its shape {shape} of {dtype.name}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def tensors_of(path: str, header: dict, data_start: int, size: int
               ) -> list[TensorInfo]:
    """The tensors of @header (without "__metadata__"), in file order,
    checked to cover the @size-byte file's data section exactly."""
    tensors = []
    for name, ent in header.items():
        t = _entry(path, name, ent)
        if data_start + t.end > size:
            raise SafetensorsError(f"{path}: tensor {name!r}: truncated: "
                                   f"its data ends at byte "
                                   f"{data_start + t.end}, the file at "
                                   f"{size}")
        tensors.append(t)
    tensors.sort(key=lambda t: (t.begin, t.end, t.name))
    at = 0
    prev = None
    for t in tensors:
        if t.begin < at:
            raise SafetensorsError(f"{path}: tensor {t.name!r}: bad header: "
                                   f"its bytes [{t.begin}, {t.end}) overlap "
                                   f"tensor {prev.name!r}'s "
                                   f"[{prev.begin}, {prev.end})")
        if t.begin > at:
            raise SafetensorsError(f"{path}: bad header: bytes [{at}, "
                                   f"{t.begin}) of the data section, before "
                                   f"tensor {t.name!r}, belong to no tensor")
        at, prev = t.end, t
    if data_start + at != size:
        raise SafetensorsError(f"{path}: bad header: the file has "
                               f"{size - data_start - at} bytes after the "
                               "data of its last tensor")
    return tensors


def read_header(fd: int, path: str = ""
                ) -> tuple[int, list[TensorInfo], dict[str, str]]:
    """(data section offset, tensors, metadata) of an open safetensors file."""
    size = os.fstat(fd).st_size
    data_start, header = parse_header(path, size,
                                      os.pread(fd, HEAD_READ, 0), fd)
    metadata = metadata_of(path, header)
    return data_start, tensors_of(path, header, data_start, size), metadata
