"""Triton device functions shared by the NVFP4 and MXFP8 activation quantizers and moe.fused_moe's
gather/requantize (`_lib`: more than one group inlines them; importing this module loads triton).

Both are `@triton.jit` functions: Triton inlines them into the calling kernel, and its own cache key
covers their source. Both reproduce an oracle in `_lib/quant` exactly:

- `block_amax`: `scales.block_amax`, max |x| over a block ignoring NaN. Triton's `tl.max` is not
  NaN-ignoring on its own, so NaN magnitudes are replaced by 0 first (a reduction from 0 with
  fmaxf semantics: an all-NaN block gives 0, +-Inf gives +Inf).
- `swizzled_scale_offsets`: `swizzle.swizzle_scales`'s 128x4 atom layout (FORMATS.md), byte offset
  of scale (r, c) in a grid with `NB` scale columns, padded to a multiple of 4:

      (r // 128) * (ceil4(NB) // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + (c % 4)

- `div_rn_by`: RN(p / D) for a constant D without `div.rn.f32` (NVFP4 "pairs": D = 6); its
  exactness argument is in its docstring.
- `grid_origin` (device) and `grid_axes` (host): the quantizers' two-axis grid, or its one-axis K-major form.
"""

from __future__ import annotations

import struct

import triton
import triton.language as tl


def div_ptx(d: float) -> str:
    """The inline PTX of `div_rn_by` for the constant d: q0 = RN(p R), r = fma(-q0, d, p), q = RN(q0 + r R),
    R = RN(1/d) (fp32 immediates in PTX's 0fXXXXXXXX form)."""
    f32 = lambda v: f"0f{struct.unpack('<I', struct.pack('<f', v))[0]:08X}"
    rcp = struct.unpack("<f", struct.pack("<f", 1.0 / d))[0]  # fp32 RN(1/d): d is an exact fp32 here
    return f"""{{
    .reg .f32 q0, r;
    mul.rn.f32 q0, $1, {f32(rcp)};
    fma.rn.f32 r, q0, {f32(-d)}, $1;
    fma.rn.f32 $0, r, {f32(rcp)}, q0;
    }}"""


@triton.jit
def div_rn_by(p, D: tl.constexpr, PTX: tl.constexpr, ASM: tl.constexpr):
    """RN(p / D) for fp32 p and a constant D, with PTX = `div_ptx(D)`: RN(1/D) times p corrected by one
    exact fma residual, 3 instructions instead of `div.rn.f32`'s ~10 and its slow-path branch. Equal to
    the division for every p whose quotient is a normal fp32 (the steps scale by powers of two exactly;
    `test_div_by_constant.py` checks every mantissa of one binade for each D used); a subnormal quotient
    may differ in its last bits (each caller says why that cannot show), p = +-Inf gives NaN. Under
    the interpreter (ASM False) the division itself."""
    if ASM:
        return tl.inline_asm_elementwise(PTX, "=f,f", [p], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.math.div_rn(p, D)


@triton.jit
def block_amax(xb):
    """max |xb| over the last axis of a 3-D fp32 tile [rows, blocks, block], NaN ignored."""
    mag = tl.abs(xb)
    mag = tl.where(mag == mag, mag, 0.0)
    return tl.max(mag, axis=2)


@triton.jit
def swizzled_scale_offsets(rows64, scols, NB: tl.constexpr):
    """[len(rows64), len(scols)] int64 byte offsets of scales (rows64, scols) in the 128x4 layout.

    rows64: int64 row indices (int64: ceil128(M) * ceil4(NB) can pass 2^31 bytes); scols: scale
    column indices; NB: scale columns per row before padding to a multiple of 4.
    """
    NB_PAD: tl.constexpr = (NB + 3) // 4 * 4
    row_part = (rows64 // 128) * (NB_PAD // 4 * 512) + (rows64 % 32) * 16 + ((rows64 // 32) % 4) * 4
    col_part = (scols // 4) * 512 + (scols % 4)
    return row_part[:, None] + col_part[None, :]


@triton.jit
def block_amax_maxnum(xb):
    """`block_amax` with one select per block instead of one per element.

    `tl.max` combines with `tl.maximum` whose default `propagate_nan=NONE` lowers to `max.f32`
    (fmaxf: a NaN operand yields the other one; the interpreter reduces with `np.nanmax`, the same
    rule), so only an all-NaN block reduces to NaN, and the oracle wants 0 there. The compile tier
    pins the PTX (`max.f32`, no `max.NaN.f32`).
    """
    amax = tl.max(tl.abs(xb), axis=2)
    return tl.where(amax == amax, amax, 0.0)


@triton.jit
def pack_bytes4(b):
    """[R, C] int32 bytes (0..255) -> [R, C/4] int32 words, byte c % 4 at bits 8*(c % 4): the
    little-endian word of 4 consecutive bytes (bytes are disjoint bit ranges, so the sum is an OR)."""
    R: tl.constexpr = b.shape[0]
    C: tl.constexpr = b.shape[1]
    shifts = tl.arange(0, 4) * 8
    return tl.sum(tl.reshape(b, (R, C // 4, 4)) << shifts[None, None, :], axis=2)


def grid_axes(rows: int, cols: int, k_major: bool, what: str) -> tuple[int, int, int]:
    """The launch grid that `grid_origin` reads: (rows, cols, 1), or with k_major one axis of rows x cols
    programs (a ValueError naming `what` from 2^31 programs on: one grid axis holds 2^31 - 1)."""
    if not k_major:
        return (rows, cols, 1)
    if rows * cols >= 2**31:
        raise ValueError(f"{what} is {rows * cols} programs; a k_major grid needs < 2^31")
    return (rows * cols, 1, 1)


@triton.jit
def grid_origin(COLS: tl.constexpr, K_MAJOR: tl.constexpr):
    """(row block, column unit) of this program in a quantizer's grid: the two grid axes, or with K_MAJOR a
    one-axis grid whose program_id(0) = row block x COLS + column unit (column units fastest, so the programs
    resident at once read whole rows; `NvFp4Config.k_major`, `MxFp8Config.k_major`)."""
    if K_MAJOR:
        pid = tl.program_id(0)
        pid_m = pid // COLS
        pid_c = pid - pid_m * COLS
    else:
        pid_m = tl.program_id(0)
        pid_c = tl.program_id(1)
    return pid_m, pid_c
