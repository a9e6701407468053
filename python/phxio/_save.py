"""Write device tensors as a safetensors file, or as shards with an index.

The header is padded so that the data section starts on a 4 KiB
boundary, and written from host memory while the tensors' bytes move;
those go from the device to the file through the engine, as phx_write()
moves one buffer: one batch, every shard's tensors queued in file order,
tensors of one allocation that follow each other there merged into one
transfer, O_DIRECT for all but the pages two tensors share.  So the file
is written front to back by one pipeline that never drains between
tensors or shards.  Files are written under temporary names and renamed
into place only when complete, so a failed save leaves nothing behind
and an old checkpoint intact; a save that succeeded removes what is left
of the checkpoint it replaced (its index, shards it did not overwrite).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from typing import Any, Optional, Union

from . import _core, _lib
from ._dtypes import DType, dtype_of
from ._pipeline import NOT_RUN, Pipeline, ios as new_ios, threads_of
from ._header import INDEX_NAME, MAX_HEADER

_ALIGN = 4096
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
          "TB": 10**12, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
          "TIB": 1 << 40}


def _shard_limit(size: Union[int, str, None]) -> Optional[int]:
    """Bytes from 400_000_000, "400MB" or "5GiB" (as transformers reads)."""
    if size is None or isinstance(size, int):
        if size is not None and size <= 0:
            raise ValueError(f"max_shard_size must be positive, not {size}")
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*",
                     str(size).upper())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"max_shard_size {size!r}: use bytes or a size "
                         "such as '400MB' or '5GiB'")
    return max(1, int(float(m.group(1)) * _UNITS[m.group(2)]))


def _allocation(obj: Any) -> Any:
    """What @obj's memory is part of, where that can be told, else None.
    One transfer moves bytes of one allocation only: a device copy may
    not run from one allocation into the next even where they lie side
    by side."""
    if isinstance(obj, _core.DeviceArray):
        return ("phxio", obj.owner.handle)
    storage = getattr(obj, "untyped_storage", None)  # torch
    if callable(storage):
        try:
            return ("torch", storage().data_ptr())
        except (RuntimeError, TypeError):
            return None
    return None


def _source(name: str, obj: Any
            ) -> tuple[DType, tuple[int, ...], Any, Any]:
    """(dtype, shape, transfer target, allocation) of one tensor to save."""
    if not isinstance(name, str):
        raise TypeError(f"tensor names must be strings, not {name!r}")
    if name == "__metadata__":
        raise ValueError("'__metadata__' is reserved: pass metadata= "
                         "instead")
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.generic):
        obj = numpy.array(obj)  # a scalar: saved as a 0-d tensor
    if isinstance(obj, _core.DeviceArray):
        dtype, shape = obj.dtype, obj.shape
    else:
        try:
            dtype = dtype_of(obj.dtype)
            shape = tuple(int(s) for s in obj.shape)
        except (AttributeError, TypeError) as exc:
            raise TypeError(f"tensor {name!r}: cannot save a "
                            f"{type(obj).__name__} ({exc})") from None
        contig = getattr(obj, "is_contiguous", None)
        if contig is not None and not contig():
            raise ValueError(f"tensor {name!r} is not contiguous: save "
                             "t.contiguous()")
    try:
        target = _core._target(obj, source=True) if dtype.nbytes(shape) \
            else None
    except (TypeError, ValueError, BufferError) as exc:
        raise type(exc)(f"tensor {name!r}: cannot save it: {exc}") from None
    return dtype, shape, target, _allocation(obj)


def _header(entries: list[tuple[str, DType, tuple, Any]],
            metadata: Optional[dict]) -> tuple[bytes, list[int]]:
    """The header bytes and each entry's offset in the data section."""
    head: dict[str, Any] = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ValueError(f"metadata must map strings to strings; "
                                 f"{k!r}: {v!r} does not")
        head["__metadata__"] = dict(metadata)
    offs = []
    at = 0
    for name, dtype, shape, *_ in entries:
        n = dtype.nbytes(shape)
        head[name] = {"dtype": dtype.name, "shape": list(shape),
                      "data_offsets": [at, at + n]}
        offs.append(at)
        at += n
    raw = json.dumps(head, separators=(",", ":")).encode()
    # Trailing spaces are valid JSON: pad so that the data section starts
    # on a 4 KiB boundary, where direct I/O can write it.
    raw += b" " * (-(8 + len(raw)) % _ALIGN)
    if len(raw) > MAX_HEADER:
        raise ValueError(f"a header of {len(raw)} bytes for "
                         f"{len(entries)} tensors is over the format's "
                         f"limit of {MAX_HEADER}: use max_shard_size")
    return raw, offs


