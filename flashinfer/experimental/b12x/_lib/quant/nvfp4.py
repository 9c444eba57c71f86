"""NVFP4 reference: E2M1 values, one E4M3 scale per 16, one fp32 global scale `gs` (a multiplier).

Quantize, per 16-element block of x (x read as fp32; every op below is one IEEE fp32 op, round to
nearest even, in this order; a kernel reproduces the bits only with the same ops, no FMA contraction,
no reciprocal in place of a division):

    amax = max |x_i| over the block, NaN ignored          (fmaxf reduction from 0)
    t    = (gs * amax) / 6                                 (multiply, then a true division by 6)
    t    = min(t, 448)                                     (t is never NaN: amax is not, gs is finite)
    sf   = e4m3_rn_satfinite(t)
    y_i  = (x_i * gs) / f32(sf)                            (multiply, then a true division by sf)
    y_i  = clamp(y_i, -6, 6)
    q_i  = e2m1(y_i)                                       (ties to even code, +0 for zero, NaN -> +0)
    if sf == 0: q_i = 0 for the whole block                (t < 2^-10: the block underflows)

Dequantize: x_i ~ (e2m1(q_i) * f32(sf)) / gs.

Non-finite inputs: NaN elements are skipped by amax and encode +0. An Inf element makes amax Inf, so
sf saturates to 448; the Inf encodes +-6 and the block's finite values are quantized against that
scale. `global_scale` must be a finite positive fp32 scalar: a Python number or a CPU tensor is
checked on the host (ValueError otherwise); a tensor on another device (a GPU) is trusted, never
read on the host (see `global_scale_tensor`), as the quantization kernels trust it.
`nvfp4_global_scale` always returns a valid one (it ignores NaN and +-Inf).
"""

from __future__ import annotations

import torch

from .e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from .scales import E4M3_MAX, block_amax, e4m3_decode, e4m3_encode, fp32_const

NVFP4_BLOCK = 16
_FP32_MAX = torch.finfo(torch.float32).max


def global_scale_tensor(global_scale, device) -> torch.Tensor:
    """`global_scale` (float or one-element tensor) as a 0-d fp32 tensor on `device`.

    A Python number or a CPU tensor must be finite and > 0 as fp32 (ValueError otherwise). A tensor on
    any other device is trusted: reading its value would be a host sync (and a torch.compile graph
    break), so only its size is checked; a non-positive or non-finite device scale gives undefined
    codes and scales, as it does in the quantization kernels.
    """
    gs = torch.as_tensor(global_scale, dtype=torch.float32).detach().reshape(-1)
    if gs.numel() != 1:
        raise ValueError(f"global_scale must be a scalar, got shape {tuple(gs.shape)}")
    if gs.device.type == "cpu":
        value = float(gs[0])
        if not (value > 0 and value < float("inf")):
            raise ValueError(f"global_scale must be finite and > 0, got {value}")
    return gs[0].to(device)


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """The usual per-tensor global scale `(448 * 6) / amax(x)`, a 0-d fp32 tensor on x's device.

    amax is taken over the FINITE elements: NaN and +-Inf are ignored (an Inf amax would make the
    scale 0, not a valid global scale). Quantizing with this scale still follows the module
    docstring: an Inf element saturates its block's scale to 448 and encodes +-6. No finite nonzero
    element (x all zero, all non-finite, or empty) gives 1.0. The quotient is clamped to the largest
    finite fp32 (an amax below 2688 / 3.4e38 would overflow to Inf), so the result is always a valid
    `global_scale`. Computed by torch ops on x's device; no value is read back to the host.
    """
    mag = x.float().abs().reshape(-1)
    mag = torch.where(torch.isfinite(mag), mag, torch.zeros_like(mag))
    amax = mag.amax() if mag.numel() else fp32_const(x, 0.0)
    gs = torch.minimum(fp32_const(x, E4M3_MAX * E2M1_MAX) / amax, fp32_const(x, _FP32_MAX))
    return torch.where(amax == 0, fp32_const(x, 1.0), gs)


def quantize_nvfp4(x: torch.Tensor, global_scale) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] float (K % 16 == 0) -> (packed uint8 [..., K/2], scales float8_e4m3fn [..., K/16]).

    Scales come back row-major (unswizzled); `swizzle_scales(scales, 0)` gives the MMA layout.
    """
    k = x.shape[-1] if x.dim() else 0
    if x.dim() < 1 or k % NVFP4_BLOCK:
        raise ValueError(f"quantize_nvfp4: x must be [..., K] with K % 16 == 0, got shape {tuple(x.shape)}")
    gs = global_scale_tensor(global_scale, x.device)
    blocks = x.float().reshape(*x.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    t = (gs * block_amax(blocks)) / fp32_const(x, E2M1_MAX)
    sf = e4m3_encode(torch.minimum(t, fp32_const(x, E4M3_MAX)))
    sf32 = e4m3_decode(sf).unsqueeze(-1)
    y = (blocks * gs) / sf32
    y = torch.where(sf32 == 0, torch.zeros_like(y), y).clamp(-E2M1_MAX, E2M1_MAX)
    codes = e2m1_encode(y).reshape(x.shape)
    return pack_e2m1(codes), sf


def dequantize_nvfp4(
    packed: torch.Tensor, scales: torch.Tensor, global_scale, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(packed uint8 [..., K/2], row-major e4m3 scales [..., K/16], gs) -> [..., K] in `dtype`."""
    codes = unpack_e2m1(packed)
    k = codes.shape[-1]
    if k % NVFP4_BLOCK or tuple(scales.shape) != (*codes.shape[:-1], k // NVFP4_BLOCK):
        raise ValueError(
            f"dequantize_nvfp4: scales must be [..., {k // NVFP4_BLOCK}] for packed {tuple(packed.shape)}, "
            f"got {tuple(scales.shape)}"
        )
    gs = global_scale_tensor(global_scale, packed.device)
    vals = e2m1_decode(codes).reshape(*codes.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    out = (vals * e4m3_decode(scales).unsqueeze(-1)) / gs
    return out.reshape(codes.shape).to(dtype)
