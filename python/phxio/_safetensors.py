"""A safetensors loader: one call for a file or a sharded checkpoint.

Every file's selected data lands in one device allocation per file, moved
by one pipeline of batched transfers over all files (_pipeline): a file's
transfers start as soon as its header is parsed, so the next header is
read while earlier bytes move.  The returned tensors are views into those
allocations, which live as long as any of their views.  The result
matches safetensors.torch.load_file() bit for bit: same names, dtypes,
shapes and bytes.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from . import _core, _lib
from ._header import (INDEX_NAME, SafetensorsError, TensorInfo, parse_json,
                      read_header)
from ._phxfs import XATTR_DEVICE, open_fd
from ._transfer import open_data
from ._pipeline import NOT_RUN, Pipeline, ios as new_ios, threads_of

# Transfers are cut into pieces of this size, so that workers share files.
_PIECE = 64 << 20
# Selected tensors closer than this in the file are read as one range.
_GAP = 64 << 10
_ALIGN = 4096

Selector = Union[None, str, Callable[[str], bool], Iterable[str]]


# ---- which files ------------------------------------------------------------

@dataclass
class _Source:
    path: str
    listed: Optional[set[str]] = None  # names the index puts in this file


def _read_index(index: str) -> tuple[list[_Source], dict]:
    fd = open_data(index, os.O_RDONLY, block_devices=False)
    with open(fd, "rb") as f:
        doc = parse_json(f.read(), index, "index")
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict) or not all(
            isinstance(v, str) for v in wmap.values()):
        raise SafetensorsError(f"{index}: bad index: no \"weight_map\" of "
                               "tensor names to file names")
    base = os.path.dirname(index)
    files: dict[str, _Source] = {}
    for name, fname in wmap.items():
        src = files.get(fname)
        if src is None:
            # as transformers has it: shards lie beside their index
            if fname in ("", ".", "..") or os.path.basename(fname) != fname:
                raise SafetensorsError(
                    f"{index}: bad index: tensor {name!r} is in {fname!r}, "
                    "which is not a file name in the index's directory")
            src = files[fname] = _Source(os.path.join(base, fname), set())
        src.listed.add(name)
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) \
        else {}
    return [files[k] for k in sorted(files)], meta


def open_source(src: _Source, index: Optional[str]) -> int:
    """Open one file of a checkpoint (a regular file only: a FIFO would
    block the open); a missing shard is named with a tensor of its."""
    try:
        return open_data(src.path, os.O_RDONLY, block_devices=False)
    except FileNotFoundError:
        if index is None:
            raise
        some = sorted(src.listed or ())[:1]
        raise FileNotFoundError(
            errno.ENOENT, f"{index}: shard {src.path} is missing (it should "
            f"hold tensor {some[0]!r} and {len(src.listed) - 1} more)",
            src.path) from None


def check_listed(src: _Source, tensors: list[TensorInfo],
                 index: Optional[str]) -> None:
    """Every tensor @index puts in @src's file must be in it."""
    if src.listed is None:
        return
    gone = src.listed - {t.name for t in tensors}
    if gone:
        raise SafetensorsError(f"{src.path}: tensor {min(gone)!r}, which "
                               f"{index} puts in this file, is not in it")


