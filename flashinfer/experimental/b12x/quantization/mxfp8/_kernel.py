"""MXFP8 row quantizer (Triton): bf16/fp16 [M, K] -> E4M3 [M, K] + UE8M0 scales, row-major and swizzled.

Per 32-element block of a row, exactly the fp32 op sequence of `_lib/quant/mx.py` (the oracle):

    amax = max |x_i| (NaN ignored)      s = div_rn(amax, 448)
    byte = exponent field of s, + 1 if its mantissa is nonzero; s == 0 -> 127; s Inf -> 255
    v_i  = e4m3_rn_satfinite(x_i * 2^(127 - byte))

- `div_rn` is PTX `div.rn.f32` (Triton's `/` is the approximate `div.full.f32`).
- `x / 2^(byte-127)` equals `x * 2^(127-byte)` bit for bit (both factors exact powers of two; byte
  is 1..254 for finite blocks), so the kernel multiplies.
- A NaN element encodes 0x7F; a block whose amax is +Inf gets byte 255 (a NaN scale), and then
  every one of its values is NaN (0x7F), as `x / NaN` is in the oracle. The kernel writes 0x7F
  itself: which NaN byte the hardware conversion produces does not matter.
- |v| <= 448 * (1 + 2^-23) (s rounds at most half an ulp down), so round-to-nearest lands on 448
  and saturation never decides a value; `cvt.rn.satfinite.e4m3x2.f32` keeps the sign of zero, as
  the oracle does.
- Variants (`MxFp8Config`, all bit-equal under the interpreter): lean (one NaN select per block
  in amax, one NaN test per value), layout "rows" or "quarters" (a thread owns whole blocks), and
  hw_nan (sm_90a: no NaN test per value; the conversion writes 0x7F for NaN itself).
- GPU validation: every config in `_VALIDATED` passed test_gpu_candidates bit for bit on the H200
  (the "rows" configs at 03:45 UTC, the "quarters" configs at 05:55, 2026-11-30). A config added
  later goes to `_UNVALIDATED` (offered only with B12X_QUANT_UNVALIDATED_CANDIDATES=1) until it
  passes there too: the interpreter has passed configs the GPU got wrong (NVFP4, 03:45).
- Swizzled scales (FORMATS.md 128x4 atoms) are written only at live (row < M, block < K/32)
  positions: the caller's padding bytes are left as they are.

Constraints: K % 32 == 0 (static), M < 2^31 (live, never a compile key), all tensors contiguous
and 16-byte aligned (the compiled kernel assumes it; api.py checks it).
Bytes moved: 2*M*K read + M*K written + 2*M*K/32 scale bytes written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import triton
import triton.language as tl

from ..._lib import triton_pdl as _triton_pdl
from ..._lib import triton_quant as _triton_helpers
from ..._lib.compile import kernel
from ..._lib.triton_build import PerDevice, aot_compile, aot_options, device_loader, launch_on_stream
from ..._lib.triton_pdl import gdc_enter
from ..._lib.triton_quant import block_amax, block_amax_maxnum, grid_axes, grid_origin, swizzled_scale_offsets

OP = "quantization.mxfp8"
BLOCK = 32  # elements per UE8M0 scale
DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
UNVALIDATED_ENV = "B12X_QUANT_UNVALIDATED_CANDIDATES"


# -------------------------------------------------------------------------------------------------
# Config and heuristic
# -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MxFp8Config:
    """One program quantizes block_m rows x block_k columns with num_warps warps.

    lean: amax with one NaN select per block (`block_amax_maxnum`) instead of one per element, and
    one NaN test per value (a NaN block scale, byte 255, becomes a NaN multiplier, so its values are
    NaN and take the same 0x7F) instead of two. Same bits.
    layout: "rows" = the tile loaded as [block_m, block_k] (Triton spreads a 32-element block over
    four threads); "quarters" = loaded as the four 8-element quarters of every block, so a thread
    owns whole blocks (amax and scale without shuffles; `_quantize_quarters`); needs lean. "flat" =
    "quarters" through flat [rows, 8 values a block] pointers, reshaped after the load and before the
    store: same values, same bits. Why: the H200 runs Triton 3.6, which lays the quarters' 3-D
    pointers' lanes down the rows and converts through shared memory (1 barrier, STS + LDS a tile,
    528 SASS for 4x512x2); flat pointers build what Triton 3.9 builds from either (496, none).
    pdl: launched as a programmatic dependent (`_lib/triton_pdl.py`; api.py docstring). Not a tuning
    choice: the plan sets it from `MxFp8Query.pdl`.
    k_major (session 31): a one-axis grid whose consecutive programs take consecutive column tiles of a
    row block, so the programs resident at once read whole rows (the two-axis grid's consecutive programs
    take consecutive row blocks of one column tile: a column band of every row). NVFP4's mid tile gained
    2.4-2.8% from it at K = 4096 (`nvfp4/_dispatch.MID_K_MAJOR_MAX_K`).
    hw_nan (session 32, lean only): no select of 0x7F for NaN values: the conversion's own NaN byte is
    kept. The H200's `cvt.rn.satfinite.e4m3x2.f32` writes 0x7F for every NaN, either sign and any
    payload (`scripts/probe_e4m3_nan.py`, session 26), so on sm_90a the bits are the oracle's with one
    FSETP + SEL and the byte unpacking around them fewer a value. Only `default_config(k, "sm_90a")`
    takes it: no other architecture has been probed. The interpreter's fp8 emulation writes 0x7C / 0xFC
    / 0x78 for NaN, so interpreted launches keep the select (as `pdl`, a compiled-only difference).
    """

    block_m: int = 16
    block_k: int = 256
    num_warps: int = 4
    lean: bool = False
    layout: str = "rows"
    pdl: bool = False
    k_major: bool = False
    hw_nan: bool = False


def can_implement(k: int, config: MxFp8Config) -> bool:
    pow2 = lambda n: n > 0 and n & (n - 1) == 0
    return (
        k > 0
        and k % BLOCK == 0
        and pow2(config.block_m)
        and pow2(config.block_k)
        and config.block_k >= BLOCK
        and config.num_warps in (1, 2, 4, 8, 16)
        and isinstance(config.lean, bool)
        and config.layout in ("rows", "quarters", "flat")
        and (config.layout == "rows" or config.lean)
        and isinstance(config.pdl, bool)
        and isinstance(config.k_major, bool)
        and isinstance(config.hw_nan, bool)
        and (config.lean or not config.hw_nan)
    )


def default_config(k: int, arch: str | None = None) -> MxFp8Config:
    """The heuristic: 4 rows x 512 columns, 2 warps, lean, "quarters" (a thread owns whole blocks).
    The H200 sweep of 2026-11-30 05:58 (docs/performance.md; every MXFP8 candidate passed the bitwise
    tier at 05:55) put it within 9% of the fastest config at every M in {1, 16, 128, 4096, 16384} x K
    in {4096, 7168} (M = 16384 K = 7168: 101 µs, 84% of copy, vs 108 for the old 16 x 256 default).
    One config for every M: a plan's capacity says little about its live M.
    Session 31: in K-major order (`k_major`), which the H200 timed faster at all four of #4's shapes
    (2026-12-04, graph timer, one process: 4096 x 4096 15.73 -> 15.36 µs, as a programmatic dependent
    15.17 -> 14.73 (81.5% of copy); 16384 x 4096 54.84 -> 54.12; 4096 x 7168 25.85 -> 25.74; 16384 x 7168
    96.33 -> 93.33), its bits checked there (test_gpu_candidates).
    Session 32: on sm_90a (`arch`) without the per-value NaN select (`hw_nan`, the probed hardware byte),
    which the H200 timed 4.7-6.9% faster at the four shapes (4096 x 4096 15.35 -> 14.28 µs, 84.6% of copy;
    16384 x 7168 93.85 -> 88.12, 96.0%), its bits checked there (test_gpu_candidates)."""
    return MxFp8Config(
        block_m=4,
        block_k=min(512, triton.next_power_of_2(k)),
        num_warps=2,
        lean=True,
        layout="quarters",
        k_major=True,
        hw_nan=HW_NAN_DEFAULT and arch is not None and hw_nan_supported(arch),
    )


# (block_m, block_k, num_warps, lean[, layout]): predictions in docs/predictions/quantization.md.
# GPU-validated: passed test_gpu_candidates.py bit for bit on the H200 (2026-11-30: "rows" at 03:45
# UTC, "quarters" at 05:55).
_VALIDATED = (
    (4, 512, 4, False),
    (8, 512, 4, False),
    (16, 512, 8, False),
    (32, 256, 8, False),
    (32, 128, 4, False),
    (64, 128, 8, False),
    (16, 256, 4, True),
    (8, 512, 4, True),
    (16, 512, 8, True),
    (32, 256, 8, True),
    (32, 512, 8, True),
    (64, 256, 8, True),
    (8, 1024, 8, True),
    (16, 1024, 8, True),
    (4, 2048, 8, True),
    (1, 1024, 2, True),  # tiny M: one row per program, K split wide
    (1, 512, 1, True),
    (4, 256, 1, True),
    (16, 256, 4, True, "quarters"),
    (32, 256, 8, True, "quarters"),
    (32, 512, 8, True, "quarters"),
    (64, 256, 8, True, "quarters"),
    (16, 1024, 8, True, "quarters"),
    (1, 1024, 1, True, "quarters"),
    (4, 512, 2, True, "quarters"),
    (4, 512, 2, True, "quarters", False, True),  # K-major (the default since session 31): passed 2026-12-04
    # session 31, K-major too, bits passed on the H200 2026-12-04 (s31_g): 2 x 512 x 1 is the fastest plain tile
    # at 4096 x 7168 (25.18 against the default's 25.73 µs) but 1.4x slower as a programmatic dependent;
    # 4 x 1024 x 4 ties the default at 4096 x 4096 / 7168 both ways
    (2, 512, 1, True, "quarters", False, True),
    (4, 1024, 4, True, "quarters", False, True),
    # session 32: without the NaN select (sm_90a only: `hw_nan_supported`), bits passed on the H200 2026-12-04 (s32_a)
    (4, 512, 2, True, "quarters", False, True, True),  # the sm_90a default
    (4, 1024, 4, True, "quarters", False, True, True),
    (2, 512, 1, True, "quarters", False, True, True),
)
# Not GPU-validated: offered only with B12X_QUANT_UNVALIDATED_CANDIDATES=1 (bench --all-configs,
# test_gpu_candidates.py). Move a config to _VALIDATED after test_gpu_candidates passes for it on
# the GPU. Session 15: the "flat" layout (the quarters through flat pointers: no shared-memory
# conversion on the H200's Triton 3.6), the default tile first; predictions in
# docs/predictions/quantization.md (session 15).
_UNVALIDATED: tuple = (
    (4, 512, 2, True, "flat"),  # the default tile (one row a program needs no fix: 1 x 1024 builds the same)
    (16, 256, 4, True, "flat"),
)


# Session 32: the sm_90a default drops the NaN select (`MxFp8Config.hw_nan`): the hw_nan tiles passed
# test_gpu_candidates on the H200 (19 of 19, 2026-12-04) and the default tile ran 4.7-6.9% faster at #4's four
# shapes (docs/performance.md, session 32). Its two-blocks-a-thread tiles (8 x 512 x 2, 4 x 1024 x 2: 88
# registers) passed too and ran 10-60% slower: not offered.
HW_NAN_DEFAULT = True


def unvalidated_enabled() -> bool:
    """B12X_QUANT_UNVALIDATED_CANDIDATES=1: offer the configs that have not passed the GPU tier."""
    return os.environ.get(UNVALIDATED_ENV) == "1"


def candidate_configs(k: int, *, unvalidated: bool | None = None, arch: str | None = None) -> tuple[MxFp8Config, ...]:
    """The default (for `arch`) first, then every valid GPU-validated candidate, then (only when
    `unvalidated`, default: `unvalidated_enabled()`) the unvalidated ones; tiles wider than the row are
    capped; `hw_nan` tiles only where `arch` is None or sm_90a (`hw_nan_supported`).
    PreparationSession autotune and bench_quantization sweep what this returns."""
    if unvalidated is None:
        unvalidated = unvalidated_enabled()
    out = [default_config(k, arch)]
    for bm, bk, nw, *rest in _VALIDATED + (_UNVALIDATED if unvalidated else ()):
        cfg = MxFp8Config(bm, min(bk, triton.next_power_of_2(k)), nw, *rest)
        if can_implement(k, cfg) and cfg not in out and (arch is None or not cfg.hw_nan or hw_nan_supported(arch)):
            out.append(cfg)
    return tuple(out)


def hw_nan_supported(arch: str) -> bool:
    """Whether `MxFp8Config.hw_nan` keeps the oracle's bits on `arch`: only the probed sm_90a."""
    return arch == "sm_90a"


