"""The decode kernel's shape-aware heuristic (`decode_config_for`) and the switches and bounds of its rules.

Every rule's switch lives here with its evidence (the run, the GPU, the figures), read by `decode_config_for` and
`launch.fused_config` / `launch.default_config` at call time: tests flip a rule with
`monkeypatch.setattr(decode_rules, NAME, value)`. B12X_GEMM_DECODE_OPTS (`with_decode_opts`) forces DecodeConfig
fields on the M <= 16 buckets' configs, the way the device jobs time a rule's options before it becomes one;
B12X_DECODE_RULES (`rules_from_env`, read at import) sets this module's switches by name, the way they time a staged
rule's own code path (e.g. "FUSED_SILU_GROUPS=1").
"""

from __future__ import annotations

import dataclasses
import os

from .formats import FORMAT

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
WAVE_SMS = 132  # the SM count every wave rule here counts in (the H100's and the H200's)
ONE_WAVE_CTAS = (2 * WAVE_SMS, 3 * WAVE_SMS)
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
FOUR_CTA_CTAS = 4 * WAVE_SMS
# DECODE16_ONE_WAVE's grids: a second unroll-2 wave of more than 33 CTAs (an eighth of the first; 288 tied, 320 won),
# up to one wave of 3 an SM
DECODE16_WAVE_CTAS = (ONE_WAVE_CTAS[0] + 33, ONE_WAVE_CTAS[1])
# DECODE16_SHARED_A: DECODE16_ONE_WAVE's kernel with shared activations (ashare, two warp groups along N: wn 2, half
#   the CTAs), 80 registers and no stack where the one-group form spills 5 + 10 words a K step (ptxas 13.0 sm_90a,
#   session 53). Staged, off: `scripts/jobs/s53_a.sh d16s` times exactly this config (prediction -3 to +5%,
#   docs/predictions/gemm_decode.md, session 53); every cell faster in two runs, then the gemm tier, turns it on.
DECODE16_SHARED_A = False
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
# (DECODE8_FP4_MUL, DECODE16_FP4_MUL): the E2M1 codes and their placement are NVFP4's, only the scale differs. H100
# 2026-12-06 11:22 / 11:24 (session 53, `scripts/jobs/s52_a.sh mxmul` twice, the plain kernel, cold weights, graph
# timer, "mul" against shift under MXFP4_HINTS's configs): M = 1 / 8 / 16 28672 x 4096 -6.1 / -12.1..-12.3 / -5.2..-5.4%
# (M = 1 a tie in its 13-15% noise), 4096 x 4096 -6.9..-7.7 / -7.9..-8.0 / -3.3..-3.8%, 7168 x 2048 -2.0..-2.3 /
# -3.5..-3.7 / -2.2..-2.8%, 11264 x 2048 -7.2..-8.1 / -5.3..-5.6 / -0.9..-1.3%, 14336 x 4096 -2.7..-3.2 / -0.25..-0.48
# (tie, then faster than its 0.28% noise) / -2.0..-2.5%; 4096 x 14336 -5.4..-5.5 / -2.1..-2.4%, and M = 16 -3.6..-4.1%
# (unlike NVFP4's +3..+4%: MXFP4 takes "mul" at 9..16 tokens past LONG_K too). The fused kernel's MXFP4
# keeps shift: 11:35 (`scripts/jobs/s53_a.sh fmxmul`, both sides forced) silu_mul M = 16 28672 x 4096 +17.6% and
# residual M = 8 4096 x 4096 +1.4% under "mul", though 14 of its other 16 cells gained (-0.7 to -11%; two ties): a fused
# rule would need those two cells' cause.
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
# decode_config_for: the fused silu_mul kernel's MXFP4 takes MXFP4_FP4_MUL under FUSED_FP4_MUL, but not at 9..16
# tokens from WIDE_DECODE_N on. Staged, off: one H100 run so far (session 53, `scripts/jobs/s53_a.sh fmxmul`):
# silu_mul "mul" against shift -2.8 to -11.0% at M = 1 / 8 (11264 x 2048, 14336 x 4096, 28672 x 4096, 7168 x 2048;
# two cells ties in their noise) and -6.5 to -7.6% at M = 16 (11264 x 2048, 14336 x 4096, 7168 x 2048); M = 16
# 28672 x 4096 +17.6%: there "mul" takes the 4-warp CTA from 128 to 130 registers (ptxas 13.0 sm_90a), 4 -> 3 CTAs
# an SM, and the 896-CTA grid from 2 waves to 3 (minctas 4 holds it at 128 with a 40-byte stack: a tie, -0.7 /
# +0.1%, in sessions 53-54). The residual epilogue keeps shift (+1.4% at M = 8 4096 x 4096 in all three runs, with
# the same 96-register allocation either way). Session 54 ran it twice more (H100, the same job): the 11 covered
# silu_mul cells -2.7 to -10.9% and -3.0 to -10.8%; M = 1 11264 x 2048 and 28672 x 4096 were ties in their 7-11%
# noise in the first two runs (medians -3.9 to -5.5%) and beyond it in the third (-5.5 / -4.0%); no covered cell was
# ever slower. On since session 54 (the fused gpu tests on it: docs/validation.md).
FUSED_MXFP4_SILU_MUL = True
# decode_config_for: W4A16 MXFP4's shared-activation tiling at 9..16 tokens (WIDE_DECODE_N, warps x 2 tiles x 2
# groups: N / 64 CTAs) unrolled once where that makes its grid one wave, the plain kernel only: 4 warps over
# ONE_WAVE_CTAS[1] < N / 64 <= FOUR_CTA_CTAS, 8 warps (N = 16384) over WAVE_SMS < N / 64 <= ONE_WAVE_CTAS[0]. At
# unroll 2 MXFP4 takes 150 registers (3 CTAs of 4 warps an SM, 1 of 8: 28672 x 4096's 448 CTAs and 16384 x 4096's
# 256 run in two waves) where NVFP4 takes 106; at unroll 1 it takes 124 / 122 with no stack (ptxas 13.0 sm_90a,
# session 53).
# H100 2026-12-06 (session 54, `scripts/jobs/s53_a.sh mxwide` twice, cold weights, graph timer, unroll 1 against 2,
# µs, M = 9 / 16): 28672 x 4096 (448 CTAs) 39.40 -> 32.09 / 40.30 -> 33.02, 32768 x 4096 (512) 43.20 -> 33.30 / 44.76
# -> 34.47, 28672 x 2048 20.96 -> 17.61 / 21.64 -> 18.03, 16384 x 4096 (8 warps, 256) 23.45 -> 19.99 / 24.36 -> 20.44:
# -14 to -23% at every covered cell in both runs (prediction -8 to -20%); 20480 x 4096 (320 CTAs: one wave already at
# unroll 2, outside the rule) +13.2 / +13.6% under unroll 1. On, behind the gemm tier (docs/validation.md).
MXFP4_WIDE_ONE_WAVE = True
# decode_config_for: W4A16 at M <= 8 on 16 warps x 2 tiles (4096 <= K < LONG_K) halves its warps where its grid,
# N / 32 CTAs, is between one and two waves of one CTA an SM (WAVE_SMS < N / 32 <= ONE_WAVE_CTAS[0]: 94 registers a
# lane at 16 warps, 1 CTA an SM; at 8 warps 2 an SM, one wave), the plain kernel only. H100 2026-12-06 (session 54,
# `scripts/jobs/s53_a.sh w16`, cold weights, graph timer, 16 -> 8 warps, µs, M = 1 / 8): NVFP4 5120 x 4096 9.16 ->
# 7.65 / 9.43 -> 8.03, 6144 x 4096 9.39 -> 7.82 / 9.70 -> 8.31, 7168 x 4096 9.79 -> 8.24 / 10.11 -> 8.57, 8192 x 4096
# 10.21 -> 8.72 / 10.48 -> 9.05; MXFP4 -12.6 to -15.9% at the same cells; 4096 x 4096 (128 CTAs: one wave already)
# +13.3 to +16.9%. Then `scripts/jobs/s54_a.sh t3` (two more runs, 4608 / 5120 / 6144 / 8192 x 4096 and 6144 x 6144,
# both formats, M = 1 / 8): -13.2 to -23.5% at all 20 covered cells in both (6144 x 6144 -17.4 to -23.5%), the
# 4096 x 4096 control +12.2 to +16.6% (prediction -10 to -30%). On, behind the gemm tier (docs/validation.md).
EIGHT_WARP_WAVE = True
# decode_config_for: the same halving at 9..16 tokens (EIGHT_WARP_WAVE16, the plain kernel) and in the fused kernel's
# ONE_WAVE_EPILOGUES at M <= 16 (FUSED_EIGHT_WARP_WAVE). `scripts/decode_waves.py` (session 54, ptxas 13.0 sm_90a)
# found these grids at 16 warps x 2 tiles, 1 CTA an SM, 1.2-1.9 waves at 5120-8192 x 4096: plain M = 16 118 / 124
# registers (NVFP4 / MXFP4), silu_mul 114-128, residual 92-122; at 8 warps every one fits 2 an SM (one wave).
# H100 (session 54's peers table): M = 16 6144 x 4096 11.5 µs where M = 1 runs 7.8. Prediction -10 to -25%
# (docs/predictions/gemm_decode.md). H100 2026-12-06 15:52 (session 55, `scripts/jobs/s54_a.sh w8b`, two runs, cold
# weights, graph timer): plain M = 9 / 16 at 4608-8192 x 4096 and 6144 x 6144 -11.8 to -21.9% at all 40 rows (6144 x
# 4096 M = 16 11.5 -> 9.9 µs); residual -12.2 to -24.9%, silu_mul -1.1 to -18.5% (MXFP4 M = 16 the smallest, -1.1 to
# -4.0%) at all 72 rows; the 4096 x 4096 control (128 CTAs) within 1%. On, behind the gemm tier (661 passed).
EIGHT_WARP_WAVE16 = True
FUSED_EIGHT_WARP_WAVE = True
# fused_config: the fused silu_mul kernel keeps the plain heuristic's warp groups (wn 2: the 9..16-token grids from
# WIDE_DECODE_N on) where `one_wave` reaches it, as residual does (GROUPED_EPILOGUES), and MXFP4 runs them unrolled
# once. ptxas 13.0 sm_90a (session 54, CPU), M = 16: MXFP4 28672 x 4096 today 128 registers (4 CTAs an SM, 896 CTAs:
# 1.7 waves), wn 2 152 (3 an SM, 448 CTAs: 1.13 waves), wn 2 + unroll 1 96 (5 an SM: one wave); MXFP4 16384 x 2048 (8
# warps) 153 either way (1 an SM: 512 CTAs 3.9 waves, wn 2 1.9), wn 2 + unroll 1 100 (2 an SM: one wave); NVFP4
# 114-118 at either wn (28672 x 4096 1.7 waves -> one; 16384 x 2048 1.9 -> one). H100 2026-12-06 14:20 (session 54,
# `scripts/jobs/s53_a.sh fash`, one run, pdl off, wn 1 -> 2 at unroll 2): NVFP4 28672 x 4096 M = 9 / 16 -1.5 / -3.0%,
# 16384 x 2048 -9.5 / -7.8%; MXFP4 16384 x 2048 -10.1 / -10.3%, 28672 x 4096 +34 / +37% (the 152 registers).
# Prediction (docs/predictions/gemm_decode.md, session 54): NVFP4 -1 to -11%, MXFP4 -8 to -30%. H100 2026-12-06 15:51
# (session 55, `scripts/jobs/s54_a.sh fsg`, two runs, cold weights, graph timer, M = 9 / 16): the 8-warp grids (16384
# x 2048 / 4096: 512 CTAs -> 256, one wave of 2 an SM) won at all 8 cells in both runs, NVFP4 -3.6 to -9.8%, MXFP4
# -21.2 to -27.4% (16384 x 2048 M = 16 16.44 -> 12.06 µs). The 4-warp grids did not: MXFP4 unrolled once lost at
# 28672 x 2048 / 4096 (+4.3 to +19.0%, 5 CTAs an SM at 0.68 waves where unroll 2 ran 4 an SM at 1.7) and was mixed
# at 36864 x 4096 (+2.8 / -6.3%); NVFP4 won at 28672 (-2.0 to -7.1%, two cells ties in 8-10% noise) and lost at 36864
# x 4096 (+15 to +19%: 576 CTAs are 1.09 waves of 4 an SM). So the rule takes the 8-warp grids whose groups fit one
# wave (`fused_silu_groups`); the 4-warp NVFP4 grids of at most FOUR_CTA_CTAS are left open (noted in
# docs/predictions/gemm_decode.md). On, behind the gemm tier.
FUSED_SILU_GROUPS = True
# fused_silu_groups: NVFP4's 4-warp groups too, where they fit one wave of 4 CTAs an SM (N / 64 <= FOUR_CTA_CTAS: N up
# to 33792; 114 registers, ptxas 13.0 sm_90a). Session 55's runs at 28672 x 2048 / 4096: -2.0 to -7.1%, two K = 4096
# cells ties in 8-10% noise; 36864 (576 CTAs, 1.09 waves) +15 to +19%, outside. MXFP4's 4-warp grids stay one group
# (unrolled once they lost). H100 2026-12-06 16:27 (session 55, `scripts/jobs/s55_a.sh fsg4`, two runs, cold weights,
# graph timer, M = 9 / 16; prediction -2 to -10%): 20480 x 2048 -7.2 to -11.5%, 24576 x 4096 -11.0 to -12.6%, 28672 x
# 2048 -4.2 to -6.7%, 33792 x 2048 -6.3 to -8.1%, all beyond their noise; 28672 x 4096 -2.5 to -3.8%, ties in that
# shape's 3-8% cold-weight spread at three of its four rows (its median was lower in all four runs there, with the
# fsg run's two). The 36864 control tied (-0.1 / -0.2%). On with that looser bar at 28672 x 4096. Its config passed
# test_fused_silu_groups_on_the_gpu under session 55's first, wider FUSED_SILU_GROUPS; the test as it now stands has
# not run on a GPU (docs/validation.md, session 55).
FUSED_SILU_GROUPS4 = True
# fused_config: FUSED_MXFP4_SILU_MUL's multiply on the grids where `fused_silu_groups` gives MXFP4 silu_mul its
# 8-warp groups unrolled once (100 registers under either placement, ptxas 13.0 sm_90a: no register cliff there).
# H100 2026-12-06 16:27 (session 55, `scripts/jobs/s55_a.sh fmul`, two runs, M = 9 / 16 at 16384 x 2048 / 3072 /
# 4096, "mul" against shift; prediction -1 to -6%): -7.5 to -12.3% at all 12 rows, beyond their noise, with the
# same error against the fp32 reference as shift's at every row. On; test_fused_silu_groups_on_the_gpu pins it but
# has not run on a GPU since (docs/validation.md, session 55).
FUSED_MXFP4_GROUPS_MUL = True
# decode_config_for: from this K on, 1..8-token tiles of FP4 activations at 16 warps take two weight tiles
LONG_K = 8192
SHARED_A = ("bfloat16", "float16")  # the activation formats `ashare` exchanges (DecodeConfig)


