"""vLLM's load format "phoenix": safetensors checkpoints through phxio.

Installing the package registers it (the ``vllm.general_plugins`` entry
point ``phoenix`` runs register() in every vLLM process), so

    vllm serve MODEL --load-format phoenix
    LLM(model=MODEL, load_format="phoenix")

need nothing else.  Options come as JSON in ``--model-loader-extra-config``
(``model_loader_extra_config=`` in Python):

    direct      true (default): read tensors straight into the memory of
                the parameters they fill, where that is provably what
                vLLM's loaders would do (below); false: every tensor
                goes through the model's weight loaders
    group_size  bytes read ahead of vLLM's weight loaders, as a number or
                a size ("1GiB", the default); at most two groups are held
    threads     the pipeline's workers, 1 to 64 (PHX_LOAD_THREADS, else 1)
    tp_slices   true (default): with tensor parallelism, each rank reads
                only its rows of the weights whose split it knows
    prepare     true (default): set the device up beside model
                construction (below); false: in the weight phase

Direct reads (phxio._direct has the rules): with one tensor-parallel
rank and one pipeline stage, no quantization, the model's load_weights
runs once on stand-ins (meta tensors: no data) with recorders in place
of the parameters' weight loaders.  A tensor whose stand-in reaches,
untouched, a parameter whose loader is a plain copy
(default_weight_loader, the unquantized linear and embedding layers'
loaders) with the same dtype and shape (or, for q/k/v and gate/up
stacked into one parameter, its rows there) is read by phxio's pipeline
straight into the parameter's memory at once, the reads of all of them
in flight together, no tensor in between.  The other calls (a padded
vocabulary, a converted dtype, any other loader) are made again with the
real tensors, read group by group, when the stand-ins run out and the
direct reads are done, before load_weights returns.  A stand-in the
model changes before its loader (a transposed or renamed weight) ends
the pass: then every tensor goes through ``model.load_weights`` group by
group, as with direct false.  Either way no second copy of the whole
model is held.  Files of a checkpoint staged on phxfs are device memory
already: where every file is staged on the model's device there is
nothing to read, and the loaders get views of that memory (the stand-in
pass would only add its own cost); where some are, the direct tensors of
those are copied from it device to device, the others are views of it.

What a process's first load would set up (the device opened, the
pipeline's engines: io_uring, pinned staging, copy streams) is built in a
thread started when vLLM asks for the model, beside its construction;
the weight phase waits for it, and "Loading weights took" counts that
wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import glob
import os
import threading
import time
from typing import Any, Iterator, Optional

from . import _core, _lib, _pipeline, _weights
from ._safetensors import INDEX_NAME, SafetensorsError
from ._weights import DEFAULT_GROUP

LOAD_FORMAT = "phoenix"
OPTIONS = ("direct", "group_size", "threads", "tp_slices", "prepare")
_SWITCHES = ("direct", "tp_slices", "prepare")

_loader_class: Any = None


def _size(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    n = ctypes.c_uint64()
    if _lib.lib().phx_parse_size(str(value).encode(), ctypes.byref(n)):
        raise ValueError
    return n.value


def options(extra: Optional[dict]) -> dict:
    """The loader's options from vLLM's model_loader_extra_config."""
    out = {"group_size": DEFAULT_GROUP, "threads": None, "tp_slices": True,
           "direct": True, "prepare": True}
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"load format {LOAD_FORMAT}: "
                         f"model_loader_extra_config is "
                         f"{type(extra).__name__} {extra!r}: give a JSON "
                         f"object of options ({', '.join(OPTIONS)})")
    for key, value in (extra or {}).items():
        if key not in OPTIONS:
            raise ValueError(f"load format {LOAD_FORMAT}: unknown option "
                             f"{key!r} in model_loader_extra_config; known: "
                             f"{', '.join(OPTIONS)}")
        try:
            if key == "group_size":
                out[key] = _size(value, key)
                if out[key] < 1:
                    raise ValueError
            elif key == "threads":
                # a whole number (as JSON or text); not true, not 2.5
                if isinstance(value, (bool, float)):
                    raise ValueError
                out[key] = int(value)
                if not 1 <= out[key] <= _pipeline.MAX_THREADS:
                    raise ValueError
            else:
                if not isinstance(value, bool):
                    raise ValueError
                out[key] = value
        except (TypeError, ValueError):
            want = "true or false" if key in _SWITCHES else {
                "group_size": "a size such as 1073741824 or \"1GiB\"",
                "threads": "a number of workers, 1 to "
                           f"{_pipeline.MAX_THREADS}"}[key]
            raise ValueError(f"load format {LOAD_FORMAT}: option {key}="
                             f"{value!r}: give {want}") from None
    return out


def checkpoint_dir(model: str, revision: Optional[str],
                   download_dir: Optional[str],
                   ignore: Any = None) -> str:
    """The local folder of @model's safetensors weights, fetched from the
    Hugging Face hub first when @model is not a folder."""
    if os.path.isdir(model):
        return model
    from vllm.model_executor.model_loader.weight_utils import \
        download_weights_from_hf

    return download_weights_from_hf(model, download_dir,
                                    ["*.safetensors", "*.json"],
                                    revision=revision,
                                    ignore_patterns=ignore)


def checkpoint_files(folder: str) -> Any:
    """What load_safetensors reads: the index, else every shard."""
    if os.path.exists(os.path.join(folder, INDEX_NAME)):
        return os.path.join(folder, INDEX_NAME)
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise FileNotFoundError(2, f"load format {LOAD_FORMAT}: {folder}: "
                                f"no {INDEX_NAME} and no *.safetensors "
                                "file; this format reads safetensors "
                                "checkpoints only", folder)
    return files


def _device_of(model: Any) -> Any:
    """The phxio device that holds @model's parameters."""
    for p in model.parameters():
        if p.device.type == "cuda":
            return _core.device(f"cuda:{p.device.index or 0}")
        break
    return _core.device("sim0")


