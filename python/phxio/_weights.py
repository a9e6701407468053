"""A checkpoint's tensors one bounded group at a time.

For a framework that copies each tensor into memory of its own (vLLM's
weight loaders, a module's load_state_dict): load_safetensors() of the
whole checkpoint would hold a second full copy of the model.  Here the
tensors come in groups of about @group_size bytes; while the caller
consumes one, the next is read by the same pipeline, so at most two
groups are held at once.  Files staged on phxfs are device memory
already: their tensors are views of it and cost nothing to hold.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional

from . import _core
from ._safetensors import (SafetensorsError, Selector, TensorInfo, _claim,
                           _selector, _sources, _staged_on, _where,
                           check_listed, check_rows, load, open_source,
                           read_header, unknown_rows)

DEFAULT_GROUP = 1 << 30


class _Held:
    """The descriptor a file's header was read from, closed by close() or
    once no File holds it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)

    @property
    def open(self) -> bool:
        return self._close.alive

    def close(self) -> None:
        self._close()


class File:
    """One file's parsed header: its tensors (offsets in the data section,
    which starts at @data_start), the device it is staged on (phxfs),
    else None, and (headers() holds it) the descriptor the header was
    read from: its data is read, and a staged file mapped, through that
    descriptor, so from the file whose header this is, also where its
    name was taken by another file since."""

    def __init__(self, path: str, tensors: list[TensorInfo],
                 staged: Optional[str], data_start: int = 0,
                 held: Optional[_Held] = None) -> None:
        self.path = path
        self.tensors = tensors
        self.staged = staged
        self.data_start = data_start
        self.held = held

    @property
    def fd(self) -> Optional[int]:
        """The open descriptor the header was read from, or None."""
        h = self.held
        return h.fd if h is not None and h.open else None


def close(files: list[File]) -> None:
    """Close the descriptors @files hold (those of only() with them)."""
    for f in files:
        if f.held is not None:
            f.held.close()


def fds(files: list[File]) -> dict[str, int]:
    """{path: descriptor its header was read from} of @files that hold
    one, for load() to read them through."""
    return {f.path: f.fd for f in files if f.fd is not None}


def headers(path: Any, keep: Optional[Callable[[str], bool]] = None
            ) -> list[File]:
    """The files of a checkpoint (as iter_safetensors takes it) with the
    tensors @keep selects, each header read once; each File holds the
    descriptor it was read from until close(), or until it (and every
    File only() made of it) is gone."""
    sources, index = _sources(path)
    out: list[File] = []
    seen: dict[str, str] = {}
    try:
        for src in sources:
            if keep is not None and src.listed is not None and \
                    not any(map(keep, src.listed)):
                continue
            held = _Held(open_source(src, index))
            try:
                start, tensors, _ = read_header(held.fd, src.path)
                staged = _staged_on(held.fd)
                _claim(seen, tensors, src.path)
                check_listed(src, tensors, index)
                if keep is not None:
                    tensors = [t for t in tensors if keep(t.name)]
            except BaseException:
                held.close()
                raise
            if tensors:
                out.append(File(src.path, tensors, staged, start, held))
            else:
                held.close()
    except BaseException:
        close(out)
        raise
    return out


def _groups(files: list[File], group_size: int
            ) -> list[list[tuple[str, list[str]]]]:
    """Consecutive runs of tensors of about @group_size bytes, as (file,
    names) lists; a tensor larger than that is a group of its own."""
    groups: list[list[tuple[str, list[str]]]] = []
    cur: list[tuple[str, list[str]]] = []
    held = 0
    for f in files:
        names: list[str] = []
        for t in f.tensors:
            n = t.end - t.begin
            if held and held + n > group_size:
                if names:
                    cur.append((f.path, names))
                    names = []
                groups.append(cur)
                cur, held = [], 0
            names.append(t.name)
            held += n
        if names:
            cur.append((f.path, names))
    if cur:
        groups.append(cur)
    return groups


def iter_safetensors(path: Any, device: Any = None, *,
                     group_size: int = DEFAULT_GROUP,
                     threads: Optional[int] = None,
                     select: Selector = None,
                     where: Optional[dict] = None,
                     report: Optional[dict] = None,
                     rows: Optional[dict[str, tuple[int, int]]] = None,
                     ) -> Iterator[tuple[str, Any]]:
    """Yield (name, torch tensor) for a safetensors checkpoint (a file, a
    directory, an index, a list of files) on @device, in file order.

    A tensor stays valid as long as the caller holds it; the group that
    holds it is freed once none of its tensors is held.  Files on phxfs
    (on @device, or with @device None) give views of their memory.
    @where, when given, is filled with each name's file (for errors);
    @report with "files", "staged" (files used in place), "tensors",
    "bytes" and "groups" (read groups).  @rows: as for load_safetensors,
    the tensors of which only some rows are read.
    """
    keep, wanted = _selector(select)
    files = headers(path, keep)
    try:
        yield from _iter_checked(path, files, wanted, keep, device,
                                 group_size, threads, where, report, rows)
    finally:
        close(files)