def constexprs(k: int, config: MxFp8Config, *, compiled: bool = True) -> tuple:
    """The kernel's constexpr arguments, in signature order (K first); HW_NAN and PDL are 0 when not
    `compiled` (the interpreter has no griddepcontrol and its own NaN bytes; the math is the same)."""
    c = config
    return (
        k,
        c.block_m,
        c.block_k,
        c.lean,
        c.layout != "rows",
        c.layout == "flat",
        c.k_major,
        int(c.hw_nan and compiled),
        int(c.pdl and compiled),
    )


def grid(m: int, k: int, config: MxFp8Config) -> tuple[int, int, int]:
    """(row blocks, column tiles); with `config.k_major` one axis of row blocks x column tiles."""
    rows, cols = triton.cdiv(m, config.block_m), triton.cdiv(k, config.block_k)
    return grid_axes(rows, cols, config.k_major, f"{OP}: m={m} x k={k} with {config}")


# -------------------------------------------------------------------------------------------------
# Kernel
# -------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["m"])
def _mxfp8_quantize_kernel(
    x_ptr,  # [m, K] bf16/fp16, row-major, 16-byte aligned
    values_ptr,  # [m, K] uint8 out: E4M3 bits
    scale_rows_ptr,  # [m, K/32] uint8 out: UE8M0, row-major
    scale_mma_ptr,  # uint8 out: UE8M0 in the 128x4 swizzled layout (live positions only)
    m,  # live rows (runtime: a new m never compiles)
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LEAN: tl.constexpr,  # MxFp8Config.lean
    QUARTERS: tl.constexpr,  # MxFp8Config.layout "quarters" or "flat"
    FLAT: tl.constexpr,  # MxFp8Config.layout == "flat"
    K_MAJOR: tl.constexpr,  # MxFp8Config.k_major: a one-axis grid, column tiles fastest
    HW_NAN: tl.constexpr,  # MxFp8Config.hw_nan (0 under the interpreter)
    PDL: tl.constexpr,  # MxFp8Config.pdl (0 under the interpreter)
):
    gdc_enter(PDL)
    if QUARTERS:
        _quantize_quarters(
            x_ptr, values_ptr, scale_rows_ptr, scale_mma_ptr, m, K, BLOCK_M, BLOCK_K, FLAT, K_MAJOR, HW_NAN
        )
    else:
        _quantize_rows(x_ptr, values_ptr, scale_rows_ptr, scale_mma_ptr, m, K, BLOCK_M, BLOCK_K, LEAN, K_MAJOR, HW_NAN)


