"""quantization.mxfp8 reference: the `_lib/quant` MXFP8 oracle in this op's output layout.

The math (and its NaN/Inf rules) lives in `_lib/quant/mx.py`; this module lays the result out as
`quantize_rows` does: E4M3 values [M, K], UE8M0 scales row-major [M, K/32] and the same scales in
the 128x4 swizzled layout, where only live positions are written (the caller's padding stays).
"""

from __future__ import annotations

import torch

from ..._lib.quant import UE8M0_ONE_BYTE, quantize_mxfp8, swizzle_scales, swizzled_size


def quantize_rows(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """source [M, K] -> (float8_e4m3fn [M, K], uint8 [M, K/32], uint8 [swizzled_size(M, K/32)]
    with the MX padding byte 127)."""
    values, scales = quantize_mxfp8(source)
    return values, scales, swizzle_scales(scales, UE8M0_ONE_BYTE)


def quantize_rows_into(
    source: torch.Tensor, values: torch.Tensor, scale_rows: torch.Tensor, scale_mma: torch.Tensor
) -> None:
    """Write `quantize_rows(source)` into the caller's tensors; padding bytes of scale_mma (positions
    of no live row and block) keep their contents."""
    ref_values, ref_rows, _ = quantize_rows(source)
    m, k = source.shape
    values.view(torch.uint8).copy_(ref_values.view(torch.uint8))
    scale_rows.view(torch.uint8).copy_(ref_rows)
    size = swizzled_size(m, k // 32)
    live = swizzle_scales(torch.ones_like(ref_rows), 0) != 0  # the swizzled positions of live scales
    target = scale_mma.view(torch.uint8)[:size]
    target[live] = swizzle_scales(ref_rows, 0)[live]
