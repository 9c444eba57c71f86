"""Dispatch for the GEMM kernels: M bucket -> kernel variant, launch arguments, one launch.

Buckets (live M is a run-time extent; only the bucket is part of a compile key):

    decode8   M <= 8      decode kernel, one 8-token MMA tile (weight bytes dominate)
    decode16  M <= 16     decode kernel, two token tiles
    decode32  M <= 32     decode kernel, four token tiles (still weight-bandwidth-bound W4A16)
    decode64  M <= 64     decode kernel, eight token tiles
    tiled64   M <= 256    tiled kernel, 64 x 128 CTA tiles (65 <= M: dequantizing both operands to
                          bf16 tiles in shared memory pays off only when M amortizes it)
    tiled128  M > 256     tiled kernel, 128 x 128 (or 128 x 256) CTA tiles; from M = 1024 on (the
                          live M decides) NVFP4 / MXFP4 / MXFP8 / tensor-FP8 weights take the
                          two-pass path (`blockscaled/_twopass.py`: each operand dequantized
                          once, then a 16-bit cp.async GEMM)

The same variants run on sm_90a and sm_120a (portable mma.sync kernels). On sm_120a / sm_121a the
tiled buckets of NVFP4 / MXFP4 / MXFP8 pairs can use the native block-scaled MMA kernel
(`_kernel_sm120`; compiled on the CPU, never run: opt in with B12X_GEMM_SM120_MMA=1, `sm120_mma`).
The decode8 / decode16 buckets of weight-only NVFP4 / MXFP4 / MXFP8 can run the Triton GEMV
(`blockscaled/_kernel_gemv`, a `GemvConfig`): a plan override, or B12X_GEMM_DECODE_KERNEL=triton;
those of W4A16 NVFP4 the stream-layout decode kernel (`blockscaled/_kernel_stream`, a `StreamConfig`,
weight repacked once by `_stream_cache`): a plan override, or B12X_GEMM_DECODE_KERNEL=stream. `launch_args` builds the tensors every kernel takes,
(A, SFA, B, SFB, C, S0, S1, S2) + alpha: the epilogue multiplies by alpha * S0 * S1 * S2 * 2^E with
S0 the caller's alpha tensor, S1 / S2 the per-tensor scale (fp8_tensor) or Weight alpha of A / B
(1.0 where absent), so no scalar is ever read on the host.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import torch

from .formats import FORMAT

BUCKETS = ("decode8", "decode16", "decode32", "decode64", "tiled64", "tiled128")
BUCKET_MAX_M = {"decode8": 8, "decode16": 16, "decode32": 32, "decode64": 64, "tiled64": 256, "tiled128": math.inf}


def bucket_for(m: int) -> str:
    """The M bucket a live M runs in."""
    for name in BUCKETS:
        if m <= BUCKET_MAX_M[name]:
            return name
    raise AssertionError(m)


def decode_config_for(
    max_m: int,
    n: int,
    k: int,
    b_fmt: str,
    a_fmt: str | None = None,
    hints: bool = True,
    one_wave: bool = True,
    fp4_mul: bool = True,
    fused: str | None = None,
):
    """The decode kernel's shape-aware heuristic. M <= 16: fitted to the H200 sweep of 2026-11-30
    (bench_gemm --sweep, docs/performance.md; it picks the fastest of 18 configs in 13 of 16 cases and
    is within 3% in two more): one 16-row weight tile per token tile (tiles = ntiles), then the most
    warps in {4, 8, 16} that keep the grid near 8192 warps (M <= 8) or 4096 (M <= 16, twice the MMA
    work per warp) and give every warp at least two 128-value K chunks; fp4 weights unroll the K loop
    twice, fp8 weights (twice the registers per chunk) do not.

    M <= 32 / 64 (not swept yet; an extrapolation): 4 / 8 token tiles against 32 weight rows (tiles =
    2: each CTA reads all M x K activation bytes from L2, so BN = 32 halves that traffic against BN =
    16 while N = 2048 still gives 64 CTAs; tiles = 4 would leave N = 2048 with 32 CTAs and, at 8 token
    tiles, 128 accumulator registers), the grid target continuing the halving per doubling of the MMA
    work (2048, 1024 warps), at most 8 warps (ptxas 13.0 needs 158-230 registers per lane for these
    tilings; a 16-warp CTA caps them at 128 and spills), and no unroll (a pass's activation registers
    would double).

    Cold weights (session 24, `bench_gemm --cold-weights`: every call streams its weight from HBM, as in
    a serving step) moved two rules: with 16-bit activations, M <= 8 takes two FP4 weight tiles a warp
    at 8 or 16 warps for N >= 4096 whatever K; and W4A16 NVFP4 (the measured pair; hints=False gives
    the plain loads) at M <= 16 and N >= 4096 loads weights with L1::no_allocate +
    an L2 256-byte prefetch and activations evict-last (+ clamped loads and FP4 placement by left
    shifts at M <= 8 and N >= WIDE_DECODE_N).

    one_wave (the plain decode kernel, and `fused_config` for ONE_WAVE_ARCHS x ONE_WAVE_EPILOGUES): W4A16 NVFP4 at
    M <= 8 on 8 warps x 2 tiles drops the K unroll where that turns 1-2 waves into one (`ONE_WAVE_CTAS`), and
    past that range bounds registers to 4 CTAs an SM (`FOUR_CTA_WAVE`); the plain kernel only (fused None) does
    the same at 9..16 tokens over `DECODE16_WAVE_CTAS` (`DECODE16_ONE_WAVE`).

    fused: the fused kernel's epilogue as `fused_config` names it ("norm" for the norm form), None for the plain
    kernel. W4A16 MXFP4 takes the hints and wave rules in the plain kernel (`MXFP4_HINTS`) and, with
    `FUSED_MXFP4_HINTS`, in the fused one for ONE_WAVE_EPILOGUES.

    fp4_mul (the plain decode kernel; `fused_config` passes FUSED_FP4_MUL): W4A16
    NVFP4 with bf16 activations at N >= 4096 places FP4 codes by a multiply (`DecodeConfig.fp4 = "mul"`)
    at M <= 8 while `DECODE8_FP4_MUL` is on, and at 9 <= M <= 16 with K < LONG_K while `DECODE16_FP4_MUL`
    is on."""
    from ..blockscaled._kernel_decode import DecodeConfig, ntiles_for

    ntiles = ntiles_for(max_m)
    tiles = ntiles if ntiles <= 2 else 2
    ctas = -(-n // (16 * tiles))
    target = 8192 // ntiles
    chunks = k // 128
    warps = 16 if ntiles <= 2 else 8
    while warps > 4 and (
        warps > target // ctas or warps > chunks // 2 or DecodeConfig(warps, tiles, ntiles).red_bytes > 64 * 1024
    ):
        warps //= 2
    unroll = 2 if FORMAT[b_fmt].value_bits == 4 and ntiles <= 2 else 1
    sixteen_bit_a = a_fmt in SHARED_A
    mxfp4_hinted = (
        b_fmt == "mxfp4" and MXFP4_HINTS and (fused is None or (FUSED_MXFP4_HINTS and fused in ONE_WAVE_EPILOGUES))
    )
    if (
        ntiles == 1
        and FORMAT[b_fmt].value_bits == 4
        and n >= 32 * 128
        and ((sixteen_bit_a and warps >= 8) or (warps == 16 and k >= LONG_K))
    ):
        # M <= 8, FP4 weights: two 16-row weight tiles a warp (twice the independent loads a K step,
        # half the CTAs, still >= 128 of them). H200 2026-12-02 13:43 (session 20, probe-step sweep,
        # one weight, W4A16 NVFP4 M = 1 4096 x 14336, 16 warps): 13.78 -> 12.63 us. Session 24, cold
        # weights (2026-12-03, --sweep-subset all), 16-bit activations at 8 or 16 warps whatever K:
        # W4A16 NVFP4 4096 x 4096 6.28 -> 5.72, 7168 x 2048 5.91 -> 5.68; W4A16 MXFP4 6.12 -> 5.99,
        # 5.74 -> 5.50, 11264 x 2048 8.82 -> 8.68. FP4 activations stay at 16 warps and K >= LONG_K:
        # there two tiles lose at 4096 x 4096 (NVFP4 6.61 -> 6.91) and 11264 x 2048 (MXFP4 8.45 -> 9.15)
        # while winning at 7168 x 2048. At 28672 x 4096 (4 warps) two tiles lose 1.5%.
        tiles = 2
    config = DecodeConfig(warps=warps, tiles=tiles, ntiles=ntiles, unroll=unroll)
    if ntiles == 2 and n >= WIDE_DECODE_N and FORMAT[b_fmt].value_bits == 4 and a_fmt in SHARED_A:
        # 9 <= M <= 16, 16-bit activations x wide FP4 weights: two warp groups along N share each
        # chunk's activation loads through shared memory (every 16-token activation span read from L2
        # once per CTA, not once per warp), weights bypass L1, activations stay in it. H200 sweep 2026-11-30 10:48
        # (W4A16 NVFP4, graph timer): M = 16 28672 x 4096 41.1 -> 33.4 us; no gain at N <= 11264.
        config = dataclasses.replace(config, wn=2, ashare=True, wcache="na", acache="el")
    elif hints and ntiles <= 2 and (b_fmt == "nvfp4" or mxfp4_hinted) and sixteen_bit_a and n >= 32 * 128:
        # W4A16 NVFP4 at M <= 16, N >= 4096 (but the shared-activation case above): weights bypass L1 with an L2
        # 256-byte prefetch, activations stay in L1 (evict-last). H200 2026-12-03 04:46 (session 24,
        # bench_gemm --cold-weights --sweep-subset stream): M = 1 4096 x 14336 14.99 -> 14.11 us, M = 16
        # 17.95 -> 17.14; at M = 1 28672 x 4096 with clamped loads and FP4 placement by left shifts
        # too: 26.36 -> 24.63 (those two cost 8% at 4096 x 14336, so only from WIDE_DECODE_N on).
        # W4A16 MXFP4 (the plain kernel, MXFP4_HINTS) takes these hints and the wave rules below, not the clamp.
        config = dataclasses.replace(config, wcache="na256", acache="el")
        if ntiles == 1 and n >= WIDE_DECODE_N and b_fmt == "nvfp4":
            config = dataclasses.replace(config, clamp=True, fp4="left")
        if one_wave and (warps, tiles) == (8, 2):
            ctas = -(-n // 32)  # of 2 weight tiles (32 rows) each
            if ntiles == 1 and ONE_WAVE_CTAS[0] < ctas <= ONE_WAVE_CTAS[1]:
                # Unroll 2 takes 112 registers a lane here (ptxas 13.0, sm_90a: 2 CTAs of 256 threads an SM,
                # 264 on the H200), unroll 1 80 (3 an SM, 396): a grid between the two runs in one wave
                # instead of 1-2. H200 2026-12-03 15:50 (session 28, bench_gemm --cold-weights --sweep-subset
                # stream, graph timer): M = 1 11264 x 2048 8.31 -> 7.15 us, M = 8 8.96 -> 7.27; at 7168 x 2048
                # (224 CTAs: one wave either way) unroll 1 is 2-3% slower (5.37 -> 5.49, 5.51 -> 5.64).
                config = dataclasses.replace(config, unroll=1)
            # Past that range at M <= 8 (4 CTAs an SM) and over most of it at 9..16 tokens (3 an SM, the plain
            # kernel only), each by a register bound; the figures are at FOUR_CTA_WAVE / DECODE16_ONE_WAVE.
            elif ntiles == 1 and FOUR_CTA_WAVE and ONE_WAVE_CTAS[1] < ctas <= FOUR_CTA_CTAS:
                config = dataclasses.replace(config, unroll=1, minctas=4)
            elif (
                ntiles == 2
                and DECODE16_ONE_WAVE
                and fused is None
                and DECODE16_WAVE_CTAS[0] < ctas <= DECODE16_WAVE_CTAS[1]
            ):
                config = dataclasses.replace(config, unroll=1, minctas=3)
    # the E2M1 codes are the same in both formats; MXFP4's in the plain kernel only (MXFP4_FP4_MUL)
    mul_fmt = b_fmt == "nvfp4" or (mxfp4_hinted and MXFP4_FP4_MUL and fused is None)
    if fp4_mul and hints and mul_fmt and a_fmt == "bfloat16" and n >= 32 * 128 and ntiles <= 2:
        # FP4 codes placed by one multiply a pair (`dequant.fp4_pair_mul`: the same bits in 7-10% fewer K-loop
        # instructions; f16 compute would fall back to "left", 8% slower at 4096 x 14336). Cold weights, graph
        # timer, "mul" against the placement above at 28672 x 4096 / 4096 x 14336 / 4096 x 4096 / 7168 x 2048.
        # M = 1 (DECODE8_FP4_MUL): H100 2026-12-06 01:57 (session 48) -1.4 / -3.5 / -0.3 / -3.5%; a second H100
        # 03:35 (session 49, two processes) -1.5..-2.3 / -3.7 / -0.5..-0.8 / -3.4..-3.7%; a third 05:37 (session
        # 50, the rule on) -3.7 / -3.5 / -0.4 / -2.9%. M = 16 (DECODE16_FP4_MUL), the same four runs:
        # -1.2..-1.8 / +3.0..+4.3 / -0.8..-1.1 / -2.1..-3.4%: only K < LONG_K (with the rule on, 05:54: -0.9 /
        # +3.9 (kept shift) / -1.3 / -2.1%). 4096 x 4096 and 4096 x 14336 ran one binary (K is a run-time
        # extent), so the K bound is the trip count's, not the code's; no K between 4096 and 14336 was timed.
        # Not timed on an H200.
        if DECODE8_FP4_MUL if ntiles == 1 else (DECODE16_FP4_MUL and k < LONG_K):
            config = dataclasses.replace(config, fp4="mul")
    return with_decode_opts(config) if max_m <= 16 else config


WIDE_DECODE_N = 16384  # decode_config_for: from this N on, 9..16-token tiles share activations
# decode_config_for: FP4 placed by a multiply at M <= 8 with bf16 compute (the rule and its H100 figures are at its
# use). On since session 50, after the gemm gpu tier passed with it on (H100, 622 passed; docs/validation.md).
# An H200 run of `scripts/jobs/s48_a.sh fp4` that puts any M = 1 shape above +0.5% turns it off again.
DECODE8_FP4_MUL = True
# decode_config_for: the same at 9 <= M <= 16 and K < LONG_K (4096 x 14336 lost 3.0-4.3% on three H100s). On since
# session 50, after the gemm gpu tier passed with it on (H100, 622 passed). An H200 `s48_a.sh fp4` putting any of
# the three K < LONG_K shapes at M = 16 above +0.5% turns it off.
DECODE16_FP4_MUL = True
# fused_config: the two rules above for the fused decode kernel too. H100 2026-12-06 (session 51, cold weights, graph
# timer, "mul" against shift, two processes each): 07:13 / 07:17 (`scripts/jobs/s48_a.sh fused`) silu_mul M = 1
# 28672 x 4096 -3.3 / -3.7%, M = 16 -0.7 / -0.7%; residual M = 1 4096 x 14336 -2.5 / -2.7%, 4096 x 4096 -4.7 /
# -4.2%, M = 16 -0.5 / -0.2% (M = 16 4096 x 14336 +5.9 / +6.5%: shift by the plain rule's K < LONG_K). 07:27
# (`scripts/jobs/s51_a.txt`, silu_mul at K <= 3072): M = 1 16384 x 2048 -1.2 / -1.2%, 16384 x 3072 -1.5 / -1.4%,
# 17920 x 1536 -2.3 / -2.1%; M = 16 11264 x 2048 -3.0 / -3.3%, 16384 x 2048 -3.0 / -2.9%, 16384 x 3072 -2.6 / -2.6%,
# 17920 x 1536 -2.6 / -2.6%. At unroll 2 "mul" lost at M <= 8 over the one-wave grids (11264 x 2048 +1.5 to +2.1%,
# four runs); there the fused kernel now takes the plain kernel's one-wave rule (ONE_WAVE_EPILOGUES), and at unroll 1
# "mul" is the fastest placement (07:37-07:44: silu_mul -4.5 to -10%, residual -1.5 to -4.3% against shift). Not
# timed on an H200 nor with pdl on.
FUSED_FP4_MUL = True
# fused_config: the epilogues that take the plain kernel's one-wave rule (`decode_config_for`'s one_wave: unroll 1 at
# M <= 8 on 8 warps x 2 tiles over a grid in ONE_WAVE_CTAS's range; 80 registers a lane, 3 CTAs an SM, on sm_90a with
# ptxas 13.0 for silu_mul and residual under every FP4 placement, against 100-118 at unroll 2). H100 2026-12-06
# 07:37 / 07:38 (session 51, `scripts/jobs/s51_a.txt` gemm51_1w against gemm51_1w_u1, cold weights, graph timer),
# silu_mul, unroll 2 with shift -> unroll 1 with mul, µs: M = 1 11264 x 2048 9.40 -> 7.11 / 9.36 -> 7.14, M = 8
# 9.68 -> 7.65 / 9.71 -> 7.65; 12288 x 2048 M = 1 9.46 -> 7.35 / 9.54 -> 7.34, M = 8 9.71 -> 7.87 / 9.71 -> 7.87;
# 9216 x 4096 M = 1 14.26 -> 10.98 / 14.26 -> 11.01, M = 8 15.25 -> 11.10 / 15.15 -> 11.12 (-19 to -27%).
# rope_append (more registers: early tables) and the norm form (its own unroll 1 pipeline) are left out.
ONE_WAVE_EPILOGUES = ("silu_mul", "residual", "none")
# decode_config_for: the 8-warp x 2-tile grids (N / 32 CTAs) over one H200 wave at unroll 2 (2 CTAs an SM x
# 132 SMs) and within one at unroll 1 (3 an SM). SM-count specific: on 170 SMs (RTX 5090) the range would be
# (340, 510], on 188 (RTX PRO 6000) (376, 564], on 48 (DGX Spark) (96, 144], and the registers behind the
# 2 / 3 CTAs an SM are sm_90a's; nothing is measured there, so `default_config` applies the rule only for
# ONE_WAVE_ARCHS (None: a shape-only query, as the tests and benchmarks make). Heuristics here see the
# arch, not the SM count: an SM120 rule wants the device's count in the selection first.
ONE_WAVE_CTAS = (2 * 132, 3 * 132)
ONE_WAVE_ARCHS = (None, "sm_90a")
# decode_config_for's wave rules past ONE_WAVE_CTAS (built in session 51, timed and switched on in session 52). Each
# bounds the 8-warp x 2-tile kernel's registers so that its grid runs in one wave of 132 SMs. H100 2026-12-06 09:15
# (session 52, `scripts/jobs/s48_a.sh waves`: cold weights, graph timer, the default against the rule's options).
# FOUR_CTA_WAVE: M <= 8 over ONE_WAVE_CTAS[1] < N / 32 <= FOUR_CTA_CTAS at unroll 1 and 4 CTAs an SM (ptxas 13.0
#   sm_90a: 64 registers, 0-8 bytes of stack), the plain and (fused_config's one_wave) the fused kernel. µs, M = 1 /
#   M = 8: plain 13312 x 2048 -7.7 / -8.5%, 14336 x 4096 -6.0 / -6.6%, 16384 x 2048 -2.1 / -4.1%, 16384 x 3072
#   -4.9 / -5.1%; silu_mul -16.1 / -14.8%, -15.6 / -14.7%, -2.2 / -3.7%, -6.6 / -8.2% (every cell beyond its noise).
#   Inside ONE_WAVE_CTAS it loses (unroll 1 + minctas 4 against unroll 1: +2.3 to +3.2% at 12288 / 9216 x 4096).
# DECODE16_ONE_WAVE: 9..16 tokens over DECODE16_WAVE_CTAS at unroll 1 and 3 CTAs an SM (80 registers, 24-32 bytes
#   of stack), the plain kernel only. Plain, M = 9 / 16: 11264 x 2048 (352 CTAs) -2.2 (noise 4.5%) / -10.9%,
#   12288 x 4096 (384) -11.5 / -13.7%, 9216 x 4096 (288: a short second wave) +1.3 / -1.8% (ties). The fused
#   silu_mul kernel lost at 288 (+3.9 / +3.8%) and was mixed at 352 (+1.9 / -4.3%), so fused_config leaves it out.
#   09:23 (`scripts/jobs/s52_a.sh d16`, the range's edges, both sides forced): 288 +2.0 (noise 5.1%) / -0.5% (ties),
#   320 (10240 x 2048) -0.4 / -7.7%, 336 -1.7 / -10.2%, 352 -3.8 / -11.9% (K 2048) and -7.5 / -13.5% (K 4096), 384
#   -7.8 / -10.6% and -10.7 / -12.8%, 396 (12672 x 2048) -8.3 / -10.5%: every cell from 320 on beyond its noise.
FOUR_CTA_WAVE = True
DECODE16_ONE_WAVE = True
FOUR_CTA_CTAS = 4 * 132
# DECODE16_ONE_WAVE's grids: a second unroll-2 wave of more than 33 CTAs (an eighth of the first; 288 tied, 320 won),
# up to one wave of 3 an SM
DECODE16_WAVE_CTAS = (ONE_WAVE_CTAS[0] + 33, ONE_WAVE_CTAS[1])
# decode_config_for: W4A16 MXFP4 in the plain kernel takes W4A16 NVFP4's cache hints (weights L1::no_allocate + an
# L2 256-byte prefetch, activations evict-last) and its wave rules (ONE_WAVE_CTAS, FOUR_CTA_WAVE, DECODE16_ONE_WAVE),
# not its clamped loads / left shifts from WIDE_DECODE_N (not timed on MXFP4). Its registers match NVFP4's bounds
# (ptxas 13.0 sm_90a: M <= 8 98 at unroll 2, 80 at unroll 1, 64 + 8 stack bytes with minctas 4; 9..16 tokens 122,
# 80 + 32 bytes with minctas 3). H100 2026-12-06 09:29 (session 52, `scripts/jobs/s52_a.sh mx`, cold weights, graph
# timer, each option alone against the unhinted default): the hints -4.8 to -8.7% at all 18 cells (M = 1 / 8 / 9 /
# 16, 7168 x 2048 to 16384 x 2048); unroll 1 at 352 / 384 CTAs -14.1 to -19.5% (+1.0 to +7.1% past them and at
# 224); unroll 1 + minctas 4 at 448 / 512 -1.7 to -7.7%; 9..16 tokens unroll 1 + minctas 3 at 320-384 -0.2 (tie) to
# -9.7%.
MXFP4_HINTS = True
# decode_config_for: W4A16 MXFP4 in the plain kernel (where MXFP4_HINTS reaches it) takes the FP4-multiply rules above
# (DECODE8_FP4_MUL, DECODE16_FP4_MUL): the E2M1 codes and their placement are NVFP4's, only the scale differs. H100 2026-12-06 11:22 / 11:24 (session 53, `scripts/jobs/s52_a.sh mxmul` twice,
# the plain kernel, cold weights, graph timer, "mul" against shift under MXFP4_HINTS's configs): M = 1 / 8 / 16
# 28672 x 4096 -6.1 / -12.1..-12.3 / -5.2..-5.4% (M = 1 a tie in its 13-15% noise), 4096 x 4096 -6.9..-7.7 /
# -7.9..-8.0 / -3.3..-3.8%, 7168 x 2048 -2.0..-2.3 / -3.5..-3.7 / -2.2..-2.8%, 11264 x 2048 -7.2..-8.1 / -5.3..-5.6
# / -0.9..-1.3%, 14336 x 4096 -2.7..-3.2 / -0.25..-0.48 (tie, then faster than its 0.28% noise) / -2.0..-2.5%;
# 4096 x 14336 -5.4..-5.5 / -2.1..-2.4%, and M = 16 -3.6..-4.1% (unlike NVFP4's +3..+4%; DECODE16_FP4_MUL's K <
# LONG_K keeps shift there: not yet a rule). The fused kernel's MXFP4 keeps shift: 11:35 (`scripts/jobs/s53_a.sh
# fmxmul`, both sides forced) silu_mul M = 16 28672 x 4096 +17.6% and residual M = 8 4096 x 4096 +1.4% under "mul",
# though 14 of its other 16 cells gained (-0.7 to -11%; two ties): a fused rule would need those two cells' cause.
MXFP4_FP4_MUL = True
# decode_config_for: the same hints and wave rules for the fused kernel's MXFP4 configs (ONE_WAVE_EPILOGUES;
# rope_append and the norm form keep their plain loads). H100 2026-12-06 10:00 (session 52,
# `scripts/jobs/s52_a.sh fmx`, cold weights, graph timer, the options forced against today's unhinted configs)
# silu_mul at 264-396 CTAs (hints + unroll 1) -26.2 to -29.2%, at 397-528 (+ minctas 4) -13.6 to -19.7%, the hints
# alone at M <= 16 28672 x 4096 / 7168 x 2048 and M = 16 11264 x 2048 / 9216 x 4096 -3.0 to -7.9% (M = 1 28672 x 4096
# -6.3%, a tie in its noise); residual 4096 x 14336 / 4096 x 4096 -2.3 to -8.9%: 25 of 26 cells beyond their noise.
# On from session 53, behind its gpu test (test_decode_fused_gpu.py's test_fused_mxfp4_hinted_configs) and the gemm
# tier (docs/validation.md).
FUSED_MXFP4_HINTS = True
# decode_config_for: from this K on, 1..8-token tiles of FP4 activations at 16 warps take two weight tiles
LONG_K = 8192
SHARED_A = ("bfloat16", "float16")  # the activation formats `ashare` exchanges (DecodeConfig)


DECODE_OPTS_ENV = "B12X_GEMM_DECODE_OPTS"


def with_decode_opts(config, opts: str | None = None):
    """`config` with the decode options of B12X_GEMM_DECODE_OPTS (or `opts`) applied: comma-separated
    DecodeConfig field=value pairs, e.g. "wcache=na,acache=el,wn=2,warps=x2" ("xN" multiplies the
    heuristic's value; true/false for flags). Unset or empty: `config` unchanged. `decode_config_for`
    applies it to the M <= 16 buckets (issue #6's): a way to run the whole stack with a swept option
    before it becomes the heuristic's; invalid ones raise."""
    import dataclasses

    from ..blockscaled._kernel_decode import why_not as decode_reason

    opts = os.environ.get(DECODE_OPTS_ENV, "") if opts is None else opts
    changes = {}
    for item in filter(None, (part.strip() for part in opts.split(","))):
        name, sep, value = item.partition("=")
        field = next((f for f in dataclasses.fields(config) if f.name == name.strip()), None)
        if not sep or field is None:
            raise ValueError(f"{DECODE_OPTS_ENV}: {item!r} is not field=value of a DecodeConfig field")
        value = value.strip()
        old = getattr(config, field.name)
        if isinstance(old, bool):
            changes[field.name] = value.lower() in ("1", "true", "yes")
        elif isinstance(old, int):
            changes[field.name] = old * int(value[1:]) if value.startswith("x") else int(value)
        else:
            changes[field.name] = value
    if not changes:
        return config
    out = dataclasses.replace(config, **changes)
    reason = decode_reason("bfloat16", "nvfp4", "bfloat16", out)
    if reason is not None:
        raise ValueError(f"{DECODE_OPTS_ENV}={opts!r} gives {out}: {reason}")
    return out


SM120_MMA_ENV = "B12X_GEMM_SM120_MMA"


def sm120_mma(a_fmt: str | None, b_fmt: str | None, bucket: str, arch: str | None) -> bool:
    """True when the tiled bucket of an NVFP4 / MXFP4 / MXFP8 pair (both operands quantized) on
    SM120 / SM121 uses the native block-scaled MMA kernel (`_kernel_sm120`). That kernel compiles for
    sm_120a on the CPU but has never run (no SM120 GPU in this project's sessions), so it is opt-in:
    B12X_GEMM_SM120_MMA=1. Other archs, pairs and buckets keep the portable kernels. Its cp.async
    reads the swizzled scales 16 bytes at a time: they must start 16-byte aligned (the quantizers and
    pack_weight allocate them so; a 128x4 atom is 512 bytes)."""
    if not bucket.startswith("tiled") or os.environ.get(SM120_MMA_ENV) != "1" or a_fmt is None or arch is None:
        return False
    from ..blockscaled import _kernel_sm120 as KS

    return arch in KS.ARCHS and a_fmt == b_fmt and b_fmt in KS.RECIPES


# Epilogues whose fused configs keep the plain heuristic's warp groups (`DecodeConfig.wn`, without ashare) under
# pdl "off" / "wait". H200 session 40 (`bench_gemm --epilogue`, W4A16 M = 16 28672 x 4096, cold weights, graph
# timer; the one shape the heuristic groups): residual wn 2 vs 1 34.37 / 36.95 µs plain, 33.98 / 36.65 under
# "wait" (-7%); silu_mul 34.50 / 34.44 and 34.19 / 34.39 (even), so it keeps one group. "prefetch" was not timed.
GROUPED_EPILOGUES = ("residual",)


def fused_config(
    bucket: str,
    n: int,
    k: int,
    b_fmt: str,
    a_fmt: str | None,
    epilogue: str = "none",
    pdl: str = "off",
    opts: str | None = None,
    norm: bool = False,
    rope=None,
    hints: bool | None = None,
    span: str | None = None,
    arch: str | None = None,
):
    """The fused decode kernel's `FusedConfig` (blockscaled/_kernel_decode_fused: a fused epilogue and/or
    programmatic dependent launch) for a decode bucket: `decode_config_for`'s K loop with one warp group
    (wn 1, no ashare, kgroup 1: what that kernel runs; GROUPED_EPILOGUES under pdl "off" / "wait" keep the
    heuristic's groups, without ashare), tiles doubled to an even count for silu_mul
    (gate and up halves: T = 1 gate_up 11264 x 2048 gets 352 CTAs of 16 gate + 16 up rows instead of
    704 of 16 rows), fewer warps while the reduction buffer or a chunk per warp says so. n: the
    weight's rows (2I for silu_mul); norm: A RMS-normalized in the kernel (FusedConfig.norm). opts: DecodeConfig changes as `with_decode_opts` takes them, applied
    last (a plan override's way to sweep, e.g. "unroll=1,prefetch=1": the gated T = 1 config then
    needs 64 registers a lane instead of 112, ptxas 13.0 sm_90a); B12X_GEMM_DECODE_OPTS applies only
    through decode_config_for. rope: the `_epilogue.RopeLayout` of epilogue "rope_append" (which keeps
    the heuristic's tiles: its pairs are local rows r and r + BN/2 of any BN, so T = 1 qkv 3072 x 2048
    keeps 192 CTAs of 16 rows = 8 pairs); B12X_GEMM_ROPE_EARLY=1 gives it FusedConfig.early up to 32
    tokens (a sweep switch, unset: off). span: FusedConfig.span, None for `prefetch_span`'s choice
    (opts may also carry "span=rows" / "span=step"); hints: the base takes `decode_config_for`'s cache
    hints (False: the plain loads of every fused plan before session 25), None for all but a whole-row
    prefetch (pdl "prefetch" with span "rows", whose weight is in L2 when the K loop reads it). arch: the
    plain kernel's one-wave rule (unroll 1 over a grid in ONE_WAVE_CTAS's range) for ONE_WAVE_ARCHS and the
    ONE_WAVE_EPILOGUES, as `default_config` gives it (None: a shape-only query).

    H200 2026-12-03 07:10-07:30 (session 25, `bench_gemm --sweep-subset pdl`, W4A16 NVFP4, cold weights,
    M = 1 / 16 at 4096 x 4096, 28672 x 4096, 4096 x 14336, 7168 x 2048; `bench_block` A/B): the hints
    speed the fused kernel up under a plain launch (2-8%: 28672 x 4096 M = 1 26.81 -> 24.66 us), "wait"
    (4096 x 4096 M = 1 5.27 -> 5.02) and the first-step prefetch; after a whole-row prefetch they are
    even or slower (4096 x 4096 M = 1 5.37 -> 5.47, 7168 x 2048 M = 16 5.90 -> 6.02; the block's gate_up
    at T = 1 / 8 +0.45 / +0.27 us). "step" keeps the whole-row prefetch's gain at the small shapes (the
    same lines there) without its loss at the big ones (28672 x 4096 M = 1 31.55 -> 25.16, 4096 x 14336
    15.19 -> 13.50); at the block's 3-13 MB weights it loses (T = 32 74.34 -> 76.16 us)."""
    from ..blockscaled._kernel_decode import DecodeConfig
    from ..blockscaled._kernel_decode_fused import FusedConfig, span_reason, why_not

    if not bucket.startswith("decode"):
        raise ValueError(f"a fused epilogue or pdl runs in the decode buckets (M <= 64), got bucket {bucket}")
    opts, span_opt = _split_span(opts)
    span = span_opt or span or prefetch_span(pdl, n, k, b_fmt)
    reason = span_reason(span, pdl)
    if reason is not None:  # before the warps loop below, which would only halve warps on it
        raise ValueError(reason)
    if hints is None:
        hints = not (pdl == "prefetch" and span == "rows")
    one_wave = arch in ONE_WAVE_ARCHS and epilogue in ONE_WAVE_EPILOGUES and not norm
    base = decode_config_for(
        BUCKET_MAX_M[bucket],
        n,
        k,
        b_fmt,
        a_fmt,
        hints=hints,
        one_wave=one_wave,
        fp4_mul=FUSED_FP4_MUL,
        fused="norm" if norm else epilogue,
    )
    wn = base.wn if epilogue in GROUPED_EPILOGUES and pdl in ("off", "wait") else 1
    # (ksplit and pdl_wait are the plain kernel's: B12X_GEMM_DECODE_OPTS may have set them on the base)
    base = dataclasses.replace(base, wn=wn, ashare=False, kgroup=1, probe="", ksplit=1, pdl_wait=False)
    if epilogue == "silu_mul" and base.tiles % 2:
        base = dataclasses.replace(base, tiles=2 * base.tiles)
    if epilogue == "silu_mul" and norm and base.prefetch == 0:
        # the norm's g words and sums of squares on top of the gated tiles: ptxas 13.0 sm_90a needs 148
        # registers a lane at T <= 8 with unroll 2 (one 256-thread CTA a SM), 127 as the 1-chunk pipeline
        base = dataclasses.replace(base, unroll=1, prefetch=1, clamp=False)  # the pipeline predicates its loads
    if opts:
        base = with_decode_opts(base, opts)
    out_dtype = "bfloat16"
    # the early tables take 4 registers a lane per finish pass: at 64 tokens (4 passes) the rope qkv
    # needs 247 registers a lane against 211 (255 + 96 bytes of stack with the norm; ptxas 13.0 sm_90a)
    early = epilogue == "rope_append" and os.environ.get(ROPE_EARLY_ENV) == "1" and base.ntiles <= 4
    config = FusedConfig(base, epilogue, pdl, norm, rope, early, span)
    while base.warps > 1 and why_not(a_fmt or b_fmt, b_fmt, out_dtype, config) is not None:
        base = dataclasses.replace(base, warps=base.warps // 2)
        config = FusedConfig(base, epilogue, pdl, norm, rope, early, span)
    assert isinstance(base, DecodeConfig)
    return config


# prefetch_span: weights up to this many bytes (values + scales) prefetch whole rows under pdl
# "prefetch"; larger ones only the first step's K range. Well below the L2 of every target (H200 50 MB,
# RTX 5090 96 MB), with room for the activations and the kernel before. Session 25 (H200): the demo
# block's weights (3-13 MB, NVFP4) prefer whole rows (T = 32 74.3 vs 76.2 us); MXFP8 7168 x 2048 (15.1
# MB) at M = 16 the step (6.44 vs 6.79 us), MXFP8 4096 x 4096 (17.3 MB) too (7.21 vs 7.92).
ROWS_PREFETCH_BYTES = 14 << 20


def prefetch_span(pdl: str, n: int, k: int, b_fmt: str) -> str:
    """The FusedConfig.span `fused_config` picks: "rows" (the whole weight to L2 before the wait) for a
    weight of at most ROWS_PREFETCH_BYTES, where every line prefetched stays until its K loop reads it;
    "step" for larger ones, whose resident CTAs' whole rows would evict each other (H200 session 25,
    W4A16 M = 1: 28672 x 4096, 66 MB, rows 31.55 -> step 25.16 us; 4096 x 14336, 33 MB, 15.19 -> 13.50;
    MXFP8 M = 16 7168 x 2048, 15.1 MB, 6.79 -> 6.44; at W4A16's 8-9 MB both spans are the same lines).
    "rows" whenever pdl is not "prefetch" (span unused)."""
    if pdl != "prefetch":
        return "rows"
    spec = FORMAT[b_fmt]
    weight = spec.row_bytes(k) * n + (n * (k // spec.sf_vec) if spec.swizzled else 0)
    return "rows" if weight <= ROWS_PREFETCH_BYTES else "step"


def _split_span(opts: str | None) -> tuple[str | None, str | None]:
    """(opts without its "span=..." item, that span or None): `fused_config`'s opts carry the
    FusedConfig's span beside the DecodeConfig changes."""
    if not opts:
        return opts, None
    items = [part.strip() for part in opts.split(",") if part.strip()]
    spans = [i.partition("=")[2].strip() for i in items if i.partition("=")[0].strip() == "span"]
    rest = ",".join(i for i in items if i.partition("=")[0].strip() != "span")
    return rest or None, (spans[-1] if spans else None)


ROPE_EARLY_ENV = "B12X_GEMM_ROPE_EARLY"  # =1: fused_config's rope_append configs load their tables early

# A pdl "wait" query with no epilogue, norm or rope ran the fused kernel in `fused_config`'s one warp group: at M =
# 16 28672 x 4096 that gave up the plain kernel's shared-activation warp groups (session 25: fused "wait" 36.87 µs,
# 1.54x cuBLAS; plain 32.74). With this on (since session 39), such a query takes the plain decode heuristic as a
# programmatic dependent (`DecodeConfig.pdl_wait`) wherever that heuristic has warp groups (wn > 1). Session 39's
# s38_c (614558d, H200, graph timer): the GPU tests passed; M = 16 28672 x 4096 plain + pdl_wait 32.07 µs against
# fused "wait" 36.56 (one group) and 33.75 (two groups, opt-in); docs/performance.md, session 39.
PLAIN_PDL_GROUPS = True


def pdl_config(bucket: str, n: int, k: int, b_fmt: str, a_fmt: str | None, pdl: str, arch: str | None = None):
    """The config of a pdl query without epilogue, norm or rope in a decode bucket: `fused_config`, or with
    PLAIN_PDL_GROUPS and pdl "wait" the plain heuristic with pdl_wait where it has warp groups."""
    if PLAIN_PDL_GROUPS and pdl == "wait":
        base = default_config(bucket, n, k, b_fmt, a_fmt=a_fmt, arch=arch)
        if type(base).__name__ == "DecodeConfig" and base.wn > 1:
            return dataclasses.replace(base, pdl_wait=True)
    return fused_config(bucket, n, k, b_fmt, a_fmt, pdl=pdl, arch=arch)


def is_fused(config) -> bool:
    """Whether `config` runs the fused decode kernel (its launcher takes R and G after S2, eps after
    alpha: `fused_args`)."""
    return type(config).__name__ == "FusedConfig"


def fused_args(args, alpha_f, out, residual=None, norm_weight=None, eps=1e-6, rope=None):
    """`launch_args`' (args, alpha) -> the fused launcher's (A, SFA, B, SFB, C, S0, S1, S2, R, G, alpha,
    eps): R the residual or C, G the norm weight or A flattened (never read when absent); with rope
    (a `_epilogue.RopeAppend`, epilogue "rope_append") its six tensors COS, SIN, KC, VC, SP, SO go
    after G."""
    r = out if residual is None else residual
    g = args[0].reshape(-1) if norm_weight is None else norm_weight
    if rope is not None:
        return (*args, r, g, *rope.tensors(), alpha_f, float(eps))
    return (*args, r, g, alpha_f, float(eps))


def _is_sm120(config) -> bool:
    return type(config).__name__ == "Sm120Config"


def _is_gemv(config) -> bool:
    return type(config).__name__ == "GemvConfig"


def is_stream(config) -> bool:
    """Whether `config` runs the stream-layout decode kernel (its weight operand is
    `blockscaled/_stream_cache.stream_weight`, not the plain values)."""
    return type(config).__name__ == "StreamConfig"


DECODE_KERNEL_ENV = "B12X_GEMM_DECODE_KERNEL"  # "triton": the Triton GEMV; "stream": the stream kernel
STREAM_BUCKETS = ("decode8", "decode16")
# Whether W4A16 NVFP4 decode runs the stream-layout kernel when B12X_GEMM_DECODE_KERNEL is unset
# (False until an H200 sweep says so: docs/predictions/gemm_decode.md, session 7).
STREAM_DEFAULT = False


def stream_selected(a_fmt: str | None, b_fmt: str | None, bucket: str) -> bool:
    """Whether this case runs the stream-layout decode kernel: B12X_GEMM_DECODE_KERNEL=stream, or
    unset with STREAM_DEFAULT (W4A16 NVFP4 at M <= 16; shapes without a stream layout keep the
    decode kernel; "cute" / "triton" turn it off)."""
    env = os.environ.get(DECODE_KERNEL_ENV)
    if not (env == "stream" or (env is None and STREAM_DEFAULT)):
        return False
    return bucket in STREAM_BUCKETS and a_fmt in SHARED_A and b_fmt == "nvfp4"


def default_config(
    bucket: str,
    n: int | None = None,
    k: int | None = None,
    b_fmt: str | None = None,
    *,
    a_fmt: str | None = None,
    arch: str | None = None,
):
    """The heuristic config of a bucket (the kernel modules say what they were tuned on); decode
    buckets use the shape-aware `decode_config_for` when the problem's N, K and weight format are given;
    tiled buckets of block-scaled pairs on SM120 the native MMA kernel's when `sm120_mma` says so."""
    if sm120_mma(a_fmt, b_fmt, bucket, arch):
        from ..blockscaled._kernel_sm120 import default_config as sm120_config

        return sm120_config(a_fmt)
    from ..blockscaled import _gemv_config as GC

    if n is not None and k is not None and stream_selected(a_fmt, b_fmt, bucket):
        from ..blockscaled._kernel_stream import default_config as stream_config

        found = stream_config(BUCKET_MAX_M[bucket], n, k, a_fmt)
        if found is not None:
            return found
    if GC.selected(a_fmt, b_fmt, bucket):
        return GC.default_config(n, k, b_fmt)
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import default_config as decode_config

        if n is not None and k is not None and b_fmt is not None:
            return decode_config_for(BUCKET_MAX_M[bucket], n, k, b_fmt, a_fmt, one_wave=arch in ONE_WAVE_ARCHS)
        return decode_config(BUCKET_MAX_M[bucket])
    from ..blockscaled._kernel_tiled import default_config as tiled_config

    tiled = tiled_config(int(min(BUCKET_MAX_M[bucket], 1 << 30)), n, b_fmt)
    if bucket == TWOPASS_BUCKET and twopass_selected(a_fmt, b_fmt):
        from ..blockscaled._twopass import TwoPassConfig

        return TwoPassConfig(tiled=tiled)  # from its min_m on; the tiled kernel below
    return tiled


TWOPASS_ENV = "B12X_GEMM_TWOPASS"  # "0": the tiled kernel in tiled128 too; "1" (or unset): two-pass
TWOPASS_BUCKET = "tiled128"


def twopass_selected(a_fmt: str | None, b_fmt: str | None) -> bool:
    """Whether the tiled128 bucket (M > 256) of this pair runs the two-pass path (`_twopass.py`:
    dequantize once, then a 16-bit cp.async GEMM) by default; B12X_GEMM_TWOPASS=0 keeps the tiled
    kernel (an A/B switch)."""
    from ..blockscaled._twopass import eligible

    return os.environ.get(TWOPASS_ENV, "1") != "0" and eligible(a_fmt, b_fmt)


def is_twopass(config) -> bool:
    return type(config).__name__ == "TwoPassConfig"


def prime_ms(config, m: int) -> tuple[int, ...]:
    """The live M values a plan's prime (or prewarm) runs a variant at so that each of its kernels has
    launched once before any capture: m, and for a two-pass config whose tiled side serves some M of
    the bucket (257 .. min_m - 1) one M there too."""
    if is_twopass(config) and m >= config.min_m > BUCKET_MAX_M["tiled64"] + 1:
        return (m, config.min_m - 1)
    return (m,)


def compile_fn(bucket: str, config=None):
    """The `@kernel` compile function of a bucket's kernel (of `config`'s kernel when it is an
    `Sm120Config`)."""
    if _is_sm120(config):
        from ..blockscaled._kernel_sm120 import compile_sm120

        return compile_sm120
    if is_fused(config):
        from ..blockscaled._kernel_decode_fused import compile_decode_fused

        return compile_decode_fused
    if _is_gemv(config):
        from ..blockscaled._kernel_gemv import compile_gemv

        return compile_gemv
    if is_stream(config):
        from ..blockscaled._kernel_stream import compile_stream

        return compile_stream
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import compile_decode

        return compile_decode
    from ..blockscaled._kernel_tiled import compile_tiled

    return compile_tiled


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, config) -> str | None:
    if is_twopass(config):
        from ..blockscaled._twopass import why_not as twopass_reason

        if not bucket.startswith("tiled"):
            return f"a TwoPassConfig serves the tiled buckets (M > 64), got {bucket}"
        return twopass_reason(a_fmt, b_fmt, out_dtype, config)
    if _is_sm120(config):
        from ..blockscaled._kernel_sm120 import why_not as sm120_reason

        return sm120_reason(a_fmt, b_fmt, out_dtype, config)
    if is_fused(config):
        from ..blockscaled._kernel_decode_fused import why_not as fused_reason

        if not bucket.startswith("decode") or config.max_m < BUCKET_MAX_M[bucket]:
            return f"a FusedConfig serves a decode bucket with 8 ntiles >= the bucket's M, got {bucket}, {config}"
        return fused_reason(a_fmt, b_fmt, out_dtype, config)
    if _is_gemv(config):
        from ..blockscaled._gemv_config import why_not as gemv_reason

        return gemv_reason(a_fmt, b_fmt, out_dtype, config, bucket)
    if is_stream(config):
        from ..blockscaled._kernel_stream import why_not as stream_reason

        if bucket not in STREAM_BUCKETS or config.max_m < BUCKET_MAX_M[bucket]:
            return f"a StreamConfig serves decode8 / decode16 with 8 ntiles >= the bucket's M, got {bucket}, {config}"
        return stream_reason(a_fmt, b_fmt, out_dtype, config)
    if bucket.startswith("decode"):
        from ..blockscaled._kernel_decode import why_not as reason
    else:
        from ..blockscaled._kernel_tiled import why_not as reason
    return reason(a_fmt, b_fmt, out_dtype, config)


def kernel_key(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config=None) -> tuple:
    """(compile function, key arguments) of one single-kernel variant (`kernel_keys` for any)."""
    cfg = default_config(bucket, b_fmt=b_fmt, a_fmt=a_fmt, arch=arch) if config is None else config  # shape-blind
    if is_twopass(cfg):
        raise ValueError(f"{cfg} launches several kernels: use kernel_keys / make_launcher")
    return compile_fn(bucket, cfg), (a_fmt, b_fmt, out_dtype, cfg, arch)


def kernel_keys(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config) -> tuple:
    """((compile function, key arguments), ...) of every kernel a variant launches (what a plan
    compiles before `make_launcher` may run)."""
    if is_twopass(config):
        from ..blockscaled._twopass import kernel_keys as twopass_keys

        return twopass_keys(a_fmt, b_fmt, out_dtype, config, arch)
    return (kernel_key(a_fmt, b_fmt, out_dtype, bucket, arch, config),)


def make_launcher(a_fmt: str, b_fmt: str, out_dtype: str, bucket: str, arch: str, config):
    """The callable `fn(A, SFA, B, SFB, C, S0, S1, S2, alpha)` (or the fused form) of a variant,
    resolving (compiling, loading) its kernels."""
    if is_twopass(config):
        from ..blockscaled._twopass import TwoPassLauncher

        return TwoPassLauncher(a_fmt, b_fmt, out_dtype, config, arch)
    fn, key = kernel_key(a_fmt, b_fmt, out_dtype, bucket, arch, config)
    return fn(*key)


# ---- per-device constants (created once, outside any graph capture when prewarmed) ---------------
_CONSTS: dict = {}


def device_constants(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 [1] holding 1.0, uint8 [16] zeros) on `device`: the stand-ins for absent scales."""
    key = str(device)
    found = _CONSTS.get(key)
    if found is None:
        found = _CONSTS[key] = (
            torch.ones(1, dtype=torch.float32, device=device),
            torch.zeros(16, dtype=torch.uint8, device=device),
        )
    return found


def clear() -> None:
    _CONSTS.clear()
    cache = sys.modules.get(__name__.rsplit(".", 2)[0] + ".blockscaled._stream_cache")
    if cache is not None:
        cache.clear()
    gemv = sys.modules.get(__name__.rsplit(".", 2)[0] + ".blockscaled._kernel_gemv")
    if gemv is not None:  # split-K workspaces of the Triton GEMV (never imported just to clear)
        gemv.WORKSPACES.clear()


def _scale_arg(fmt: str, scales, ones, dummy):
    spec = FORMAT[fmt]
    if spec.swizzled:
        return scales.view(torch.uint8).reshape(-1)
    if spec.scale == "fp32_block":
        return scales.reshape(-1)
    if spec.scale == "fp32_scalar":
        return ones  # the per-tensor scale travels as S1 / S2
    return dummy


def launch_args(a_fmt, a_values, a_scales, a_alpha, b_fmt, b_values, b_scales, b_alpha, alpha, out):
    """The kernels' arguments: ((A, SFA, B, SFB, C, S0, S1, S2), alpha as a float).

    alpha: a Python number (baked into the launch) or a 1-element fp32 device tensor (read by the
    kernel, so a captured graph follows its value). a_alpha / b_alpha: an operand Weight's fp32 [1]
    alpha, or None.
    """
    ones, dummy = device_constants(out.device)
    a = a_values if FORMAT[a_fmt].family == "raw16" else a_values.view(torch.uint8)
    b = b_values.view(torch.uint8)
    if isinstance(alpha, torch.Tensor):
        s0, alpha_f = alpha.reshape(1), 1.0
    else:
        s0, alpha_f = ones, float(alpha)
    if a_fmt == "fp8_tensor":
        s1 = a_scales.reshape(1)
    else:
        s1 = ones if a_alpha is None else a_alpha.reshape(1)
    if b_fmt == "fp8_tensor":  # a tensor-FP8 Weight's alpha is always 1: its scale is `scales`
        s2 = b_scales.reshape(1)
    else:
        s2 = ones if b_alpha is None else b_alpha.reshape(1)
    sfa = _scale_arg(a_fmt, a_scales, ones, dummy)
    sfb = _scale_arg(b_fmt, b_scales, ones, dummy)
    return (a, sfa, b, sfb, out, s0, s1, s2), alpha_f
