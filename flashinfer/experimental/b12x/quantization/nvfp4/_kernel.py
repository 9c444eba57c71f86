"""NVFP4 activation quantizer (Triton): bf16/fp16 [M, K] -> packed E2M1 [M, K/2] + swizzled E4M3 scales.

Per 16-element block of a row, with `gs` the fp32 global scale (a multiplier), exactly the fp32 op
sequence of `_lib/quant/nvfp4.py` (the oracle; bits must match):

    amax = max |x_i| (NaN ignored)      t = min(div_rn(gs * amax, 6), 448)      sf = e4m3_rn(t)
    q_i  = e2m1(div_rn(x_i * gs, f32(sf)))     (all codes 0 when sf == 0)

- Divisions are `tl.math.div_rn` (PTX `div.rn.f32`): Triton's `/` is `div.full.f32`, which is not
  correctly rounded. FP fusion is off so no multiply is contracted into an FMA.
- `t` is in [0, 448], so the hardware `cvt.rn.satfinite.e4m3x2.f32` (encode "div") is the oracle's
  RNE encoding; the division-free encodes round t by its bits instead (`_e4m3_rn`, same bytes).
- E2M1 codes come from comparisons against the grid midpoints (ties to the even code; NaN fails
  every comparison -> +0; +-Inf -> +-6): SM90 has no FP4 conversion instruction.
- Variants (`NvFp4Config`, all bit-equal under the interpreter): encode "div" (the sequence above),
  "mul" (no per-element division: |x * gs| against midpoint * sf, exact; proof at
  `_encodes._e2m1_codes_mul`), "search" (the same thresholds by binary search), "steps" (the same thresholds
  as saturating FMAs on the FP32 pipe, `_steps.py`; inline PTX, mirrored in plain Triton under the
  interpreter, where `ASM` is False); layout "rows" or "halves"
  (a thread owns whole 16-element blocks); skip_dead (padding-only programs write zero scales
  only); scale_words (4-byte scale stores).
- GPU validation: the "div" configs (`_VALIDATED`) passed test_gpu_candidates on the H200 at 03:45
  and 05:55. The division-free encodes ("mul"/"search", `_UNVALIDATED`) failed there twice (03:45,
  05:55: all codes 0 or wrong scale bytes in 16x256x4-like tiles, bit-exact in the interpreter):
  ptxas of Triton 3.6 (CUDA 12.8) mishandles the 16-bit result of the E4M3 pack
  `cvt.rn.satfinite.e4m3x2.f32`. Since `_e4m3_rn` (integer and exact fp32 ops, no fp8 instruction)
  every one of them passed bit for bit at 06:38 (35 configs at M x K = 1 x 7168 and 130 x 160, three
  inputs each: random over ten decades, extreme, scales on every E4M3 value and tie), so
  `DIVISION_FREE_GPU_VALIDATED` is on and the default uses "search".
- Scales land in the 128x4 swizzled layout (FORMATS.md). The grid covers ceil128(M) rows and
  ceil64(K) columns: rows >= M and blocks >= K/16 load zeros, so their scale is 0, which is the
  oracle's padding byte for NVFP4. Bytes past ceil128(M) rows are never touched.

Constraints: K % 16 == 0 (static), M < 2^31 (live, never a compile key), x/packed/scales
contiguous and 16-byte aligned (the compiled kernel assumes it; api.py checks it).
Bytes moved: 2*M*K read + M*K/2 written + ceil128(M)*ceil4(K/16) scale bytes written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import triton
import triton.language as tl

from ..._lib import triton_pdl as _triton_pdl
from ..._lib import triton_quant as _triton_helpers
from ..._lib.compile import kernel
from ..._lib.triton_build import PerDevice, aot_compile, aot_options, device_loader, launch_on_stream
from ..._lib.triton_pdl import gdc_enter
from ..._lib.triton_quant import block_amax, block_amax_maxnum, grid_axes, grid_origin
from . import _encodes, _kernel_pairs, _pairs, _steps
from ._encodes import _e2m1_codes_div, _e2m1_codes_mul, _e2m1_codes_search, _e4m3_rn, _store_scales
from ._kernel_pairs import persistent_range, program_pairs
from ._occupancy import resident_programs
from ._steps import as_f32, e2m1_codes_steps, e2m1_steps_top, pack_steps_pairs, pack_steps_top

OP = "quantization.nvfp4"
BLOCK = 16  # elements per E4M3 scale
DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
UNVALIDATED_ENV = "B12X_QUANT_UNVALIDATED_CANDIDATES"


# -------------------------------------------------------------------------------------------------
# Config and heuristic
# -------------------------------------------------------------------------------------------------
ENCODES = ("div", "mul", "search", "steps", "pairs")
LAYOUTS = ("rows", "halves")


@dataclass(frozen=True)
class NvFp4Config:
    """One program quantizes block_m rows x block_k columns with num_warps warps.

    encode: "div" = the oracle's sequence (`div_rn` per element, midpoints on y; per-element NaN
    select in amax); "mul" = division-free and bit-equal (|x * gs| against midpoint * sf, proof at
    `_e2m1_codes_mul`; one NaN select per block in amax); "search" = "mul" with a 3-step binary
    search over the 7 thresholds instead of 7 selects (`_e2m1_codes_search`); "steps" = the same
    count as a sum of saturating FMAs, no compare or select per element (`_steps.py`); "pairs" = the
    same count decided on raw bf16 pairs against thresholds pulled back into the input's domain, two
    values per instruction (`_pairs.py`, program in `_kernel_pairs.py`; layout "halves" only; on
    fp16 input it runs "steps").
    skip_dead: programs whose rows are all >= live M (the zero padding of the last 128-row scale
    atom) store their zero scales and skip the load and the math (tiny M: 7 of 8 programs).
    scale_words: scales stored as 4-byte words (4 scale columns of a row are 4 consecutive bytes in
    the 128x4 layout) instead of bytes; needs block_k >= 64.
    k_iters: each program quantizes k_iters column tiles one after the other (a loop): the per-thread
    setup is paid once for them (the grid has ceil(tiles / k_iters) programs along K).
    prefetch ("pairs" with k_iters > 1 only): each column tile's loads are issued before the previous
    tile's math (`_kernel_pairs.py`).
    unroll, persistent, stream ("pairs"; `_kernel_pairs.py` docstring): the column loop unrolled; a
    grid of `persistent` programs per SM (capped to what is resident, `_occupancy.py`) looping over
    tile ranges; streaming cache hints. max_regs: Triton's maxnreg (0: the compiler's choice). lut
    ("pairs", with unroll or persistent): the block thresholds from a per-lane table (`_pairs.py`).
    preload ("pairs", unroll, k_iters 2 or 4, no prefetch): all the group's loads before its math.
    layout: "rows" = the tile loaded as [block_m, block_k] (Triton splits each 16-element block over
    two threads); "halves" = loaded as the two 8-element halves of every block, so one thread owns
    whole blocks and stores their 16 codes as one 8-byte word (`_quantize_tile_halves`); needs a
    division-free encode.
    pdl: launched as a programmatic dependent (`_lib/triton_pdl.py`): every program waits for the
    kernel before it in the stream, then lets the next PDL kernel launch, before its first global
    access. Not a tuning choice: the plan sets it on every tile (`api.plan(..., pdl=True)`).
    k_major ("pairs" or its fp16 fallback, not persistent; session 31): a one-axis grid whose consecutive programs take
    consecutive column groups of a row block (the default grid's consecutive programs take consecutive
    row blocks of one column group), so the programs resident at once read contiguous rows rather than
    a column band of every row.
    """

    block_m: int = 16
    block_k: int = 256
    num_warps: int = 4
    encode: str = "div"
    skip_dead: bool = False
    scale_words: bool = False
    layout: str = "rows"
    k_iters: int = 1
    prefetch: bool = False
    unroll: bool = False
    persistent: int = 0
    stream: bool = False
    max_regs: int = 0
    lut: bool = False
    preload: bool = False
    pdl: bool = False
    k_major: bool = False


def can_implement(k: int, config: NvFp4Config) -> bool:
    """block_m divides 128 (programs tile the padded 128-row scale atoms exactly); both powers of two."""
    pow2 = lambda n: n > 0 and n & (n - 1) == 0
    return (
        k > 0
        and k % BLOCK == 0
        and pow2(config.block_m)
        and config.block_m <= 128
        and pow2(config.block_k)
        and config.block_k >= BLOCK
        and config.num_warps in (1, 2, 4, 8, 16)
        and config.encode in ENCODES
        and isinstance(config.skip_dead, bool)
        and isinstance(config.scale_words, bool)
        and (not config.scale_words or config.block_k >= 64)
        and config.layout in LAYOUTS
        and (config.layout == "rows" or config.encode != "div")
        and (config.layout == "halves" or config.encode != "pairs")
        and config.k_iters in (1, 2, 4, 8, 16)
        and isinstance(config.prefetch, bool)
        and (not config.prefetch or (config.encode == "pairs" and (config.k_iters > 1 or config.persistent > 0)))
        and isinstance(config.unroll, bool)
        and (not config.unroll or (config.encode == "pairs" and config.k_iters > 1))
        and type(config.persistent) is int
        and 0 <= config.persistent <= 32
        and (config.persistent == 0 or (config.encode == "pairs" and not config.skip_dead))
        and (config.persistent == 0 or config.k_iters == 1 or config.unroll)
        and isinstance(config.stream, bool)
        and (not config.stream or config.unroll or config.persistent > 0)
        and type(config.max_regs) is int
        and (config.max_regs == 0 or (24 <= config.max_regs <= 255 and config.max_regs % 8 == 0))
        and isinstance(config.lut, bool)
        and (not config.lut or config.unroll or config.persistent > 0)
        and isinstance(config.preload, bool)
        and (not config.preload or (config.unroll and config.k_iters in (2, 4) and not config.prefetch))
        and isinstance(config.pdl, bool)
        and isinstance(config.k_major, bool)
        and (not config.k_major or (config.encode == "pairs" and config.persistent == 0))
    )


def default_config(k: int) -> NvFp4Config:
    """The heuristic: 16 x 256 tiles, 4 warps, "search" encode, skip_dead, which the H200 sweep of
    2026-11-30 05:58 (docs/performance.md) put within 7% of the fastest config at every M in {1, 16,
    128, 4096, 16384} x K in {4096, 7168}. One config for every M: a plan's capacity says little about
    its live M, and small live M (decode) is what serving runs most.
    The "steps" candidate 8 x 256 x 4 / halves / k_iters 4 is faster at large M (H200 11:16-11:21:
    16384 x 7168 113.1-117.3 µs vs 151.8, 3.6x torch.compile) but slower at M = 1 (7.4 µs vs
    5.1-5.6: no dead-program skip, 4 column tiles per program), so it stays a candidate (autotune and
    sweeps see it) until a live-M dispatch can run both. Before the division-free encodes were
    GPU-validated the "div" tile (the oracle's own sequence) was the default."""
    if DIVISION_FREE_GPU_VALIDATED:
        return NvFp4Config(16, _block_k_cap(k, 256), 4, encode="search", skip_dead=True)
    return NvFp4Config(block_m=16, block_k=_block_k_cap(k, 256), num_warps=4)


LARGE_M_STEPS = (8, 256, 4, "steps", False, False, "halves", 4)  # the large-M winner (docstring above)

# The candidate tables (GPU-validated flags, the "div" / division-free / "steps" / "pairs" tiles):
# `_candidates.py`.
from ._candidates import (  # noqa: E402
    _UNVALIDATED,
    _UNVALIDATED_ORDER,
    _UNVALIDATED_PAIRS,
    _UNVALIDATED_PAIRS_S7,
    _UNVALIDATED_PRELOAD,
    _UNVALIDATED_STEPS,
    _VALIDATED,
    DIVISION_FREE_GPU_VALIDATED,
    LARGE_M_PAIRS,  # noqa: F401 (_dispatch reads it here)
    ORDER_GPU_VALIDATED,
    PAIRS_GPU_VALIDATED,
    PRELOAD_GPU_VALIDATED,
    S7_PAIRS_GPU_VALIDATED,
    STEPS_GPU_VALIDATED,
)


def unvalidated_enabled() -> bool:
    """B12X_QUANT_UNVALIDATED_CANDIDATES=1: offer the configs that have not passed the GPU tier."""
    return os.environ.get(UNVALIDATED_ENV) == "1"


def candidate_configs(k: int, *, unvalidated: bool | None = None) -> tuple[NvFp4Config, ...]:
    """The default first, then every valid GPU-validated candidate, then (only when `unvalidated`,
    default: `unvalidated_enabled()`, or once DIVISION_FREE_GPU_VALIDATED) the division-free ones,
    then (when `unvalidated` or once STEPS_GPU_VALIDATED) the "steps" ones, then (when `unvalidated`
    or once PAIRS_GPU_VALIDATED) the "pairs" ones;
    tiles wider than the padded row are capped. PreparationSession autotune and
    bench_quantization sweep what this returns."""
    if unvalidated is None:
        unvalidated = unvalidated_enabled()
    out = [default_config(k)]
    offered = _VALIDATED + (_UNVALIDATED if unvalidated or DIVISION_FREE_GPU_VALIDATED else ())
    steps = _UNVALIDATED_STEPS if unvalidated or STEPS_GPU_VALIDATED else ()
    pairs = _UNVALIDATED_PAIRS if unvalidated or PAIRS_GPU_VALIDATED else ()
    pairs += _UNVALIDATED_PAIRS_S7 if unvalidated or S7_PAIRS_GPU_VALIDATED else ()
    pairs += _UNVALIDATED_PRELOAD if unvalidated or PRELOAD_GPU_VALIDATED else ()
    pairs += _UNVALIDATED_ORDER if unvalidated or ORDER_GPU_VALIDATED else ()
    for tup in offered + steps + pairs:
        cfg = capped_config(k, tup)
        if can_implement(k, cfg) and cfg not in out:
            out.append(cfg)
    return tuple(out)


def capped_config(k: int, fields) -> NvFp4Config:
    """The config of a candidate tuple (NvFp4Config's fields in order) or of a config, its block_k capped to
    the padded row."""
    if isinstance(fields, NvFp4Config):
        return replace(fields, block_k=_block_k_cap(k, fields.block_k))
    bm, bk, nw, *rest = fields
    return NvFp4Config(bm, _block_k_cap(k, bk), nw, *rest)


def _block_k_cap(k: int, block_k: int) -> int:
    return min(block_k, triton.next_power_of_2(_round_up(k, 64)))


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def grid(m: int, k: int, config: NvFp4Config, resident: int | None = None) -> tuple[int, int, int]:
    """Programs over ceil128(m) rows (scale padding included) x ceil64(k) columns; with
    `config.persistent`, min(units, resident) programs along one axis, each looping over its range of
    units (tiles, or groups of k_iters tiles); `resident`: the programs the device holds at once
    (`NvFp4Launcher._resident`; default `config.persistent`, one SM's worth)."""
    rows = _round_up(m, 128) // config.block_m
    groups = triton.cdiv(triton.cdiv(_round_up(k, 64), config.block_k), config.k_iters)
    if config.persistent:  # units: tiles (k_iters 1) or groups of k_iters tiles of one row block
        tiles = rows * groups
        if tiles >= 2**31:
            raise ValueError(f"{OP}: m={m} x k={k} is {tiles} tiles of {config}; a persistent grid needs < 2^31")
        return (min(tiles, config.persistent if resident is None else resident), 1, 1)
    return grid_axes(rows, groups, config.k_major, f"{OP}: m={m} x k={k} with {config}")


def constexprs(k: int, config: NvFp4Config, *, asm: bool = True) -> tuple:
    """The kernel's constexpr arguments, in signature order (K first). asm=False (the interpreter,
    which cannot run inline PTX) makes the "steps" encode use its plain-Triton mirror and drops PDL
    (the interpreter has no griddepcontrol; the math is the same)."""
    cfg = config
    return (
        k,
        cfg.block_m,
        cfg.block_k,
        ENCODES.index(cfg.encode),
        cfg.skip_dead,
        cfg.scale_words,
        cfg.layout == "halves",
        cfg.k_iters,
        cfg.prefetch,
        asm,
        cfg.unroll,
        cfg.persistent,
        cfg.stream,
        cfg.lut,
        cfg.preload,
        cfg.k_major,
        int(cfg.pdl and asm),
    )


# -------------------------------------------------------------------------------------------------
# Kernel
# -------------------------------------------------------------------------------------------------
@triton.jit
def _quantize_tile_rows(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs,
    rows64,
    row_ok,
    pid_k,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ENCODE: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    ASM: tl.constexpr,
):
    NB: tl.constexpr = K // 16
    TILE_NB: tl.constexpr = BLOCK_K // 16
    # Phase 1: load the tile (rows >= m and columns >= K read as zeros).
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    # No column past K in any program (the grid spans ceil64(K) columns): the masks are per row only.
    EVEN_K: tl.constexpr = (K % BLOCK_K == 0) and (K % 64 == 0)
    if EVEN_K:
        mask = row_ok[:, None] & (cols >= 0)[None, :]
    else:
        mask = row_ok[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows64[:, None] * K + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    xb = tl.reshape(x, (BLOCK_M, TILE_NB, 16))

    # Phase 2: per-16 amax (NaN ignored) -> E4M3 scale.
    if ENCODE != 0:
        amax = block_amax_maxnum(xb)  # [BLOCK_M, TILE_NB]
    else:
        amax = block_amax(xb)
    t = tl.minimum(tl.math.div_rn(gs * amax, 6.0), 448.0)  # never NaN: amax is not, gs is finite
    if ENCODE != 0:
        sbits, sf = _e4m3_rn(t)  # no fp8 instruction: see `_e4m3_rn`
    else:
        sf8 = t.to(tl.float8e4nv)  # the GPU-validated default keeps its code
        sf = sf8.to(tl.float32)
        sbits = sf8.to(tl.uint8, bitcast=True).to(tl.int32)

    # Phase 3: E2M1 codes (ties to the even code, NaN -> +0, +-Inf saturate to +-6).
    if ENCODE == 1:
        code = _e2m1_codes_mul(xb, gs, sf)
    elif ENCODE == 2:
        code = _e2m1_codes_search(xb, gs, sf)
    elif ENCODE == 3:
        code = e2m1_codes_steps(xb, gs, sf, ASM)
    else:
        code = _e2m1_codes_div(xb, gs, sf)

    # Phase 4: pack pairs (element 2i low nibble) and store the live rows.
    lo, hi = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_K // 2, 2)))
    packed = (lo | (hi << 4)).to(tl.uint8)
    pcols = pid_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    tl.store(
        packed_ptr + rows64[:, None] * (K // 2) + pcols[None, :],
        packed,
        mask=row_ok[:, None] & ((pcols >= 0) if EVEN_K else (pcols < K // 2))[None, :],
    )

    # Phase 5: scales at their swizzled offsets, padding rows and columns included (they hold 0).
    _store_scales(scales_ptr, rows64, pid_k, sbits, NB, TILE_NB, SCALE_WORDS)


@triton.jit
def _quantize_tile_halves(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs,
    rows64,
    row_ok,
    pid_k,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ENCODE: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    ASM: tl.constexpr,
):
    """`_quantize_tile_rows` (same bits) with each thread owning whole 16-element blocks.

    The tile is loaded as two [rows, blocks, 8] halves (elements 0-7 and 8-15 of every block; one
    16-byte load each, the second one hits the sectors the first one brought into L1): Triton gives
    both halves the same layout, so the amax, the scale and the thresholds of a block stay in one
    thread (no shuffles, no duplicated per-block math), and the 16 codes of a block leave as one
    8-byte store (nibble i of the little-endian word is element i), coalesced across the warp.
    """
    NB: tl.constexpr = K // 16
    TILE_NB: tl.constexpr = BLOCK_K // 16
    EVEN_K: tl.constexpr = (K % BLOCK_K == 0) and (K % 64 == 0)
    blk = pid_k * TILE_NB + tl.arange(0, TILE_NB)  # global block (scale column) index
    if EVEN_K:
        bmask = row_ok[:, None] & (blk >= 0)[None, :]
    else:
        bmask = row_ok[:, None] & (blk < NB)[None, :]  # K % 16 == 0: a block is all in or all out
    e = tl.arange(0, 8)
    WORDS: tl.constexpr = ENCODE == 3 and x_ptr.dtype.element_ty == tl.bfloat16
    if WORDS:
        # "steps" on bf16: each half loaded as 4 int32 words (the same 16 bytes) and unpacked by hand,
        # lo = w << 16 (element 2j), hi = w & 0xFFFF0000 (element 2j + 1): one instruction a value.
        j = tl.arange(0, 4)
        wptrs = x_ptr.to(tl.pointer_type(tl.int32)) + rows64[:, None, None] * (K // 2) + (blk * 8)[None, :, None]
        wptrs += j[None, None, :]
        # |hi| = w & 0x7FFF0000 (one LOP3; w's bit 31 is its sign); lo = w << 16, its |.| left to FMUL/FMNMX.
        ua = tl.load(wptrs, mask=bmask[:, :, None], other=0)
        ub = tl.load(wptrs + 4, mask=bmask[:, :, None], other=0)
        la, lb = as_f32(ua << 16, ASM), as_f32(ub << 16, ASM)
        ma, mb = (ua & 0x7FFF0000).to(tl.float32, bitcast=True), (ub & 0x7FFF0000).to(tl.float32, bitcast=True)
        amax = tl.maximum(tl.max(tl.abs(la), axis=2), tl.max(ma, axis=2))
        amax = tl.maximum(amax, tl.maximum(tl.max(tl.abs(lb), axis=2), tl.max(mb, axis=2)))
    else:
        ptrs = x_ptr + rows64[:, None, None] * K + (blk * 16)[None, :, None] + e[None, None, :]
        xa = tl.load(ptrs, mask=bmask[:, :, None], other=0.0).to(tl.float32)
        xb = tl.load(ptrs + 8, mask=bmask[:, :, None], other=0.0).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(xa), axis=2), tl.max(tl.abs(xb), axis=2))

    # amax: NaN-ignoring max (`block_amax_maxnum`'s rule) of the two halves.
    amax = tl.where(amax == amax, amax, 0.0)
    t = tl.minimum(tl.math.div_rn(gs * amax, 6.0), 448.0)
    sbits, sf = _e4m3_rn(t)  # no fp8 instruction: see `_e4m3_rn`

    if WORDS:
        lo_a = e2m1_steps_top(tl.abs(la), la.to(tl.int32, bitcast=True), gs, sf, ASM)
        lo_b = e2m1_steps_top(tl.abs(lb), lb.to(tl.int32, bitcast=True), gs, sf, ASM)
        wa = pack_steps_pairs(lo_a, e2m1_steps_top(ma, ua, gs, sf, ASM))
        wb = pack_steps_pairs(lo_b, e2m1_steps_top(mb, ub, gs, sf, ASM))
    elif ENCODE == 3:  # codes in the top nibble: shifted down into place (`_steps.py`)
        wa = pack_steps_top(e2m1_steps_top(tl.abs(xa), xa.to(tl.int32, bitcast=True), gs, sf, ASM))
        wb = pack_steps_top(e2m1_steps_top(tl.abs(xb), xb.to(tl.int32, bitcast=True), gs, sf, ASM))
    else:
        if ENCODE == 2:
            ca = _e2m1_codes_search(xa, gs, sf)
            cb = _e2m1_codes_search(xb, gs, sf)
        else:
            ca = _e2m1_codes_mul(xa, gs, sf)
            cb = _e2m1_codes_mul(xb, gs, sf)
        shifts = e * 4
        wa = tl.sum(ca << shifts[None, None, :], axis=2).to(tl.uint32, bitcast=True)  # disjoint nibbles
        wb = tl.sum(cb << shifts[None, None, :], axis=2).to(tl.uint32, bitcast=True)
    words = wa.to(tl.uint64) | (wb.to(tl.uint64) << 32)
    offs = rows64[:, None] * NB + blk[None, :]  # 8-byte units: a row is K/2 = 8 * NB bytes
    tl.store(packed_ptr.to(tl.pointer_type(tl.uint64)) + offs, words, mask=bmask)

    _store_scales(scales_ptr, rows64, pid_k, sbits, NB, TILE_NB, SCALE_WORDS)


@triton.jit
def _quantize_tile(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs,
    rows64,
    row_ok,
    pid_k,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ENCODE: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    HALVES: tl.constexpr,
    ASM: tl.constexpr,
):
    if HALVES:
        _quantize_tile_halves(
            x_ptr, packed_ptr, scales_ptr, gs, rows64, row_ok, pid_k, K, BLOCK_M, BLOCK_K, ENCODE, SCALE_WORDS, ASM
        )
    else:
        _quantize_tile_rows(
            x_ptr, packed_ptr, scales_ptr, gs, rows64, row_ok, pid_k, K, BLOCK_M, BLOCK_K, ENCODE, SCALE_WORDS, ASM
        )


@triton.jit
def _program_tile(
    x_ptr,
    packed_ptr,
    scales_ptr,
    gs_ptr,
    gs_value,
    gs_on_device,
    m,
    pid_m,
    pid_k,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ENCODE: tl.constexpr,
    SKIP_DEAD: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    HALVES: tl.constexpr,
    ASM: tl.constexpr,
):
    """One BLOCK_M x BLOCK_K tile: rows from pid_m, columns from pid_k."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < m
    rows64 = rows.to(tl.int64)
    if SKIP_DEAD:
        if pid_m * BLOCK_M >= m:  # padding rows only: their scales are 0, nothing else to write
            zeros = tl.zeros((BLOCK_M, BLOCK_K // 16), tl.int32)
            _store_scales(scales_ptr, rows64, pid_k, zeros, K // 16, BLOCK_K // 16, SCALE_WORDS)
        else:
            gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
            _quantize_tile(
                x_ptr, packed_ptr, scales_ptr, gs, rows64, row_ok, pid_k,
                K, BLOCK_M, BLOCK_K, ENCODE, SCALE_WORDS, HALVES, ASM,
            )  # fmt: skip
    else:
        gs = tl.where(gs_on_device != 0, tl.load(gs_ptr), gs_value)
        _quantize_tile(
            x_ptr, packed_ptr, scales_ptr, gs, rows64, row_ok, pid_k,
            K, BLOCK_M, BLOCK_K, ENCODE, SCALE_WORDS, HALVES, ASM,
        )  # fmt: skip


@triton.jit
def _program_tiles(
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
    ENCODE: tl.constexpr,
    SKIP_DEAD: tl.constexpr,
    SCALE_WORDS: tl.constexpr,
    HALVES: tl.constexpr,
    K_ITERS: tl.constexpr,
    ASM: tl.constexpr,
    K_MAJOR: tl.constexpr = False,
):
    """Every encode but "pairs" on bf16: K_ITERS column tiles of one row block, one after the other."""
    NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
    pid_m, pid_g = grid_origin((NK + K_ITERS - 1) // K_ITERS, K_MAJOR)
    if K_ITERS == 1:  # one tile: the GPU-validated configs' code, unchanged
        pid_k = pid_g
        _program_tile(
            x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m, pid_m, pid_k,
            K, BLOCK_M, BLOCK_K, ENCODE, SKIP_DEAD, SCALE_WORDS, HALVES, ASM,
        )  # fmt: skip
    else:
        # A loop, not unrolled: per-thread setup is paid once per K_ITERS tiles, registers stay those
        # of one tile. The last program's tiles past ceil64(K) are skipped.
        for it in range(K_ITERS):
            pid_k = pid_g * K_ITERS + it
            if (NK % K_ITERS == 0) or (pid_k < NK):
                _program_tile(
                    x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m, pid_m, pid_k,
                    K, BLOCK_M, BLOCK_K, ENCODE, SKIP_DEAD, SCALE_WORDS, HALVES, ASM,
                )  # fmt: skip


@triton.jit(do_not_specialize=["gs_ptr", "gs_value", "gs_on_device", "m"], do_not_specialize_on_alignment=["gs_ptr"])
def _nvfp4_quantize_kernel(
    x_ptr,  # [m, K] bf16/fp16, row-major, 16-byte aligned
    packed_ptr,  # [m, K/2] uint8 out: element 2i in the low nibble
    scales_ptr,  # uint8 out: E4M3 scales in the 128x4 swizzled layout, ceil128(m) rows
    gs_ptr,  # fp32 [1]: the global scale when gs_on_device != 0 (any valid fp32 address otherwise)
    gs_value,  # fp32: the global scale when gs_on_device == 0
    gs_on_device,  # int: which of the two holds the global scale
    m,  # live rows (runtime: a new m never compiles)
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ENCODE: tl.constexpr,  # ENCODES.index(NvFp4Config.encode)
    SKIP_DEAD: tl.constexpr,  # NvFp4Config.skip_dead
    SCALE_WORDS: tl.constexpr,  # NvFp4Config.scale_words
    HALVES: tl.constexpr,  # NvFp4Config.layout == "halves"
    K_ITERS: tl.constexpr,  # NvFp4Config.k_iters: column tiles per program, one after the other
    PREFETCH: tl.constexpr,  # NvFp4Config.prefetch ("pairs" only)
    ASM: tl.constexpr,  # inline PTX allowed (compiled); False under TRITON_INTERPRET ("steps" mirrors it)
    UNROLL: tl.constexpr,  # NvFp4Config.unroll ("pairs" only)
    PERSISTENT: tl.constexpr,  # NvFp4Config.persistent: > 0 = a persistent grid (`grid`)
    STREAM: tl.constexpr,  # NvFp4Config.stream ("pairs" only)
    LUT: tl.constexpr,  # NvFp4Config.lut ("pairs" only)
    PRELOAD: tl.constexpr,  # NvFp4Config.preload ("pairs" only)
    K_MAJOR: tl.constexpr,  # NvFp4Config.k_major ("pairs" only, a one-axis grid)
    PDL: tl.constexpr,  # NvFp4Config.pdl (0 under the interpreter)
):
    gdc_enter(PDL)  # before the first global access (the global scale, skip_dead's scale stores)
    PAIRS: tl.constexpr = ENCODE == 4 and x_ptr.dtype.element_ty == tl.bfloat16
    if PAIRS:
        program_pairs(
            x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m,
            K, BLOCK_M, BLOCK_K, SKIP_DEAD, SCALE_WORDS, K_ITERS, PREFETCH, ASM, UNROLL, PERSISTENT, STREAM, LUT, PRELOAD,
            K_MAJOR,
        )  # fmt: skip
    else:
        ENC: tl.constexpr = ENCODE - (ENCODE == 4)  # "pairs" on fp16 input runs "steps" (same bits)
        if PERSISTENT > 0:  # fp16 input under a persistent grid: its tiles one by one (same bits)
            NK: tl.constexpr = ((K + 63) // 64 * 64 + BLOCK_K - 1) // BLOCK_K
            start, end = persistent_range(m, NK, BLOCK_M)
            for t in range(start, end):
                pid_m = t // NK
                _program_tile(
                    x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m, pid_m, t - pid_m * NK,
                    K, BLOCK_M, BLOCK_K, ENC, SKIP_DEAD, SCALE_WORDS, HALVES, ASM,
                )  # fmt: skip
        else:
            _program_tiles(
                x_ptr, packed_ptr, scales_ptr, gs_ptr, gs_value, gs_on_device, m,
                K, BLOCK_M, BLOCK_K, ENC, SKIP_DEAD, SCALE_WORDS, HALVES, K_ITERS, ASM, K_MAJOR,
            )  # fmt: skip


# -------------------------------------------------------------------------------------------------
# Launcher and compile function
# -------------------------------------------------------------------------------------------------
class NvFp4Launcher:
    """`launcher(x, packed, scales, gs_ptr, gs_value, gs_on_device, m)`: one launch on the current
    stream of x's device. Arguments are trusted (api.py validated them); m == 0 launches nothing.

    `load(device_index)` gives an object indexable by grid (a Triton CompiledKernel loaded on that
    device, or the JIT function under TRITON_INTERPRET); `compiled` says which.
    """

    def __init__(
        self, k: int, config: NvFp4Config, load, *, compiled: bool, key: str = "", sms: int | None = None
    ) -> None:
        self.k, self.config, self.compiled, self.key = k, config, compiled, key
        self._modules = PerDevice(OP, key, load)
        self._sms = sms  # persistent grids: the SM count (None: the device's, read once per device)
        self._sms_by_device: dict = {}  # device index -> resident programs of a persistent grid

    def _resident(self, fn, index) -> int:
        """Persistent grids: the programs the device holds at once (`_occupancy.resident_programs`)."""
        n = self._sms_by_device.get(index)
        if n is None:
            import torch

            props = torch.cuda.get_device_properties(index)
            n = self._sms_by_device[index] = resident_programs(self.config, fn, props, self._sms)
        return n

    def __call__(self, x, packed, scales, gs_ptr, gs_value, gs_on_device, m) -> None:
        if m == 0:
            return
        cfg = self.config
        args = (x, packed, scales, gs_ptr, gs_value, gs_on_device, m, *constexprs(self.k, cfg, asm=self.compiled))
        if not self.compiled:
            g = grid(m, self.k, cfg, cfg.persistent * (self._sms or 1))
            _nvfp4_quantize_kernel[g](*args, num_warps=cfg.num_warps)
            return
        index = x.device.index
        fn = self._modules.get(index)
        g = grid(m, self.k, cfg, self._resident(fn, index) if cfg.persistent else None)
        launch_on_stream(fn, g, index, *args)


def _source(dtype: str, k: int, config: NvFp4Config):
    from triton.compiler import ASTSource

    aligned = [["tt.divisibility", 16]]
    signature = {
        "x_ptr": f"*{DTYPES[dtype]}",
        "packed_ptr": "*u8",
        "scales_ptr": "*u8",
        "gs_ptr": "*fp32",
        "gs_value": "fp32",
        "gs_on_device": "i32",
        "m": "i32",
        "K": "constexpr",
        "BLOCK_M": "constexpr",
        "BLOCK_K": "constexpr",
        "ENCODE": "constexpr",
        "SKIP_DEAD": "constexpr",
        "SCALE_WORDS": "constexpr",
        "HALVES": "constexpr",
        "K_ITERS": "constexpr",
        "PREFETCH": "constexpr",
        "ASM": "constexpr",
        "UNROLL": "constexpr",
        "PERSISTENT": "constexpr",
        "STREAM": "constexpr",
        "LUT": "constexpr",
        "PRELOAD": "constexpr",
        "K_MAJOR": "constexpr",
        "PDL": "constexpr",
    }
    names = [n for n, t in signature.items() if t == "constexpr"]
    attrs = {(0,): aligned, (1,): aligned, (2,): aligned}
    return ASTSource(_nvfp4_quantize_kernel, signature, dict(zip(names, constexprs(k, config))), attrs)


def compile_for_target(dtype: str, k: int, config: NvFp4Config, arch: str):
    """The Triton CompiledKernel for `arch`, built without a GPU (Triton's disk cache keeps it)."""
    if dtype not in DTYPES:
        raise ValueError(f"{OP}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    options = aot_options(config.num_warps, pdl=config.pdl, maxnreg=config.max_regs)
    return aot_compile(_source(dtype, k, config), arch, options)


@kernel(
    OP,
    backend="triton",
    sources=(
        _triton_helpers.__name__,
        _triton_pdl.__name__,
        _encodes.__name__,
        _steps.__name__,
        _pairs.__name__,
        _kernel_pairs.__name__,
    ),
)
def compile_nvfp4(dtype: str, k: int, config: NvFp4Config, arch: str) -> NvFp4Launcher:
    """Compile the quantizer for (dtype, K, config) on `arch` and return its launcher."""
    load = device_loader(lambda: compile_for_target(dtype, k, config, arch))
    return NvFp4Launcher(k, config, load, compiled=True, key=f"dtype={dtype} k={k} {config} ({arch})")


def interpreted_launcher(k: int, config: NvFp4Config | None = None, *, sms: int = 3) -> NvFp4Launcher:
    """A launcher through the JIT function, for TRITON_INTERPRET=1 runs on CPU tensors (tests); a
    persistent config's grid counts `sms` SMs (3: programs get uneven tile ranges)."""
    config = config or default_config(k)
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    return NvFp4Launcher(k, config, None, compiled=False, sms=sms)
