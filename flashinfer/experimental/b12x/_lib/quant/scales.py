"""Scale codecs: E4M3 (saturating) and UE8M0 (power-of-two), plus the NaN-ignoring block amax.

E4M3 (`torch.float8_e4m3fn`), as `cvt.rn.satfinite.e4m3x2.f32` converts:
- round to nearest even, subnormals down to 2^-9;
- |v| beyond 448 (including +-Inf) saturates to +-448 (0x7E / 0xFE);
- NaN -> 0x7F whatever its sign (the one canonical NaN the hardware writes);
- -0.0 and negatives that round to zero keep their sign (0x80): E4M3 values are not scrubbed of -0.

UE8M0: byte e encodes 2^(e - 127) (byte 0 is 2^-127, an fp32 subnormal); byte 255 is NaN.

Block amax (`block_amax`): max |v| over a block IGNORING NaN, i.e. a reduction with `fmaxf`/`max.f32`
starting from 0 (both return the non-NaN operand). An all-NaN block has amax 0; +-Inf gives +Inf.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
E4M3_NAN_BYTE = 0x7F
UE8M0_BIAS = 127
UE8M0_NAN_BYTE = 255
UE8M0_ONE_BYTE = 127  # 2^0; the scale of an all-zero MX block and the MX swizzle padding

_FP32_EXP_MASK = 0xFF
_FP32_MANT_MASK = 0x7FFFFF


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """uint8 view of a one-byte tensor (uint8, int8, float8_*); errors name what came."""
    if t.element_size() != 1:
        raise ValueError(f"expected a one-byte dtype (uint8 / float8_e4m3fn / float8_e8m0fnu), got {t.dtype}")
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn of `x` read as fp32, saturating (module docstring); same shape."""
    x = x.float()
    # Clamp first: the saturation must not depend on how torch converts out-of-range values.
    q = x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    nan_byte = torch.full_like(q.view(torch.uint8), E4M3_NAN_BYTE)
    return torch.where(torch.isnan(x), nan_byte, q.view(torch.uint8)).view(torch.float8_e4m3fn)


def e4m3_decode(q: torch.Tensor) -> torch.Tensor:
    """fp32 values of E4M3 bytes (float8_e4m3fn or their uint8 view); exact."""
    return as_bytes(q).view(torch.float8_e4m3fn).float()


def ue8m0_decode(b: torch.Tensor) -> torch.Tensor:
    """fp32 2^(e - 127) of UE8M0 bytes (uint8 or float8_e8m0fnu); byte 255 -> NaN. Exact."""
    e = as_bytes(b).to(torch.int32)
    # Build the fp32 bits directly: exponent field e for e >= 1; 2^-127 is the subnormal 0x00400000.
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), e << 23)
    bits = torch.where(e == UE8M0_NAN_BYTE, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(torch.float32)


def ue8m0_round_up(s: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes (uint8) of fp32 scales `s` >= 0, rounded UP to a power of two, by the bit rule.

    Bit rule (integer ops on the fp32 bits, as a kernel does it): byte = exponent field of s, plus 1
    when its mantissa field is nonzero. Special cases: s == 0 -> 127 (scale 1.0, the all-zero block);
    s = +Inf or NaN -> 255 (NaN scale); s above 2^127 also bumps to 255 (no finite power of two
    covers it). A subnormal s becomes byte 1 (2^-126), the literal rule. The sign bit is ignored.
    """
    bits = s.float().contiguous().view(torch.int32)
    exp = (bits >> 23) & _FP32_EXP_MASK
    bumped = exp + ((bits & _FP32_MANT_MASK) != 0).to(torch.int32)
    byte = torch.where(exp == _FP32_EXP_MASK, torch.full_like(exp, UE8M0_NAN_BYTE), bumped)
    byte = torch.where((bits & 0x7FFFFFFF) == 0, torch.full_like(exp, UE8M0_ONE_BYTE), byte)
    return byte.to(torch.uint8)


def mx_scale_round_up(amax: torch.Tensor, elem_max: float = E4M3_MAX) -> torch.Tensor:
    """UE8M0 byte of an MX block from its amax: `ue8m0_round_up(amax / elem_max)`.

    `amax / elem_max` is one IEEE fp32 division (not a multiply by 1/elem_max). For MXFP8
    (elem_max 448) this is the FORMATS.md rule: all-zero block -> 127, Inf amax -> 255.
    """
    amax = amax.float()
    return ue8m0_round_up(amax / fp32_const(amax, elem_max))


def block_amax(blocks: torch.Tensor) -> torch.Tensor:
    """fp32 max |v| over the last dim, NaN ignored (see module docstring)."""
    mag = blocks.float().abs()
    mag = torch.where(torch.isnan(mag), torch.zeros_like(mag), mag)
    return mag.amax(dim=-1)


def fp32_const(t: torch.Tensor, value: float) -> torch.Tensor:
    """A 0-d fp32 tensor holding `value` on t's device.

    Every reference divides by a tensor on the operand's device, never by a Python or CPU scalar:
    CUDA torch rewrites `t / cpu_scalar` as `t * (1 / scalar)`, which is a different rounding.
    A fill on the device, not a copy from the host, so a reference may run inside CUDA graph capture
    (tensor_fp8_linear's dynamic activation scale does).
    """
    return torch.full((), value, dtype=torch.float32, device=t.device)
