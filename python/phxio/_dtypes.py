"""Element types: safetensors names, DLPack codes, NumPy and torch types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from . import _dlpack as dl


@dataclass(frozen=True)
class DType:
    name: str                   # safetensors name ("BF16")
    bits: int                   # bits per element in the file
    dlpack: Optional[tuple[int, int]]  # (code, bits) or None
    typestr: Optional[str]      # NumPy typestr, None when NumPy lacks it
    torch: Optional[str]        # torch dtype attribute
    ml_dtypes: Optional[str] = None  # ml_dtypes name for NumPy views
    raw: str = "|u1"            # same-width stand-in for NumPy

    def nbytes(self, shape: Sequence[int]) -> int:
        n = 1
        for s in shape:
            n *= s
        return (n * self.bits + 7) // 8

    def dl_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        # F4 is exported as torch does: two values a byte, last dim halved
        if self.bits == 4 and shape:
            return (*shape[:-1], shape[-1] // 2)
        return tuple(shape)

    @property
    def typestr_or_void(self) -> str:
        return self.typestr or f"|V{max(self.bits // 8, 1)}"

    def numpy_layout(self, shape: Sequence[int]
                     ) -> tuple[tuple[int, ...], str, Any]:
        """(shape, typestr, descr) of a NumPy view of such an array."""
        if self.typestr:
            return tuple(shape), self.typestr, None
        if self.bits % 8:
            return (self.nbytes(shape),), "|u1", None
        return tuple(shape), self.raw, None

    def numpy_dtype(self) -> Any:
        """The NumPy dtype arrays of this type get (raw when NumPy lacks it)."""
        import numpy

        if self.typestr:
            return numpy.dtype(self.typestr)
        if self.ml_dtypes:
            try:
                import ml_dtypes

                return numpy.dtype(getattr(ml_dtypes, self.ml_dtypes))
            except (ImportError, AttributeError):
                pass
        return numpy.dtype(self.raw if self.bits % 8 == 0 else "|u1")


_ALL = [
    DType("BOOL", 8, (dl.KDL_BOOL, 8), "|b1", "bool"),
    DType("U8", 8, (dl.KDL_UINT, 8), "|u1", "uint8"),
    DType("I8", 8, (dl.KDL_INT, 8), "|i1", "int8"),
    DType("F8_E5M2", 8, (dl.KDL_FLOAT8_E5M2, 8), None, "float8_e5m2",
          "float8_e5m2"),
    DType("F8_E4M3", 8, (dl.KDL_FLOAT8_E4M3FN, 8), None, "float8_e4m3fn",
          "float8_e4m3fn"),
    DType("F8_E4M3FNUZ", 8, (dl.KDL_FLOAT8_E4M3FNUZ, 8), None,
          "float8_e4m3fnuz", "float8_e4m3fnuz"),
    DType("F8_E5M2FNUZ", 8, (dl.KDL_FLOAT8_E5M2FNUZ, 8), None,
          "float8_e5m2fnuz", "float8_e5m2fnuz"),
    DType("F8_E8M0", 8, (dl.KDL_FLOAT8_E8M0FNU, 8), None, "float8_e8m0fnu",
          "float8_e8m0fnu"),
    DType("I16", 16, (dl.KDL_INT, 16), "<i2", "int16"),
    DType("U16", 16, (dl.KDL_UINT, 16), "<u2", "uint16"),
    DType("F16", 16, (dl.KDL_FLOAT, 16), "<f2", "float16"),
    DType("BF16", 16, (dl.KDL_BFLOAT, 16), None, "bfloat16", "bfloat16",
          "<u2"),
    DType("I32", 32, (dl.KDL_INT, 32), "<i4", "int32"),
    DType("U32", 32, (dl.KDL_UINT, 32), "<u4", "uint32"),
    DType("F32", 32, (dl.KDL_FLOAT, 32), "<f4", "float32"),
    DType("C64", 64, (dl.KDL_COMPLEX, 64), "<c8", "complex64"),
    DType("F64", 64, (dl.KDL_FLOAT, 64), "<f8", "float64"),
    DType("I64", 64, (dl.KDL_INT, 64), "<i8", "int64"),
    DType("U64", 64, (dl.KDL_UINT, 64), "<u8", "uint64"),
    DType("F4", 4, (dl.KDL_UINT, 8), None, "float4_e2m1fn_x2"),
    DType("F6_E2M3", 6, None, None, None),
    DType("F6_E3M2", 6, None, None, None),
]

DTYPES: dict[str, DType] = {d.name: d for d in _ALL}

_ALIASES = {"bool": "BOOL", "uint8": "U8", "u1": "U8", "int8": "I8",
            "i1": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
            "half": "F16", "bfloat16": "BF16", "int32": "I32",
            "uint32": "U32", "float32": "F32", "float": "F32",
            "complex64": "C64", "float64": "F64", "double": "F64",
            "int64": "I64", "uint64": "U64", "float8_e5m2": "F8_E5M2",
            "float8_e4m3fn": "F8_E4M3", "float8_e4m3fnuz": "F8_E4M3FNUZ",
            "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
            "float4_e2m1fn_x2": "F4"}


def dtype_of(obj: Any) -> DType:
    """A DType from a safetensors name, a NumPy dtype or a torch dtype."""
    if isinstance(obj, DType):
        return obj
    name = str(obj)
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name in DTYPES:
        return DTYPES[name]
    if name in _ALIASES:
        return DTYPES[_ALIASES[name]]
    try:
        import numpy

        nd = numpy.dtype(obj)
        for d in _ALL:
            if d.typestr and numpy.dtype(d.typestr) == nd:
                return d
        if nd.name in _ALIASES:
            return DTYPES[_ALIASES[nd.name]]
    except (ImportError, TypeError):
        pass
    raise TypeError(f"unknown element type {obj!r}")


def nbytes_of_interface(cai: dict) -> int:
    """Bytes covered by a C-contiguous __cuda_array_interface__."""
    n = 1
    for s in cai["shape"]:
        n *= s
    typestr = cai["typestr"]
    return n * int(typestr[2:])
