"""torch views of phxio memory (imported only when torch is used)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ._dtypes import DType


def retype(u8: "torch.Tensor", dtype: DType, shape: Sequence[int]
           ) -> "torch.Tensor":
    """View the flat uint8 tensor @u8 as @dtype with @shape, as torch does.

    Falls back to a copy only when the bytes are misaligned for the type.
    """
    tdt = getattr(torch, dtype.torch, None) if dtype.torch else None
    if tdt is None:
        return u8  # a type torch lacks (F6): the raw bytes
    shape = dtype.dl_shape(shape)
    if tdt == torch.uint8:
        return u8.view(shape)
    try:
        t = u8.view(tdt)
    except RuntimeError:
        t = u8.clone().view(tdt)
    return t.view(shape)


def as_tensor(arr: Any) -> "torch.Tensor":
    u8 = torch.from_dlpack(arr.owner[arr.offset:arr.offset + arr.nbytes])
    return retype(u8, arr.dtype, arr.shape)


def views(buf: Any, placed: Sequence[tuple[Any, int]], out: dict) -> None:
    """Add a tensor to @out for each (TensorInfo, offset) of @buf.

    One typed view of the whole buffer per element type, then one strided
    view per tensor: the cheapest way torch offers to cut many tensors
    out of one allocation.
    """
    base = torch.from_dlpack(buf)
    typed: dict = {}
    for t, off in placed:
        dt = t.dtype
        tdt = getattr(torch, dt.torch, None) if dt.torch else None
        size = dt.bits // 8
        if tdt is None or dt.bits % 8 or off % size or base.numel() % size:
            out[t.name] = retype(base[off:off + t.end - t.begin], dt,
                                 t.shape)
            continue
        whole = typed.get(tdt)
        if whole is None:
            whole = typed[tdt] = base.view(tdt)
        shape = t.shape
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        out[t.name] = whole.as_strided(shape, strides, off // size)
