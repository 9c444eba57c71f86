"""gemm.tensor_fp8_linear: y = x W^T with per-tensor FP8: x quantized inline with one fp32 scale.

    w = pack_weight(weight_e4m3, weight_scale, input_scale=None)   # or a bf16/fp32 weight
    y = mm(x, w)                                                   # bf16/fp16 [M, K] -> [M, N]

Activation scale: `input_scale=` (a static checkpoint scale), else the Weight's input_scale, else
dynamic (amax / 448 over the whole activation). The quantization is `reference.quantize_tensor_fp8`
as torch ops (a reduction and an elementwise pass; capture-safe, not fused), then the gemm.blockscaled
tensor-FP8 kernels multiply by both scales in the epilogue. CPU tensors run the references.
"""

from __future__ import annotations

import torch

from .._shared.formats import dtype_key
from .._shared.operands import describe
from .._shared.weight import Weight, own_recipe
from .._shared.weight import pack_weight as _pack
from ..blockscaled import api as _bs
from ..blockscaled.reference import quantize_tensor_fp8

OP = "gemm.tensor_fp8_linear"


def pack_weight(
    weight, scale=None, *, recipe=None, global_scale=None, global_scale_kind="multiplier", input_scale=None
) -> Weight:
    """E4M3 [N, K] + fp32 scalar scale (or a bf16/fp32 weight, quantized here) -> a tensor-FP8 Weight;
    input_scale: an optional static activation scale kept on the Weight. gemm.blockscaled.pack_weight's
    keywords: recipe None or "fp8_tensor"; global_scale is NVFP4's (an error here)."""
    recipe = own_recipe(OP, "fp8_tensor", recipe)
    kw = dict(global_scale=global_scale, global_scale_kind=global_scale_kind, input_scale=input_scale)
    return _pack(weight, scale, recipe=recipe, **kw)


def mm(lhs, rhs, out=None, *, plan=None, expected_m=None, input_scale=None, **kwargs):
    """y = lhs @ deq(rhs)^T. lhs: bf16/fp16 [M, K] (quantized here) or an (E4M3 values, fp32 scale) pair."""
    if isinstance(rhs, Weight) and rhs.recipe != "fp8_tensor":
        raise ValueError(f"rhs must be a tensor-FP8 Weight (pack_weight), got {rhs!r}")
    if isinstance(lhs, torch.Tensor):
        if dtype_key(lhs.dtype) not in ("bfloat16", "float16") or lhs.dim() != 2:
            raise ValueError(f"lhs must be bf16/fp16 [M, K] or an (E4M3, scale) pair, got {describe(lhs)}")
        if out is None and kwargs.get("c_dtype") is None:
            kwargs["c_dtype"] = lhs.dtype
        scale = input_scale
        if scale is None and isinstance(rhs, Weight):
            scale = rhs.input_scale
        lhs = quantize_tensor_fp8(lhs, scale)
    kwargs.setdefault("ab_dtype", "float8_e4m3fn")
    kwargs.setdefault("sf_dtype", "float32")
    kwargs.setdefault("sf_vec_size", 0)
    return _bs.mm(lhs, rhs, out, plan=plan, expected_m=expected_m, **kwargs)


def prewarm(weight: Weight, token_counts, *, out_dtype=torch.bfloat16, stream=None) -> None:
    """Resolve every GEMM variant the listed M values need (gemm.blockscaled.prewarm)."""
    _bs.prewarm(weight, token_counts, out_dtype=out_dtype, stream=stream, activation="fp8_tensor")