@triton.jit
def _ue8m0(amax):
    """UE8M0 byte of each block from its NaN-free amax (see the module docstring)."""
    s_bits = tl.math.div_rn(amax, 448.0).to(tl.int32, bitcast=True)
    exp = (s_bits >> 23) & 0xFF
    byte = exp + ((s_bits & 0x7FFFFF) != 0).to(tl.int32)
    byte = tl.where(exp == 0xFF, 255, byte)
    return tl.where(s_bits == 0, 127, byte)  # amax is never negative: bits 0 is exactly s == 0


@triton.jit
def _lean_multiplier(byte):
    """2^(127 - byte) per block; 2^-127 (byte 254) is the fp32 subnormal 0x00400000; byte 255 (a NaN
    scale) gives a NaN multiplier, so every value of the block is NaN, then 0x7F."""
    mult_bits = tl.where(byte == 254, 0x00400000, (254 - byte) << 23)
    return tl.where(byte == 255, 0x7FC00000, mult_bits).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_lean(x, mult, HW_NAN: tl.constexpr = False):
    """E4M3 bits of x * mult; NaN -> 0x7F, selected here or (HW_NAN) by the sm_90a conversion itself."""
    v = x * mult
    q = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    if HW_NAN:
        return q
    return tl.where(v != v, 0x7F, q)


