"""moe.fused_moe routing and gather kernels (Triton): topk_ids -> expert-sorted rows -> FC1 operand.

Per call with live T tokens, k routes per token, R = T * k routes (route r = (t, j), r = t * k + j),
E experts; a route is VALID when 0 <= topk_ids[t, j] < E (others are ignored: no row, nothing added).
Outputs, in the plan's workspace (sized by max_tokens, never by T):

    expert_start  int32 [E + 1]       exclusive prefix sum of valid routes per expert; [E] = valid routes
    sorted_token  int32 [R_cap]       token of sorted row p (p < expert_start[E]; later rows untouched)
    sorted_expert int32 [R_cap]       expert of sorted row p
    route_row     int32 [max_tokens * k]   sorted row of route r, -1 when ignored (r < R)
    A1, SFA1      the FC1 operand, row p = a[sorted_token[p]] (times the route weight when it is
                  applied on the input): bf16 [R_cap, H] | NVFP4 packed uint8 [R_cap, H/2] + E4M3
                  scales (128x4 swizzled over R_cap rows, global scale a1_gscale[expert]) | MXFP8 e4m3
                  bytes [R_cap, H] + UE8M0 scales (swizzled) | "nvfp4_deq": the same NVFP4
                  quantization stored dequantized without the global scale, bf16 [R_cap, H] of
                  e2m1(q) * e4m3(sf) (exact in bf16; for the grouped kernels' bf16-A path)
    alpha1, alpha2 fp32 [E]           the GEMMs' activation dequant factor: 1 / a*_gscale (nvfp4 and
                                      nvfp4_deq), else 1
    active        int32 [E]           compact_grid only: the experts with rows, ascending, then E up to
                                      [E - 1] (the expert GEMMs' grid list; otherwise 0..E-1, constant)

Rows of one expert are ordered by route index (any order is allowed; this one is deterministic).

Two ways to the sorted row p of a valid route r with expert e:
- micro (R <= micro_max_routes; one launch does routing AND gather): every program recounts
  p = #{valid r' : e' < e} + #{r' < r : e' == e} over all R routes ([BLOCK_R, CHUNK] compares per
  step; R^2 / BLOCK_R compares per H chunk, ~64k at T = 64, k = 8), and one extra program counts
  the valid routes per expert (`tl.histogram`, R / CHUNK dependent steps) and writes expert_start,
  the alphas and `active` from the counts. No atomics, nothing to zero first, no host sync. (Until
  session 19 several extra programs counted with [E_BLOCK, 64] compare tiles: E / E_BLOCK x R / 64
  dependent steps, ~16 at E = 128 T = 64, which made the launch 16.8 µs there against 6.0 at T = 16.)
- dynamic (large R; 4 launches, a counting sort): `hist` counts each block of routes per expert,
  `scan` turns the counts into per-block offsets (in place) and per-expert totals, `start` writes
  expert_start and the alphas, then the gather kernel (DYNAMIC) takes
  p = expert_start[e] + offset[block, e] + #{r' < r in the block : e' == e}.

Quantization reproduces the `_lib.quant` oracles bit for bit (quantize_nvfp4 with the route's
expert's gs, quantize_mxfp8), on x = fp32(a[t]) (* w[t, j] in fp32 when applied on the input): every
division is `div_rn` (Triton's `/` is approximate), fp fusion is off (no multiply folded into an
FMA); NVFP4 divides only for the block scale and encodes the codes without a division (the
standalone quantizer's `_e4m3_rn` + its "pairs" rule on the bf16 words when x = a[tok], else
`_e2m1_codes_search`: the same bits). Each program gathers its
block_h columns in steps of `gather_step_h` (about 32 values a thread). Scale padding columns are
never written (PAD fills them once at prepare time).

Bytes: the gather reads T * H * 2 bytes of `a` once per route (k times; L2 hits after the first) and
writes R rows of the operand; routing reads R ids (micro: R * R / BLOCK_R id loads from L2).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from ..._lib import triton_pdl as _triton_pdl
from ..._lib import triton_quant as _triton_helpers
from ..._lib.compile import kernel
from ..._lib.triton_build import PerDevice, aot_compile, aot_options, device_loader, launch_on_stream
from ..._lib.triton_pdl import gdc_enter
from ..._lib.triton_quant import block_amax, swizzled_scale_offsets
from ...quantization.nvfp4 import _encodes as _nvfp4_encodes
from ...quantization.nvfp4 import _kernel_pairs as _nvfp4_kernel_pairs
from ...quantization.nvfp4 import _pairs as _nvfp4_pairs
from ...quantization.nvfp4._encodes import _e2m1_codes_search, _e4m3_rn
from ...quantization.nvfp4._kernel_pairs import _encode_store_pairs, _load_pair_words
from ...quantization.nvfp4._pairs import pairs_prologue

OP = "moe.fused_moe"
FMT_BF16, FMT_NVFP4, FMT_MXFP8, FMT_NVFP4_DEQ = 0, 1, 2, 3
OPERAND_FORMATS = {"bfloat16": FMT_BF16, "nvfp4": FMT_NVFP4, "mxfp8": FMT_MXFP8, "nvfp4_deq": FMT_NVFP4_DEQ}
GLOBAL_SCALED = ("nvfp4", "nvfp4_deq")  # formats quantized with the expert's gs (alpha = 1 / gs)
# Workspace buffers (values, scales) each operand format is written to ("dummy": no scales).
BUFFERS = {
    1: {"nvfp4_deq": ("a1_deq", "dummy")},
    2: {"nvfp4_deq": ("a2_deq", "dummy")},
}
NVFP4_ENCODES = ("pairs", "search")  # RoutingConfig.nvfp4_encode
NVFP4_DEQ_ENCODES = ("divide", "search")  # RoutingConfig / CombineConfig .nvfp4_deq_encode
SF_BLOCK = {"nvfp4": 16, "mxfp8": 32, "nvfp4_deq": 16}
SCALE_PAD = {"nvfp4": 0, "mxfp8": 127}  # FORMATS.md: NVFP4 pads with 0, MX with 127 (scale 1.0)
IDS_DTYPES = {"int32": "i32", "int64": "i64"}
# Workspace views are 1 KiB aligned; `a` is checked 16-byte aligned by bind.
ALIGNED_GATHER = ("a_ptr", "start_ptr", "sorted_token_ptr", "sorted_expert_ptr", "route_row_ptr", "out_ptr", "sf_ptr")


# -------------------------------------------------------------------------------------------------
# Config and heuristic
# -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoutingConfig:
    """Tiles of the routing/gather kernels. block_h must divide H (and be a multiple of the operand's
    scale block); micro_max_routes: the largest live R the one-launch micro path takes; chunk: routes
    a step of the micro path's recount and histogram takes; e_block: experts a step of the dynamic
    path's hist / scan kernels takes."""

    block_r: int = 16
    block_h: int = 512
    chunk: int = 256
    e_block: int = 64
    dyn_block_r: int = 64
    scan_b: int = 32
    micro_max_routes: int = 1024
    num_warps: int = 4
    # Values (rows x columns) one step of the gather covers: the program's block_h columns go in
    # steps of `gather_step_h` columns (at least one scale block), ~32 fp32 values a thread of 4 warps
    # at the dynamic path's 64 rows instead of 256. H200 2026-12-01 (session 14, bench_moe --steps,
    # T = 4096): with the whole 64 x 512 tile at once the nvfp4 route + gather took 773 / 1186 / 1278
    # µs at E = 128 / 256 / 512, w4a16's bf16 one 72 / 122 / 164.
    gather_tile: int = 4096
    # The NVFP4 operand's E2M1 encode when the route weight is not applied on the input (x = a[tok],
    # bf16): "pairs" (the standalone quantizer's, decided on the raw bf16 pairs, two values an
    # instruction; ~8.5 instructions a value) or "search" (fp32 binary search, ~15). The same bits.
    nvfp4_encode: str = "pairs"
    # The "nvfp4_deq" operand's encode (dequant buckets, `_nvfp4_deq_tile`): "divide" (y = x gs / sf by
    # correctly rounded divisions, then rounded to the E2M1 grid) or "search" (the packed operand's
    # division-free `_nvfp4_codes`, the codes then decoded). The same bits (the interpreter tier checks
    # both against the codec, the H200 tier the layers bit for bit). The heuristic (`default_config`)
    # takes "search": H200 2026-12-02 (session 19, bench_moe --decode-dequant [--deq-encode search],
    # nvfp4, µs per layer, divide -> search, E = 128 / 256 / 512): T = 1 31.5 -> 26.2, 70.5 -> 65.0,
    # 53.8 -> 51.7; T = 4 48.1 -> 46.8, 184.2 -> 182.4, 133.2 -> 130.7; T = 16 .. 256 within 1%.
    nvfp4_deq_encode: str = "divide"
    # Write `active` (the hit experts) so the expert GEMMs launch min(E, T * k) rows of CTAs instead
    # of E. The heuristic (`default_config`) turns it on: H200 2026-11-30 06:41 (docs/moe.md), E = 128,
    # k = 8, w4a16: T = 1 55.6 -> 30.9 us, T = 4 86.7 -> 66.4, T = 16 195.8 -> 192.5 (nvfp4 T = 16
    # 181 -> 186, within its spread of routings); passed the gpu tier (test_compact_grid, graph replay).
    compact_grid: bool = False
    # The routing/gather kernels as programmatic dependents (set with the plan's other launches by
    # `api.with_pdl`; the heuristic's `api.PDL` is "wait"): compiled with `launch_pdl`, they enter
    # through `gdc_enter` (wait for the kernel before, then release the next), so the expert GEMMs'
    # CTAs get resident while the gather still runs. Same bits.
    pdl: bool = False


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def largest_pow2_divisor(n: int, cap: int) -> int:
    d = 1
    while d * 2 <= cap and n % (d * 2) == 0:
        d *= 2
    return d


