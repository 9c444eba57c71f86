"""quantization.nvfp4 reference: the `_lib/quant` NVFP4 oracle in this op's output layout.

The math (and its NaN/Inf rules) lives in `_lib/quant/nvfp4.py`; this module only lays the result
out as the op does: packed E2M1 [M, K/2] and E4M3 scales in the 128x4 swizzled layout with zero
padding (FORMATS.md).
"""

from __future__ import annotations

import torch

from ..._lib.quant import quantize_nvfp4, swizzle_scales, swizzled_size


def quantize(x: torch.Tensor, global_scale) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (packed uint8 [M, K/2], float8_e4m3fn [swizzled_size(M, K/16)], padding 0)."""
    packed, scales = quantize_nvfp4(x, global_scale)
    return packed, swizzle_scales(scales, 0)


def quantize_into(x: torch.Tensor, global_scale, packed: torch.Tensor, scales: torch.Tensor) -> None:
    """Write `quantize(x, global_scale)` into the first M rows of `packed` and the first
    swizzled_size(M, K/16) bytes of `scales` (what the kernel writes; the rest stays as it is)."""
    ref_packed, ref_scales = quantize(x, global_scale)
    m, k = x.shape
    packed[:m].copy_(ref_packed)
    scales.view(torch.uint8)[: swizzled_size(m, k // 16)].copy_(ref_scales.view(torch.uint8))
