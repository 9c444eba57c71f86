"""Run the quantizer Triton kernels under TRITON_INTERPRET=1 and compare bits with the oracles.

test_interpret.py runs this file in a fresh interpreter (TRITON_INTERPRET must be set before the
kernel modules import triton) and reads one JSON line: {case id: "ok" or what differed}. CASES is
plain data so the test module can parametrize over it without importing triton.

Interpreter patches (documented, like the bf16-dot one GPU.md describes), both measured in
triton 3.9's interpreter against torch:
- fp32 -> float8e4nv rounds wrongly (2943 of ~130k probe values: ties and subnormals, e.g. -400 ->
  -416), while the GPU emits `cvt.rn.satfinite.e4m3x2.f32` (test_compile.py pins that instruction
  in the PTX). The patch emulates the instruction: round to nearest even, saturate to +-448, and
  NaN -> 0xFF (a NaN byte the oracle never writes, so the kernels' own NaN handling is what the
  comparison sees).
- bf16 -> fp32 turns 254 of the 65536 bf16 patterns (subnormals) into wrong values; the GPU's
  `cvt.f32.bf16` is exact (the bits shifted left by 16), which is what the patch does.
Everything else runs as the interpreter does it.
"""

from __future__ import annotations

import json
import os
import sys

NVFP4_SHAPES = [(1, 16), (3, 48), (7, 64), (130, 160), (9, 2048)]
MXFP8_SHAPES = [(1, 32), (3, 96), (7, 64), (130, 160), (9, 2048)]
# (config, m, k): tiles smaller and larger than the tensor; BLOCK_K 16/32 splits a 4-column scale
# group across programs. Under the interpreter every program costs ~10 ms: tiny tiles get tiny shapes.
NVFP4_CONFIGS = [((16, 32, 4), 130, 160), ((32, 64, 4), 130, 160), ((128, 512, 8), 130, 160), ((4, 16, 1), 5, 48)]
# Every NVFP4 variant (encode, skip_dead, scale_words, layout) on a tile smaller than the tensor, with live
# rows ending inside a 128-row atom (dead programs) and K/16 not a multiple of 4 (scale padding).
NVFP4_VARIANTS = [
    ((16, 32, 4, "mul", False, False), 130, 160),
    ((32, 64, 4, "mul", True, False), 130, 160),
    ((16, 64, 2, "mul", True, True), 130, 160),
    ((16, 64, 4, "div", True, True), 5, 48),
    ((4, 16, 1, "mul", True, False), 5, 48),
    ((128, 512, 8, "mul", False, True), 130, 160),
    ((16, 32, 4, "search", False, False), 130, 160),
    ((16, 64, 2, "search", True, True), 130, 160),
    ((4, 16, 1, "search", True, False), 5, 48),
    ((16, 32, 4, "mul", False, False, "halves"), 130, 160),
    ((16, 64, 2, "search", True, True, "halves"), 130, 160),
    ((4, 16, 1, "mul", True, False, "halves"), 5, 48),
    ((32, 128, 4, "mul", True, False, "halves"), 130, 160),
    ((16, 32, 4, "search", False, False, "halves"), 130, 160),
    ((16, 64, 4, "mul", True, True, "halves"), 130, 160),
    # the FMA-pipe encode (`_steps.py`; its plain-Triton mirror here, ASM off under the interpreter)
    ((16, 32, 4, "steps", False, False), 130, 160),
    ((16, 64, 2, "steps", True, True), 130, 160),
    ((4, 16, 1, "steps", True, False), 5, 48),
    ((16, 32, 4, "steps", False, False, "halves"), 130, 160),
    ((16, 64, 4, "steps", True, True, "halves"), 130, 160),
    ((16, 32, 4, "steps", False, False, "halves", 4), 130, 160),  # k_iters: 6 tiles, 2 programs, 2 skipped
    ((4, 16, 1, "steps", False, False, "halves", 8), 5, 128),  # k_iters: 8 tiles, one program
    # the bf16-pair encode (`_pairs.py`; its plain-Triton mirror here: float64 directed roundings,
    # integer compares of the 15-bit magnitudes). On fp16 input the kernel runs "steps".
    ((16, 32, 4, "pairs", False, False, "halves"), 130, 160),
    ((16, 64, 4, "pairs", True, True, "halves", 4), 130, 160),  # 3 tiles in one program, 1 skipped
    ((16, 32, 4, "pairs", False, False, "halves", 4), 130, 160),
    ((4, 16, 1, "pairs", False, False, "halves", 8), 5, 128),
    ((16, 32, 4, "pairs", False, False, "halves", 4, True), 130, 160),  # prefetch: 3 tiles, 1 past the end
    ((4, 16, 1, "pairs", False, False, "halves", 8, True), 5, 128),
    # session 7: unrolled column loop, persistent grids (3 SMs under the interpreter: 16 programs per
    # SM = 48 programs; ranges crossing row blocks), streaming hints, register caps (no-ops here)
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True), 5, 48),  # 4 tiles, the last padding
    ((4, 16, 1, "pairs", False, False, "halves", 8, True, True), 5, 128),
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 0, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 1, True, False, 16, False, 56), 5, 48),  # 128 tiles, 48 programs
    ((4, 16, 1, "pairs", False, False, "halves", 1, False, False, 16), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 16, False, 56), 5, 128),  # 64 groups
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 16), 5, 128),
    ((4, 16, 1, "pairs", False, False, "halves", 2, True, True, 16, False, 56), 5, 128),  # 128 groups
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 16), 5, 128),
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 16, True, 56), 5, 128),
    ((16, 32, 4, "pairs", False, False, "halves", 1, True, False, 2), 130, 160),  # 96 tiles, 6 programs
    ((16, 32, 4, "pairs", False, False, "halves", 4, True, True, 2), 130, 160),  # 32 groups, 2 tiles skipped
    # thresholds from the lane table (`_pairs.pair_thresholds_lut`; here recomputed from each block's M)
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 4, True, True, 16, False, 0, True), 5, 128),
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 16, False, 0, True), 5, 128),
    ((4, 16, 1, "pairs", False, False, "halves", 1, False, False, 16, False, 0, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 1, True, False, 16, False, 64, True), 5, 48),
    # session 27: a group's loads all before its math (preload): 2 groups of 4 over 6 tiles (2 past the end),
    # pairs of tiles, a persistent grid of groups, the computed thresholds, dead padding programs
    ((16, 32, 4, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True, True), 130, 160),
    ((4, 16, 1, "pairs", False, False, "halves", 2, False, True, 0, False, 0, True, True), 5, 48),
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 16, False, 0, True, True), 5, 128),
    ((16, 32, 4, "pairs", False, False, "halves", 4, False, True, 0, False, 0, False, True), 130, 160),
    ((16, 64, 4, "pairs", True, True, "halves", 2, False, True, 0, False, 0, False, True), 130, 160),
    # session 31: programs in K-major order (one grid axis: row block x groups + group), a preload group of 4
    # tiles (the last one past the row's end) and a prefetching one
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True, True, False, True), 5, 48),
    ((16, 32, 4, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True, False, False, True), 130, 160),
]
# The lane table under global scales inside (float: 2^-60 <= gs <= 2^60) and outside its range (the
# uniform fallback to the computed thresholds): every special input, every gs kind.
LUT_GS = [(4, 16, 1, "pairs", False, False, "halves", 4, True, True, 0, False, 0, True)]
# A persistent grid on fp16 input (which runs "steps" tile by tile over the same ranges).
PERSISTENT_FP16 = [
    ((4, 16, 1, "pairs", False, False, "halves", 1, True, False, 16), 5, 48),
    (
        (4, 16, 1, "pairs", False, False, "halves", 4, True, True, 16),
        5,
        128,
    ),  # session 28: a PDL tile (the interpreter drops PDL: the constexpr is 0; the tuple's plumbing runs)
    ((4, 16, 1, "mul", True, False, "rows", 1, False, False, 0, False, 0, False, False, True), 5, 48),
    # session 31: a K-major grid on fp16 ("steps" over the same one-axis program ids)
    ((4, 16, 1, "pairs", False, False, "halves", 4, False, True, 0, False, 0, True, True, False, True), 5, 48),
]
# "steps" under other global scales and fp16: its rows and halves variants (few: the interpreter is slow).
STEPS_VARIANTS = [(16, 32, 4, "steps", False, False), (16, 32, 4, "steps", False, False, "halves")]
# "pairs" under other global scales (its thresholds scale u and gs by 2^64 below gs = 2^-64; "denorm_gs"
# is the smallest fp32, "max_gs" near the largest) and on fp16 (where it runs "steps").
PAIRS_VARIANTS = [(16, 32, 4, "pairs", False, False, "halves")]
MXFP8_CONFIGS = [((16, 32, 4), 130, 160), ((32, 64, 4), 130, 160), ((128, 512, 8), 130, 160), ((1, 32, 1), 5, 96)]
MXFP8_VARIANTS = [
    ((16, 32, 4, True), 130, 160),
    ((1, 64, 1, True), 5, 96),
    ((128, 512, 8, True), 130, 160),
    ((16, 32, 4, True, "quarters"), 130, 160),
    ((1, 64, 1, True, "quarters"), 5, 96),
    ((32, 128, 4, True, "quarters"), 130, 160),
    # session 15: the quarters through flat pointers (K 160: a 64-column tile's second block masked)
    ((16, 64, 4, True, "flat"), 130, 160),
    ((1, 64, 1, True, "flat"), 5, 96),
    ((1, 64, 1, True, "quarters", True), 5, 96),  # session 28: PDL (dropped by the interpreter)
    # session 31: programs in K-major order (one grid axis): 3 row blocks x 3 column tiles, the last ones masked
    ((4, 64, 2, True, "quarters", False, True), 9, 160),
    # session 32: hw_nan (the select is the device conversion's there; the interpreter keeps it)
    ((4, 64, 2, True, "quarters", False, True, True), 9, 160),
]
DATA = ["wide", "specials", "ties"]
# "near": x * gs within an fp32 ulp or two of midpoint * scale; "scale_ties": block scales on and
# next to every E4M3 value and rounding midpoint, subnormal ones included (`_e4m3_rn`'s rounding).
NVFP4_DATA = DATA + ["near", "scale_ties"]
# The configs and the input of the 05:55 H200 failures (test_gpu.py's `_random`: 10 decades of
# magnitude per block, 2% zero blocks; the global scale from amax, as a device tensor), at the
# failing shapes. The interpreter cannot show a ptxas fault, but it runs that exact path.
NVFP4_GPU_FAILED = [
    ((16, 256, 4, "mul", False, False), 1, 7168),
    ((16, 256, 4, "search", True, False), 33, 7168),
    ((64, 512, 8, "mul", False, False, "halves"), 1, 7168),
]


