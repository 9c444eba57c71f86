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
"""

from __future__ import annotations

import triton
import triton.language as tl


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
