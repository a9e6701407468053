"""Checkpoint tensors read straight into a model's parameters.

A framework's weight loaders copy each checkpoint tensor into its
parameter, one Python call per tensor (vLLM's also narrow it to a rank's
slice or stack q, k and v into one qkv_proj).  Where that copy is a plain
one, the file's bytes can go into the parameter's memory directly: no
tensor in between and no loader call, the reads of all of them in flight
together.

Which tensors qualify is learnt from the model itself, in one pass of
its own load_weights.  It is fed stand-ins (meta tensors of the
checkpoint's names, shapes and dtypes, which hold no data) while every
parameter's (and buffer's) weight loader is replaced by a recorder.  When
a stand-in arrives at a recorder as itself (not renamed into another
tensor, sliced, transposed or converted), the model has shown where that
tensor goes and with which shard id.  The recorder then starts the read
at once when:

  - the target's own loader is one the caller's `kinds` table knows as a
    plain copy (for vLLM: default_weight_loader and the unquantized
    linear and embedding layers' loaders, at tensor-parallel size 1), on
    a parameter of a type that table allows, with none of the attributes
    that change what those loaders do (a sharded, packed, GGUF or
    bitsandbytes weight, a scalar spread over a fused array);
  - the layouts match: same dtype, the parameter contiguous on the
    target device; for a plain copy the same shape; for a stacked
    parameter (q/k/v into qkv_proj, gate/up into gate_up_proj) whose
    rows are its parts' rows added up, the part's shape is its rows
    there, as that layer's loader places them.

Any other call is kept to be made again, in order, with the real tensor
once the stand-ins are through: its loader gets exactly what the model
gave the recorder, the real tensor in the stand-in's place.  A parameter
with such a call has all its calls made that way (after the direct reads
are done), so what the model sends one parameter always lands in the
model's order.  A stand-in the model changes before it reaches a loader,
or an error in the pass, ends it: the model then loads from real tensors
as if nothing had happened (the reads started are waited for first).

The pass ends when the stand-ins run out, before the model's
load_weights returns: the direct reads are waited for and the kept calls
made there, so whatever load_weights does after its loop sees the data.
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

from . import _lib
from ._pipeline import Pipeline, ios as new_ios, threads_of
from ._transfer import open_data

# How a known loader places a checkpoint tensor in its parameter.
COPY = "copy"        # the whole parameter
EMBED = "embed"      # the whole parameter, when no padding rows follow
MERGED = "merged"    # rows of output_sizes[shard] (gate/up)
QKV = "qkv"          # rows of q, k or v

# Attributes under which those loaders do something other than a copy.
_SPECIAL = ("is_sharded_weight", "use_bitsandbytes_4bit",
            "needs_scalar_to_array", "packed_dim", "is_gguf_weight",
            "is_gguf_weight_type")

# Transfers are cut into pieces of this size, so that workers share them.
_PIECE = 64 << 20


@dataclass
class Kinds:
    """What the caller knows of its framework's loaders: {function (a
    bound method's __func__): kind}, with None for a target without a
    loader of its own; the loader such a target gets (@default); and the
    parameter types those loaders copy into plainly."""
    loaders: dict[Any, str]
    default: Callable
    param_types: tuple[type, ...] = (torch.nn.Parameter,)


@dataclass
class Part:
    """One checkpoint tensor's place in a parameter."""
    name: str
    param: str
    tensor: Any      # the parameter
    offset: int      # bytes into the parameter's memory
    nbytes: int


@dataclass
class _Call:
    """One loader call of the pass, as the model made it."""
    name: str        # the checkpoint tensor whose stand-in it got
    target: str      # parameter or buffer name
    tensor: Any
    loader: Any      # the target's own, or None
    args: tuple
    kw: dict
    part: Optional[Part]


class Refused(Exception):
    """Raised by a recorder to end the pass (the reason is the message)."""