def _target_name(vllm_config: Any) -> str:
    """The phxio device the model vLLM is about to build will live on
    (what _device_of() finds on its parameters afterwards)."""
    import torch

    load = getattr(vllm_config.load_config, "device", None)
    where = torch.device(load or vllm_config.device_config.device)
    if where.type != "cuda":
        return "sim0"
    index = where.index
    if index is None:
        index = torch.cuda.current_device()
    return f"cuda:{index}"


class _Prepare(threading.Thread):
    """The first load's set-up, run beside vLLM's model construction: the
    device opened and the pipeline's engines (io_uring, pinned staging,
    copy streams) built into its pool, so the load borrows them."""

    def __init__(self, name: str, threads: Optional[int]) -> None:
        super().__init__(name="phx-prepare", daemon=True)
        self.target, self.threads = name, threads
        self.seconds = 0.0
        self.error: Optional[BaseException] = None
        self.start()

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            _pipeline.prepare(_core.device(self.target), self.threads)
        except BaseException as e:  # raised by wait(), in the load
            self.error = e
        self.seconds = time.perf_counter() - t0

    def wait(self) -> float:
        """Seconds waited for it to finish; raises what it met."""
        t0 = time.perf_counter()
        self.join()
        if self.error is not None:
            raise self.error
        return time.perf_counter() - t0


def _kinds() -> Any:
    """vLLM's loaders whose copy at one tensor-parallel rank is a plain
    one (checked against vLLM 0.26 and 0.32): each class's own function,
    so a subclass that overrides it is not taken for it."""
    import torch
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.vocab_parallel_embedding import \
        VocabParallelEmbedding
    from vllm.model_executor.model_loader.weight_utils import \
        default_weight_loader

    from ._direct import COPY, EMBED, MERGED, QKV, Kinds

    loaders: dict[Any, str] = {None: COPY, default_weight_loader: COPY}
    for cls, kind in ((linear.ReplicatedLinear, COPY),
                      (linear.ColumnParallelLinear, COPY),
                      (linear.RowParallelLinear, COPY),
                      (linear.MergedColumnParallelLinear, MERGED),
                      (linear.QKVParallelLinear, QKV),
                      (VocabParallelEmbedding, EMBED)):
        for attr in ("weight_loader", "weight_loader_v2"):
            if attr in vars(cls):
                loaders[vars(cls)[attr]] = kind
    types: list[type] = [torch.nn.Parameter]
    try:  # the unquantized linear layers' weights in newer vLLM
        from vllm.model_executor.parameter import ModelWeightParameter

        types.append(ModelWeightParameter)
    except ImportError:
        pass
    return Kinds(loaders, default_weight_loader, tuple(types))


def _one_rank() -> Optional[str]:
    """Why this process does not hold the whole model (tensor or pipeline
    parallelism), or None."""
    try:
        from vllm.distributed import (get_pp_group,
                                      get_tensor_model_parallel_world_size)

        tp = get_tensor_model_parallel_world_size()
        pp = get_pp_group().world_size
    except AssertionError:  # no parallel groups: not in a vLLM worker
        return None
    if tp > 1:
        return f"tensor parallelism ({tp} ranks)"
    if pp > 1:
        return f"pipeline parallelism ({pp} stages)"
    return None


def _why_not_direct(model_config: Any, opts: dict, files: list,
                    dev: Any) -> Optional[str]:
    """Why no tensor is to be read straight into a parameter, or None.
    A checkpoint whose @files are all staged on @dev has nothing to read:
    its views go to the loaders, and the stand-in pass would only add its
    own cost."""
    quant = getattr(model_config, "quantization", None)
    if not opts["direct"]:
        return "option direct is false"
    if quant is not None:
        return f"quantization {quant}"
    if files and all(f.staged == dev.name for f in files):
        return f"every file is staged on phxfs on {dev.name}"
    return _one_rank()


