"""DLPack capsules through ctypes: export device memory, read foreign tensors.

Exported capsules follow the DLPack protocol: the legacy "dltensor" capsule
(DLManagedTensor) or, when the consumer asks for max_version >= (1, 0), the
"dltensor_versioned" one (DLManagedTensorVersioned).  The producer keeps the
owning Python object alive until the consumer calls the deleter, or until
the capsule is collected unconsumed.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3

# DLDataTypeCode
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_COMPLEX = 5
KDL_BOOL = 6
KDL_FLOAT8_E4M3FN = 10
KDL_FLOAT8_E4M3FNUZ = 11
KDL_FLOAT8_E5M2 = 12
KDL_FLOAT8_E5M2FNUZ = 13
KDL_FLOAT8_E8M0FNU = 14
KDL_FLOAT4_E2M1FN = 17

DLPACK_MAJOR = 1
DLPACK_MINOR = 0
FLAG_READ_ONLY = 1 << 0


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_NAME_LEGACY = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_NAME_USED_LEGACY = b"used_dltensor"
_NAME_USED_VERSIONED = b"used_dltensor_versioned"

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                               ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

# The capsule destructor sees an object whose reference count already hit
# zero: it must not make a Python reference to it, so it goes through
# prototypes that take the raw pointer.
_raw = ctypes.PyDLL(None)
_raw_is_valid = _raw.PyCapsule_IsValid
_raw_is_valid.restype = ctypes.c_int
_raw_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_raw_get_pointer = _raw.PyCapsule_GetPointer
_raw_get_pointer.restype = ctypes.c_void_p
_raw_get_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Everything a live exported tensor needs, keyed by the struct's address:
# the struct itself, its shape/strides arrays and the owner object.
_live: dict[int, tuple] = {}
_live_lock = threading.Lock()


def _release(addr: int) -> None:
    with _live_lock:
        _live.pop(addr, None)


@_Deleter
def _deleter(addr: Optional[int]) -> None:
    if addr:
        _release(addr)


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CapsuleDestructor
def _capsule_destructor(capsule_addr: Optional[int]) -> None:
    # The consumer renames a capsule it took over; an unconsumed one still
    # owns its tensor and must release it here.
    for name in (_NAME_LEGACY, _NAME_VERSIONED):
        if _raw_is_valid(capsule_addr, name):
            _release(_raw_get_pointer(capsule_addr, name))
            return


def export(owner: Any, data: int, device: tuple[int, int],
           dtype: tuple[int, int], shape: Sequence[int],
           max_version: Optional[tuple[int, int]] = None,
           readonly: bool = False) -> Any:
    """A DLPack capsule for a C-contiguous array at @data owned by @owner."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    versioned = max_version is not None and max_version[0] >= 1
    mt: Any
    if versioned:
        mt = DLManagedTensorVersioned()
        mt.version = DLPackVersion(DLPACK_MAJOR, DLPACK_MINOR)
        mt.flags = FLAG_READ_ONLY if readonly else 0
        name = _NAME_VERSIONED
    else:
        mt = DLManagedTensor()
        name = _NAME_LEGACY
    t = mt.dl_tensor
    t.data = data
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(dtype[0], dtype[1], 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = None  # compact row-major
    t.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _deleter
    addr = ctypes.addressof(mt)
    with _live_lock:
        _live[addr] = (mt, shape_arr, owner)
    return _api.PyCapsule_New(addr, name,
                              ctypes.cast(_capsule_destructor,
                                          ctypes.c_void_p))


@dataclass
class ForeignTensor:
    """What a consumer needs of a DLPack tensor: where and how big."""
    data: int
    device_type: int
    device_id: int
    nbytes: int
    contiguous: bool
    readonly: bool = False  # its producer marked it so (DLPack 1.0)


def inspect(obj: Any) -> ForeignTensor:
    """Read the address, device and size of @obj through its __dlpack__."""
    try:
        cap = obj.__dlpack__(max_version=(1, 0))
    except TypeError:
        cap = obj.__dlpack__()
    name = _api.PyCapsule_GetName(cap)
    versioned = name == _NAME_VERSIONED
    if name not in (_NAME_LEGACY, _NAME_VERSIONED):
        raise ValueError(f"not a DLPack capsule: {name!r}")
    addr = _api.PyCapsule_GetPointer(cap, name)
    cls = DLManagedTensorVersioned if versioned else DLManagedTensor
    mt = cls.from_address(addr)
    t = mt.dl_tensor
    shape = [t.shape[i] for i in range(t.ndim)]
    itembits = t.dtype.bits * t.dtype.lanes
    count = 1
    for s in shape:
        count *= s
    nbytes = (count * itembits + 7) // 8
    contiguous = True
    if t.strides and count > 1:
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expect:
                contiguous = False
            expect *= shape[i]
    info = ForeignTensor((t.data or 0) + t.byte_offset, t.device.device_type,
                         t.device.device_id, nbytes, contiguous,
                         versioned and bool(mt.flags & FLAG_READ_ONLY))
    # Consume the capsule and hand the tensor straight back to its producer;
    # the caller keeps @obj alive for as long as it uses the address.
    _api.PyCapsule_SetName(cap, _NAME_USED_VERSIONED if versioned
                           else _NAME_USED_LEGACY)
    if mt.deleter:
        mt.deleter(addr)
    return info
