"""The NVFP4 quantizer's program for encode "pairs" on bf16 input (`_pairs.py` has the rule and its proof).

Same tiling and outputs as the "halves" layout of `_kernel.py` (one thread owns whole 16-element
blocks, loaded as 4 int32 words per half, the 16 codes stored as one 8-byte word; the scales at their
swizzled offsets), with the per-program work hoisted out of the k_iters loop: the global-scale load
and `pairs_prologue` (RD(1/gs), one float64 division) run once per program, not once per tile.
PREFETCH (`NvFp4Config.prefetch`): the loop loads column tile i + 1 before it encodes tile i, so each
warp keeps its next 1 KB in flight while it computes (8 more registers): a bet that the steps tile's
67% issue efficiency on the H200 came from exposed DRAM latency.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._encodes import _e4m3_rn, _store_scales
from ._pairs import pack_pair_codes, pair_amax, pair_codes, pair_thresholds, pairs_prologue


@triton.jit
def _load_pair_words(x_ptr, rows64, row_ok, pid_k, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """(half a, half b [rows, blocks, 4] int32 words of two bf16 each, block mask [rows, blocks], block
    indices [blocks]) of column tile pid_k; rows and blocks outside read as 0 (code 0, scale 0)."""
    NB: tl.constexpr = K // 16
    TILE_NB: tl.constexpr = BLOCK_K // 16
    EVEN_K: tl.constexpr = (K % BLOCK_K == 0) and (K % 64 == 0)
    blk = pid_k * TILE_NB + tl.arange(0, TILE_NB)  # global block (scale column) index
    if EVEN_K:
        bmask = row_ok[:, None] & (blk >= 0)[None, :]
    else:
        bmask = row_ok[:, None] & (blk < NB)[None, :]  # K % 16 == 0: a block is all in or all out
    j = tl.arange(0, 4)
    wptrs = x_ptr.to(tl.pointer_type(tl.int32)) + rows64[:, None, None] * (K // 2) + (blk * 8)[None, :, None]
    wptrs += j[None, None, :]
    ua = tl.load(wptrs, mask=bmask[:, :, None], other=0)
    ub = tl.load(wptrs + 4, mask=bmask[:, :, None], other=0)
    return ua, ub, bmask, blk


@triton.jit
def _encode_store_pairs(
    ua,
    ub,
    bmask,
    blk,
    packed_ptr,
    scales_ptr,
    gs,
    scale,
    rg,
    gs_k,
    rows64,
    pid_k,
    K: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    ASM: tl.constexpr,
):
    NB: tl.constexpr = K // 16
    amax = pair_amax(ua, ub, ASM)  # NaN ignored
    t = tl.minimum(tl.math.div_rn(gs * amax, 6.0), 448.0)
    sbits, sf = _e4m3_rn(t)

    th = pair_thresholds(sf, scale, rg, gs_k, ASM)
    wa = pack_pair_codes(pair_codes(ua, th, ASM), ASM)
    wb = pack_pair_codes(pair_codes(ub, th, ASM), ASM)
    words = wa.to(tl.uint64) | (wb.to(tl.uint64) << 32)
    offs = rows64[:, None] * NB + blk[None, :]  # 8-byte units: a row is K/2 = 8 * NB bytes
    tl.store(packed_ptr.to(tl.pointer_type(tl.uint64)) + offs, words, mask=bmask)

    _store_scales(scales_ptr, rows64, pid_k, sbits, NB, BLOCK_K // 16, SCALE_WORDS)


@triton.jit
def program_pairs(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs_ptr,
    gs_value,
    gs_on_device,
    m,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SKIP_DEAD: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    K_ITERS: tl.constexpr,
    PREFETCH: tl.constexpr,
    ASM: tl.constexpr,
):
    """Rows pid_m * BLOCK_M + [0, BLOCK_M), column tiles program_id(1) * K_ITERS + [0, K_ITERS)."""
    pid_m = tl.program_id(0)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < m
    rows64 = rows.to(tl.int64)
    gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
    scale, rg, gs_k = pairs_prologue(gs, ASM)
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    dead = pid_m * BLOCK_M >= m  # padding rows only (skip_dead): their scales are 0, nothing else
    k0 = tl.program_id(1) * K_ITERS
    if PREFETCH:
        ua, ub, bmask, blk = _load_pair_words(x_ptr, rows64, row_ok, k0, K, BLOCK_K)
    for it in range(K_ITERS):
        pid_k = k0 + it
        if PREFETCH:  # the next tile's loads go out before this tile's math (masked past the last)
            more = row_ok & ((it + 1 < K_ITERS) & (pid_k + 1 < NK))
            na, nb, nmask, nblk = _load_pair_words(x_ptr, rows64, more, pid_k + 1, K, BLOCK_K)
        if (NK % K_ITERS == 0) or (pid_k < NK):
            if SKIP_DEAD and dead:
                zeros = tl.zeros((BLOCK_M, BLOCK_K // 16), tl.int32)
                _store_scales(scales_ptr, rows64, pid_k, zeros, K // 16, BLOCK_K // 16, SCALE_WORDS)
            else:
                if not PREFETCH:
                    ua, ub, bmask, blk = _load_pair_words(x_ptr, rows64, row_ok, pid_k, K, BLOCK_K)
                _encode_store_pairs(
                    ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, pid_k,
                    K, BLOCK_K, SCALE_WORDS, ASM,
                )  # fmt: skip
        if PREFETCH:
            ua, ub, bmask, blk = na, nb, nmask, nblk