def _cases():
    cases = []
    for dtype in ("bfloat16", "float16"):
        for m, k in NVFP4_SHAPES:
            for data in DATA:
                cases.append(("nvfp4", dtype, m, k, None, data, "tensor"))
        for m, k in MXFP8_SHAPES:
            for data in DATA:
                cases.append(("mxfp8", dtype, m, k, None, data, ""))
    for cfg, m, k in NVFP4_CONFIGS:
        cases.append(("nvfp4", "bfloat16", m, k, cfg, "wide", "float"))
    for cfg, m, k in NVFP4_VARIANTS:
        # every data set for each variant; the other "steps"/"pairs" tilings (same math): fewer
        full = cfg[3] not in ("steps", "pairs") or cfg in STEPS_VARIANTS + PAIRS_VARIANTS
        decades = cfg[3] == "pairs" and len(cfg) < 9  # (not the slow prefetch loops)
        for data in NVFP4_DATA if full else ["specials", "near"] + (["decades"] if decades else []):
            cases.append(("nvfp4", "bfloat16", m, k, cfg, data, "tensor"))
    for cfg, m, k in PERSISTENT_FP16:
        cases.append(("nvfp4", "float16", m, k, cfg, "near", "tensor"))
    for cfg, m, k in NVFP4_GPU_FAILED:
        cases.append(("nvfp4", "bfloat16", m, k, cfg, "decades", "tensor"))
    for dtype in ("bfloat16", "float16"):
        for gs in ("tensor", "up", "down"):
            for cfg in (None, NVFP4_VARIANTS[0][0], NVFP4_VARIANTS[6][0], NVFP4_VARIANTS[9][0], *STEPS_VARIANTS):
                cases.append(("nvfp4", dtype, 9, 2048, cfg, "near", gs))
            for cfg in PAIRS_VARIANTS:  # a smaller shape: the interpreter runs the pair mirror slowly
                cases.append(("nvfp4", dtype, 3, 512, cfg, "near", gs))
    for cfg, m, k in MXFP8_CONFIGS:
        cases.append(("mxfp8", "bfloat16", m, k, cfg, "wide", ""))
    for cfg, m, k in MXFP8_VARIANTS:
        for data in DATA:
            for dtype in ("bfloat16", "float16"):
                cases.append(("mxfp8", dtype, m, k, cfg, data, ""))
    for gs in ("float", "tiny_gs", "huge_gs"):
        for cfg in (None, *STEPS_VARIANTS, *PAIRS_VARIANTS):
            cases.append(("nvfp4", "bfloat16", 7, 64, cfg, "specials", gs))
    for gs in ("float", "tiny_gs", "huge_gs", "denorm_gs", "max_gs"):
        for cfg in LUT_GS:
            cases.append(("nvfp4", "bfloat16", 7, 64, cfg, "specials", gs))
    for gs in ("denorm_gs", "max_gs"):
        for cfg in (None, *PAIRS_VARIANTS):
            for data in ("specials", "wide"):
                cases.append(("nvfp4", "bfloat16", 7, 64, cfg, data, gs))
    return cases