DECODE_OPTS_ENV = "B12X_GEMM_DECODE_OPTS"
RULES_ENV = "B12X_DECODE_RULES"


def switches() -> tuple[str, ...]:
    """The names of this module's rule switches: its upper-case bool constants."""
    return tuple(name for name, value in globals().items() if name.isupper() and isinstance(value, bool))


def rules_from_env(value: str | None = None) -> dict[str, bool]:
    """Set the switches B12X_DECODE_RULES (or `value`) names, comma-separated NAME=1 / NAME=0 pairs (true/false,
    on/off, yes/no too), and return them; unset or empty sets nothing. Read once at import: a benchmark process
    times a staged rule's own code path with it. A name that is not a switch, or a value that is not a truth
    value, raises ValueError naming the variable and the choices."""
    value = os.environ.get(RULES_ENV, "") if value is None else value
    truth = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False, "off": False, "no": False}
    got, names = {}, switches()
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, flag = (part.strip() for part in item.partition("="))
        if not sep or name not in names or flag.lower() not in truth:
            raise ValueError(f"{RULES_ENV}: {item!r} is not NAME=1 or NAME=0 for a switch of {', '.join(names)}")
        got[name] = truth[flag.lower()]
    globals().update(got)
    return got


def _eight_warp_wave(ntiles: int, fused: str | None) -> bool:
    """Whether a 16-warp x 2-tile grid of 133-264 CTAs halves its warps: EIGHT_WARP_WAVE (plain, M <= 8),
    EIGHT_WARP_WAVE16 (plain, 9..16 tokens), FUSED_EIGHT_WARP_WAVE (the fused ONE_WAVE_EPILOGUES, M <= 16)."""
    if fused is None:
        return EIGHT_WARP_WAVE if ntiles == 1 else EIGHT_WARP_WAVE16 and ntiles == 2
    return FUSED_EIGHT_WARP_WAVE and fused in ONE_WAVE_EPILOGUES and ntiles <= 2


