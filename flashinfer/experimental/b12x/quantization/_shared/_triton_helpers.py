"""Triton device functions shared by the NVFP4 and MXFP8 activation quantizers.

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