def default_config(hidden: int) -> RoutingConfig:
    # Not measured yet (bench_moe.py times the whole layer): 16 routes x 512 columns keeps 16 KiB of
    # bf16 input per program; the micro path's recount costs R / 256 compare steps per program.
    # compact_grid and nvfp4_deq_encode: see their fields.
    return RoutingConfig(block_h=largest_pow2_divisor(hidden, 512), compact_grid=True, nvfp4_deq_encode="search")


def can_implement(hidden: int, a_fmt: str, config: RoutingConfig) -> bool:
    sf = SF_BLOCK.get(a_fmt, 16)
    return (
        a_fmt in OPERAND_FORMATS
        and all(_pow2(v) for v in (config.block_r, config.block_h, config.chunk, config.e_block))
        and all(_pow2(v) for v in (config.dyn_block_r, config.scan_b))
        and config.block_h >= sf
        and hidden % config.block_h == 0
        and config.micro_max_routes >= 1
        and config.num_warps in (1, 2, 4, 8, 16)
        and isinstance(config.compact_grid, bool)
        and _pow2(config.gather_tile)
        and config.nvfp4_encode in NVFP4_ENCODES
        and config.nvfp4_deq_encode in NVFP4_DEQ_ENCODES
        and isinstance(config.pdl, bool)
    )


