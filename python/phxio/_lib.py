"""ctypes bindings to libphoenix: loading, structures, error checking.

The library is found in this order: the PHX_LIBRARY environment variable (a
path), the copy the wheel carries (phxio/_libs/), the build tree of a
source checkout (build/libphoenix.so next to python/), then the dynamic
loader's search (libphoenix.so.0), then ctypes.util.find_library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p

PHX_DEVICE_NONE = 0
PHX_DEVICE_CUDA = 1
PHX_DEVICE_SIM = 2
PHX_DEVICE_KMOD = 3

PHX_OP_READ = 0
PHX_OP_WRITE = 1
PHX_STREAM_FIXED = 0x7  # phoenix.h: the values of a transfer are final

PHX_BUF_SPARSE = 1 << 0
PHX_BATCH_POLL = 1 << 0

KIND_NAMES = {PHX_DEVICE_CUDA: "cuda", PHX_DEVICE_SIM: "sim",
              PHX_DEVICE_KMOD: "kmod", PHX_DEVICE_NONE: "none"}
PATH_NAMES = ("none", "staged", "buffered", "p2p", "memcpy")


class DeviceInfoStruct(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 16),
        ("kind", c_int),
        ("index", c_int),
        ("model", ctypes.c_char * 64),
        ("capacity", c_uint64),
        ("used", c_uint64),
        ("free", c_uint64),
        ("numa_node", c_int),
    ]


class IoStruct(ctypes.Structure):
    _fields_ = [
        ("op", c_int),
        ("fd", c_int),
        ("file_off", c_int64),
        ("buf", c_void_p),
        ("buf_off", c_uint64),
        ("dptr", c_uint64),
        ("len", c_uint64),
        ("result", c_int64),
        ("path", c_int),
        ("user_data", c_void_p),
    ]


class SettingsStruct(ctypes.Structure):
    _fields_ = [
        ("staging_size", c_uint64),
        ("chunk_size", c_uint64),
        ("queue_depth", c_uint),
        ("alloc_chunk", c_uint64),
        ("direct", c_int),
        ("hot_fraction", c_uint),
        ("sim_devices", c_uint),
        ("sim_capacity", c_uint64),
        ("stream_wait", c_int),
        ("stream_rings", c_uint),
        ("gather", c_int),
        ("hot_readers", c_uint),
    ]


class StatsStruct(ctypes.Structure):
    _fields_ = [
        ("bytes", c_uint64 * 5),
        ("ios", c_uint64),
        ("errors", c_uint64),
        ("pinned_bytes", c_uint64),
    ]


class EngineStatsStruct(ctypes.Structure):
    _fields_ = [
        ("built", c_uint64),
        ("alive", c_uint),
        ("idle", c_uint),
        ("staging_bytes", c_uint64),
        ("threaded_reads", c_uint64),
        ("setup_ns", c_uint64),
        ("setup_wait_ns", c_uint64),
    ]


_PROTOTYPES = {
    "phx_version": (c_char_p, []),
    "phx_strerror_last": (c_char_p, []),
    "phx_default_kind": (c_int, [ctypes.POINTER(c_char_p)]),
    "phx_device_list": (c_int, [c_int, ctypes.POINTER(DeviceInfoStruct),
                                c_int]),
    "phx_device_open": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
    "phx_device_close": (None, [c_void_p]),
    "phx_device_prepare": (c_int, [c_void_p]),
    "phx_device_info": (c_int, [c_void_p, ctypes.POINTER(DeviceInfoStruct)]),
    "phx_device_kind": (c_int, [c_void_p]),
    "phx_device_native": (c_void_p, [c_void_p]),
    "phx_device_set_limit": (c_int, [c_void_p, c_uint64]),
    "phx_buf_alloc": (c_int, [c_void_p, c_uint64, c_uint,
                              ctypes.POINTER(c_void_p)]),
    "phx_buf_free": (None, [c_void_p]),
    "phx_buf_resize": (c_int, [c_void_p, c_uint64]),
    "phx_buf_commit": (c_int, [c_void_p, c_uint64, c_uint64]),
    "phx_buf_size": (c_uint64, [c_void_p]),
    "phx_buf_committed": (c_uint64, [c_void_p]),
    "phx_buf_dptr": (c_uint64, [c_void_p]),
    "phx_buf_host_view": (c_void_p, [c_void_p]),
    "phx_buf_send": (c_int, [c_void_p, c_int]),
    "phx_buf_recv": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p)]),
    "phx_io_run": (c_int64, [c_void_p, ctypes.POINTER(IoStruct)]),
    "phx_read": (c_int64, [c_void_p, c_uint64, c_int, c_int64, c_uint64]),
    "phx_write": (c_int64, [c_void_p, c_uint64, c_int, c_int64, c_uint64]),
    "phx_memcpy_to_buf": (c_int, [c_void_p, c_uint64, c_void_p, c_uint64]),
    "phx_memcpy_from_buf": (c_int, [c_void_p, c_void_p, c_uint64,
                                    c_uint64]),
    "phx_memcpy_buf": (c_int, [c_void_p, c_uint64, c_void_p, c_uint64,
                               c_uint64]),
    "phx_batch_create": (c_int, [c_void_p, c_uint, c_uint,
                                 ctypes.POINTER(c_void_p)]),
    "phx_batch_submit": (c_int, [c_void_p, ctypes.POINTER(IoStruct), c_uint]),
    "phx_batch_queue": (c_int, [c_void_p, ctypes.POINTER(IoStruct), c_uint]),
    "phx_batch_wait": (c_int, [c_void_p, c_uint, c_void_p, c_uint, c_int]),
    "phx_batch_destroy": (None, [c_void_p]),
    "phx_stream_create": (c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
    "phx_stream_wrap": (c_int, [c_void_p, c_void_p,
                                ctypes.POINTER(c_void_p)]),
    "phx_stream_native": (c_void_p, [c_void_p]),
    "phx_stream_set_flags": (c_int, [c_void_p, c_uint]),
    "phx_stream_sync": (c_int, [c_void_p]),
    "phx_stream_destroy": (None, [c_void_p]),
    "phx_io_enqueue": (c_int, [c_void_p, c_int, c_int, c_uint64,
                               ctypes.POINTER(c_uint64),
                               ctypes.POINTER(c_int64),
                               ctypes.POINTER(c_int64),
                               ctypes.POINTER(c_int64)]),
    "phx_settings_get": (None, [ctypes.POINTER(SettingsStruct)]),
    "phx_parse_size": (c_int, [c_char_p, ctypes.POINTER(c_uint64)]),
    "phx_stats_get": (None, [c_void_p, ctypes.POINTER(StatsStruct)]),
    "phx_engine_stats_get": (c_int, [c_void_p,
                                     ctypes.POINTER(EngineStatsStruct)]),
}


class PhoenixError(OSError):
    """A libphoenix call failed: ``errno`` is set and the message says why."""


def _candidates() -> Iterator[str]:
    """Where libphoenix may be, nearest first.  The system's library
    search (ctypes.util.find_library runs ldconfig or a compiler, which
    costs milliseconds) is asked last, only when nothing before loaded."""
    env = os.environ.get("PHX_LIBRARY")
    if env:
        yield env
        return
    here = Path(__file__).resolve().parent
    if (here / "_libs" / "libphoenix.so").is_file():
        yield str(here / "_libs" / "libphoenix.so")
    root = here.parent.parent
    build = os.environ.get("BUILD", "build")
    for name in (build, "build"):
        p = root / name / "libphoenix.so"
        if p.is_file() and (root / "lib" / "include" / "phoenix.h").is_file():
            yield str(p)
    yield from system_candidates("phoenix")


def system_candidates(name: str) -> Iterator[str]:
    """lib@name as the system has it: its soname through the dynamic
    loader's search, then ctypes.util.find_library (which runs ldconfig or
    a compiler, milliseconds: asked only when the soname did not load)."""
    yield f"lib{name}.so.0"
    found = ctypes.util.find_library(name)
    if found:
        yield found


def load_first(what: str, candidates: Iterable[str], install: str,
               env: str) -> tuple[ctypes.CDLL, str]:
    """The first of @candidates that loads, and its name; else one error
    that lists why each failed and how to get the library.  Those after
    the one that loads are not looked at."""
    errors = []
    for cand in candidates:
        try:
            return ctypes.CDLL(cand), cand
        except OSError as exc:
            errors.append(f"{cand}: {exc}")
    raise PhoenixError(
        2, f"cannot load {what} (" + "; ".join(errors) +
        f"): build it with `make`, install it with {install}, "
        f"or set {env} to its path")


def loaded_once(load: Callable[[], ctypes.CDLL]
                ) -> Callable[[], ctypes.CDLL]:
    """@load made a function that loads the library on its first call and
    gives that library ever after (other threads wait for the first)."""
    lock = threading.Lock()
    loaded: list[ctypes.CDLL] = []

    @functools.wraps(load)
    def get() -> ctypes.CDLL:
        if not loaded:
            with lock:
                if not loaded:
                    loaded.append(load())
        return loaded[0]

    return get


@loaded_once
def lib() -> ctypes.CDLL:
    """The loaded libphoenix, with its prototypes declared."""
    handle, cand = load_first("libphoenix", _candidates(),
                              "`make install-python`", "PHX_LIBRARY")
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes
    handle._phx_path = cand
    return handle


def lib_dir() -> str:
    """The folder of the libphoenix in use (the wheel's phxio/_libs holds
    libphxfile.so beside it, for LMCache's find_library)."""
    return str(Path(getattr(lib(), "_phx_path", "")).resolve().parent)


def last_error() -> str:
    msg = lib().phx_strerror_last()
    return msg.decode(errors="replace") if msg else ""


def check(ret: int, what: str = "") -> int:
    """Raise PhoenixError for a negative errno return, else pass it on."""
    if ret < 0:
        err = -ret
        msg = last_error() or os.strerror(err)
        if what and what not in msg:
            msg = f"{what}: {msg}"
        raise PhoenixError(err, msg)
    return ret