def case_id(case) -> str:
    op, dtype, m, k, cfg, data, gs = case
    cfg_s = "default" if cfg is None else "x".join(map(str, cfg))
    return "-".join(str(p) for p in (op, dtype, f"{m}x{k}", cfg_s, data, gs) if p != "")


CASES = {case_id(c): c for c in _cases()}


def _patch_conversions():
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.interpreter as interpreter

    original = interpreter._convert_float

    def convert(data, src, dst, rounding):
        if src == tl.bfloat16 and dst == tl.float32:  # cvt.f32.bf16 is exact: the bits, shifted
            return (np.ascontiguousarray(data).astype(np.uint32) << 16).view(np.float32)
        if src == tl.float32 and dst == tl.float8e4nv:
            t = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
            q = t.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
            return torch.where(t.isnan(), torch.full_like(q, 0xFF), q).numpy()
        return original(data, src, dst, rounding)

    interpreter._convert_float = convert


def make_input(data: str, m: int, k: int, dtype, block: int, seed: int):
    """x [m, k] of `dtype`: "wide" = randn over 12 decades; "specials" = zero / NaN / Inf / huge /
    tiny blocks; "ties" = values on the rounding midpoints of the E2M1 (block 16) or E4M3 grid;
    "near" (block 16) = per block a random E4M3 scale s (amax 6 s, so the block's scale is s at a
    global scale ~1) and the other values midpoint * s * (1 + d 2^-8), d in {-1, 0, 1};
    "scale_ties" (block 16, global scale 1) = per block amax = 6 t, t an E4M3 value or the midpoint
    of two (normal or subnormal; 6 t is exact in bf16/fp16, so the kernel's t is exactly that), or
    one ulp of x's dtype off it, and random values below amax; "decades" = test_gpu.py's `_random`
    (randn times 10^U(-5, 5) per block, 2% zero blocks)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-6, 6, k)[torch.randperm(k, generator=g)]
    if data == "decades":
        scale = 10 ** ((torch.rand(m, k // block, 1, generator=g) - 0.5) * 10)
        keep = (torch.rand(m, k // block, 1, generator=g) > 0.02).float()
        x = (torch.randn(m, k, generator=g).view(m, k // block, block) * scale * keep).view(m, k)
    elif data == "scale_ties":
        nb = m * k // block
        e4m3 = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        t = torch.cat([e4m3, (torch.cat([torch.zeros(1), e4m3[:-1]]) + e4m3) / 2])
        amax = (6 * t[torch.randint(0, t.numel(), (nb,), generator=g)]).to(dtype)
        step = torch.randint(-1, 2, (nb,), generator=g).to(torch.int16)  # one ulp down, none, up
        amax = (amax.view(torch.int16) + step).view(dtype).float().clamp(max=2688.0)
        blocks = (torch.rand(nb, block, generator=g) * 2 - 1) * amax[:, None]
        blocks[torch.arange(nb), torch.randint(0, block, (nb,), generator=g)] = amax
        x = blocks.view(m, k)
    elif data == "specials":
        finfo = torch.finfo(dtype)
        blocks = x.view(m * k // block, block)
        kind = torch.randint(0, 8, (blocks.shape[0], 1), generator=g)
        one = torch.zeros_like(blocks, dtype=torch.bool).scatter_(
            1, torch.randint(0, block, (blocks.shape[0], 1), generator=g), True
        )  # one random element per block
        amax = blocks.abs().amax(dim=1, keepdim=True)
        blocks.copy_(torch.where(kind == 0, torch.where(one, -0.0, 0.0), blocks))  # zero block, one -0
        blocks.copy_(torch.where((kind == 1) & one, float("nan"), blocks))  # one NaN
        blocks.copy_(torch.where(kind == 2, float("nan"), blocks))  # all NaN
        inf = torch.where(torch.rand(blocks.shape[0], 1, generator=g) < 0.5, float("inf"), float("-inf"))
        blocks.copy_(torch.where((kind == 3) & one, inf, blocks))  # one +-Inf
        blocks.copy_(torch.where(kind == 4, blocks * (finfo.max / amax), blocks))  # up to the dtype's max
        blocks.copy_(torch.where(kind == 5, blocks * (finfo.smallest_normal / 4), blocks))  # subnormals
        blocks.copy_(torch.where(kind == 6, -blocks.abs() * 1e-3, blocks))  # all negative, small
    elif data == "near":
        nb = m * k // block
        s = torch.randint(1, 127, (nb, 1), generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])[torch.randint(0, 7, (nb, block), generator=g)]
        d = torch.randint(-1, 2, (nb, block), generator=g).float()
        signs = torch.where(torch.rand(nb, block, generator=g) < 0.5, -1.0, 1.0)
        blocks = mids * s * (1 + d * 2.0**-8) * signs
        blocks[:, 0] = 6 * s[:, 0]
        x = blocks.view(m, k)
    elif data == "ties":
        if block == 16:  # E2M1 midpoints and grid points, with a 6 in the block so sf = 1 at gs = 1
            grid = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 0.0, 5.5])
        else:  # E4M3 midpoints (normal and subnormal), with 448 in the block so the scale is 1
            mids = [1.0625, 1.1875, 3.25, 0.5 + 1 / 32, 2.0**-10, 3 * 2.0**-10, 5 * 2.0**-10, 15 * 2.0**-10]
            grid = torch.tensor(mids + [448.0, 464.0 - 16, 208.0, 240.0] + [0.0] * 20)[:32]
        signs = torch.where(torch.rand(m, k, generator=g) < 0.5, -1.0, 1.0)
        x = grid.repeat(m, k // block) * signs
    return x.to(dtype)


def run_case(case) -> str:
    import torch

    from flashinfer.experimental.b12x._lib.quant import (
        nvfp4_global_scale,
        quantize_mxfp8,
        quantize_nvfp4,
        swizzle_scales,
        swizzled_size,
    )

    op, dtype_s, m, k, cfg, data, gs_kind = case
    dtype = getattr(torch, dtype_s)
    seed = sum(map(ord, case_id(case)))
    if op == "nvfp4":
        from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as kmod

        x = make_input(data, m, k, dtype, 16, seed)
        gs = {"tiny_gs": 2.0**-100, "huge_gs": 1e30, "up": 1 + 2.0**-20, "down": 1 - 2.0**-20}.get(gs_kind)
        gs = {"denorm_gs": 1e-45, "max_gs": 3e38}.get(gs_kind, gs)
        if gs is None:
            gs = 1.0 if data in ("ties", "near", "scale_ties") else float(nvfp4_global_scale(x))
        launcher = kmod.interpreted_launcher(k, None if cfg is None else kmod.NvFp4Config(*cfg))
        size = swizzled_size(m, k // 16)
        packed = torch.full((m, k // 2), 0xFF, dtype=torch.uint8)
        scales = torch.full((size + 512,), 0xFF, dtype=torch.uint8)  # 512 bytes past the end: untouched
        gs_t = torch.tensor([gs], dtype=torch.float32)
        if gs_kind == "float":
            launcher(x, packed, scales, torch.tensor([-1.0]), gs, 0, m)
        else:
            launcher(x, packed, scales, gs_t, 0.0, 1, m)
        ref_packed, ref_scales = quantize_nvfp4(x, gs)
        got = {"packed": packed, "scales": scales[:size], "tail": scales[size:]}
        want = {"packed": ref_packed, "scales": swizzle_scales(ref_scales, 0).view(torch.uint8)}
        want["tail"] = torch.full((512,), 0xFF, dtype=torch.uint8)
    else:
        from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as kmod

        x = make_input(data, m, k, dtype, 32, seed)
        launcher = kmod.interpreted_launcher(k, None if cfg is None else kmod.MxFp8Config(*cfg))
        values = torch.full((m, k), 0xAB, dtype=torch.uint8)
        scale_rows = torch.full((m, k // 32), 0xAB, dtype=torch.uint8)
        scale_mma = torch.full((swizzled_size(m, k // 32),), 0xAB, dtype=torch.uint8)
        launcher(x, values, scale_rows, scale_mma, m)
        ref_values, ref_scales = quantize_mxfp8(x)
        got = {"values": values, "scale_rows": scale_rows, "scale_mma": scale_mma}
        want = {"values": ref_values.view(torch.uint8), "scale_rows": ref_scales}
        want["scale_mma"] = swizzle_scales(ref_scales, 0xAB).view(torch.uint8)  # padding untouched
    bad = [name for name in got if not torch.equal(got[name], want[name])]
    if not bad:
        return "ok"
    name = bad[0]
    diff = (got[name] != want[name]).nonzero()
    first = tuple(diff[0].tolist())
    return f"{name} differs at {diff.shape[0]} positions, first {first}: got {int(got[name][first])}, want {int(want[name][first])}"


def main(ids: list[str]) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    _patch_conversions()
    import warnings

    warnings.simplefilter("ignore")  # numpy warns on the x / 0 the kernels mask away
    results = {}
    for cid in ids or list(CASES):
        try:
            results[cid] = run_case(CASES[cid])
        except Exception as e:  # reported per case, so one failure does not hide the others
            results[cid] = f"raised {type(e).__name__}: {e}"
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
