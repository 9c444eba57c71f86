"""OCP MX references: MXFP8 (E4M3 values) and MXFP4 (E2M1 values), one UE8M0 scale per 32 along K.

Both read x as fp32 and take the block amax with NaN ignored (`block_amax`). Values are
`elem(x_i / 2^(byte - 127))`, one IEEE fp32 division; for byte <= 254 it equals `x_i * 2^(127 - byte)`
bit for bit (both factors are exact powers of two in fp32), so a kernel may multiply.

MXFP8 scale (FORMATS.md): `s = amax / 448` (true fp32 division), rounded UP to a power of two by the
bit rule of `ue8m0_round_up` (exponent field + 1 if the mantissa is nonzero). Values never exceed 448
by more than the rounding of that division, and `e4m3_rn_satfinite` absorbs it.

MXFP4 scale (the OCP MX v1.0 conversion rule): shared exponent `floor(log2(amax)) - 2`, where 2 is
the exponent of E2M1's largest normal (6 = 1.5 * 2^2). On the fp32 bits: byte = max(exponent field of
amax - 2, 0) (a subnormal amax gives 0). The floor keeps the block's full resolution and clips instead:
scaled values in (6, 8) saturate to +-6. (Rounding amax/6 up like MXFP8 differs only for amax in
(6, 8) * 2^k: it doubles the scale there, trading one bit of the whole block for the clipped top.)

Special blocks, both formats: amax == 0 (all zero, or all NaN) -> byte 127. amax == +Inf -> byte 255
(NaN scale): x / NaN is NaN, so every MXFP8 value is NaN (0x7F) and every MXFP4 code is +0, and the
block dequantizes to NaN either way. A NaN element in a finite block encodes 0x7F (MXFP8) or +0
(MXFP4, E2M1 has no NaN).
"""

from __future__ import annotations

import torch

from .e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from .scales import (
    UE8M0_NAN_BYTE,
    UE8M0_ONE_BYTE,
    block_amax,
    e4m3_decode,
    e4m3_encode,
    mx_scale_round_up,
    ue8m0_decode,
)

MX_BLOCK = 32
E2M1_EMAX = 2  # floor(log2(6)): exponent of E2M1's largest normal, the OCP `emax_elem`


def _blocks(x: torch.Tensor, who: str) -> torch.Tensor:
    if x.dim() < 1 or x.shape[-1] % MX_BLOCK:
        raise ValueError(f"{who}: x must be [..., K] with K % 32 == 0, got shape {tuple(x.shape)}")
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // MX_BLOCK, MX_BLOCK)


def _scaled(blocks: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    return blocks / ue8m0_decode(scale_bytes).unsqueeze(-1)


def mxfp4_scale_floor(amax: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes (uint8) of MXFP4 blocks from fp32 amax >= 0 (OCP rule, module docstring)."""
    bits = amax.float().contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    byte = (exp - E2M1_EMAX).clamp(0, UE8M0_NAN_BYTE - 1)
    byte = torch.where(exp == 0xFF, torch.full_like(exp, UE8M0_NAN_BYTE), byte)
    byte = torch.where((bits & 0x7FFFFFFF) == 0, torch.full_like(exp, UE8M0_ONE_BYTE), byte)
    return byte.to(torch.uint8)


def quantize_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] float (K % 32 == 0) -> (float8_e4m3fn [..., K], UE8M0 bytes uint8 [..., K/32])."""
    blocks = _blocks(x, "quantize_mxfp8")
    scale = mx_scale_round_up(block_amax(blocks))
    return e4m3_encode(_scaled(blocks, scale)).reshape(x.shape), scale


def dequantize_mxfp8(values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32):
    """(e4m3 [..., K], UE8M0 [..., K/32]) -> [..., K] in `dtype`: `f32(v) * 2^(byte - 127)`."""
    vals = _blocks(e4m3_decode(values), "dequantize_mxfp8")
    _check_scales(scales, vals.shape[:-1], "dequantize_mxfp8")
    return (vals * ue8m0_decode(scales).unsqueeze(-1)).reshape(values.shape).to(dtype)


def quantize_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] float (K % 32 == 0) -> (packed E2M1 uint8 [..., K/2], UE8M0 bytes uint8 [..., K/32])."""
    blocks = _blocks(x, "quantize_mxfp4")
    scale = mxfp4_scale_floor(block_amax(blocks))
    y = _scaled(blocks, scale).clamp(-E2M1_MAX, E2M1_MAX)
    return pack_e2m1(e2m1_encode(y).reshape(x.shape)), scale


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32):
    """(packed uint8 [..., K/2], UE8M0 [..., K/32]) -> [..., K] in `dtype`: `e2m1(q) * 2^(byte - 127)`."""
    codes = unpack_e2m1(packed)
    vals = _blocks(e2m1_decode(codes), "dequantize_mxfp4")
    _check_scales(scales, vals.shape[:-1], "dequantize_mxfp4")
    return (vals * ue8m0_decode(scales).unsqueeze(-1)).reshape(codes.shape).to(dtype)


def _check_scales(scales: torch.Tensor, expected: torch.Size, who: str) -> None:
    if scales.element_size() != 1 or tuple(scales.shape) != tuple(expected):
        raise ValueError(f"{who}: scales must be UE8M0 bytes {list(expected)}, got {scales.dtype} {list(scales.shape)}")