def uses_pairs(a_fmt: str, on_input: bool, config: RoutingConfig) -> bool:
    """Whether the gather encodes NVFP4 with the "pairs" rule (bf16 input: the route weight not on it)."""
    return a_fmt == "nvfp4" and not on_input and config.nvfp4_encode == "pairs"


def gather_step_h(a_fmt: str, block_r: int, config: RoutingConfig) -> int:
    """Columns one gather step of `block_r` rows covers: gather_tile / block_r, at least one scale
    block of the operand format (16 columns for bf16) and at most block_h (a power of two dividing it)."""
    return min(config.block_h, max(SF_BLOCK.get(a_fmt, 16), config.gather_tile // block_r))


# -------------------------------------------------------------------------------------------------
# Device helpers
# -------------------------------------------------------------------------------------------------
@triton.jit
def _load_routes(ids_ptr, r, R, ids_st, ids_sj, K: tl.constexpr, E: tl.constexpr):
    """(expert int32, valid) of flat routes r; ignored and out-of-range routes get expert E."""
    ok = r < R
    t = r // K
    j = r - t * K
    e = tl.load(ids_ptr + t.to(tl.int64) * ids_st + j * ids_sj, mask=ok, other=-1)
    valid = ok & (e >= 0) & (e < E)
    return tl.where(valid, e, E).to(tl.int32), valid


@triton.jit
def _write_alphas(ec, e_ok, g1_ptr, g2_ptr, alpha1_ptr, alpha2_ptr, NVFP4: tl.constexpr):
    """alpha = 1 / gs per expert for NVFP4 activations (correctly rounded), else 1."""
    if NVFP4:
        one = tl.full(ec.shape, 1.0, tl.float32)
        g1 = tl.load(g1_ptr + ec, mask=e_ok, other=1.0)
        g2 = tl.load(g2_ptr + ec, mask=e_ok, other=1.0)
        tl.store(alpha1_ptr + ec, tl.math.div_rn(one, g1), mask=e_ok)
        tl.store(alpha2_ptr + ec, tl.math.div_rn(one, g2), mask=e_ok)
    else:
        tl.store(alpha1_ptr + ec, tl.full(ec.shape, 1.0, tl.float32), mask=e_ok)
        tl.store(alpha2_ptr + ec, tl.full(ec.shape, 1.0, tl.float32), mask=e_ok)


@triton.jit
def _write_active(count, ea, active_ptr, E: tl.constexpr):
    """active = the experts ea (< E) with count > 0, ascending, then E up to index E - 1."""
    hit = (count > 0) & (ea < E)
    hit_i = hit.to(tl.int32)
    rank = tl.cumsum(hit_i, axis=0) - hit_i
    n_active = tl.sum(hit_i, axis=0)
    tl.store(active_ptr + rank, ea, mask=hit)
    tl.store(active_ptr + ea, tl.full(ea.shape, E, tl.int32), mask=(ea >= n_active) & (ea < E))


@triton.jit
def _write_starts(count, ec, start_ptr, g1_ptr, g2_ptr, alpha1_ptr, alpha2_ptr, active_ptr, E: tl.constexpr,
                  NVFP4: tl.constexpr, COMPACT: tl.constexpr):  # fmt: skip
    """From count = valid routes of experts ec (a power-of-two range from 0 covering E, 0 beyond E):
    expert_start [E + 1] (exclusive prefix sum, [E] the total), the alphas, and (COMPACT) `active`."""
    tl.store(start_ptr + ec, tl.cumsum(count, axis=0) - count, mask=ec < E)
    tl.store(start_ptr + E, tl.sum(count, axis=0))
    _write_alphas(ec, ec < E, g1_ptr, g2_ptr, alpha1_ptr, alpha2_ptr, NVFP4)
    if COMPACT:
        _write_active(count, ec, active_ptr, E)


@triton.jit
def _nvfp4_scaled(x, gs, BR: tl.constexpr, BK: tl.constexpr):
    """quantize_nvfp4's first steps on x fp32 [BR, BK] with per-row global scale gs fp32 [BR] (the
    dequant bucket's operand, `_nvfp4_deq_tile`): y = x gs / sf [BR, BK // 16, 16] (the value the E2M1
    code rounds) and the E4M3 block scales sf [BR, BK // 16] as fp32."""
    xb = tl.reshape(x, (BR, BK // 16, 16))
    amax = block_amax(xb)
    t = tl.minimum(tl.math.div_rn(gs[:, None] * amax, 6.0), 448.0)
    sf = t.to(tl.float8e4nv).to(tl.float32)
    y = tl.math.div_rn(xb * gs[:, None, None], sf[:, :, None])
    return y, sf


@triton.jit
def _nvfp4_codes(x, gs, BR: tl.constexpr, BK: tl.constexpr):
    """NVFP4 of x fp32 [BR, BK] with per-row global scale gs fp32 [BR] (quantize_nvfp4): the E4M3
    scale bytes and values [BR, BK // 16] and the E2M1 codes [BR, BK // 16, 16] (bit 3 the sign, set
    only on a nonzero magnitude). The standalone quantizer's division-free encode, the same bits as the
    oracle's two `div_rn`s: the scale byte rounded on t's bits (`_e4m3_rn`: no fp8 instruction), the
    codes by a binary search over the thresholds m * sf (`_e2m1_codes_search`; the proofs are in their
    docstrings); NaN values and zero scales give code 0."""
    xb = tl.reshape(x, (BR, BK // 16, 16))
    t = tl.minimum(tl.math.div_rn(gs[:, None] * block_amax(xb), 6.0), 448.0)  # never NaN
    sbits, sf = _e4m3_rn(t)
    return sbits, sf, _e2m1_codes_search(xb, gs[:, None, None], sf)


@triton.jit
def _nvfp4_tile(x, gs, out_ptr, sf_ptr, rows64, row_ok, col0, KDIM: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr):
    """Quantize x fp32 [BR, BK] (columns col0.. of rows rows64) to NVFP4 with per-row global scale
    gs fp32 [BR] (`_nvfp4_codes`' steps, written out here: calling it reorders this kernel's address
    arithmetic in the GPU-validated SASS) and store packed codes [., KDIM/2] and swizzled E4M3 scales."""
    NB: tl.constexpr = KDIM // 16
    xb = tl.reshape(x, (BR, BK // 16, 16))
    t = tl.minimum(tl.math.div_rn(gs[:, None] * block_amax(xb), 6.0), 448.0)  # never NaN
    sbits, sf = _e4m3_rn(t)
    code = _e2m1_codes_search(xb, gs[:, None, None], sf)
    lo, hi = tl.split(tl.reshape(code, (BR, BK // 2, 2)))
    pcols = col0 // 2 + tl.arange(0, BK // 2)
    tl.store(
        out_ptr + rows64[:, None] * (KDIM // 2) + pcols[None, :], (lo | (hi << 4)).to(tl.uint8), mask=row_ok[:, None]
    )
    scols = col0 // 16 + tl.arange(0, BK // 16)
    offs = swizzled_scale_offsets(rows64, scols, NB)
    tl.store(sf_ptr + offs, sbits.to(tl.uint8), mask=row_ok[:, None])


@triton.jit
def _nvfp4_deq_tile(
    x, gs, out_ptr, rows64, row_ok, col0, KDIM: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr, SEARCH: tl.constexpr
):
    """Quantize x as `_nvfp4_tile` does and store bf16 [., KDIM] of e2m1(code) * sf: exact (a 2-bit
    times a 4-bit significand; |value| in [2^-10, 2688]), the global scale left to the GEMM's alpha.
    SEARCH (`RoutingConfig.nvfp4_deq_encode` "search"): `_nvfp4_codes`' codes decoded (magnitude m / 2
    below code 4, then 2, 3, 4, 6). Else ("divide") the E2M1 value is |y| rounded to the grid directly:
    the grid's step is 0.5 below 2, 1 in [2, 4) and 2 from 4, so fl(fl(|y| + c) - c) with c = 2^22,
    2^23, 2^24 rounds to it with the ties to the even code (the oracle's `>` / `>=` midpoint rule: 0.25
    -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), then min(., 6) saturates. Both:
    NaN y (code 0 there) and zero scales give +0, no negative zeros."""
    if SEARCH:
        _, sf, code = _nvfp4_codes(x, gs, BR, BK)
        m = code & 7
        half = 0.5 * m.to(tl.float32)
        mag = tl.where(m < 4, half, tl.where(m < 6, half * 2.0 - 2.0, half * 4.0 - 8.0))  # 2, 3 | 4, 6
        val = tl.where(code >= 8, 0.0 - mag, mag) * sf[:, :, None]  # the sign only on a nonzero magnitude
    else:
        y, sf = _nvfp4_scaled(x, gs, BR, BK)
        mag = tl.abs(y)
        c = tl.where(mag < 2.0, 4194304.0, tl.where(mag < 4.0, 8388608.0, 16777216.0))
        val = tl.minimum((mag + c) - c, 6.0)  # fp fusion is off: two correctly rounded adds
        val = tl.where((mag != mag) | (sf[:, :, None] == 0), 0.0, val)
        val = tl.where(y < 0, 0.0 - val, val) * sf[:, :, None]  # 0 - 0 = +0: no negative zeros
    cols = col0 + tl.arange(0, BK)
    tl.store(
        out_ptr + rows64[:, None] * KDIM + cols[None, :],
        tl.reshape(val, (BR, BK)).to(tl.bfloat16),
        mask=row_ok[:, None],
    )


@triton.jit
def _mxfp8_tile(x, out_ptr, sf_ptr, rows64, row_ok, col0, KDIM: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr):
    """Quantize x fp32 [BR, BK] to MXFP8 (quantize_mxfp8): e4m3 bytes [., KDIM] + swizzled UE8M0."""
    NB: tl.constexpr = KDIM // 32
    xb = tl.reshape(x, (BR, BK // 32, 32))
    amax = block_amax(xb)
    bits = tl.math.div_rn(amax, 448.0).to(tl.int32, bitcast=True)
    expo = (bits >> 23) & 0xFF
    byte = expo + ((bits & 0x7FFFFF) != 0).to(tl.int32)  # round the scale UP to a power of two
    byte = tl.where(expo == 0xFF, 255, byte)
    byte = tl.where(bits == 0, 127, byte)
    # x / 2^(byte - 127) == x * 2^(127 - byte) exactly; 2^-127 (byte 254) is a subnormal.
    mult = tl.where(byte == 254, 0x00400000, (254 - byte) << 23).to(tl.float32, bitcast=True)
    v = xb * mult[:, :, None]
    q = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    q = tl.where((v != v) | (byte == 255)[:, :, None], 0x7F, q)
    cols = col0 + tl.arange(0, BK)
    tl.store(out_ptr + rows64[:, None] * KDIM + cols[None, :], tl.reshape(q, (BR, BK)), mask=row_ok[:, None])
    scols = col0 // 32 + tl.arange(0, BK // 32)
    offs = swizzled_scale_offsets(rows64, scols, NB)
    tl.store(sf_ptr + offs, byte.to(tl.uint8), mask=row_ok[:, None])


@triton.jit
def store_operand(
    x,
    gs,
    out_ptr,
    sf_ptr,
    rows64,
    row_ok,
    col0,
    KDIM: tl.constexpr,
    FMT: tl.constexpr,
    BR: tl.constexpr,
    BK: tl.constexpr,
    DEQ_SEARCH: tl.constexpr,
):
    """Rows rows64 (mask row_ok), columns col0 + [0, BK) of a GEMM operand of KDIM columns, in FMT
    (DEQ_SEARCH: "nvfp4_deq" with the "search" encode, `RoutingConfig.nvfp4_deq_encode`)."""
    if FMT == 0:
        cols = col0 + tl.arange(0, BK)
        tl.store(out_ptr + rows64[:, None] * KDIM + cols[None, :], x.to(tl.bfloat16), mask=row_ok[:, None])
    elif FMT == 1:
        _nvfp4_tile(x, gs, out_ptr, sf_ptr, rows64, row_ok, col0, KDIM, BR, BK)
    elif FMT == 2:
        _mxfp8_tile(x, out_ptr, sf_ptr, rows64, row_ok, col0, KDIM, BR, BK)
    else:
        _nvfp4_deq_tile(x, gs, out_ptr, rows64, row_ok, col0, KDIM, BR, BK, DEQ_SEARCH)


# -------------------------------------------------------------------------------------------------
# Kernels
# -------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["T", "ids_st", "ids_sj", "w_st", "w_sj"])
def _route_gather_kernel(
    ids_ptr,  # topk_ids [T, k] int32/int64, strides (ids_st, ids_sj)
    w_ptr,  # topk_weights fp32 [T, k], strides (w_st, w_sj)
    a_ptr,  # a bf16 [T, H] contiguous
    start_ptr,  # int32 [E + 1]: written here (micro) or read (DYNAMIC)
    sorted_token_ptr,  # int32 [R_cap] out
    sorted_expert_ptr,  # int32 [R_cap] out
    route_row_ptr,  # int32 [max_tokens * k] out
    offs_ptr,  # DYNAMIC: int32 [blocks, E] per-block offsets from the scan kernel
    g1_ptr,  # fp32 [E] a1_gscale (nvfp4) or any fp32 pointer
    g2_ptr,  # fp32 [E] a2_gscale (nvfp4) or any fp32 pointer
    alpha1_ptr,  # fp32 [E] out (micro): 1 / a1_gscale or 1
    alpha2_ptr,  # fp32 [E] out (micro): 1 / a2_gscale or 1
    active_ptr,  # int32 [E] out (micro, COMPACT): the experts with rows, then E
    out_ptr,  # the FC1 operand's values (bf16 or uint8)
    sf_ptr,  # uint8: its swizzled scales (nvfp4 / mxfp8)
    T,
    ids_st,
    ids_sj,
    w_st,
    w_sj,
    K: tl.constexpr,
    E: tl.constexpr,
    H: tl.constexpr,
    FMT: tl.constexpr,
    ON_INPUT: tl.constexpr,
    DYNAMIC: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
    CHUNK: tl.constexpr,
    E_PAD: tl.constexpr,
    COMPACT: tl.constexpr,
    SUB_H: tl.constexpr,
    PAIRS: tl.constexpr,
    ASM: tl.constexpr,
    DEQ_SEARCH: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    pid = tl.program_id(0)
    pid_h = tl.program_id(1)
    R = T * K
    n_route_blocks = tl.cdiv(R, BLOCK_R)
    if pid >= n_route_blocks:
        # Micro only, the one extra program: valid routes per expert, then expert_start, alphas, active.
        if (not DYNAMIC) and pid_h == 0:
            count = tl.zeros([E_PAD], dtype=tl.int32)
            for c0 in range(0, R, CHUNK):  # R / CHUNK dependent steps (at most 4 at the defaults)
                ex, ok = _load_routes(ids_ptr, c0 + tl.arange(0, CHUNK), R, ids_st, ids_sj, K, E)
                count += tl.histogram(tl.where(ok, ex, 0), E_PAD, mask=ok)
            _write_starts(count, tl.arange(0, E_PAD), start_ptr, g1_ptr, g2_ptr, alpha1_ptr, alpha2_ptr, active_ptr,
                          E, (FMT == 1) or (FMT == 3), COMPACT)  # fmt: skip
    else:
        # Phase 1: this program's routes and their sorted rows.
        r = pid * BLOCK_R + tl.arange(0, BLOCK_R)
        e, valid = _load_routes(ids_ptr, r, R, ids_st, ids_sj, K, E)
        if DYNAMIC:
            same_before = (e[None, :] == e[:, None]) & (r[None, :] < r[:, None])
            row = tl.sum(same_before.to(tl.int32), axis=1)
            row += tl.load(start_ptr + e, mask=valid, other=0)
            row += tl.load(offs_ptr + pid * E + e, mask=valid, other=0)
        else:
            row = tl.zeros([BLOCK_R], dtype=tl.int32)
            for c0 in range(0, R, CHUNK):
                rc = c0 + tl.arange(0, CHUNK)
                ec, _ = _load_routes(ids_ptr, rc, R, ids_st, ids_sj, K, E)
                ahead = (ec[None, :] < e[:, None]) | ((ec[None, :] == e[:, None]) & (rc[None, :] < r[:, None]))
                row += tl.sum(ahead.to(tl.int32), axis=1)
        tok = r // K
        if pid_h == 0:
            tl.store(sorted_token_ptr + row, tok, mask=valid)
            tl.store(sorted_expert_ptr + row, e, mask=valid)
            tl.store(route_row_ptr + r, tl.where(valid, row, -1), mask=r < R)

        # Phase 2: gather a[tok] (times the route weight on input) into row `row` of the operand, in
        # steps of SUB_H columns (`gather_step_h`).
        tok64 = tok.to(tl.int64)
        if ON_INPUT:
            w = tl.load(w_ptr + tok64 * w_st + (r - tok * K) * w_sj, mask=valid, other=0.0)
        if (FMT == 1) or (FMT == 3):
            gs = tl.load(g1_ptr + e, mask=valid, other=1.0)
        else:
            gs = tl.full([BLOCK_R], 1.0, tl.float32)
        if PAIRS:
            # NVFP4 of a[tok] itself (no route weight): the standalone quantizer's "pairs" encode on the
            # bf16 words (`RoutingConfig.nvfp4_encode`), with each row's expert's global scale
            scale, rg, gs_k = pairs_prologue(gs, ASM)
            dst = tl.where(valid, row, -1).to(tl.int64)  # no scale bytes for ignored routes
            for step in tl.static_range(BLOCK_H // SUB_H):
                pid_k = pid_h * (BLOCK_H // SUB_H) + step
                ua, ub, bmask, blk = _load_pair_words(a_ptr, tok64, valid, pid_k, H, SUB_H)
                _encode_store_pairs(
                    ua, ub, bmask, blk, out_ptr, sf_ptr, gs[:, None], scale[:, None], rg[:, None],
                    gs_k[:, None], dst, pid_k, H, SUB_H, False, ASM, ROWS=True,
                )  # fmt: skip
        else:
            for step in tl.static_range(BLOCK_H // SUB_H):
                col0 = pid_h * BLOCK_H + step * SUB_H
                cols = col0 + tl.arange(0, SUB_H)
                x = tl.load(a_ptr + tok64[:, None] * H + cols[None, :], mask=valid[:, None], other=0.0)
                x = x.to(tl.float32)
                if ON_INPUT:
                    x = x * w[:, None]
                store_operand(x, gs, out_ptr, sf_ptr, row.to(tl.int64), valid, col0, H, FMT, BLOCK_R, SUB_H, DEQ_SEARCH)


@triton.jit(do_not_specialize=["T", "ids_st", "ids_sj"])
def _route_hist_kernel(
    ids_ptr,  # topk_ids [T, k]
    hist_ptr,  # int32 [blocks, E] out: valid routes per (block of BLOCK_R routes, expert)
    T,
    ids_st,
    ids_sj,
    K: tl.constexpr,
    E: tl.constexpr,
    BLOCK_R: tl.constexpr,
    E_BLOCK: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    pid = tl.program_id(0)
    e, _ = _load_routes(ids_ptr, pid * BLOCK_R + tl.arange(0, BLOCK_R), T * K, ids_st, ids_sj, K, E)
    for e0 in tl.static_range(0, E, E_BLOCK):
        ec = e0 + tl.arange(0, E_BLOCK)
        count = tl.sum((e[None, :] == ec[:, None]).to(tl.int32), axis=1)
        tl.store(hist_ptr + pid * E + ec, count, mask=ec < E)


@triton.jit(do_not_specialize=["T"])
def _route_scan_kernel(
    hist_ptr,  # int32 [blocks, E]: counts in, exclusive per-expert offsets over blocks out
    count_ptr,  # int32 [E] out: valid routes per expert
    T,
    K: tl.constexpr,
    E: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SCAN_B: tl.constexpr,
    E_BLOCK: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    ec = tl.program_id(0) * E_BLOCK + tl.arange(0, E_BLOCK)
    e_ok = ec < E
    blocks = tl.cdiv(T * K, BLOCK_R)
    running = tl.zeros([E_BLOCK], dtype=tl.int32)
    for b0 in range(0, blocks, SCAN_B):
        bb = b0 + tl.arange(0, SCAN_B)
        m = (bb < blocks)[:, None] & e_ok[None, :]
        ptrs = hist_ptr + bb[:, None] * E + ec[None, :]
        h = tl.load(ptrs, mask=m, other=0)
        tl.store(ptrs, tl.cumsum(h, axis=0) - h + running[None, :], mask=m)
        running += tl.sum(h, axis=0)
    tl.store(count_ptr + ec, running, mask=e_ok)


@triton.jit
def _route_start_kernel(
    count_ptr,  # int32 [E] valid routes per expert
    start_ptr,  # int32 [E + 1] out
    g1_ptr,
    g2_ptr,
    alpha1_ptr,
    alpha2_ptr,
    active_ptr,  # int32 [E] out (COMPACT)
    E: tl.constexpr,
    E_PAD: tl.constexpr,
    NVFP4: tl.constexpr,
    COMPACT: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    ec = tl.arange(0, E_PAD)
    c = tl.load(count_ptr + ec, mask=ec < E, other=0)
    _write_starts(c, ec, start_ptr, g1_ptr, g2_ptr, alpha1_ptr, alpha2_ptr, active_ptr, E, NVFP4, COMPACT)


# -------------------------------------------------------------------------------------------------
# Ahead-of-time compilation and launch
# -------------------------------------------------------------------------------------------------
class TritonKernel:
    """One Triton kernel at fixed constexprs: compiled ahead of time for `arch` (no GPU needed) and
    loaded once per device on first launch, or launched through the JIT function under
    TRITON_INTERPRET (`arch=None`). `launch(grid, *args)` runs on torch's current stream of the
    device of the first tensor argument; args are the runtime arguments in kernel order.
    `aligned`: pointer arguments the caller guarantees 16-byte aligned (workspace views, checked
    inputs): Triton then vectorizes their accesses. `pdl`: compiled with `launch_pdl` and its PDL
    constexpr 1 (the kernel enters through `gdc_enter`); the interpreter runs PDL 0 (no
    griddepcontrol there; the same math)."""

    def __init__(
        self, fn, signature: dict, constexprs: dict, num_warps: int, arch, key: str = "", aligned=(), pdl=False
    ):
        self.pdl = bool(pdl) and arch is not None
        constexprs = dict(constexprs, PDL=int(self.pdl))
        self.fn, self.constexprs, self.num_warps, self.arch, self.key = fn, constexprs, num_warps, arch, key
        self._signature = dict(signature, **{name: "constexpr" for name in constexprs})
        names = list(self._signature)
        self._attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        self._tail = tuple(constexprs.values())
        self.compiled = self._compile() if arch is not None else None
        self._modules = None if arch is None else PerDevice(OP, key, device_loader(self._compile, first=self.compiled))

    def _compile(self):
        """The CompiledKernel (asm["ptx"], asm["cubin"]); Triton's disk cache makes a repeat a read."""
        from triton.compiler import ASTSource

        src = ASTSource(self.fn, self._signature, self.constexprs, self._attrs)
        return aot_compile(src, self.arch, aot_options(self.num_warps, pdl=self.pdl))

    def _loaded(self, index: int):
        """The module on device `index`, loaded on first use (a module load is resolution too)."""
        return self._modules.get(index)

    def launch(self, grid, *args) -> None:
        if self.arch is None:
            self.fn[grid](*args, **self.constexprs, num_warps=self.num_warps)
            return
        import torch

        index = next(a for a in args if isinstance(a, torch.Tensor)).device.index
        launch_on_stream(self._loaded(index), grid, index, *args, *self._tail)


def fmt_ptr(a_fmt: str) -> str:
    """The Triton pointer type of an operand format's values."""
    return "*bf16" if a_fmt in ("bfloat16", "nvfp4_deq") else "*u8"


def operand_buffers(which: int, fmt: str) -> tuple[str, str]:
    """(values, scales) workspace names operand `which` (1: FC1's, 2: FC2's) in `fmt` is written to."""
    return BUFFERS[which].get(fmt, (f"a{which}", f"a{which}_scales"))


class RoutingKernels:
    """The routing/gather kernels of one (ids dtype, k, E, H, FC1 operand format, placement) key."""

    def __init__(self, ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config: RoutingConfig, arch):
        self.k, self.e, self.h, self.a_fmt, self.config = num_topk, num_experts, hidden, a_fmt, config
        ids = f"*{IDS_DTYPES[ids_dtype]}"
        key = f"routing ids={ids_dtype} k={num_topk} E={num_experts} H={hidden} {a_fmt} on_input={on_input}"
        cfg = config
        i32, f32 = "*i32", "*fp32"
        gather_sig = dict(
            ids_ptr=ids, w_ptr=f32, a_ptr="*bf16", start_ptr=i32, sorted_token_ptr=i32, sorted_expert_ptr=i32,
            route_row_ptr=i32, offs_ptr=i32, g1_ptr=f32, g2_ptr=f32, alpha1_ptr=f32, alpha2_ptr=f32,
            active_ptr=i32, out_ptr=fmt_ptr(a_fmt), sf_ptr="*u8", T="i32", ids_st="i32", ids_sj="i32", w_st="i32", w_sj="i32",
        )  # fmt: skip
        common = dict(K=num_topk, E=num_experts, H=hidden, FMT=OPERAND_FORMATS[a_fmt], ON_INPUT=bool(on_input))
        e_pad = triton.next_power_of_2(num_experts)
        tiles = dict(CHUNK=cfg.chunk, E_PAD=e_pad, COMPACT=cfg.compact_grid)
        nw = cfg.num_warps

        def route_gather(dynamic: bool, block_r: int, name: str) -> TritonKernel:
            sub = gather_step_h(a_fmt, block_r, cfg)
            consts = dict(common, DYNAMIC=dynamic, BLOCK_R=block_r, BLOCK_H=cfg.block_h, SUB_H=sub, **tiles)
            consts.update(PAIRS=uses_pairs(a_fmt, on_input, cfg), ASM=arch is not None)
            consts.update(DEQ_SEARCH=a_fmt == "nvfp4_deq" and cfg.nvfp4_deq_encode == "search")
            return TritonKernel(
                _route_gather_kernel, gather_sig, consts, nw, arch, f"{key} {name}", ALIGNED_GATHER, cfg.pdl
            )

        self.micro = route_gather(False, cfg.block_r, "micro")  # one launch: routing + gather, small R
        self.gather = route_gather(True, cfg.dyn_block_r, "gather")  # after the counting sort
        kd = dict(K=num_topk, E=num_experts)
        self.hist = TritonKernel(
            _route_hist_kernel,
            dict(ids_ptr=ids, hist_ptr=i32, T="i32", ids_st="i32", ids_sj="i32"),
            dict(kd, BLOCK_R=cfg.dyn_block_r, E_BLOCK=cfg.e_block),
            nw,
            arch,
            key + " hist",
            pdl=cfg.pdl,
        )
        self.scan = TritonKernel(
            _route_scan_kernel,
            dict(hist_ptr=i32, count_ptr=i32, T="i32"),
            dict(kd, BLOCK_R=cfg.dyn_block_r, SCAN_B=cfg.scan_b, E_BLOCK=cfg.e_block),
            nw,
            arch,
            key + " scan",
            pdl=cfg.pdl,
        )
        self.start = TritonKernel(
            _route_start_kernel,
            dict(count_ptr=i32, start_ptr=i32, g1_ptr=f32, g2_ptr=f32, alpha1_ptr=f32, alpha2_ptr=f32, active_ptr=i32),
            dict(E=num_experts, E_PAD=e_pad, NVFP4=a_fmt in GLOBAL_SCALED, COMPACT=cfg.compact_grid),
            nw,
            arch,
            key + " start",
            pdl=cfg.pdl,
        )

    def load(self, index: int) -> None:
        """Load every kernel's module on device `index` (preparation: before any capture)."""
        for k in (self.micro, self.gather, self.hist, self.scan, self.start):
            if k.arch is not None:
                k._loaded(index)

    def hist_blocks(self, max_routes: int) -> int:
        """Rows of the dynamic path's per-block histogram for up to max_routes routes."""
        return triton.cdiv(max_routes, self.config.dyn_block_r)

    def __call__(self, T, ids, w, a, s, g1, g2) -> None:
        """Route and gather T tokens. s: the workspace views (api.py's scratch names); g1/g2: the
        experts' a1/a2 gscales (nvfp4) or any fp32 tensor."""
        cfg, R = self.config, T * self.k
        if R == 0:
            return
        strides = (ids.stride(0), ids.stride(1), w.stride(0), w.stride(1))
        n_h = self.h // cfg.block_h
        values, scales = operand_buffers(1, self.a_fmt)
        tail = (s[values], s.get(scales, s["dummy"]), T, *strides)
        meta = (s["expert_start"], s["sorted_token"], s["sorted_expert"], s["route_row"], s["hist"])
        alphas = (g1, g2, s["alpha1"], s["alpha2"], s["active"])
        if R <= cfg.micro_max_routes:
            grid = (triton.cdiv(R, cfg.block_r) + 1, n_h, 1)  # + the expert_start / active program
            self.micro.launch(grid, ids, w, a, *meta, *alphas, *tail)
            return
        blocks = triton.cdiv(R, cfg.dyn_block_r)
        self.hist.launch((blocks, 1, 1), ids, s["hist"], T, ids.stride(0), ids.stride(1))
        self.scan.launch((triton.cdiv(self.e, cfg.e_block), 1, 1), s["hist"], s["expert_count"], T)
        self.start.launch((1, 1, 1), s["expert_count"], s["expert_start"], *alphas)
        self.gather.launch((blocks, n_h, 1), ids, w, a, *meta, *alphas, *tail)


@kernel(
    OP,
    backend="triton",
    sources=(
        _triton_helpers.__name__,
        _triton_pdl.__name__,
        _nvfp4_encodes.__name__,
        _nvfp4_pairs.__name__,
        _nvfp4_kernel_pairs.__name__,
    ),
)
def compile_routing(
    ids_dtype: str,
    num_topk: int,
    num_experts: int,
    hidden: int,
    a_fmt: str,
    on_input: bool,
    config: RoutingConfig,
    arch: str,
) -> RoutingKernels:
    """The routing + gather kernels for one static key, compiled for `arch` (no GPU needed)."""
    return _checked(ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config, arch)


def interpreted_routing(ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config=None) -> RoutingKernels:
    """The same kernels launched through Triton's interpreter (TRITON_INTERPRET=1, CPU tensors)."""
    config = config or default_config(hidden)
    return _checked(ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config, None)


def _checked(ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config, arch) -> RoutingKernels:
    if ids_dtype not in IDS_DTYPES:
        raise ValueError(f"{OP}: ids_dtype must be one of {sorted(IDS_DTYPES)}, got {ids_dtype!r}")
    if not can_implement(hidden, a_fmt, config):
        raise ValueError(f"{OP}: routing cannot implement H={hidden} with {a_fmt} and {config}")
    return RoutingKernels(ids_dtype, num_topk, num_experts, hidden, a_fmt, on_input, config, arch)
