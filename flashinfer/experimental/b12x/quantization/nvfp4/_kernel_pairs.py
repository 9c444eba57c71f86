"""The NVFP4 quantizer's program for encode "pairs" on bf16 input (`_pairs.py` has the rule and its proof).

Same tiling and outputs as the "halves" layout of `_kernel.py` (one thread owns whole 16-element
blocks, loaded as 4 int32 words per half, the 16 codes stored as one 8-byte word; the scales at their
swizzled offsets), with the per-program work hoisted out of the k_iters loop: the global-scale load
and `pairs_prologue` (RD(1/gs), one float64 division) run once per program, not once per tile.
PREFETCH (`NvFp4Config.prefetch`): the loop loads column tile i + 1 before it encodes tile i, so each
warp keeps its next 1 KB in flight while it computes (8 more registers): a bet that the steps tile's
67% issue efficiency on the H200 came from exposed DRAM latency.

Session 7 variants (issue #4: >= 80% of the copy ceiling at M >= 4096; each bit-equal, selectable by
`NvFp4Config`, none the default):
- UNROLL: the k_iters loop unrolled (`tl.static_range`): no loop-carried register moves (9 IMAD.MOV
  a tile on sm_90a with prefetch), no loop counter, the last tile's bounds check folded.
- PERSISTENT (CTAs per SM, clamped at launch to what is resident: `NvFp4Launcher`): a grid of
  persistent * SMs programs, each quantizing one contiguous range of the (row block, column tile)
  tiles in row-major order (`persistent_range`: ranges differ by at most one tile, so there is no
  partial last wave: the 8x256x4 tile holds 56 registers, 9 programs per SM, so 4096 x 4096's 2048
  programs are 1.7 waves), with the prologue (global scale, RD(1/gs) in float64: ~120 SASS
  instructions a thread, ~10% of a 4-tile program) paid once per range; with PREFETCH the next
  tile's loads in flight across row blocks. With k_iters > 1 (and unroll) the unit is a group of
  k_iters tiles of one row block, each through the unrolled loop.
- STREAM: streaming cache hints (loads evict_first, stores `.cs`): the input is read once and the
  outputs are not read back by this kernel.
- PRELOAD (session 27, with UNROLL, k_iters 2 or 4): every tile of the group is loaded before the first
  tile's math, so a thread keeps its whole group (64 or 128 bytes) in flight at once instead of one
  tile ahead: a bet that the 4096-row shapes lose their time to each program's serial chain of load
  round trips (the grid is under two waves there), paid for in registers (fewer programs an SM).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..._lib.triton_quant import grid_origin
from ._encodes import _e4m3_rn, _store_scales
from ._pairs import (
    LUT_HI,
    LUT_LO,
    block_t,
    lut_prologue,
    pack_pair_codes,
    pair_amax,
    pair_codes,
    pair_thresholds,
    pair_thresholds_lut,
    pairs_prologue,
)


@triton.jit
def _tile_blocks(row_ok, pid_k, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """(block mask [rows, blocks], global block indices [blocks]) of column tile pid_k."""
    NB: tl.constexpr = K // 16
    TILE_NB: tl.constexpr = BLOCK_K // 16
    EVEN_K: tl.constexpr = (K % BLOCK_K == 0) and (K % 64 == 0)
    blk = pid_k * TILE_NB + tl.arange(0, TILE_NB)  # global block (scale column) index
    if EVEN_K:
        bmask = row_ok[:, None] & (blk >= 0)[None, :]
    else:
        bmask = row_ok[:, None] & (blk < NB)[None, :]  # K % 16 == 0: a block is all in or all out
    return bmask, blk


@triton.jit
def _load_pair_words(
    x_ptr, rows64, row_ok, pid_k, K: tl.constexpr, BLOCK_K: tl.constexpr, STREAM: tl.constexpr = False
):
    """(half a, half b [rows, blocks, 4] int32 words of two bf16 each, block mask [rows, blocks], block
    indices [blocks]) of column tile pid_k; rows and blocks outside read as 0 (code 0, scale 0)."""
    bmask, blk = _tile_blocks(row_ok, pid_k, K, BLOCK_K)
    # Flat [rows, 4 words a block] pointers, reshaped after the load: the coalescing pass then lays the
    # lanes along the blocks on Triton 3.6 too (for a [rows, blocks, 4] pointer it put them down the
    # rows, and the packed words went through shared memory, 2 barriers a tile, to the store's layout).
    NB: tl.constexpr = K // 16
    TILE_NB: tl.constexpr = BLOCK_K // 16
    EVEN_K: tl.constexpr = (K % BLOCK_K == 0) and (K % 64 == 0)
    w = tl.arange(0, TILE_NB * 4)
    wblk = pid_k * TILE_NB + w // 4  # the block of word w (its half-a word w % 4)
    if EVEN_K:
        wmask = row_ok[:, None] & (w >= 0)[None, :]
    else:
        wmask = row_ok[:, None] & (wblk < NB)[None, :]
    wptrs = x_ptr.to(tl.pointer_type(tl.int32)) + rows64[:, None] * (K // 2) + (wblk * 8 + w % 4)[None, :]
    if STREAM:
        ua = tl.load(wptrs, mask=wmask, other=0, eviction_policy="evict_first")
        ub = tl.load(wptrs + 4, mask=wmask, other=0, eviction_policy="evict_first")
    else:
        ua = tl.load(wptrs, mask=wmask, other=0)
        ub = tl.load(wptrs + 4, mask=wmask, other=0)
    BM: tl.constexpr = ua.shape[0]
    return tl.reshape(ua, (BM, TILE_NB, 4)), tl.reshape(ub, (BM, TILE_NB, 4)), bmask, blk


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
    STREAM: tl.constexpr = False,
    lut=None,
    LUT: tl.constexpr = False,
    ROWS: tl.constexpr = False,
):
    """Encode and store one column tile: gs, scale, rg, gs_k scalars (`pairs_prologue`), or [rows, 1]
    with ROWS (no LUT then: the lane table holds one global scale); bmask masks the codes, rows64 < 0
    the scales."""
    NB: tl.constexpr = K // 16
    amax = pair_amax(ua, ub, ASM)  # NaN ignored
    # moe's gather (ROWS) keeps div.rn: the fma form held 9 more registers there on Triton 3.6 (105
    # against 96: one program an SM fewer), and its route + gather at E = 512 read 247 us in session 26
    # (216 in session 16)
    sbits, sf = _e4m3_rn(block_t(gs, amax, ASM and not ROWS))

    if LUT:  # `_pairs.pair_thresholds_lut` inside its global-scale range (a uniform branch)
        if (gs_k >= LUT_LO) & (gs_k <= LUT_HI):
            t0, t1, t2, t3, t4, t5, t6, nt0 = pair_thresholds_lut(sf, lut, scale, rg, gs_k, ASM)
        else:
            t0, t1, t2, t3, t4, t5, t6, nt0 = pair_thresholds(sf, scale, rg, gs_k, ASM)
        th = (t0, t1, t2, t3, t4, t5, t6, nt0)
    else:
        th = pair_thresholds(sf, scale, rg, gs_k, ASM, ROWS)
    wa = pack_pair_codes(pair_codes(ua, th, ASM), ASM)
    wb = pack_pair_codes(pair_codes(ub, th, ASM), ASM)
    if LUT:  # sf == 0: every code 0 (the table's thresholds are not NaN there)
        wa = tl.where(sf == 0, 0, wa)
        wb = tl.where(sf == 0, 0, wb)
    words = wa.to(tl.uint64) | (wb.to(tl.uint64) << 32)
    offs = rows64[:, None] * NB + blk[None, :]  # 8-byte units: a row is K/2 = 8 * NB bytes
    if STREAM:
        tl.store(packed_ptr.to(tl.pointer_type(tl.uint64)) + offs, words, mask=bmask, cache_modifier=".cs")
    else:
        tl.store(packed_ptr.to(tl.pointer_type(tl.uint64)) + offs, words, mask=bmask)

    _store_scales(scales_ptr, rows64, pid_k, sbits, NB, BLOCK_K // 16, SCALE_WORDS, STREAM)


@triton.jit
def persistent_range(m, NK: tl.constexpr, BLOCK_M: tl.constexpr):
    """[start, end) of this program's tiles in a persistent grid: tile t is row block t // NK and column
    tile t % NK over ceil128(m) rows (padding rows included: they read zeros, so their scales are 0);
    program p of P gets [p n / P, (p + 1) n / P) of the n tiles (lengths differ by at most one).
    `grid` keeps n below 2^31."""
    n = ((m + 127) // 128 * (128 // BLOCK_M)).to(tl.int64) * NK
    p = tl.program_id(0).to(tl.int64)
    num = tl.num_programs(0).to(tl.int64)
    return (p * n // num).to(tl.int32), ((p + 1) * n // num).to(tl.int32)


@triton.jit
def _program_pairs_persistent(
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
    SCALE_WORDS: tl.constexpr,
    PREFETCH: tl.constexpr,
    STREAM: tl.constexpr,
    ASM: tl.constexpr,
    LUT: tl.constexpr,
):
    """The tiles of `persistent_range`, row block by row block: each row block's part of the range is
    a column loop like the plain grid's (addresses advance by a constant, no division per tile); with
    PREFETCH the next tile's loads of the same row block go out before this tile's math."""
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    start, end = persistent_range(m, NK, BLOCK_M)
    gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
    scale, rg, gs_k = pairs_prologue(gs, ASM)
    lut = lut_prologue(tl.zeros((BLOCK_M, BLOCK_K // 16), tl.int32), scale, rg, gs_k, ASM) if LUT else None
    for pid_m in range(start // NK, (end + NK - 1) // NK):
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < m
        rows64 = rows.to(tl.int64)
        k_lo = tl.maximum(start - pid_m * NK, 0)
        k_hi = tl.minimum(end - pid_m * NK, NK)
        if PREFETCH:
            ua, ub, bmask, blk = _load_pair_words(x_ptr, rows64, row_ok, k_lo, K, BLOCK_K, STREAM)
        for pid_k in range(k_lo, k_hi):
            if PREFETCH:  # a full-shape mask (the interpreter's masked load rejects a broadcast one)
                more = row_ok & (tl.zeros([BLOCK_M], tl.int32) + (pid_k + 1) < k_hi)
                na, nb, nmask, nblk = _load_pair_words(x_ptr, rows64, more, pid_k + 1, K, BLOCK_K, STREAM)
            else:
                ua, ub, bmask, blk = _load_pair_words(x_ptr, rows64, row_ok, pid_k, K, BLOCK_K, STREAM)
            _encode_store_pairs(
                ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, pid_k,
                K, BLOCK_K, SCALE_WORDS, ASM, STREAM, lut, LUT,
            )  # fmt: skip
            if PREFETCH:
                ua, ub, bmask, blk = na, nb, nmask, nblk


@triton.jit
def _load_group_tile(
    x_ptr, rows64, row_ok, k0, IT: tl.constexpr, NK: tl.constexpr, K_ITERS: tl.constexpr, K: tl.constexpr,
    BLOCK_K: tl.constexpr, STREAM: tl.constexpr,
):  # fmt: skip
    """Tile k0 + IT of a group of K_ITERS (`NvFp4Config.preload`): its loads, masked off past the last
    column tile of the row (a group's first tile always exists)."""
    if (NK % K_ITERS == 0) or (IT == 0):
        ok = row_ok
    else:  # a full-shape mask (the interpreter's masked load rejects a broadcast one)
        ok = row_ok & (tl.zeros_like(rows64).to(tl.int32) + (k0 + IT) < NK)
    return _load_pair_words(x_ptr, rows64, ok, k0 + IT, K, BLOCK_K, STREAM)


@triton.jit
def _group_tile(
    ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, IT: tl.constexpr,
    NK: tl.constexpr, K_ITERS: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr, SKIP_DEAD: tl.constexpr,
    SCALE_WORDS: tl.constexpr, STREAM: tl.constexpr, ASM: tl.constexpr, lut, LUT: tl.constexpr,
):  # fmt: skip
    """Encode and store tile k0 + IT of a group from its loaded words (skipped past the last column
    tile; zero scales only for a dead program under SKIP_DEAD)."""
    if (NK % K_ITERS == 0) or (k0 + IT < NK):
        if SKIP_DEAD and dead:
            zeros = tl.zeros((rows64.shape[0], BLOCK_K // 16), tl.int32)
            _store_scales(scales_ptr, rows64, k0 + IT, zeros, K // 16, BLOCK_K // 16, SCALE_WORDS, STREAM)
        else:
            _encode_store_pairs(
                ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, k0 + IT,
                K, BLOCK_K, SCALE_WORDS, ASM, STREAM, lut, LUT,
            )  # fmt: skip


@triton.jit
def _group_tile_pair(
    ua, ub, bmask, blk, va, vb, vmask, vblk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0,
    IT: tl.constexpr, NK: tl.constexpr, K_ITERS: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr,
    SKIP_DEAD: tl.constexpr, SCALE_WORDS: tl.constexpr, STREAM: tl.constexpr, ASM: tl.constexpr, lut,
    LUT: tl.constexpr,
):  # fmt: skip
    """`_group_tile` of tiles IT and IT + 1 (preload), in that order."""
    _group_tile(
        ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, IT,
        NK, K_ITERS, K, BLOCK_K, SKIP_DEAD, SCALE_WORDS, STREAM, ASM, lut, LUT,
    )  # fmt: skip
    _group_tile(
        va, vb, vmask, vblk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, IT + 1,
        NK, K_ITERS, K, BLOCK_K, SKIP_DEAD, SCALE_WORDS, STREAM, ASM, lut, LUT,
    )  # fmt: skip


@triton.jit
def _k_tiles_unrolled(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs,
    scale,
    rg,
    gs_k,
    rows64,
    row_ok,
    dead,
    k0,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SKIP_DEAD: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    K_ITERS: tl.constexpr,
    PREFETCH: tl.constexpr,
    STREAM: tl.constexpr,
    ASM: tl.constexpr,
    lut,
    LUT: tl.constexpr,
    PRELOAD: tl.constexpr = False,
):
    """`program_pairs`'s column loop, unrolled (`NvFp4Config.unroll`): the same tiles and bits."""
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    if PRELOAD:  # every tile's loads first (K_ITERS 2 or 4), then the tiles' math and stores
        a0, b0, m0, l0 = _load_group_tile(x_ptr, rows64, row_ok, k0, 0, NK, K_ITERS, K, BLOCK_K, STREAM)
        a1, b1, m1, l1 = _load_group_tile(x_ptr, rows64, row_ok, k0, 1, NK, K_ITERS, K, BLOCK_K, STREAM)
        if K_ITERS == 4:
            a2, b2, m2, l2 = _load_group_tile(x_ptr, rows64, row_ok, k0, 2, NK, K_ITERS, K, BLOCK_K, STREAM)
            a3, b3, m3, l3 = _load_group_tile(x_ptr, rows64, row_ok, k0, 3, NK, K_ITERS, K, BLOCK_K, STREAM)
        _group_tile_pair(
            a0, b0, m0, l0, a1, b1, m1, l1, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, 0,
            NK, K_ITERS, K, BLOCK_K, SKIP_DEAD, SCALE_WORDS, STREAM, ASM, lut, LUT,
        )  # fmt: skip
        if K_ITERS == 4:
            _group_tile_pair(
                a2, b2, m2, l2, a3, b3, m3, l3, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, 2,
                NK, K_ITERS, K, BLOCK_K, SKIP_DEAD, SCALE_WORDS, STREAM, ASM, lut, LUT,
            )  # fmt: skip
    else:  # one tile at a time, the next tile's loads out before this tile's math with PREFETCH
        if PREFETCH:
            ua, ub, bmask, blk = _load_group_tile(x_ptr, rows64, row_ok, k0, 0, NK, K_ITERS, K, BLOCK_K, STREAM)
        for it in tl.static_range(K_ITERS):
            if PREFETCH:
                if it + 1 < K_ITERS:
                    na, nb, nmask, nblk = _load_group_tile(
                        x_ptr, rows64, row_ok, k0, it + 1, NK, K_ITERS, K, BLOCK_K, STREAM
                    )
            else:
                ua, ub, bmask, blk = _load_group_tile(x_ptr, rows64, row_ok, k0, it, NK, K_ITERS, K, BLOCK_K, STREAM)
            _group_tile(
                ua, ub, bmask, blk, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, dead, k0, it,
                NK, K_ITERS, K, BLOCK_K, SKIP_DEAD, SCALE_WORDS, STREAM, ASM, lut, LUT,
            )  # fmt: skip
            if PREFETCH:
                if it + 1 < K_ITERS:
                    ua, ub, bmask, blk = na, nb, nmask, nblk


@triton.jit
def _program_pairs_persistent_groups(
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
    SCALE_WORDS: tl.constexpr,
    K_ITERS: tl.constexpr,
    PREFETCH: tl.constexpr,
    STREAM: tl.constexpr,
    ASM: tl.constexpr,
    LUT: tl.constexpr,
    PRELOAD: tl.constexpr = False,
):
    """A persistent grid over groups of K_ITERS column tiles of one row block (the unit of the plain
    grid's programs): `persistent_range` over the (row block, group) pairs, each group through the
    unrolled column loop (`_k_tiles_unrolled`), the prologue once per program."""
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    NG: tl.constexpr = (NK + K_ITERS - 1) // K_ITERS
    start, end = persistent_range(m, NG, BLOCK_M)
    gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
    scale, rg, gs_k = pairs_prologue(gs, ASM)
    lut = lut_prologue(tl.zeros((BLOCK_M, BLOCK_K // 16), tl.int32), scale, rg, gs_k, ASM) if LUT else None
    for i in range(start, end):
        pid_m = i // NG
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        _k_tiles_unrolled(
            x_ptr, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows.to(tl.int64), rows < m, False,
            (i - pid_m * NG) * K_ITERS, K, BLOCK_M, BLOCK_K, False, SCALE_WORDS, K_ITERS, PREFETCH, STREAM, ASM,
            lut, LUT, PRELOAD,
        )  # fmt: skip


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
    UNROLL: tl.constexpr = False,
    PERSISTENT: tl.constexpr = 0,
    STREAM: tl.constexpr = False,
    LUT: tl.constexpr = False,
    PRELOAD: tl.constexpr = False,
    K_MAJOR: tl.constexpr = False,
):
    """Rows pid_m * BLOCK_M + [0, BLOCK_M), column tiles program_id(1) * K_ITERS + [0, K_ITERS) (K_MAJOR: both
    from program_id(0), column groups fastest); or (PERSISTENT) the tile range of `persistent_range`."""
    if PERSISTENT > 0 and K_ITERS > 1:
        _program_pairs_persistent_groups(
            x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m,
            K, BLOCK_M, BLOCK_K, SCALE_WORDS, K_ITERS, PREFETCH, STREAM, ASM, LUT, PRELOAD,
        )  # fmt: skip
    elif PERSISTENT > 0:
        _program_pairs_persistent(
            x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m,
            K, BLOCK_M, BLOCK_K, SCALE_WORDS, PREFETCH, STREAM, ASM, LUT,
        )  # fmt: skip
    else:
        _program_pairs_tiles(
            x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m,
            K, BLOCK_M, BLOCK_K, SKIP_DEAD, SCALE_WORDS, K_ITERS, PREFETCH, ASM, UNROLL, STREAM, LUT, PRELOAD, K_MAJOR,
        )  # fmt: skip


@triton.jit
def _program_pairs_tiles(
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
    UNROLL: tl.constexpr,
    STREAM: tl.constexpr,
    LUT: tl.constexpr,
    PRELOAD: tl.constexpr,
    K_MAJOR: tl.constexpr = False,
):
    """Rows pid_m * BLOCK_M + [0, BLOCK_M), column tiles program_id(1) * K_ITERS + [0, K_ITERS); with
    K_MAJOR program_id(0) = pid_m * groups + group (`NvFp4Config.k_major`)."""
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    pid_m, pid_g = grid_origin((NK + K_ITERS - 1) // K_ITERS, K_MAJOR)
    k0 = pid_g * K_ITERS
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < m
    rows64 = rows.to(tl.int64)
    gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
    scale, rg, gs_k = pairs_prologue(gs, ASM)
    dead = pid_m * BLOCK_M >= m  # padding rows only (skip_dead): their scales are 0, nothing else
    if UNROLL:
        lut = lut_prologue(tl.zeros((BLOCK_M, BLOCK_K // 16), tl.int32), scale, rg, gs_k, ASM) if LUT else None
        _k_tiles_unrolled(
            x_ptr, packed_ptr, scales_ptr, gs, scale, rg, gs_k, rows64, row_ok, dead, k0,
            K, BLOCK_M, BLOCK_K, SKIP_DEAD, SCALE_WORDS, K_ITERS, PREFETCH, STREAM, ASM, lut, LUT, PRELOAD,
        )  # fmt: skip
    else:
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
