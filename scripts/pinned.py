"""The pinned host-to-device copy rate: the limit the GPU benchmark
scripts give their hot rows as ratios of (imported by them; run from
scripts/, whose folder is on their path)."""

from __future__ import annotations

import time


def pinned_rate(copies: int = 5) -> float:
    """GB/s of torch copies of 1 GiB from pinned host memory to the
    current CUDA device, after one untimed copy."""
    import torch

    h = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    d = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(copies):
        d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
    return copies * (1 << 30) / 1e9 / (time.perf_counter() - t0)