def _standin(info: Any) -> Optional[Any]:
    dt = info.dtype
    tdt = getattr(torch, dt.torch, None) if dt.torch else None
    if tdt is None or dt.bits % 8:
        return None
    return torch.empty(info.shape, dtype=tdt, device="meta")


def _torch_dtype(info: Any) -> Any:
    return getattr(torch, info.dtype.torch, None) if info.dtype.torch \
        else None


def place(param: Any, loader: Any, info: Any, args: tuple, kw: dict,
          kinds: Kinds) -> Optional[tuple[int, int]]:
    """(byte offset, bytes) in @param where @loader, given the tensor
    @info with @args and @kw after it, copies it plainly; None where that
    is not known to be a plain copy of a matching layout."""
    func = getattr(loader, "__func__", loader)
    try:
        kind = kinds.loaders.get(func)
    except TypeError:  # an unhashable callable
        return None
    layer = getattr(loader, "__self__", None)
    if kind is None or type(param) not in kinds.param_types or \
            not param.is_contiguous() or \
            any(getattr(param, a, None) is not None and
                getattr(param, a) is not False for a in _SPECIAL) or \
            getattr(param, "tp_rank", 0) != 0 or \
            getattr(param, "tp_size", 1) != 1 or \
            getattr(layer, "tp_rank", 0) != 0 or \
            getattr(layer, "tp_size", 1) != 1 or \
            _torch_dtype(info) != param.dtype:
        return None
    shape = tuple(param.shape)
    nbytes = param.numel() * param.element_size()
    if kind in (COPY, EMBED):
        if args or kw or tuple(info.shape) != shape:
            return None
        if kind == EMBED and not _whole_vocab(layer, shape):
            return None
        return 0, nbytes
    if getattr(param, "output_dim", None) != 0 or not shape or \
            not shape[0]:
        return None
    rows = _rows(kind, layer, args, kw, shape[0])
    if rows is None or tuple(info.shape) != (rows[1], *shape[1:]):
        return None
    row = nbytes // shape[0]
    return rows[0] * row, rows[1] * row


def _shard(args: tuple, kw: dict) -> Any:
    if len(args) == 1 and not kw:
        return args[0]
    if not args and set(kw) == {"loaded_shard_id"}:
        return kw["loaded_shard_id"]
    return None


def _rows(kind: str, layer: Any, args: tuple, kw: dict, total: int
          ) -> Optional[tuple[int, int]]:
    """(first row, rows) a stacked layer's loader gives a shard at
    tensor-parallel size 1, when its parts' rows add up to @total."""
    shard = _shard(args, kw)
    try:
        if kind == MERGED:
            sizes = [int(n) for n in layer.output_sizes]
            if type(shard) is not int or not 0 <= shard < len(sizes) or \
                    sum(sizes) != total:
                return None
            return sum(sizes[:shard]), sizes[shard]
        if kind == QKV and shard in ("q", "k", "v"):
            if getattr(layer, "num_kv_head_replicas", 1) != 1:
                return None
            head = layer.head_size
            vhead = getattr(layer, "v_head_size", head)
            q = layer.num_heads * head
            k = layer.num_kv_heads * head
            v = layer.num_kv_heads * vhead
            if q + k + v != total:
                return None
            return {"q": (0, q), "k": (q, k), "v": (q + k, v)}[shard]
    except (AttributeError, TypeError):
        pass
    return None


def _whole_vocab(layer: Any, shape: tuple) -> bool:
    """An embedding's loader copies the checkpoint's rows and zeroes the
    padding after them: a plain copy when there is none."""
    idx = getattr(layer, "shard_indices", None)
    try:
        return idx.org_vocab_start_index == 0 and \
            idx.org_vocab_end_index == shape[0]
    except AttributeError:
        return False


def as_bytes(t: Any) -> Any:
    """A flat uint8 view of the contiguous tensor @t's memory."""
    return t.data.reshape(-1).view(torch.uint8)