@triton.jit
def _quarter(x_ptr, offs, mask, BLOCK_M: tl.constexpr, TILE_NB: tl.constexpr):
    """One 8-value quarter of every block of the tile through flat pointers, as fp32 [rows, blocks, 8]."""
    return tl.reshape(tl.load(x_ptr + offs, mask=mask, other=0.0), (BLOCK_M, TILE_NB, 8)).to(tl.float32)


@triton.jit
def _quantize_quarters(
    x_ptr,
    values_ptr,
    scale_rows_ptr,
    scale_mma_ptr,
    m,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FLAT: tl.constexpr = False,
    K_MAJOR: tl.constexpr = False,
    HW_NAN: tl.constexpr = False,
):
    """The lean kernel with each thread owning whole 32-element blocks: the tile is loaded as the
    four 8-element quarters of every block (16-byte loads; Triton gives the four the same layout,
    so a block's amax and scale need no shuffles) and each quarter's 8 values leave as one 8-byte
    store. Same bits as `_quantize_rows` with LEAN."""
    NB: tl.constexpr = K // 32
    TILE_NB: tl.constexpr = BLOCK_K // 32
    pid_m, pid_k = grid_origin((K + BLOCK_K - 1) // BLOCK_K, K_MAJOR)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    blk = pid_k * TILE_NB + tl.arange(0, TILE_NB)
    bmask = (rows < m)[:, None] & (blk < NB)[None, :]
    if FLAT:  # [rows, 8 values a block] pointers (MxFp8Config "flat"), reshaped to [rows, blocks, 8]
        w = tl.arange(0, TILE_NB * 8)
        wblk = pid_k * TILE_NB + w // 8
        m3 = (rows < m)[:, None] & (wblk < NB)[None, :]
        offs = rows64[:, None] * K + (wblk * 32 + w % 8)[None, :]
        x0 = _quarter(x_ptr, offs, m3, BLOCK_M, TILE_NB)
        x1 = _quarter(x_ptr, offs + 8, m3, BLOCK_M, TILE_NB)
        x2 = _quarter(x_ptr, offs + 16, m3, BLOCK_M, TILE_NB)
        x3 = _quarter(x_ptr, offs + 24, m3, BLOCK_M, TILE_NB)
    else:
        m3 = bmask[:, :, None]
        e = tl.arange(0, 8)
        offs = rows64[:, None, None] * K + (blk * 32)[None, :, None] + e[None, None, :]
        x0 = tl.load(x_ptr + offs, mask=m3, other=0.0).to(tl.float32)
        x1 = tl.load(x_ptr + offs + 8, mask=m3, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + offs + 16, mask=m3, other=0.0).to(tl.float32)
        x3 = tl.load(x_ptr + offs + 24, mask=m3, other=0.0).to(tl.float32)
    amax = tl.maximum(
        tl.maximum(tl.max(tl.abs(x0), axis=2), tl.max(tl.abs(x1), axis=2)),
        tl.maximum(tl.max(tl.abs(x2), axis=2), tl.max(tl.abs(x3), axis=2)),
    )  # NaN-ignoring (maxnum), as `block_amax_maxnum`
    amax = tl.where(amax == amax, amax, 0.0)
    byte = _ue8m0(amax)
    mult = _lean_multiplier(byte)[:, :, None]
    if FLAT:
        F: tl.constexpr = TILE_NB * 8
        tl.store(values_ptr + offs, tl.reshape(_e4m3_lean(x0, mult, HW_NAN), (BLOCK_M, F)), mask=m3)
        tl.store(values_ptr + offs + 8, tl.reshape(_e4m3_lean(x1, mult, HW_NAN), (BLOCK_M, F)), mask=m3)
        tl.store(values_ptr + offs + 16, tl.reshape(_e4m3_lean(x2, mult, HW_NAN), (BLOCK_M, F)), mask=m3)
        tl.store(values_ptr + offs + 24, tl.reshape(_e4m3_lean(x3, mult, HW_NAN), (BLOCK_M, F)), mask=m3)
    else:
        tl.store(values_ptr + offs, _e4m3_lean(x0, mult, HW_NAN), mask=m3)
        tl.store(values_ptr + offs + 8, _e4m3_lean(x1, mult, HW_NAN), mask=m3)
        tl.store(values_ptr + offs + 16, _e4m3_lean(x2, mult, HW_NAN), mask=m3)
        tl.store(values_ptr + offs + 24, _e4m3_lean(x3, mult, HW_NAN), mask=m3)
    sbyte = byte.to(tl.uint8)
    tl.store(scale_rows_ptr + rows64[:, None] * NB + blk[None, :], sbyte, mask=bmask)
    tl.store(scale_mma_ptr + swizzled_scale_offsets(rows64, blk, NB), sbyte, mask=bmask)


@triton.jit
def _quantize_rows(
    x_ptr,
    values_ptr,
    scale_rows_ptr,
    scale_mma_ptr,
    m,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    LEAN: tl.constexpr,
    K_MAJOR: tl.constexpr = False,
    HW_NAN: tl.constexpr = False,
):
    NB: tl.constexpr = K // 32  # scale columns
    TILE_NB: tl.constexpr = BLOCK_K // 32
    pid_m, pid_k = grid_origin((K + BLOCK_K - 1) // BLOCK_K, K_MAJOR)

    # Phase 1: load the tile.
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    rows64 = rows.to(tl.int64)
    mask = (rows < m)[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows64[:, None] * K + cols[None, :], mask=mask, other=0.0).to(tl.float32)

    # Phase 2: per-32 amax (NaN ignored) -> UE8M0 byte, rounded up on the bits of amax / 448.
    xb = tl.reshape(x, (BLOCK_M, TILE_NB, 32))
    if LEAN:
        amax = block_amax_maxnum(xb)  # [BLOCK_M, TILE_NB]
    else:
        amax = block_amax(xb)
    s_bits = tl.math.div_rn(amax, 448.0).to(tl.int32, bitcast=True)
    exp = (s_bits >> 23) & 0xFF
    byte = exp + ((s_bits & 0x7FFFFF) != 0).to(tl.int32)
    byte = tl.where(exp == 0xFF, 255, byte)
    byte = tl.where(s_bits == 0, 127, byte)  # amax is never negative: bits 0 is exactly s == 0

    # Phase 3: values = e4m3(x * 2^(127 - byte)); 2^-127 (byte 254) is the fp32 subnormal 0x00400000.
    mult_bits = tl.where(byte == 254, 0x00400000, (254 - byte) << 23)
    if LEAN:  # byte 255 (amax Inf): a NaN multiplier makes every value NaN, then 0x7F
        mult_bits = tl.where(byte == 255, 0x7FC00000, mult_bits)
    mult = mult_bits.to(tl.float32, bitcast=True)
    v = xb * mult[:, :, None]
    q = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    if LEAN:
        if not HW_NAN:
            q = tl.where(v != v, 0x7F, q)
    else:
        q = tl.where((v != v) | (byte == 255)[:, :, None], 0x7F, q)
    tl.store(values_ptr + rows64[:, None] * K + cols[None, :], tl.reshape(q, (BLOCK_M, BLOCK_K)), mask=mask)

    # Phase 4: scales, row-major and swizzled, live positions only.
    scols = pid_k * TILE_NB + tl.arange(0, TILE_NB)
    smask = (rows < m)[:, None] & (scols < NB)[None, :]
    sbyte = byte.to(tl.uint8)
    tl.store(scale_rows_ptr + rows64[:, None] * NB + scols[None, :], sbyte, mask=smask)
    tl.store(scale_mma_ptr + swizzled_scale_offsets(rows64, scols, NB), sbyte, mask=smask)


# -------------------------------------------------------------------------------------------------
# Launcher and compile function
# -------------------------------------------------------------------------------------------------
class MxFp8Launcher:
    """`launcher(x, values, scale_rows, scale_mma, m)`: one launch on the current stream of x's
    device. Arguments are trusted (api.py validated them); m == 0 launches nothing.

    `load(device_index)` gives an object indexable by grid (a Triton CompiledKernel loaded on that
    device); `compiled=False` launches the JIT function instead (TRITON_INTERPRET runs).
    """

    def __init__(self, k: int, config: MxFp8Config, load, *, compiled: bool, key: str = "") -> None:
        self.k, self.config, self.compiled, self.key = k, config, compiled, key
        self._modules = PerDevice(OP, key, load)

    def __call__(self, x, values, scale_rows, scale_mma, m) -> None:
        if m == 0:
            return
        cfg = self.config
        g = grid(m, self.k, cfg)
        args = (x, values, scale_rows, scale_mma, m, *constexprs(self.k, cfg, compiled=self.compiled))
        if not self.compiled:
            _mxfp8_quantize_kernel[g](*args, num_warps=cfg.num_warps)
            return
        index = x.device.index
        launch_on_stream(self._modules.get(index), g, index, *args)


def _source(dtype: str, k: int, config: MxFp8Config):
    from triton.compiler import ASTSource

    aligned = [["tt.divisibility", 16]]
    signature = {
        "x_ptr": f"*{DTYPES[dtype]}",
        "values_ptr": "*u8",
        "scale_rows_ptr": "*u8",
        "scale_mma_ptr": "*u8",
        "m": "i32",
        "K": "constexpr",
        "BLOCK_M": "constexpr",
        "BLOCK_K": "constexpr",
        "LEAN": "constexpr",
        "QUARTERS": "constexpr",
        "FLAT": "constexpr",
        "K_MAJOR": "constexpr",
        "HW_NAN": "constexpr",
        "PDL": "constexpr",
    }
    names = [n for n, t in signature.items() if t == "constexpr"]
    attrs = {(0,): aligned, (1,): aligned, (2,): aligned, (3,): aligned}
    return ASTSource(_mxfp8_quantize_kernel, signature, dict(zip(names, constexprs(k, config))), attrs)


def compile_for_target(dtype: str, k: int, config: MxFp8Config, arch: str):
    """The Triton CompiledKernel for `arch`, built without a GPU (Triton's disk cache keeps it)."""
    if dtype not in DTYPES:
        raise ValueError(f"{OP}: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    if config.hw_nan and not hw_nan_supported(arch):
        raise ValueError(f"{OP}: hw_nan=True keeps the oracle's NaN bytes only on sm_90a (probed), got arch {arch!r}")
    return aot_compile(_source(dtype, k, config), arch, aot_options(config.num_warps, pdl=config.pdl))


@kernel(OP, backend="triton", sources=(_triton_helpers.__name__, _triton_pdl.__name__))
def compile_mxfp8(dtype: str, k: int, config: MxFp8Config, arch: str) -> MxFp8Launcher:
    """Compile the quantizer for (dtype, K, config) on `arch` and return its launcher."""
    load = device_loader(lambda: compile_for_target(dtype, k, config, arch))
    return MxFp8Launcher(k, config, load, compiled=True, key=f"dtype={dtype} k={k} {config} ({arch})")


def interpreted_launcher(k: int, config: MxFp8Config | None = None) -> MxFp8Launcher:
    """A launcher through the JIT function, for TRITON_INTERPRET=1 runs on CPU tensors (tests)."""
    config = config or default_config(k)
    if not can_implement(k, config):
        raise ValueError(f"{OP}: cannot implement k={k} with {config}")
    return MxFp8Launcher(k, config, None, compiled=False)
