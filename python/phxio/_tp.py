"""Which rows of a checkpoint tensor one tensor-parallel rank of vLLM uses.

vLLM's column-parallel layers give each rank a slice along the output
dimension, the first of the stored [out, in] weight: the rank's weight
loader narrows the full tensor to rows [r * n, (r + 1) * n).  Where this
module can tell n and r from the layer, only those rows are read (the
rest of the tensor handed over stays unread memory that the weight loader
never looks at).  It knows the unquantized ColumnParallelLinear,
MergedColumnParallelLinear (gate/up) and QKVParallelLinear (q/k/v, with
replicated KV heads) as vLLM 0.26-0.32 define them, under the checkpoint
names the model's packed_modules_mapping gives; every other tensor
(row-parallel, embeddings, quantized, unknown layouts) is read whole.
"""

from __future__ import annotations

from typing import Any, Optional

_COLUMN = "ColumnParallelLinear"
_MERGED = "MergedColumnParallelLinear"
_QKV = "QKVParallelLinear"


def _kind(module: Any) -> Optional[str]:
    for cls in type(module).__mro__:
        if cls.__name__ in (_QKV, _MERGED, _COLUMN):
            return cls.__name__
    return None


def _unquantized(module: Any) -> bool:
    qm = getattr(module, "quant_method", None)
    return qm is None or type(qm).__name__ == "UnquantizedLinearMethod"


def tp_rows(model: Any, tp_size: int, tp_rank: int
            ) -> dict[str, tuple[int, int]]:
    """{checkpoint tensor name: (first row, end row)} for this rank."""
    if tp_size <= 1:
        return {}
    packed = getattr(model, "packed_modules_mapping", None) or {}
    out: dict[str, tuple[int, int]] = {}
    for name, module in model.named_modules():
        kind = _kind(module)
        weight = getattr(module, "weight", None)
        if kind is None or weight is None or not _unquantized(module) or \
                getattr(weight, "output_dim", None) != 0 or \
                getattr(weight, "is_sharded_weight", False):
            continue
        prefix, _, leaf = name.rpartition(".")
        base = f"{prefix}." if prefix else ""
        parts = packed.get(leaf)
        if kind == _COLUMN:
            n = weight.shape[0]
            _put(out, f"{base}{leaf}", tp_rank * n, n, module)
        elif kind == _MERGED and parts and \
                len(parts) == len(module.output_sizes):
            for part, size in zip(parts, module.output_sizes):
                n = size // tp_size
                _put(out, f"{base}{part}", tp_rank * n, n, module)
        elif kind == _QKV and parts and len(parts) == 3:
            head = module.head_size
            vhead = getattr(module, "v_head_size", head)
            kv_rank = tp_rank // max(1, module.num_kv_head_replicas)
            q, k, v = parts
            nq = module.num_heads * head
            _put(out, f"{base}{q}", tp_rank * nq, nq, module)
            _put(out, f"{base}{k}", kv_rank * module.num_kv_heads * head,
                 module.num_kv_heads * head, module)
            _put(out, f"{base}{v}", kv_rank * module.num_kv_heads * vhead,
                 module.num_kv_heads * vhead, module)
    return out


def _put(out: dict, name: str, start: int, n: int, module: Any) -> None:
    out[f"{name}.weight"] = (start, start + n)
    bias = getattr(module, "bias", None)
    if bias is not None and getattr(bias, "output_dim", None) == 0:
        out[f"{name}.bias"] = (start, start + n)


def vllm_rows(model: Any) -> dict[str, tuple[int, int]]:
    """tp_rows() for the rank this vLLM process is."""
    from vllm.distributed import (get_tensor_model_parallel_rank,
                                  get_tensor_model_parallel_world_size)

    try:
        size = get_tensor_model_parallel_world_size()
    except AssertionError:  # no parallel groups: not in a vLLM worker
        return {}
    return tp_rows(model, size, get_tensor_model_parallel_rank())
