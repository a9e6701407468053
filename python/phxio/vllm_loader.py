"""vLLM's load format "phoenix": safetensors checkpoints through phxio.

Installing the package registers it (the ``vllm.general_plugins`` entry
point ``phoenix`` runs register() in every vLLM process), so

    vllm serve MODEL --load-format phoenix
    LLM(model=MODEL, load_format="phoenix")

need nothing else.  Options come as JSON in ``--model-loader-extra-config``
(``model_loader_extra_config=`` in Python):

    group_size  bytes read ahead of vLLM's weight loaders, as a number or
                a size ("1GiB", the default); at most two groups are held
    threads     the pipeline's workers (PHX_LOAD_THREADS, else 1)
    tp_slices   true (default): with tensor parallelism, each rank reads
                only its rows of the weights whose split it knows

The weights go through phxio's one pipeline into the memory of the
device the model lives on (the simulated device's host memory for vLLM's
CPU build) and are fed to ``model.load_weights`` group by group, so no
second copy of the whole model is held.  Files of a checkpoint staged on
phxfs are device memory already: their tensors are views of it.

What a process's first load would set up (the device opened, the
pipeline's engines: io_uring, pinned staging, copy streams) is built in a
thread started when vLLM asks for the model, beside its construction;
the weight phase waits for it, and "Loading weights took" counts that
wait.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
import time
from typing import Any, Iterator, Optional

from . import _core, _lib, _pipeline
from ._safetensors import INDEX_NAME, SafetensorsError
from ._weights import DEFAULT_GROUP, iter_safetensors

LOAD_FORMAT = "phoenix"
OPTIONS = ("group_size", "threads", "tp_slices")

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
    out = {"group_size": DEFAULT_GROUP, "threads": None, "tp_slices": True}
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
                out[key] = int(value)
                if out[key] < 1:
                    raise ValueError
            else:
                if not isinstance(value, bool):
                    raise ValueError
                out[key] = value
        except (TypeError, ValueError):
            want = {"group_size": "a size such as 1073741824 or \"1GiB\"",
                    "threads": "a number of workers, at least 1",
                    "tp_slices": "true or false"}[key]
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


def _weights(model: Any, folder: str, opts: dict, where: dict,
             last: list, report: dict) -> Iterator[tuple[str, Any]]:
    from ._tp import vllm_rows

    dev = _device_of(model)
    report["device"] = dev.name
    rows = vllm_rows(model) if opts["tp_slices"] else {}
    report["sliced"] = len(rows)
    for name, tensor in iter_safetensors(
            checkpoint_files(folder), dev, group_size=opts["group_size"],
            threads=opts["threads"], where=where, report=report,
            rows=rows or None):
        last[0] = name
        yield name, tensor


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
            t0 = time.perf_counter()
            folder = self._folder(model_config)
            where: dict[str, str] = {}
            last = [None]
            report: dict = {}
            prep, self._prepare = self._prepare, None
            if prep is not None:  # its wait is in the time logged below
                report["waited"] = prep.wait()
                report["prepared"] = prep.seconds
                report["built0"] = \
                    _core.device(prep.target).engine_stats()["built"]
                report["target"] = prep.target
            try:
                loaded = model.load_weights(
                    _weights(model, folder, self.options, where, last,
                             report))
            except (_lib.PhoenixError, SafetensorsError, OSError):
                raise  # from reading: they name the file and tensor
            except Exception as e:  # from vLLM's weight loaders
                if last[0] is None:
                    raise
                raise RuntimeError(f"load format {LOAD_FORMAT}: "
                                   f"{where.get(last[0], folder)}: tensor "
                                   f"{last[0]!r}: {e}") from e
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
                dev = _core.device(report["target"])
                logger.info("load format %s: %s and its engines prepared in "
                            "%.3f s beside model construction; the load "
                            "waited %.3f s for it and built %d engines",
                            LOAD_FORMAT, dev.name, report["prepared"],
                            report["waited"],
                            dev.engine_stats()["built"] - report["built0"])
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