def fused_silu_groups(n: int, b_fmt: str, config) -> bool:
    """Whether the fused silu_mul kernel keeps `config`'s warp groups (the plain heuristic's decode config at N = `n`):
    FUSED_SILU_GROUPS, 8-warp groups (wn 2) whose CTAs (`DecodeConfig.ctas`) fit one wave of 2 an SM;
    FUSED_SILU_GROUPS4, NVFP4's 4-warp groups within one wave of 4 an SM."""
    if config.wn < 2:
        return False
    ctas = config.ctas(n)
    if config.warps == 8:
        return FUSED_SILU_GROUPS and ctas <= ONE_WAVE_CTAS[0]
    return FUSED_SILU_GROUPS4 and config.warps == 4 and b_fmt == "nvfp4" and ctas <= FOUR_CTA_CTAS


def with_decode_opts(config, opts: str | None = None):
    """`config` with the decode options of B12X_GEMM_DECODE_OPTS (or `opts`) applied: comma-separated
    DecodeConfig field=value pairs, e.g. "wcache=na,acache=el,wn=2,warps=x2" ("xN" multiplies the
    heuristic's value; true/false for flags). Unset or empty: `config` unchanged. `decode_config_for`
    applies it to the M <= 16 buckets (issue #6's): a way to run the whole stack with a swept option
    before it becomes the heuristic's; invalid ones raise."""
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
        if MXFP4_WIDE_ONE_WAVE and one_wave and fused is None and b_fmt == "mxfp4" and config.warps in (4, 8):
            # unroll 1 fits 4 CTAs of 4 warps an SM (2 of 8) where unroll 2 fits 3 (1): one wave over these grids
            lo, hi = (ONE_WAVE_CTAS[1], FOUR_CTA_CTAS) if config.warps == 4 else (WAVE_SMS, ONE_WAVE_CTAS[0])
            if lo < config.ctas(n) <= hi:
                config = dataclasses.replace(config, unroll=1)
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
        ctas = config.ctas(n)  # of 2 weight tiles (32 rows) each on the grids the rules below take (wn 1 here)
        if (
            one_wave
            and (warps, tiles) == (16, 2)
            and k < LONG_K
            and WAVE_SMS < ctas <= ONE_WAVE_CTAS[0]
            and _eight_warp_wave(ntiles, fused)
        ):
            config = dataclasses.replace(config, warps=8)
        if one_wave and (warps, tiles) == (8, 2):
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
                if DECODE16_SHARED_A:
                    config = dataclasses.replace(config, wn=2, ashare=True)
    # the E2M1 codes are the same in both formats; MXFP4's in the plain kernel (MXFP4_FP4_MUL) and the fused
    # silu_mul one below the wide 9..16-token grids (FUSED_MXFP4_SILU_MUL)
    mxfp4_mul = fused is None or (
        FUSED_MXFP4_SILU_MUL and fused == "silu_mul" and not (ntiles == 2 and n >= WIDE_DECODE_N)
    )
    mul_fmt = b_fmt == "nvfp4" or (mxfp4_hinted and MXFP4_FP4_MUL and mxfp4_mul)
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
        # MXFP4 in the plain kernel at 9..16 tokens whatever K: M = 16 4096 x 14336 -3.6 / -4.1% (MXFP4_FP4_MUL's runs)
        past_long_k = b_fmt == "mxfp4" and fused is None
        if DECODE8_FP4_MUL if ntiles == 1 else (DECODE16_FP4_MUL and (k < LONG_K or past_long_k)):
            config = dataclasses.replace(config, fp4="mul")
    return with_decode_opts(config) if max_m <= 16 else config


rules_from_env()