def _shards(entries: list, limit: Optional[int]) -> list[list]:
    if limit is None:
        return [entries]
    shards: list[list] = [[]]
    size = 0
    for e in entries:
        n = e[1].nbytes(e[2])
        if shards[-1] and size + n > limit:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += n
    return shards


def save(tensors: dict, path: Any, metadata: Optional[dict] = None,
         max_shard_size: Union[int, str, None] = None,
         threads: Optional[int] = None) -> list[str]:
    """Write @tensors (name -> device tensor) to a safetensors file.

    Tensors are torch or CuPy tensors on a GPU, phxio DeviceArrays or
    (on the simulated device) NumPy arrays, all on one device and
    C-contiguous.  @metadata (str -> str) goes into "__metadata__".
    With @max_shard_size (bytes, or "400MB", "5GiB") a checkpoint larger
    than that is cut into shards named as transformers names them, next
    to @path: "model.safetensors" gives model-00001-of-0000N.safetensors
    and model.safetensors.index.json; a directory as @path means
    DIR/model.safetensors.  @threads: workers, 1 to 64 (default
    PHX_LOAD_THREADS, else 1), each taking whole shards; together they
    hold one engine's staging memory.  Returns the files written.  Then
    the files of an earlier save to @path that this one did not replace
    are removed: its index, the shards that index lists or named as this
    save's shards are, and for a sharded save the unsharded @path.
    """
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith(os.sep):
        path = os.path.join(path, "model.safetensors")
    limit = _shard_limit(max_shard_size)
    nthreads = threads_of(threads)
    entries = [(name, *_source(name, obj)) for name, obj in tensors.items()]
    # As safetensors orders them (widest elements first, so that each
    # tensor's offset suits its type), then in device memory order rather
    # than by name: tensors in a row there go out as one transfer.
    entries.sort(key=lambda e: (-e[1].bits, e[3].dptr if e[3] else 0, e[0]))
    devs = {e[3].device.name for e in entries if e[3] is not None}
    if len(devs) > 1:
        raise ValueError("save_safetensors: all tensors must be on one "
                         f"device, not {', '.join(sorted(devs))}")
    shards = _shards(entries, limit)
    stem = path[:-len(".safetensors")] if path.endswith(".safetensors") \
        else path
    index = stem + ".safetensors.index.json"
    if os.path.basename(path) == "model.safetensors":
        index = os.path.join(os.path.dirname(path), INDEX_NAME)
    if len(shards) == 1:
        names = [path]
    else:
        names = [f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                 for i in range(len(shards))]
    suffix = f".tmp{os.getpid()}.{next(_saves)}"
    files = _write_all(shards, names, metadata, nthreads, suffix)
    try:
        if len(shards) > 1:
            wmap = {e[0]: os.path.basename(f)
                    for shard, f in zip(shards, names) for e in shard}
            total = sum(e[1].nbytes(e[2]) for e in entries)
            doc = {"metadata": {"total_size": total, **(metadata or {})},
                   "weight_map": wmap}
            files.append(index + suffix)
            _write_index(files[-1], doc)
            names.append(index)
        stale = _stale(path, stem, index, names)
        # the index last: it names shards that are in place by then
        for tmp, final in zip(files, names):
            os.replace(tmp, final)
    except BaseException:
        for tmp in files:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    for f in stale:
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OSError(exc.errno, f"{f}: cannot remove this file of "
                          f"the checkpoint {path} replaced: "
                          f"{os.strerror(exc.errno)}", f) from None
    return names


# Temporary names of one process's saves differ by this count as well.
_saves = itertools.count()


def _write_index(tmp: str, doc: dict) -> None:
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")