def _iter_checked(path: Any, files: list[File], wanted: Optional[set[str]],
                  keep: Optional[Callable[[str], bool]], device: Any,
                  group_size: int, threads: Optional[int],
                  where: Optional[dict], report: Optional[dict],
                  rows: Optional[dict[str, tuple[int, int]]]
                  ) -> Iterator[tuple[str, Any]]:
    if wanted is not None:
        have = {t.name for f in files for t in f.tensors}
        if wanted - have:
            missing = sorted(wanted - have)
            raise SafetensorsError(f"{_where(path)}: no tensor named "
                                   f"{missing[0]!r}")
    if rows:
        if keep is None:
            unknown_rows(_where(path), rows,
                         {t.name for f in files for t in f.tensors})
        for f in files:
            for t in f.tensors:
                if t.name in rows:
                    check_rows(f.path, t, rows[t.name])
    if where is not None:
        for f in files:
            for t in f.tensors:
                where[t.name] = f.path
    yield from iter_files(files, device, group_size=group_size,
                          threads=threads, report=report, rows=rows)


def only(files: list[File], names: Any) -> list[File]:
    """@files cut down to the tensors named in @names."""
    out = []
    for f in files:
        keep = [t for t in f.tensors if t.name in names]
        if keep:
            out.append(File(f.path, keep, f.staged, f.data_start, f.held))
    return out


def in_order(files: list[File], device: Any) -> list[File]:
    """@files in the order iter_files() yields their tensors: those staged
    on @device (a Device, or None for any) first."""
    name = getattr(device, "name", None)
    staged = [f for f in files if f.staged is not None and
              (name is None or f.staged == name)]
    return staged + [f for f in files if f not in staged]


def iter_files(files: list[File], device: Any = None, *,
               group_size: int = DEFAULT_GROUP,
               threads: Optional[int] = None,
               report: Optional[dict] = None,
               rows: Optional[dict[str, tuple[int, int]]] = None,
               ) -> Iterator[tuple[str, Any]]:
    """iter_safetensors() of the tensors of @files, from headers()."""
    dev = device if isinstance(device, _core.Device) or device is None \
        else _core.device(device)
    ordered = in_order(files, dev)
    staged = [f for f in ordered if f.staged is not None and
              (dev is None or f.staged == dev.name)]
    rest = ordered[len(staged):]
    groups = _groups(rest, max(1, group_size)) if rest else []
    if report is not None:
        report.update(files=len(files), staged=len(staged),
                      tensors=sum(len(f.tensors) for f in files),
                      bytes=sum(t.end - t.begin for f in files
                                for t in f.tensors), groups=len(groups))
    if staged:
        yield from _staged_views(staged, dev, threads)
    if not groups:
        return

    def read(group: list[tuple[str, list[str]]]) -> dict:
        # through the descriptors the headers were read from (@rest holds
        # them open while a read ahead may still run)
        return load([p for p, _ in group], device=dev, framework="pt",
                    threads=threads, rows=rows,
                    select={n for _, names in group for n in names},
                    _fds=fds(rest))

    with ThreadPoolExecutor(1, thread_name_prefix="phx-groups") as pool:
        nxt = pool.submit(read, groups[0])
        for i, group in enumerate(groups):
            sd = nxt.result()
            nxt = pool.submit(read, groups[i + 1]) \
                if i + 1 < len(groups) else None
            for _, names in group:
                for name in names:
                    yield name, sd.pop(name)
            del sd


def _staged_views(staged: list[File], dev: Any, threads: Optional[int]
                  ) -> Iterator[tuple[str, Any]]:
    """The tensors of files staged on phxfs, as views of their memory.
    Each file is mapped through the phxfs daemon (a round trip and an
    import of its memory); up to four are mapped at once, and their
    tensors come in file order."""
    def view(f: File) -> dict:
        return load(f.path, device=dev, framework="pt", threads=threads,
                    select=[t.name for t in f.tensors], _fds=fds([f]))

    with ThreadPoolExecutor(min(4, len(staged)),
                            thread_name_prefix="phx-staged") as pool:
        maps = [pool.submit(view, f) for f in staged]
        for f, m in zip(staged, maps):
            sd = m.result()
            for t in f.tensors:
                yield t.name, sd.pop(t.name)
            del sd
