"""DeepSeek block-FP8 references: 128x128 weight blocks, per-token-per-group activations, MX lowering.

One scale rule for both (x read as fp32, IEEE fp32 ops in this order):

    amax = max |x_i| over the block, NaN ignored
    s    = amax / 448            (true division; stored as fp32 `weight_scale_inv` / activation scale)
    s    = 1.0 if s == 0         (all-zero block: a unit scale, so no consumer ever divides by 0)
    q_i  = e4m3_rn_satfinite(x_i / s)      (true division, not a multiply by 1/s)

Dequantize: x_i ~ f32(q_i) * s.

Non-finite: NaN elements are skipped by amax and encode 0x7F. A block holding +-Inf gets s = +Inf; its
finite values encode +-0 and its infinities NaN, so the block dequantizes to NaN (0 * Inf), the same
"Inf poisons the block" outcome as an MX NaN scale.

Weight blocks at the right/bottom edge may be partial (N or K not a multiple of 128); the scale grid is
[ceil(N/128), ceil(K/128)] and a partial block's amax covers only its real elements.
"""

from __future__ import annotations

import torch

from .mx import MX_BLOCK, quantize_mxfp8
from .scales import E4M3_MAX, block_amax, e4m3_decode, e4m3_encode, fp32_const

BLOCK_FP8_WEIGHT_BLOCK = 128
BLOCK_FP8_ACT_GROUP = 128


def _scale(amax: torch.Tensor) -> torch.Tensor:
    s = amax / fp32_const(amax, E4M3_MAX)
    return torch.where(s == 0, torch.ones_like(s), s)


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _tiles(w: torch.Tensor, block: int) -> torch.Tensor:
    """[N, K] -> zero-padded [N/block, K/block, block*block] (zeros do not move an |x| max)."""
    n, k = w.shape
    nb, kb = _cdiv(n, block), _cdiv(k, block)
    padded = torch.zeros(nb * block, kb * block, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float()
    return padded.view(nb, block, kb, block).permute(0, 2, 1, 3).reshape(nb, kb, block * block)


def _expand(scale: torch.Tensor, n: int, k: int, block: int) -> torch.Tensor:
    """[N/block, K/block] -> [N, K]: each element's block scale."""
    return scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :k]


def quantize_block_fp8_weight(
    weight: torch.Tensor, block: int = BLOCK_FP8_WEIGHT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """float [N, K] -> (float8_e4m3fn [N, K], fp32 weight_scale_inv [ceil(N/128), ceil(K/128)])."""
    if weight.dim() != 2:
        raise ValueError(f"quantize_block_fp8_weight: weight must be [N, K], got shape {tuple(weight.shape)}")
    n, k = weight.shape
    scale = _scale(block_amax(_tiles(weight, block)))
    q = e4m3_encode(weight.float() / _expand(scale, n, k, block))
    return q, scale


def dequantize_block_fp8_weight(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, block: int = BLOCK_FP8_WEIGHT_BLOCK
) -> torch.Tensor:
    """(e4m3 [N, K], fp32 [ceil(N/128), ceil(K/128)]) -> fp32 [N, K]: `f32(q) * s`."""
    check_block_fp8_weight(weight, weight_scale_inv, block, "dequantize_block_fp8_weight")
    n, k = weight.shape
    return e4m3_decode(weight) * _expand(weight_scale_inv.float(), n, k, block)


def quantize_block_fp8_act(x: torch.Tensor, group: int = BLOCK_FP8_ACT_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """float [..., K] (K % group == 0) -> (float8_e4m3fn [..., K], fp32 scales [..., K/group])."""
    if x.dim() < 1 or x.shape[-1] % group:
        raise ValueError(
            f"quantize_block_fp8_act: x must be [..., K] with K % {group} == 0, got shape {tuple(x.shape)}"
        )
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // group, group)
    scale = _scale(block_amax(blocks))
    return e4m3_encode(blocks / scale.unsqueeze(-1)).reshape(x.shape), scale


def dequantize_block_fp8_act(x: torch.Tensor, scales: torch.Tensor, group: int = BLOCK_FP8_ACT_GROUP) -> torch.Tensor:
    """(e4m3 [..., K], fp32 [..., K/group]) -> fp32 [..., K]."""
    vals = e4m3_decode(x)
    blocks = vals.reshape(*vals.shape[:-1], vals.shape[-1] // group, group)
    if tuple(scales.shape) != tuple(blocks.shape[:-1]):
        raise ValueError(
            f"dequantize_block_fp8_act: scales must be {list(blocks.shape[:-1])}, got {list(scales.shape)}"
        )
    return (blocks * scales.float().unsqueeze(-1)).reshape(vals.shape)


def requantize_block_fp8_to_mx(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, block: int = BLOCK_FP8_WEIGHT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-FP8 weight -> MXFP8 (e4m3 [N, K], UE8M0 uint8 [N, K/32], row-major), K % 32 == 0.

    The weight is dequantized (`f32(q) * s`) and quantized afresh with `quantize_mxfp8`, so each
    32-wide group gets the power-of-two scale of ITS OWN amax. Rounding the 128x128 scale up to a
    power of two and keeping the codes would instead waste up to one bit of every value in the block.
    """
    if weight.dim() != 2 or weight.shape[1] % MX_BLOCK:
        raise ValueError(
            f"requantize_block_fp8_to_mx: weight must be [N, K] with K % 32 == 0, got {tuple(weight.shape)}"
        )
    return quantize_mxfp8(dequantize_block_fp8_weight(weight, weight_scale_inv, block))


def check_block_fp8_weight(weight: torch.Tensor, scale: torch.Tensor, block: int, who: str) -> None:
    """ValueError (prefixed with `who`) unless weight is one-byte [N, K] and scale fp32 [N/block, K/block]."""
    if weight.dim() != 2 or weight.element_size() != 1:
        raise ValueError(f"{who}: weight must be e4m3 [N, K], got {weight.dtype} {tuple(weight.shape)}")
    n, k = weight.shape
    expected = (_cdiv(n, block), _cdiv(k, block))
    if scale.dtype != torch.float32 or tuple(scale.shape) != expected:
        raise ValueError(
            f"{who}: weight_scale_inv must be float32 {list(expected)} for weight [{n}, {k}], "
            f"got {scale.dtype} {list(scale.shape)}"
        )
