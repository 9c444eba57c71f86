"""Checkpoint layouts -> kernel layouts, done once at load time (plain torch, any device).

- ModelOpt NVFP4 linear: `weight` uint8 [N, K/2], `weight_scale` e4m3 [N, K/16] row-major,
  `weight_scale_2` fp32 scalar = 1/gs_w, `input_scale` fp32 scalar = 1/gs_a
  -> packed weight, swizzled scales (padding 0), alpha = weight_scale_2 * input_scale, gs_a.
- OCP MXFP4 experts ("fp4_e8m0_k32", e.g. gpt-oss): weights [E, rows, K/2] (or [E, rows, K/32, 16])
  + UE8M0 scales [E, rows, K/32] -> the same weights, scales swizzled per expert (padding 127).
- DeepSeek block-FP8 linear: e4m3 [N, K] + fp32 weight_scale_inv [ceil(N/128), ceil(K/128)] -> as is
  (validated, contiguous), or lowered to MXFP8 by requantization with swizzled scales (padding 127).

Nothing here changes a value a checkpoint defines: the NVFP4 and MXFP4 bytes pass through bit-exact,
only the scale layout moves. The block-FP8 -> MXFP8 lowering is the one conversion that requantizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .block_fp8 import BLOCK_FP8_WEIGHT_BLOCK, check_block_fp8_weight, requantize_block_fp8_to_mx
from .mx import MX_BLOCK
from .nvfp4 import NVFP4_BLOCK
from .scales import UE8M0_ONE_BYTE, as_bytes
from .swizzle import swizzle_scales

NVFP4_WEIGHT_SCALE_PAD = 0


@dataclass(frozen=True, eq=False)
class NvFp4Linear:
    """Kernel layout of one NVFP4 linear. `weight_scale` is flat swizzled e4m3 [swizzled_size(N, K/16)].

    `alpha` multiplies the GEMM output; `input_global_scale` (gs_a) is the multiplier the activation
    quantizer takes (None for weight-only checkpoints without `input_scale`).
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    alpha: torch.Tensor
    weight_scale_2: torch.Tensor
    input_global_scale: torch.Tensor | None
    n: int
    k: int


@dataclass(frozen=True, eq=False)
class MxFp4Experts:
    """Kernel layout of stacked MXFP4 expert weights: `weight` uint8 [E, rows, K/2] and `scales`
    uint8 UE8M0 [E, swizzled_size(rows, K/32)]."""

    weight: torch.Tensor
    scales: torch.Tensor
    rows: int
    k: int


@dataclass(frozen=True, eq=False)
class BlockFp8Linear:
    """DeepSeek block-FP8 linear as the block-FP8 kernels take it (checkpoint layout, contiguous)."""

    weight: torch.Tensor
    weight_scale_inv: torch.Tensor
    n: int
    k: int


@dataclass(frozen=True, eq=False)
class MxFp8Linear:
    """MXFP8 linear: `weight` e4m3 [N, K], `scales` uint8 UE8M0 flat [swizzled_size(N, K/32)]."""

    weight: torch.Tensor
    scales: torch.Tensor
    n: int
    k: int


def _scalar(t, name: str) -> torch.Tensor:
    t = torch.as_tensor(t)
    if t.numel() != 1 or not t.is_floating_point():
        raise ValueError(f"{name} must be a float32 scalar, got {t.dtype} {list(t.shape)}")
    value = t.detach().float().reshape(())
    if not (0 < float(value) < float("inf")):
        raise ValueError(f"{name} must be finite and > 0, got {float(value)}")
    return value


