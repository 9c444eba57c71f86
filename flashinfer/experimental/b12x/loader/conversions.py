"""Dtype conversions applied while loading (checkpoint dtype -> destination dtype).

A conversion is `fn(dst, src)` writing `src` (checkpoint dtype, same shape, on the host or the
device) into `dst`. It must be elementwise: a large tensor is converted piece by piece as its bytes
arrive. Registered by default: exact widenings only (bf16/fp16 -> fp32, fp8 -> bf16/fp16/fp32,
fp32 -> fp64); narrowing is lossy and must be asked for with `register_conversion`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_REGISTRY: dict[tuple[torch.dtype, torch.dtype], Callable] = {}


def cast(dst: torch.Tensor, src: torch.Tensor) -> None:
    """The default conversion: torch's own rounding (a cast inside `copy_`)."""
    dst.copy_(src, non_blocking=True)


def register_conversion(src_dtype: torch.dtype, dst_dtype: torch.dtype, fn: Callable | None = None) -> None:
    """Allow loading `src_dtype` checkpoint tensors into `dst_dtype` destinations through `fn` (default: cast)."""
    if src_dtype == dst_dtype:
        raise ValueError(f"no conversion needed from {src_dtype} to itself")
    _REGISTRY[(src_dtype, dst_dtype)] = fn or cast


def unregister_conversion(src_dtype: torch.dtype, dst_dtype: torch.dtype) -> None:
    _REGISTRY.pop((src_dtype, dst_dtype), None)


def find_conversion(src_dtype: torch.dtype, dst_dtype: torch.dtype) -> Callable | None:
    return _REGISTRY.get((src_dtype, dst_dtype))


def registered_conversions() -> tuple[tuple[torch.dtype, torch.dtype], ...]:
    return tuple(_REGISTRY)


for _src in (torch.bfloat16, torch.float16):
    register_conversion(_src, torch.float32)
for _src in (torch.float8_e4m3fn, torch.float8_e5m2):
    for _dst in (torch.bfloat16, torch.float16, torch.float32):
        register_conversion(_src, _dst)
register_conversion(torch.float32, torch.float64)
