"""gemm.mxfp8_linear: y = x W^T with x quantized inline to MXFP8 and an MXFP8 weight.

    w = pack_weight(weight)                       # bf16/fp32 (quantized), E4M3 + UE8M0, or block-FP8
    y = mm(x, w)                                  # x bf16/fp16 [M, K] -> y [M, N] in x's dtype

The activation goes through `b12x.quantization.mxfp8.quantize_rows` (bit-exact with
`_lib.quant.quantize_mxfp8`) into fresh buffers, then the gemm.blockscaled MXFP8 x MXFP8 kernels run.
A (values, scales) pair is taken as already quantized. CPU tensors run the references.
"""

from __future__ import annotations

import torch

from ..._lib.quant import swizzled_size
from .._shared.formats import dtype_key
from .._shared.operands import describe
from .._shared.weight import Weight, own_recipe
from .._shared.weight import pack_weight as _pack
from ..blockscaled import api as _bs

OP = "gemm.mxfp8_linear"


def pack_weight(
    weight, scale=None, *, recipe=None, global_scale=None, global_scale_kind="multiplier", input_scale=None
) -> Weight:
    """-> an MXFP8 Weight: bf16/fp16/fp32 [N, K] is quantized; E4M3 [N, K] + UE8M0 [N, K/32] pass through
    (scales swizzled); DeepSeek block-FP8 (fp32 [N/128, K/128] scales) is requantized to MXFP8.
    gemm.blockscaled.pack_weight's keywords: recipe None or "mxfp8"; global_scale is NVFP4's (an error here)."""
    recipe = own_recipe(OP, "mxfp8", recipe)
    kw = dict(global_scale=global_scale, global_scale_kind=global_scale_kind, input_scale=input_scale)
    return _pack(weight, scale, recipe=recipe, **kw)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] bf16/fp16 -> (E4M3 [M, K], UE8M0 swizzled storage [swizzled_size(M, K/32)])."""
    from ...quantization import mxfp8 as qmx

    m, k = x.shape
    values = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    storage = torch.empty(swizzled_size(m, k // 32), dtype=torch.uint8, device=x.device)
    if m:
        rows = torch.empty(m, k // 32, dtype=torch.uint8, device=x.device)
        qmx.quantize_rows(x, values, rows, storage)
    return values, storage


def mm(lhs, rhs, out=None, *, plan=None, expected_m=None, **kwargs):
    """y = lhs @ deq(rhs)^T. lhs: bf16/fp16 [M, K] (quantized here) or an MXFP8 (values, scales) pair;
    rhs: an MXFP8 Weight or pair. The output dtype defaults to lhs's (16-bit lhs) or bf16."""
    if isinstance(rhs, Weight) and rhs.recipe != "mxfp8":
        raise ValueError(f"rhs must be an MXFP8 Weight (pack_weight), got {rhs!r}")
    if isinstance(lhs, torch.Tensor):
        if dtype_key(lhs.dtype) not in ("bfloat16", "float16") or lhs.dim() != 2:
            raise ValueError(f"lhs must be bf16/fp16 [M, K] or an MXFP8 (values, scales) pair, got {describe(lhs)}")
        if out is None and kwargs.get("c_dtype") is None:
            kwargs["c_dtype"] = lhs.dtype
        lhs = quantize(lhs.contiguous())
    kwargs.setdefault("ab_dtype", "float8_e4m3fn")
    kwargs.setdefault("sf_dtype", "float8_e8m0fnu")
    kwargs.setdefault("sf_vec_size", 32)
    return _bs.mm(lhs, rhs, out, plan=plan, expected_m=expected_m, **kwargs)


def prewarm(weight: Weight, token_counts, *, out_dtype=torch.bfloat16, stream=None, source_dtype=torch.bfloat16):
    """Resolve the activation quantizer and the GEMM variants the listed M values need (see
    gemm.blockscaled.prewarm), so freezing afterwards holds."""
    _bs.prewarm(weight, token_counts, out_dtype=out_dtype, stream=stream, activation="mxfp8")
    if weight.device.type == "cuda":
        quantize(torch.zeros(1, weight.k, dtype=source_dtype, device=weight.device))
