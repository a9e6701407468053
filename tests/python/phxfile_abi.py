"""libphxfile.so as LMCache loads it: its path, its argtypes, one call's
parameters kept alive until the stream gets there."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import pytest

ABI = ["phxFileDriverOpen", "phxFileDriverClose", "phxFileBufRegister",
       "phxFileBufDeregister", "phxFileHandleRegister",
       "phxFileHandleDeregister", "phxFileStreamRegister",
       "phxFileStreamDeregister", "phxFileReadAsync", "phxFileWriteAsync"]
PENDING = -(1 << 62)


def library_path() -> str:
    env = os.environ.get("PHX_PHXFILE_LIBRARY")
    if env:
        return env
    tree = Path(__file__).resolve().parents[2] / "build" / "libphxfile.so"
    if tree.is_file():
        return str(tree)
    found = ctypes.util.find_library("phxfile")
    if not found:
        pytest.skip("libphxfile.so not built")
    return found


def load_like_lmcache(path: str) -> ctypes.CDLL:
    """The library with the argtypes LMCache 0.5.6 declares.  Loading the
    same path twice gives the same library, with one session."""
    lib = ctypes.CDLL(path)
    i64p = ctypes.POINTER(ctypes.c_int64)
    sizep = ctypes.POINTER(ctypes.c_size_t)
    decl = {
        "phxFileDriverOpen": [],
        "phxFileDriverClose": [],
        "phxFileBufRegister": [ctypes.c_void_p, ctypes.c_size_t],
        "phxFileBufDeregister": [ctypes.c_void_p],
        "phxFileHandleRegister": [ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_int],
        "phxFileHandleDeregister": [ctypes.c_void_p],
        "phxFileStreamRegister": [ctypes.c_void_p],
        "phxFileStreamDeregister": [ctypes.c_void_p],
        "phxFileReadAsync": [ctypes.c_void_p, ctypes.c_void_p, sizep, i64p,
                             i64p, i64p, ctypes.c_void_p],
        "phxFileWriteAsync": [ctypes.c_void_p, ctypes.c_void_p, sizep, i64p,
                              i64p, i64p, ctypes.c_void_p],
    }
    for name, argtypes in decl.items():
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = argtypes
    return lib


class Op:
    """The parameters of one async call, kept alive as LMCache keeps them."""

    def __init__(self, nbytes: int, file_offset: int, buf_offset: int = 0):
        self.nbytes = ctypes.c_size_t(nbytes)
        self.file_offset = ctypes.c_int64(file_offset)
        self.buf_offset = ctypes.c_int64(buf_offset)
        self.bytes_done = ctypes.c_int64(PENDING)

    def args(self):
        return (ctypes.byref(self.nbytes), ctypes.byref(self.file_offset),
                ctypes.byref(self.buf_offset), ctypes.byref(self.bytes_done))


def handle(lib, fd: int) -> ctypes.c_void_p:
    fh = ctypes.c_void_p()
    assert lib.phxFileHandleRegister(ctypes.byref(fh), fd) == 0
    assert fh.value
    return fh