def _stale(path: str, stem: str, index: str, names: list[str]
           ) -> list[str]:
    """The files of an earlier save to @path that this one, writing
    @names, does not replace: its index, the shards that index lists, and
    files named as this save's shards are (stem-0000K-of-0000N), also
    @path itself when this save is sharded.  Loaders prefer an index to
    the files beside it, so any of them left behind would be read as part
    of the new checkpoint (or instead of it)."""
    base = os.path.dirname(path) or "."
    keep = {os.path.abspath(n) for n in names}
    found = []
    if index not in names and os.path.isfile(index):
        found.append(index)
    try:
        with open(index, "rb") as f:
            wmap = json.load(f).get("weight_map")
        listed = set(wmap.values()) if isinstance(wmap, dict) else set()
    except (OSError, ValueError, AttributeError, TypeError):
        listed = set()
    pattern = re.compile(re.escape(os.path.basename(stem)) +
                         r"-\d{5}-of-\d{5}\.safetensors")
    try:
        here = os.listdir(base)
    except OSError:
        here = []
    for fname in here:
        if pattern.fullmatch(fname):
            listed.add(fname)
    if len(names) > 1:
        listed.add(os.path.basename(path))
    for fname in sorted(listed):
        if not isinstance(fname, str) or os.path.basename(fname) != fname \
                or not fname.endswith(".safetensors"):
            continue  # only plain shard names beside the index
        f = os.path.join(base, fname)
        if os.path.abspath(f) not in keep and os.path.isfile(f):
            found.append(f)
    return found


def _runs(shard: list, offs: list[int], data_start: int
          ) -> list[tuple[int, int, int]]:
    """(device address, file offset, length) of the shard's bytes in file
    order, one run for tensors of one allocation that follow each other
    there too (as a loaded checkpoint's do): fewer transfers, and fewer
    unaligned edges that must go through the page cache."""
    runs: list[list[int]] = []
    last = None
    for (name, dtype, shape, t, alloc), off in zip(shard, offs):
        n = dtype.nbytes(shape)
        if not n:
            continue
        foff = data_start + off
        if runs and alloc is not None and alloc == last and \
                runs[-1][0] + runs[-1][2] == t.dptr and \
                runs[-1][1] + runs[-1][2] == foff:
            runs[-1][2] += n
        else:
            runs.append([t.dptr, foff, n])
            last = alloc
    return [(d, f, n) for d, f, n in runs]


def _write_all(shards: list[list], names: list[str],
               metadata: Optional[dict], nthreads: int, suffix: str
               ) -> list[str]:
    """Write every shard under its name with @suffix; returns those
    names (none is left behind on failure)."""
    dev = next((e[3].device for s in shards for e in s if e[3] is not None),
               None)
    tmps: list[str] = []
    fds: list[int] = []
    groups: list[tuple[str, Any]] = []
    pipe: Optional[Pipeline] = None
    try:
        for shard, final in zip(shards, names):
            tmp = final + suffix
            head, offs = _header(shard, metadata)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         os.O_CLOEXEC, 0o644)
            tmps.append(tmp)
            fds.append(fd)
            data_start = 8 + len(head)
            # Sized up front: the data writes then land inside the file,
            # where the file system takes them in parallel (writes past
            # the end are serialized), and trailing empty tensors count.
            total = sum(e[1].nbytes(e[2]) for e in shard)
            os.ftruncate(fd, data_start + total)
            runs = _runs(shard, offs, data_start)
            if runs:
                if pipe is None:
                    pipe = Pipeline(dev, min(nthreads, len(shards)))
                arr = new_ios(len(runs))
                for io, (dptr, foff, n) in zip(arr, runs):
                    io.op = _lib.PHX_OP_WRITE
                    io.fd = fd
                    io.file_off = foff
                    io.dptr = dptr
                    io.len = n
                pipe.put(arr)
                groups.append((final, arr))
            # while the tensors' bytes move: the header is no part of
            # their pages (the data section starts on a 4 KiB boundary)
            os.pwrite(fd, len(head).to_bytes(8, "little") + head, 0)
        if pipe is not None:
            pipe.finish()
        for final, arr in groups:
            for io in arr:
                if io.result != io.len:
                    err = -io.result if io.result < 0 else 5
                    why = "cancelled after another failure" \
                        if io.result == NOT_RUN else os.strerror(err)
                    raise _lib.PhoenixError(
                        err, f"writing {final} at offset {io.file_off} "
                        f"from {dev.name}: {why}")
        return tmps
    except BaseException:
        if pipe is not None:
            pipe.abort()
        for tmp in tmps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    finally:
        for fd in fds:
            os.close(fd)