def modelopt_nvfp4_linear(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_scale_2,
    input_scale=None,
) -> NvFp4Linear:
    """ModelOpt NVFP4 checkpoint tensors of one linear -> `NvFp4Linear` (see module docstring).

    alpha = weight_scale_2 * input_scale (one fp32 multiply); gs_a = 1 / input_scale (fp32 division).
    """
    if weight.dtype != torch.uint8 or weight.dim() != 2:
        raise ValueError(f"weight must be uint8 [N, K/2], got {weight.dtype} {list(weight.shape)}")
    n, k = weight.shape[0], weight.shape[1] * 2
    if k % NVFP4_BLOCK:
        raise ValueError(f"weight must have K % 16 == 0, got K = {k} (weight {list(weight.shape)})")
    if weight_scale.dtype not in (torch.float8_e4m3fn, torch.uint8) or list(weight_scale.shape) != [
        n,
        k // NVFP4_BLOCK,
    ]:
        raise ValueError(
            f"weight_scale must be float8_e4m3fn [{n}, {k // NVFP4_BLOCK}], "
            f"got {weight_scale.dtype} {list(weight_scale.shape)}"
        )
    ws2 = _scalar(weight_scale_2, "weight_scale_2").to(weight.device)
    sf = as_bytes(weight_scale).view(torch.float8_e4m3fn)
    swizzled = swizzle_scales(sf, NVFP4_WEIGHT_SCALE_PAD)
    if input_scale is None:
        return NvFp4Linear(weight.contiguous(), swizzled, ws2, ws2, None, n, k)
    in_s = _scalar(input_scale, "input_scale").to(weight.device)
    alpha = ws2 * in_s
    gs_a = torch.ones_like(in_s) / in_s
    return NvFp4Linear(weight.contiguous(), swizzled, alpha, ws2, gs_a, n, k)


def ocp_mxfp4_experts(blocks: torch.Tensor, scales: torch.Tensor) -> MxFp4Experts:
    """OCP "fp4_e8m0_k32" expert tensors -> `MxFp4Experts`; bytes unchanged, scales swizzled per expert.

    `blocks` uint8 [E, rows, K/2] or [E, rows, K/32, 16] (low nibble = even element in both);
    `scales` uint8 [E, rows, K/32].
    """
    if blocks.dtype != torch.uint8 or blocks.dim() not in (3, 4):
        raise ValueError(
            f"blocks must be uint8 [E, rows, K/2] or [E, rows, K/32, 16], got {blocks.dtype} {list(blocks.shape)}"
        )
    if blocks.dim() == 4:
        if blocks.shape[-1] != MX_BLOCK // 2:
            raise ValueError(f"blocks [E, rows, K/32, 16] must end in 16 bytes, got {list(blocks.shape)}")
        blocks = blocks.reshape(*blocks.shape[:2], -1)
    e, rows, k = blocks.shape[0], blocks.shape[1], blocks.shape[2] * 2
    if k % MX_BLOCK:
        raise ValueError(f"blocks must have K % 32 == 0, got K = {k}")
    if scales.element_size() != 1 or list(scales.shape) != [e, rows, k // MX_BLOCK]:
        raise ValueError(
            f"scales must be uint8 [{e}, {rows}, {k // MX_BLOCK}], got {scales.dtype} {list(scales.shape)}"
        )
    swizzled = swizzle_scales(as_bytes(scales), UE8M0_ONE_BYTE)
    return MxFp4Experts(blocks.contiguous(), swizzled, rows, k)


def deepseek_block_fp8_linear(weight: torch.Tensor, weight_scale_inv: torch.Tensor) -> BlockFp8Linear:
    """DeepSeek block-FP8 tensors, validated and made contiguous; values unchanged."""
    check_block_fp8_weight(weight, weight_scale_inv, BLOCK_FP8_WEIGHT_BLOCK, "deepseek_block_fp8_linear")
    w = as_bytes(weight).view(torch.float8_e4m3fn).contiguous()
    return BlockFp8Linear(w, weight_scale_inv.contiguous(), *weight.shape)


def deepseek_block_fp8_linear_to_mx(weight: torch.Tensor, weight_scale_inv: torch.Tensor) -> MxFp8Linear:
    """DeepSeek block-FP8 -> MXFP8 by `requantize_block_fp8_to_mx`, scales swizzled (padding 127)."""
    check_block_fp8_weight(weight, weight_scale_inv, BLOCK_FP8_WEIGHT_BLOCK, "deepseek_block_fp8_linear_to_mx")
    values, scales = requantize_block_fp8_to_mx(weight, weight_scale_inv)
    return MxFp8Linear(values, swizzle_scales(scales, UE8M0_ONE_BYTE), *weight.shape)