class Pass:
    """One pass of a model's load_weights over stand-ins (see the module).

    @files: the checkpoint's headers (_weights.File), in the order the
    tensors are to be fed; @dev: the phxio device of the model; @where:
    the torch device of its parameters; only @candidates (default: all)
    are read direct.  @read(names) yields (name, tensor) of the real
    tensors for the calls made again; @ready() runs before the first read
    starts (the device's set-up done).  Files staged on @dev (phxfs) are
    mapped by a few threads from installed() on, and the tensors read
    direct from them are copied device to device.  A File that holds the
    descriptor its header was read from (as headers() gives it) is read,
    and mapped, through that descriptor, so from that file also where its
    name was taken by another file since; the caller closes those.  Use:

        with p.installed(model):
            loaded = model.load_weights(p.feed())
        p.settle()            # calls made after the stand-ins ran out

    then finish() (or abort() on the way out of a failure).
    """

    def __init__(self, files: list, dev: Any, where: Any, kinds: Kinds,
                 read: Callable[[list[str]], Iterable[tuple[str, Any]]],
                 threads: Optional[int] = None,
                 candidates: Optional[set[str]] = None,
                 ready: Callable[[], None] = lambda: None) -> None:
        self.files = files
        self.dev = dev
        self.where = where
        self.cuda = where if where.type == "cuda" else None
        self.kinds = kinds
        self.read = read
        self.workers = threads_of(threads)
        self.candidates = candidates
        self.ready = ready
        self.file_of = {t.name: f for f in files for t in f.tensors}
        self.info = {t.name: t for f in files for t in f.tensors}
        self.standins: dict[str, Any] = {}
        self.by_id: dict[int, str] = {}
        self.calls: list[_Call] = []
        self.settled = 0
        self.redone: set[str] = set()  # targets loaded through loaders
        self.reason = ""               # why the pass ended, when it did
        self.error: Optional[BaseException] = None  # a real one
        self.last: Optional[str] = None  # the tensor being loaded
        self.params: dict[str, Any] = {}
        self.parts: dict[str, list[Part]] = {}  # by parameter
        self.staged_parts = 0
        self.replayed = 0
        self.waited = 0.0  # seconds waiting for the direct reads
        self._started = False
        self._pipe: Optional[Pipeline] = None
        self._arrays: list[tuple[Any, list[tuple[str, str, str]]]] = []
        self._fds: dict[str, int] = {}
        self._mapped: dict[str, Any] = {}
        self._opening: dict[str, Future] = {}
        self._pool: Optional[ThreadPoolExecutor] = None
        self._src: dict[str, Any] = {}
        self._copies = False
        for name, info in self.info.items():
            s = _standin(info)
            if s is None:
                self.reason = (f"tensor {name!r} has a type torch lacks "
                               f"({info.dtype.name})")
                break
            self.standins[name] = s
            self.by_id[id(s)] = name

    # ---- the pass ---------------------------------------------------

    @contextlib.contextmanager
    def installed(self, model: Any) -> Iterator[None]:
        """Recorders in place of the loaders of @model's parameters and
        buffers for the duration."""
        self.params = dict(model.named_parameters())
        saved: dict[int, tuple[Any, Any]] = {}
        self._open_staged()
        try:
            for name, t in list(self.params.items()) + \
                    list(model.named_buffers()):
                if id(t) in saved:
                    continue
                try:
                    old = t.weight_loader
                except AttributeError:
                    old = None
                saved[id(t)] = (t, old)
                t.weight_loader = self._recorder(name, t, old)
            yield
        finally:
            for t, old in saved.values():
                try:
                    if old is None:
                        del t.weight_loader
                    else:
                        t.weight_loader = old
                except AttributeError:
                    pass

    def feed(self) -> Iterator[tuple[str, Any]]:
        """The stand-ins, then settle()."""
        for name, s in self.standins.items():
            if self.reason:
                return
            self.last = name
            yield name, s
        self.last = None
        if not self.reason:
            self.settle()

    def _recorder(self, target: str, tensor: Any, loader: Any
                  ) -> Callable:
        def record(p: Any, weight: Any, *args: Any, **kw: Any) -> None:
            if self.reason:
                raise Refused(self.reason)
            name = self.by_id.get(id(weight))
            if p is not tensor or name is None:
                self.reason = (f"{target!r} was sent a tensor other than a "
                               f"checkpoint's ({self.last!r} changed on "
                               "the way?)")
                raise Refused(self.reason)
            if loader is None and (args or kw):
                # the default loader a target without one gets takes no
                # shard: the model means something else
                self.reason = (f"{target!r} has no loader and was sent "
                               f"{name!r} with arguments {args} {kw}")
                raise Refused(self.reason)
            part = None
            if target in self.params and \
                    (self.candidates is None or name in self.candidates) \
                    and tensor.device == self.where:
                placed = place(tensor, loader, self.info[name], args, kw,
                               self.kinds)
                if placed is not None:
                    part = Part(name, target, tensor, *placed)
                    try:
                        self._start(part)
                    except BaseException as e:
                        self.error = e
                        raise
            self.calls.append(_Call(name, target, tensor, loader, args, kw,
                                    part))
        return record

    # ---- reads ------------------------------------------------------

    def _start(self, part: Part) -> None:
        if not self._started:
            self._started = True
            self.ready()
            if self.cuda is not None:
                # the parameters' initialisation may still be queued on
                # torch's stream; the engine writes from its own streams
                torch.cuda.current_stream(self.cuda).synchronize()
        f = self.file_of[part.name]
        t = self.info[part.name]
        if f.staged is not None and f.staged == self.dev.name and \
                self._staged(f) is not None:
            a = f.data_start + t.begin
            as_bytes(part.tensor)[part.offset:part.offset + part.nbytes] \
                .copy_(self._src[f.path][a:a + part.nbytes])
            self._copies = True
            return
        # the file whose header was read (its name may be another's now)
        fd = f.fd if f.fd is not None else self._fds.get(f.path)
        if fd is None:
            fd = self._fds[f.path] = open_data(f.path, os.O_RDONLY,
                                               block_devices=False)
        workers = self.workers
        if self._pipe is None:
            self._pipe = Pipeline(self.dev, workers)
        base = part.tensor.data_ptr() + part.offset
        foff = f.data_start + t.begin
        cuts = [(o, min(_PIECE, part.nbytes - o))
                for o in range(0, part.nbytes, _PIECE)]
        whose = (f.path, part.name, part.param)
        # pieces of their own for several workers to share
        step = 1 if workers > 1 else len(cuts)
        for g in range(0, len(cuts), step):
            group = cuts[g:g + step]
            arr = new_ios(len(group))
            for io, (o, n) in zip(arr, group):
                io.op = _lib.PHX_OP_READ
                io.fd = fd
                io.file_off = foff + o
                io.buf = None
                io.dptr = base + o
                io.len = n
            self._arrays.append((arr, [whose] * len(group)))
            self._pipe.put(arr)

    def _open_staged(self) -> None:
        """Start mapping the files staged on the device (each takes the
        phxfs daemon a while), beside the pass that will copy from them."""
        staged = [f for f in self.files
                  if f.staged is not None and f.staged == self.dev.name]
        if not staged:
            return
        self._pool = ThreadPoolExecutor(min(4, len(staged)),
                                        thread_name_prefix="phx-staged")
        for f in staged:
            self._opening[f.path] = self._pool.submit(_map, f.path, f.fd)

    def _staged(self, f: Any) -> Optional[Any]:
        """The memory of the staged file @f as a flat uint8 tensor, or
        None where phxfs does not hand it over (then it is read)."""
        if f.path not in self._mapped:
            fut = self._opening.pop(f.path, None)
            m = fut.result() if fut is not None else _map(f.path, f.fd)
            self._mapped[f.path] = m
            if m is not None:
                self._src[f.path] = torch.from_dlpack(m)
        return self._src.get(f.path)

    def _wait(self) -> None:
        """Wait for the reads and copies started; raise the first
        failure, naming file and tensor."""
        t0 = time.perf_counter()
        try:
            self._wait_all()
        finally:
            self.waited += time.perf_counter() - t0

    def _wait_all(self) -> None:
        if self._copies and self.cuda is not None:
            torch.cuda.synchronize(self.cuda)
        self._copies = False
        pipe, self._pipe = self._pipe, None
        arrays, self._arrays = self._arrays, []
        if pipe is None:
            return
        try:
            pipe.finish()
        except BaseException:
            pipe.abort()
            raise
        for arr, whose in arrays:
            for io, (path, name, param) in zip(arr, whose):
                if io.result != io.len:
                    _failed(io, path, name, param, self.dev)

    # ---- the end ----------------------------------------------------

    def settle(self) -> None:
        """Wait for the direct reads, then make the kept calls (and those
        of parameters that got one) with the real tensors, in order."""
        new = self.calls[self.settled:]
        self.settled = len(self.calls)
        try:
            for c in new:
                if c.part is None:
                    self.redone.add(c.target)
                    self.parts.pop(c.target, None)
            self._wait()
            again = [c for c in new if c.target in self.redone]
            for c in new:
                if c.target not in self.redone:
                    self.parts.setdefault(c.target, []).append(c.part)
                    self.staged_parts += self._is_staged(c.name)
            if not again:
                return
            by_name: dict[str, list[_Call]] = {}
            for c in again:
                by_name.setdefault(c.name, []).append(c)
            for name, tensor in self.read(list(by_name)):
                self.last = name
                for c in by_name.pop(name):
                    loader = c.loader or self.kinds.default
                    loader(c.tensor, tensor, *c.args, **c.kw)
                    self.replayed += 1
            self.last = None
        except BaseException as e:
            self.error = e
            raise

    def _is_staged(self, name: str) -> bool:
        f = self.file_of[name]
        return f.staged is not None and f.staged == self.dev.name and \
            self._src.get(f.path) is not None

    def finish(self) -> None:
        """Release what the pass holds (files, mapped staged files)."""
        self._wait()
        self._close()

    def abort(self) -> None:
        """On the way out of a failure: start nothing more, wait for what
        is in flight (so the memory it writes may be reused)."""
        pipe, self._pipe = self._pipe, None
        self._arrays = []
        try:
            if pipe is not None:
                pipe.abort()
            if self._copies and self.cuda is not None:
                torch.cuda.synchronize(self.cuda)
        finally:
            self._copies = False
            self._close()

    def _close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._src = {}
        opening, self._opening = self._opening, {}
        try:
            for path, fut in opening.items():
                if fut.cancel():  # never started: nothing to free
                    continue
                try:
                    self._mapped[path] = fut.result()
                except Exception:  # a file no tensor was copied from
                    self._mapped[path] = None
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
            mapped, self._mapped = self._mapped, {}
            for m in mapped.values():
                if m is not None:
                    m.free()

    # ---- what it did ------------------------------------------------

    @property
    def direct(self) -> dict[str, Part]:
        """The tensors read direct, by name (of parameters loaded whole
        that way)."""
        return {p.name: p for parts in self.parts.values() for p in parts}

    @property
    def packed(self) -> int:
        """Parameters filled direct from several tensors."""
        return sum(len(p) > 1 for p in self.parts.values())


def _map(path: str, fd: Optional[int] = None) -> Optional[Any]:
    """The phxfs file @path mapped as a phxio Buffer, or None where phxfs
    does not hand it over (then it is read through the mount).  With @fd,
    the descriptor its header was read from, the file that descriptor
    reads: also where @path was since renamed over by another file, whose
    bytes would otherwise be taken at this header's offsets."""
    from . import _phxfs

    try:
        if fd is not None:
            return _phxfs.open_fd(fd, path)
        return _phxfs.open_file(path)
    except _lib.PhoenixError:
        return None


def _failed(io: Any, path: str, name: str, param: str, dev: Any) -> None:
    from ._safetensors import read_error

    raise read_error(io, path, dev,
                     f"tensor {name!r} (into parameter {param!r}): ")