def _direct(model: Any, files: list, dev: Any, opts: dict, last: list,
            ready: Any, kinds: Any = None) -> Any:
    """One pass of load_weights over stand-ins, reading direct what it
    can (phxio._direct): (what load_weights returned, the pass), or
    (None, the pass) when the pass could not be made (its reason says
    why; nothing has been loaded that the model's loaders would not
    overwrite)."""
    from ._direct import Pass, Refused

    order = _weights.in_order(files, dev)
    # a file staged on another device goes the way load_safetensors takes
    candidates = {t.name for f in files
                  if f.staged is None or f.staged == dev.name
                  for t in f.tensors}

    def read(names: list[str]) -> Any:
        return _weights.iter_files(_weights.only(order, set(names)), dev,
                                   group_size=opts["group_size"],
                                   threads=opts["threads"])

    p = Pass(order, dev, next(model.parameters()).device,
             kinds or _kinds(), read,
             threads=opts["threads"], candidates=candidates, ready=ready)
    if p.reason:
        return None, p
    try:
        with p.installed(model):
            loaded = model.load_weights(p.feed())
            if p.reason:  # the model went on after a recorder's refusal
                raise Refused(p.reason)
            p.settle()  # calls made after the stand-ins ran out
        p.finish()
        return loaded, p
    except Exception as e:
        p.abort()
        if p.error is not None:  # from reading, or a loader on real data
            last[0] = p.last
            raise
        if not p.reason:
            p.reason = (f"the model's load_weights did not take stand-ins "
                        f"({type(e).__name__}: {e})")
        return None, p


def _stream(files: list, dev: Any, opts: dict, rows: dict, report: dict,
            last: list) -> Iterator[tuple[str, Any]]:
    """Every tensor, group by group, for the model's weight loaders."""
    sub: dict = {}
    for name, tensor in _weights.iter_files(
            files, dev, group_size=opts["group_size"],
            threads=opts["threads"], report=sub, rows=rows or None):
        last[0] = name
        yield name, tensor
    last[0] = None
    report["groups"] = sub.get("groups", 0)


