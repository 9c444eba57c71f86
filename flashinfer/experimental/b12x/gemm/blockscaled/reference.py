"""gemm.blockscaled reference: dequantize each operand with the `_lib.quant` codecs, multiply in fp32.

    C[m, n] = alpha * sum_k deq(A)[m, k] * deq(B)[n, k]        (fp32, rounded once to the output dtype)

Operands (formats.py has the table): A [M, K] and B [N, K] in one recipe (nvfp4, mxfp4, mxfp8,
fp8_block, fp8_tensor), or A 16-bit activations with B in any recipe (weight-only). Swizzled scales
are unswizzled with `_lib.quant.unswizzle_scales`; the NVFP4 global scale lives in alpha.
"""

from __future__ import annotations

import torch

from ..._lib import quant as Q
from .._shared.formats import FORMAT

_FLOAT_OUT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def dequantize(fmt: str, values: torch.Tensor, scales, rows: int, k: int, side: str = "b") -> torch.Tensor:
    """fp32 [rows, k] of one operand. side "a" (activations) or "b" (weights) matters for fp8_block."""
    if fmt in ("bfloat16", "float16"):
        return values.float()
    spec = FORMAT[fmt]
    if fmt in ("nvfp4", "mxfp4", "mxfp8"):
        grid = Q.unswizzle_scales(scales.reshape(-1), rows, k // spec.sf_vec)
        if fmt == "nvfp4":
            return Q.dequantize_nvfp4(values.view(torch.uint8), grid.view(torch.float8_e4m3fn), 1.0)
        if fmt == "mxfp4":
            return Q.dequantize_mxfp4(values.view(torch.uint8), grid.view(torch.uint8))
        return Q.dequantize_mxfp8(values, grid.view(torch.uint8))
    if fmt == "fp8_block":
        if side == "a":
            return Q.dequantize_block_fp8_act(values, scales.float())
        return Q.dequantize_block_fp8_weight(values, scales.float())
    return Q.e4m3_decode(values) * scales.float().reshape(())


def mm(a_fmt, a_values, a_scales, b_fmt, b_values, b_scales, alpha=1.0, out_dtype="bfloat16"):
    """C = alpha * deq(A) @ deq(B)^T for 2-D operands; fp32 math, one rounding to `out_dtype`."""
    m = a_values.shape[0]
    n = b_values.shape[0]
    k = b_values.shape[1] * 8 // FORMAT[b_fmt].value_bits
    a = dequantize(a_fmt, a_values, a_scales, m, k, "a")
    b = dequantize(b_fmt, b_values, b_scales, n, k, "b")
    c = a @ b.t()
    alpha_t = torch.as_tensor(alpha, dtype=torch.float32, device=c.device).reshape(())
    return (c * alpha_t).to(_FLOAT_OUT[str(out_dtype).removeprefix("torch.")])


def weight_dequantized(weight) -> torch.Tensor:
    """fp32 [N, K] of a packed `Weight`, including its alpha (the NVFP4 1/gs)."""
    w = dequantize(weight.recipe, weight.values, weight.scales, weight.n, weight.k, "b")
    return w * weight.alpha.float().reshape(())


def weight_only(source: torch.Tensor, weight, out_dtype=None) -> torch.Tensor:
    """source [M, K] (bf16/fp16) times a packed Weight, fp32 math: source @ deq(W)^T * alpha."""
    c = source.float() @ weight_dequantized(weight).t()
    return c.to(out_dtype or source.dtype)


def quantize_tensor_fp8(x: torch.Tensor, scale=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor E4M3: s = amax / 448 (1.0 for an all-zero tensor) unless a static `scale` is given;
    q = e4m3_rn_satfinite(x / s) (true fp32 division). Returns (q, s as fp32 [1])."""
    if scale is None:
        amax = Q.block_amax(x.float().reshape(1, -1))
        s = amax / Q.scales.fp32_const(amax, Q.E4M3_MAX)
        s = torch.where(s == 0, torch.ones_like(s), s)
    else:
        # a number becomes a device fill (capturable); a tensor is taken as it is
        s = scale if isinstance(scale, torch.Tensor) else Q.scales.fp32_const(x, float(scale))
        s = s.to(device=x.device, dtype=torch.float32).reshape(1)
    return Q.e4m3_encode(x.float() / s.reshape(())), s.reshape(1).float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 x * rsqrt(mean(x^2) + eps) * weight over the last dim (`mm(..., norm_weight=)`'s A)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float().to(x.device)


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX rotate-half in fp32: x [T, heads, D], cos / sin [T, D/2]; (x1, x2) = the halves of each
    head -> (x1 c - x2 s, x2 c + x1 s)."""
    x = x.float()
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos.float()[:, None, :].to(x.device), sin.float()[:, None, :].to(x.device)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def rope_append(c: torch.Tensor, out: torch.Tensor, rope) -> None:
    """The "rope_append" epilogue of `mm` on the fp32 product c [T, (Hq + 2 Hkv) D] (q, k, v heads):
    q heads rotated -> out ([T, Hq, D] or [T, Hq D]); k heads rotated and v heads as they are -> row
    slot_page[t] * page_size + slot_off[t] of rope.k_cache / rope.v_cache ([pages, page_size, Hkv,
    D]); each value rounded once to its destination's dtype, nothing else written. rope: a
    `_epilogue.RopeAppend` (cos, sin fp32 [T, D/2]; slots int64 [T])."""
    t = c.shape[0]
    _, _, hkv, d = rope.k_cache.shape
    hq = c.shape[1] // d - 2 * hkv
    q, k, v = c.float().split([hq * d, hkv * d, hkv * d], dim=-1)
    out.copy_(rope_rotate(q.reshape(t, hq, d), rope.cos, rope.sin).reshape(out.shape))
    pages, offs = rope.slot_page.to(c.device), rope.slot_off.to(c.device)
    rope.k_cache[pages, offs] = rope_rotate(k.reshape(t, hkv, d), rope.cos, rope.sin).to(rope.k_cache.dtype)
    rope.v_cache[pages, offs] = v.reshape(t, hkv, d).to(rope.v_cache.dtype)


def apply_epilogue(c: torch.Tensor, epilogue: str = "none", residual=None) -> torch.Tensor:
    """The fused epilogues of `mm(..., epilogue=...)` on the fp32 product c [M, N] (before rounding):
    "none" c; "silu_mul" silu(c[:, :I]) * c[:, I:] for N = 2I (gate rows first: [M, I]); "residual"
    c + residual.float() (residual [M, N]). ("rope_append" scatters: `rope_append`.)"""
    if epilogue == "silu_mul":
        gate, up = c.float().chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up
    if epilogue == "residual":
        return c.float() + residual.float().to(c.device)
    return c