def _sources(path: Any) -> tuple[list[_Source], Optional[str]]:
    """The files to read and the index that listed them (if any)."""
    if isinstance(path, (list, tuple)):
        if not path:
            raise ValueError("load_safetensors: the list of files is empty")
        return [_Source(os.fspath(p)) for p in path], None
    p = os.fspath(path)
    if os.path.isdir(p):
        index = os.path.join(p, INDEX_NAME)
        if not os.path.exists(index):
            found = sorted(Path(p).glob("*.safetensors.index.json"))
            index = str(found[0]) if len(found) == 1 else ""
        if index:
            return _read_index(index)[0], index
        files = sorted(Path(p).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(errno.ENOENT, f"{p}: no {INDEX_NAME} "
                                    "and no *.safetensors file in it", p)
        return [_Source(str(f)) for f in files], None
    if p.endswith(".index.json"):
        return _read_index(p)[0], p
    return [_Source(p)], None


def _selector(select: Selector) -> tuple[Optional[Callable[[str], bool]],
                                         Optional[set[str]]]:
    """(predicate, names that must exist) for a name filter."""
    if select is None:
        return None, None
    if isinstance(select, str):
        return (lambda name: name.startswith(select)), None
    if callable(select):
        return select, None
    names = set(select)
    return names.__contains__, names


# ---- loading ----------------------------------------------------------------

def _framework(framework: str, dev: "_core.Device") -> str:
    if framework not in ("auto", "pt", "numpy", "phxio"):
        raise ValueError(f"unknown framework {framework!r}: use 'pt', "
                         "'numpy', 'phxio' or 'auto'")
    if framework != "auto":
        return framework
    try:
        import torch  # noqa: F401

        return "pt"
    except ImportError:
        return "numpy" if dev.kind != "cuda" else "phxio"


@dataclass
class _Plan:
    """One file: where its selected tensors go in its allocation."""
    path: str
    fd: int
    tensors: list[tuple[TensorInfo, int]]  # (tensor, offset in buf)
    ranges: list[tuple[int, int, int]]  # (file offset, buf offset, len)
    size: int  # bytes of the allocation
    data_start: int = 0  # of the file's data section
    buf: Any = None
    ios: Any = None


def _plan(path: str, fd: int, data_start: int, tensors: list[TensorInfo],
          rows: Optional[dict[str, tuple[int, int]]] = None) -> _Plan:
    """Read runs of nearby tensors as one range each, from an aligned file
    offset, so the file and the allocation are congruent (what direct and
    peer-to-peer I/O want).  A tensor in @rows gets its whole place in the
    allocation but only its rows [a, b) along the first dimension are
    read: it is a run of its own."""
    placed: list[tuple[TensorInfo, int]] = []
    ranges: list[tuple[int, int, int]] = []
    cur = 0
    i = 0
    while i < len(tensors):
        part = _rows_of(tensors[i], rows, path)
        j = i + 1
        end = tensors[i].end
        while part is None and j < len(tensors) and \
                _rows_of(tensors[j], rows, path) is None and \
                tensors[j].begin - end <= _GAP:
            end = max(end, tensors[j].end)
            j += 1
        start = (data_start + tensors[i].begin) // _ALIGN * _ALIGN
        stop = data_start + end
        if part is not None:
            t = tensors[i]
            row = (t.end - t.begin) // t.shape[0]
            lo = (data_start + t.begin + part[0] * row) // _ALIGN * _ALIGN
            hi = data_start + t.begin + part[1] * row
            if hi > lo:
                ranges.append((lo, cur + lo - start, hi - lo))
        elif stop > start:
            ranges.append((start, cur, stop - start))
        for t in tensors[i:j]:
            placed.append((t, cur + data_start + t.begin - start))
        cur += (stop - start + _ALIGN - 1) // _ALIGN * _ALIGN
        i = j
    return _Plan(path, fd, placed, ranges, cur, data_start)


def _rows_of(t: TensorInfo, rows: Optional[dict[str, tuple[int, int]]],
             path: str = "") -> Optional[tuple[int, int]]:
    """The rows of @t to read, when fewer than all of them (rows that
    are not whole bytes, of F4, are read whole)."""
    if not rows or t.name not in rows:
        return None
    a, b = check_rows(path, t, rows[t.name])
    if (a, b) == (0, t.shape[0]) or (t.end - t.begin) % t.shape[0]:
        return None
    return a, b


def check_rows(path: str, t: TensorInfo, ab: Any) -> tuple[int, int]:
    """@ab as rows [a, b) of @t, or ValueError naming the tensor."""
    try:
        a, b = ab
    except (TypeError, ValueError):
        a = b = None
    where = f"{path}: tensor {t.name!r}: rows={ab!r}"
    if not all(type(v) is int for v in (a, b)):
        raise ValueError(f"{where} are not two integers (first row, end "
                         "row)")
    if not t.shape:
        raise ValueError(f"{where}: it is a scalar, without rows")
    if not 0 <= a <= b <= t.shape[0]:
        raise ValueError(f"{where} are not rows of its {t.shape[0]} "
                         "(0 <= first <= end <= rows)")
    return a, b


def unknown_rows(where: str, rows: Optional[dict], names: Any) -> None:
    """Every name @rows gives must be a tensor of @names."""
    gone = sorted(set(rows or ()) - set(names), key=str)
    if gone:
        raise ValueError(f"{where}: rows= names tensor {gone[0]!r}, which "
                         "is not in the checkpoint" +
                         (f" (and {len(gone) - 1} more)"
                          if len(gone) > 1 else ""))


def _pieces(plan: _Plan, nparts: int) -> list[Any]:
    """The plan's ranges cut into pieces, in up to @nparts contiguous
    groups (one per worker)."""
    cuts = []
    for foff, boff, n in plan.ranges:
        for o in range(0, n, _PIECE):
            cuts.append((foff + o, boff + o, min(_PIECE, n - o)))
    if not cuts:
        return []
    nparts = max(1, min(nparts, len(cuts)))
    per = (len(cuts) + nparts - 1) // nparts
    groups = []
    for g in range(0, len(cuts), per):
        part = cuts[g:g + per]
        arr = new_ios(len(part))
        for io, (foff, boff, n) in zip(arr, part):
            io.op = _lib.PHX_OP_READ
            io.fd = plan.fd
            io.file_off = foff
            io.buf = plan.buf.handle
            io.buf_off = boff
            io.len = n
        groups.append(arr)
    return groups


def load(path: Any, device: Any = None, framework: str = "auto",
         metadata: Optional[dict] = None, threads: Optional[int] = None,
         select: Selector = None, staged: str = "view",
         rows: Optional[dict[str, tuple[int, int]]] = None,
         _fds: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Load the tensors of a safetensors checkpoint into device memory.

    @path: a .safetensors file, a directory (its
    model.safetensors.index.json, else every *.safetensors in it), an
    index file, or a list of files.  All files go through one pipeline;
    the result is one dict.
    @device: "cuda:0", "cuda", an int, a torch.device, "sim0", a
    phxio.Device, or None for the default device.
    @framework: "pt" (torch tensors), "numpy" (NumPy arrays; sim only),
    "phxio" (DeviceArray), or "auto": torch when it is installed, else
    NumPy on sim and DeviceArray on CUDA.  BF16 and F8 arrays in NumPy use
    ml_dtypes when it is installed, else same-width unsigned integers.
    @metadata: a dict that receives the files' "__metadata__".
    @threads: workers, each with its own batch, 1 to 64 (default
    PHX_LOAD_THREADS, else 1; fewer for small checkpoints); they share the
    staging memory, so more of them do not hold more host memory.
    @select: which tensors: a name prefix (str), a predicate on the name,
    or a collection of names (each must exist).  Unselected bytes are
    never read, and with an index, files holding none are never opened.
    @staged: for files on a phxfs mount, which are device memory already:
    "view" (the tensors are views of the file's memory, mapped in place;
    writing to them changes the file), "copy" (copied device to device
    into fresh memory on @device), or "read" (read through the mount like
    any file).  "view" needs @device to be None or the file's device;
    otherwise such a file is copied.
    @rows: {name: (a, b)}: of these tensors only rows a to b of the first
    dimension are read (the rest of the tensor is left uninitialized):
    for a tensor-parallel rank that uses only its slice.  Bounds that are
    not integers 0 <= a <= b <= rows, a scalar tensor, or (without
    @select) a name that is no tensor raise ValueError naming it.
    @_fds (within phxio): {path: open descriptor} of files to read
    through a copy of that descriptor rather than by their path (the
    files whose headers _weights.headers() read).
    """
    if staged not in ("view", "copy", "read"):
        raise ValueError(f"staged={staged!r}: use 'view', 'copy' or 'read'")
    named = device is not None
    dev = device if isinstance(device, _core.Device) else \
        _core.device(device)
    dev.check_open()  # also for views of staged files
    fw = _framework(framework, dev)
    nthreads = threads_of(threads)
    keep, wanted = _selector(select)
    sources, index = _sources(path)
    if keep is not None:
        sources = [s for s in sources
                   if s.listed is None or any(map(keep, s.listed))]
    plans: list[_Plan] = []
    owner: dict[str, str] = {}
    pipe: Optional[Pipeline] = None
    try:
        for src in sources:
            plan = _open(src, index, keep, owner, metadata, rows, _fds)
            plans.append(plan)
            if plan.tensors and staged != "read" and \
                    _from_staged(plan, dev, named, staged == "copy"):
                continue
            if plan.tensors:
                plan.buf = dev.alloc(max(plan.size, 1))
            if not plan.ranges:
                continue
            if pipe is None:
                pipe = Pipeline(dev, _workers(sources, plan, nthreads))
            plan.ios = _pieces(plan, nthreads)
            for group in plan.ios:
                pipe.put(group)
        if wanted is not None and wanted - owner.keys():
            missing = sorted(wanted - owner.keys())
            raise SafetensorsError(f"{_where(path)}: no tensor named "
                                   f"{missing[0]!r}" +
                                   (f" (and {len(missing) - 1} more)"
                                    if len(missing) > 1 else ""))
        if keep is None:
            unknown_rows(_where(path), rows, owner)
        if pipe is not None:
            pipe.finish()
        for plan in plans:
            _check_results(plan, dev)
        return _wrap(plans, fw)
    except BaseException:
        if pipe is not None:
            pipe.abort()
        for plan in plans:
            if plan.buf is not None:
                plan.buf.free()
        raise
    finally:
        for plan in plans:
            os.close(plan.fd)


def _workers(sources: list[_Source], first: _Plan, nthreads: int) -> int:
    """Workers for this load: fewer for one small file."""
    if len(sources) > 1:
        return nthreads
    return max(1, min(nthreads, (first.size + _PIECE - 1) // _PIECE))


def _where(path: Any) -> str:
    if isinstance(path, (list, tuple)):
        return ", ".join(os.fspath(p) for p in path)
    return os.fspath(path)


def _claim(owner: dict[str, str], tensors: list[TensorInfo],
           path: str) -> None:
    """Note @path in @owner as the file of each of @tensors; a tensor that
    another file holds already is an error."""
    for t in tensors:
        if t.name in owner:
            raise SafetensorsError(f"tensor {t.name!r} is listed twice: "
                                   f"in {owner[t.name]} and in {path}")
        owner[t.name] = path


def _open(src: _Source, index: Optional[str],
          keep: Optional[Callable[[str], bool]], owner: dict[str, str],
          metadata: Optional[dict],
          rows: Optional[dict[str, tuple[int, int]]] = None,
          fds: Optional[dict[str, int]] = None) -> _Plan:
    """Open and parse one file (through a copy of its descriptor in
    @fds, where it has one); its plan holds the open fd."""
    held = fds.get(src.path) if fds else None
    fd = open_source(src, index) if held is None else \
        os.dup(held)  # closed with the plan, as one opened here
    try:
        data_start, tensors, meta = read_header(fd, src.path)
        if metadata is not None:
            metadata.update(meta)
        names = {t.name for t in tensors}
        _claim(owner, tensors, src.path)
        check_listed(src, tensors, index)
        if keep is not None:
            tensors = [t for t in tensors if keep(t.name)]
            for name in names:
                if not keep(name):
                    del owner[name]
        return _plan(src.path, fd, data_start, tensors, rows)
    except BaseException:
        os.close(fd)
        raise


def _staged_on(fd: int) -> Optional[str]:
    """The device a phxfs file lives on (its xattr), None for any other
    file."""
    try:
        return os.getxattr(fd, XATTR_DEVICE).decode()
    except OSError:
        return None


def _from_staged(plan: _Plan, dev: "_core.Device", named: bool,
                 copy: bool) -> bool:
    """Take @plan's tensors from the device memory of the phxfs file it
    reads, mapped in place: as views of it, or copied device to device
    into a new allocation on @dev.  False when the file is not on phxfs
    (or phxfs cannot hand its memory over): then it is read as any file."""
    where = _staged_on(plan.fd)
    if where is None:
        return False
    try:
        # the file whose header was read, also where its name was taken
        # by another file since
        mapped = open_fd(plan.fd, plan.path)
    except _lib.PhoenixError:
        return False
    # the file may have shrunk since its header was read
    end = max((plan.data_start + t.end for t, _ in plan.tensors),
              default=0)
    size = mapped.size
    if size < end:
        mapped.free()
        raise SafetensorsError(
            f"{plan.path}: truncated: the file ends at byte {size}, "
            "before the data its header lists")
    if not copy and (not named or mapped.device.name == dev.name):
        # the tensors sit where the file has them
        plan.tensors = [(t, plan.data_start + t.begin)
                        for t, _ in plan.tensors]
        plan.buf = mapped
        plan.ranges = []
        return True
    try:
        plan.buf = dev.alloc(max(plan.size, 1))
        for foff, boff, n in plan.ranges:
            _lib.check(_lib.lib().phx_memcpy_buf(plan.buf.handle, boff,
                                                 mapped.handle, foff, n),
                       f"copying {plan.path} from {mapped.device.name} to "
                       f"{dev.name}")
    finally:
        mapped.free()
    plan.ranges = []
    return True


def read_error(io: Any, path: str, dev: Any, what: str = "") -> Exception:
    """The error for @io, a read of @path into @dev that did not complete
    (its result is not its length): cancelled after another failure, the
    file shorter than its header says, or the read's errno.  @what names
    the tensor it was for, ending in ": ", or is empty."""
    if io.result == NOT_RUN:
        return _lib.PhoenixError(errno.ECANCELED, f"reading {path} into "
                                 f"{dev.name}: {what}cancelled after "
                                 "another failure")
    at = io.file_off + max(io.result, 0)
    if io.result >= 0:
        return SafetensorsError(f"{path}: {what}truncated: the file ends at "
                                f"byte {at}, before the data its header "
                                "lists")
    err = -io.result
    return _lib.PhoenixError(err, f"reading {path} at offset {at} into "
                             f"{dev.name}: {what}{os.strerror(err)}")


def _check_results(plan: _Plan, dev: "_core.Device") -> None:
    for group in plan.ios or ():
        for io in group:
            if io.result == io.len:
                continue
            # a cancelled read names no tensor: another read's failure
            # stopped it
            who = None if io.result == NOT_RUN else next(
                (t.name for t, off in plan.tensors
                 if off <= io.buf_off + max(io.result, 0) <
                 off + (t.end - t.begin)), None)
            raise read_error(io, plan.path, dev,
                             f"tensor {who!r}: " if who else "")


def _wrap(plans: list[_Plan], fw: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if fw == "pt":
        from ._torch import views

        for plan in plans:
            if plan.tensors:
                views(plan.buf, plan.tensors, out)
        return out
    for plan in plans:
        for t, off in plan.tensors:
            arr = _core.DeviceArray(plan.buf, off, t.dtype, t.shape)
            out[t.name] = arr.numpy() if fw == "numpy" else arr
    return out