@contextlib.contextmanager
def _collector_held() -> Iterator[None]:
    """Python's cyclic garbage collector held off for the duration (as it
    was, after).  The weight phase allocates a few objects per tensor in a
    process that holds hundreds of thousands (vLLM's, torch's), so the
    collections it would set off walk all of those: most of the phase's
    own time on a model of a few hundred tensors.  Nothing it makes lives
    on in cycles: the stand-ins' recorders are taken off the parameters
    when the pass ends."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _make_class() -> Any:
    from vllm.logger import init_logger
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    # under vLLM's logger, so its handlers print our lines as its own
    logger = init_logger("vllm.model_executor.model_loader.phoenix")

    class PhoenixModelLoader(BaseModelLoader):
        """Safetensors weights through phxio's pipeline (see the module)."""

        def __init__(self, load_config: Any) -> None:
            super().__init__(load_config)
            self.options = options(load_config.model_loader_extra_config)
            self._prepare: Optional[_Prepare] = None

        def load_model(self, vllm_config: Any, model_config: Any,
                       *args: Any, **kwargs: Any) -> Any:
            # in the process that will hold the model (never in one that
            # only downloads it): the set-up overlaps model construction
            if self.options["prepare"]:
                self._prepare = _Prepare(_target_name(vllm_config),
                                         self.options["threads"])
            try:
                return super().load_model(vllm_config, model_config, *args,
                                          **kwargs)
            finally:
                if self._prepare is not None:
                    self._prepare.join()
                    self._prepare = None

        def _folder(self, model_config: Any) -> str:
            return checkpoint_dir(model_config.model,
                                  getattr(model_config, "revision", None),
                                  self.load_config.download_dir,
                                  getattr(self.load_config,
                                          "ignore_patterns", None))

        def download_model(self, model_config: Any) -> None:
            self._folder(model_config)

        def load_weights(self, model: Any, model_config: Any) -> None:
            with _collector_held():
                self._load_weights(model, model_config)

        def _load_weights(self, model: Any, model_config: Any) -> None:
            from ._tp import vllm_rows

            t0 = time.perf_counter()
            folder = self._folder(model_config)
            where: dict[str, str] = {}
            last = [None]
            report: dict = {}
            prep, self._prepare = self._prepare, None

            def ready() -> None:  # before the first read
                nonlocal prep
                if prep is not None:  # its wait is in the time logged
                    report["waited"] = prep.wait()
                    report["prepared"] = prep.seconds
                    report["built0"] = \
                        _core.device(prep.target).engine_stats()["built"]
                    report["target"] = prep.target
                    prep = None

            try:
                dev = _device_of(model)
                files = _weights.headers(checkpoint_files(folder))
                where = {t.name: f.path for f in files for t in f.tensors}
                report.update(
                    device=dev.name, files=len(files),
                    staged=sum(f.staged == dev.name for f in files),
                    tensors=len(where),
                    bytes=sum(t.end - t.begin for f in files
                              for t in f.tensors))
                loaded, done = None, None
                why = _why_not_direct(model_config, self.options, files,
                                      dev)
                if why is None:
                    # the model's pass starts while the device is still
                    # being set up beside it
                    t1 = time.perf_counter()
                    loaded, done = _direct(model, files, dev, self.options,
                                           last, ready)
                    report["pass"] = time.perf_counter() - t1
                    why = done.reason if loaded is None else None
                report["direct_off"] = why
                if why is not None:
                    ready()
                    rows = vllm_rows(model) if self.options["tp_slices"] \
                        else {}
                    report["sliced"] = len(rows)
                    loaded = model.load_weights(_stream(
                        files, dev, self.options, rows, report, last))
            except (_lib.PhoenixError, SafetensorsError, OSError):
                raise  # from reading: they name the file and tensor
            except Exception as e:  # from vLLM's weight loaders
                if last[0] is None:
                    raise
                raise RuntimeError(f"load format {LOAD_FORMAT}: "
                                   f"{where.get(last[0], folder)}: tensor "
                                   f"{last[0]!r}: {e}") from e
            finally:
                if prep is not None:
                    prep.join()
            # the descriptors the headers were read from, through which
            # every tensor was read (after a failure, a read ahead may
            # still use them: they close with the last File holding them)
            _weights.close(files)
            logger.info("Loading weights took %.2f seconds",
                        time.perf_counter() - t0)
            if "prepared" in report and \
                    _core.device(report["target"]).name != \
                    report.get("device"):
                logger.info("load format %s: prepared %s, but the model is "
                            "on %s, where the load set itself up",
                            LOAD_FORMAT, report["target"],
                            report.get("device"))
            elif "prepared" in report:
                pdev = _core.device(report["target"])
                logger.info("load format %s: %s and its engines prepared in "
                            "%.3f s beside model construction; the load "
                            "waited %.3f s for it and built %d engines",
                            LOAD_FORMAT, pdev.name, report["prepared"],
                            report["waited"],
                            pdev.engine_stats()["built"] - report["built0"])
            if report["direct_off"] is None:
                direct = done.direct
                redone = {c.name for c in done.calls
                          if c.target in done.redone}
                logger.info("load format %s: direct: %d tensors (%.1f MB) "
                            "read straight into %d parameters, %d of them "
                            "packed from several tensors, %d tensors copied "
                            "from files staged on phxfs; %d tensors through "
                            "the model's weight loaders, %d it left out; "
                            "the pass took %.3f s, %.3f s of it waiting for "
                            "the reads",
                            LOAD_FORMAT, len(direct),
                            sum(p.nbytes for p in direct.values()) / 1e6,
                            len(done.parts), done.packed,
                            done.staged_parts, len(redone),
                            len(where) - len(direct) - len(redone),
                            report["pass"], done.waited)
            else:
                logger.info("load format %s: direct reads off: %s",
                            LOAD_FORMAT, report["direct_off"])
            logger.info("load format %s: %d tensors (%.1f MB) from %d "
                        "files of %s into %s; %d files staged on phxfs used "
                        "in place, the rest read in %d groups; %d tensors "
                        "read in part for this tensor-parallel rank "
                        "(pid %d)",
                        LOAD_FORMAT, report.get("tensors", 0),
                        report.get("bytes", 0) / 1e6,
                        report.get("files", 0), folder,
                        report.get("device", "?"), report.get("staged", 0),
                        report.get("groups", 0), report.get("sliced", 0),
                        os.getpid())
            if loaded is not None and model_config.quantization is None:
                params = {n for n, _ in model.named_parameters()}
                missing = sorted(params - set(loaded))
                if missing:
                    raise ValueError(
                        f"load format {LOAD_FORMAT}: {folder}: no weight "
                        f"for parameter {missing[0]!r} (and "
                        f"{len(missing) - 1} more) in the checkpoint")

    return PhoenixModelLoader


def register() -> None:
    """Register the load format (the vllm.general_plugins entry point)."""
    global _loader_class
    from vllm.model_executor import model_loader

    if _loader_class is None:
        _loader_class = _make_class()
    known = getattr(model_loader, "_LOAD_FORMAT_TO_MODEL_LOADER", {})
    if known.get(LOAD_FORMAT) is _loader_class:
        return
    model_loader.register_model_loader(LOAD_FORMAT)(_loader_class)
