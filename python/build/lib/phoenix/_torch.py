"""torch views of phoenix memory (imported only when torch is used)."""

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
