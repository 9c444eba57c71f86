"""The tiled kernel's large-M candidates (`_kernel_tiled.LARGE_M`: 64 x 64 warp tiles, and the grouped
CTA raster `TiledConfig.group_m`): the raster is a bijection onto the tile grid, the kernel logic
matches the fp32 reference on the CPU emulator for every recipe a config supports, every tiling
compiles for sm_90a and sm_120a without spilling, and (gpu) computes the product at M = 129 / 2048 on
the issue's shapes."""

import itertools

import numpy as np
import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm._shared.formats import FORMAT
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

from .emulated import RASTER_OPS
from .emulated import poisoned_launch_args as _launch_args
from .emulator import GlobalMemory, emulate_tile
from .helpers import PAIRS, check_tolerance, make_operands

ARCHS = ("sm_90a", "sm_120a")
# One config per distinct bf16-MMA tiling of LARGE_M (group_m does not change the K loop), grouped
# raster on; MIXED: the candidates that interleave the next K-tile's stores with the MMAs.
TILINGS = tuple({(c.bm, c.bn, c.threads): c for c in KT.LARGE_M if c.group_m and not c.mix}.values())
MIXED = tuple(c for c in KT.LARGE_M if c.mix)


def _id(c):
    """Test id that `-k` can select: 128x256w8g16m3 (bm x bn, warps, group_m, mix), f8 for fp8_mma."""
    if not isinstance(c, KT.TiledConfig):
        return repr(c)
    return f"{c.bm}x{c.bn}w{c.threads // 32}g{c.group_m}m{c.mix}" + ("f8" if c.fp8_mma else "")


ISSUE_SHAPES = ((4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048))


@pytest.mark.interpret
def test_wide_candidates_are_offered_only_past_256_rows():
    assert set(KT.LARGE_M) <= set(KT.candidate_configs(2048))
    assert not set(KT.LARGE_M) & set(KT.candidate_configs(256))
    assert KT.default_config(4096) == KT.TiledConfig(128, 128, 2, 4, group_m=16)
    assert KT.default_config(4096, 4096) == KT.TiledConfig(128, 128, 2, 4, group_m=16)
    assert KT.default_config(4096, KT.WIDE_N) == KT.TiledConfig(128, 256, 2, 4, group_m=16, mix=2)
    assert KT.default_config(256, 1 << 20) == KT.TiledConfig(64, 128, 2, 2)
    assert KT.default_config(4096, KT.WIDE_N, "fp8_block") == KT.TiledConfig(128, 128, 2, 4, group_m=16)


@pytest.mark.interpret
def test_default_config_implements_every_pair():
    """The heuristic never picks a tile the kernel rejects, for any format pair and output dtype."""
    for a_fmt, b_fmt in itertools.product(FORMAT, FORMAT):
        for out in ("bfloat16", "float16", "float32"):
            old = KT.why_not(a_fmt, b_fmt, out, KT.TiledConfig(128, 128, 2, 4))
            for n in (4096, KT.WIDE_N, 28672):
                new = KT.why_not(a_fmt, b_fmt, out, KT.default_config(4096, n, b_fmt))
                assert (new is None) == (old is None), (a_fmt, b_fmt, out, n, new)
    assert KT.default_config(4096, KT.WIDE_N) in KT.LARGE_M and KT.default_config(4096) in KT.LARGE_M
    assert len(TILINGS) == 4 and len(MIXED) == 6


@pytest.mark.interpret
@pytest.mark.parametrize("group_m", [0, 1, 2, 3, 8, 16])
@pytest.mark.parametrize("grid_m, grid_n", [(1, 1), (1, 7), (5, 3), (16, 112), (17, 5)])
def test_grouped_raster_visits_every_tile_once(group_m, grid_m, grid_n):
    """Launch order is x fastest, then y: the first min(g, grid_m) * grid_n CTAs cover that many M-tiles
    only; the idle CTAs (n0 >= N, at most g - 1 per N-tile) all come after every busy one, so the
    block scheduler hands out the busy CTAs first, one an SM while there are SMs free."""
    logic = KT.TiledLogic("nvfp4", "nvfp4", "bfloat16", KT.TiledConfig(128, 256, 2, 4, group_m=group_m))
    gx, gy, gz = logic.grid(grid_m, grid_n)
    order = [logic.tile_origin(RASTER_OPS, (x, y), grid_m) for y in range(gy) for x in range(gx)]
    busy = [(m0, n0) for m0, n0 in order if n0 < grid_n * 256]
    assert sorted(busy) == sorted((i * 128, j * 256) for i in range(grid_m) for j in range(grid_n))
    assert gz == 1 and len(order) - len(busy) <= max(group_m - 1, 0) * grid_n
    assert order[: len(busy)] == busy  # no idle CTA before a busy one
    assert all(m0 < grid_m * 128 for m0, _ in order)
    if group_m:
        assert {m0 // 128 for m0, _ in busy[: min(group_m, grid_m) * grid_n]} == set(range(min(group_m, grid_m)))


@pytest.mark.interpret
def test_invalid_group_m_is_rejected():
    with pytest.raises(ValueError, match=r"group_m must be 0 \(2-D grid\) or 1..64 M-tiles per raster group"):
        KT.TiledLogic("nvfp4", "nvfp4", "bfloat16", KT.TiledConfig(group_m=65))


# ---- CPU emulator: the kernel body with the launch grid and raster of the config -------------------
def run_tiled_grid(a_fmt, b_fmt, out_dtype, config, args, alpha):
    """Emulate compile_tiled(...)(*args, alpha): every CTA of `TiledLogic.grid`, placed by
    `tile_origin`, runs the kernel's K loop (loads, `k_tile`: math and stores to the other buffer,
    one barrier). mix = 0: all warps store before any warp's math; mix > 0: warp after warp, each
    interleaving its own stores with its math. Both are legal schedules that expose a K-tile which
    writes the buffer another warp still reads."""
    logic = KT.TiledLogic(a_fmt, b_fmt, out_dtype, config)
    gmem = GlobalMemory()
    bases = [gmem.put(t) for t in args]
    c = args[4]
    m, n = c.shape
    k = args[2].shape[1] * 8 // FORMAT[b_fmt].value_bits
    rt = KT.Runtime(*bases, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
    grid_m = -(-m // config.bm)
    gx, gy, _ = logic.grid(grid_m, -(-n // config.bn))
    for by in range(gy):
        for bx in range(gx):
            m0, n0 = logic.tile_origin(RASTER_OPS, (bx, by), grid_m)
            if n0 >= n:  # an idle CTA of the grouped raster's short last group: the kernel skips it whole
                continue
            emulate_tile(logic, gmem, rt, np.int32(m0), np.int32(n0))
    raw = torch.from_numpy(gmem.get(bases[4])[: c.numel() * c.element_size()].copy())
    return raw.view(c.dtype).reshape(c.shape)


def _supported(cfg):
    return [(a, b) for a, b in PAIRS if KT.can_implement(a, b, "bfloat16", cfg)]


FAMILY_PAIRS = (("nvfp4", "nvfp4"), ("mxfp8", "mxfp8"), ("bfloat16", "fp8_block"), ("fp8_tensor", "fp8_tensor"))


def _pairs_for(cfg):
    """Every supported recipe for the 128 x 256 tilings with mix 0 and 3 (the main candidates), one
    per operand family for the others: they differ from those only in warp, span and store counts."""
    pairs = _supported(cfg)
    if cfg.bn == 256 and cfg.mix in (0, 3):
        return pairs
    return [p for p in pairs if p in FAMILY_PAIRS or cfg.fp8_mma]


@pytest.mark.interpret
@pytest.mark.parametrize("cfg", TILINGS, ids=_id)
def test_tilings_on_the_emulator(cfg):
    """M = 129: one full 128-row M-tile plus a 1-row tail (or part of one 256-row tile); N = 144 a
    partial N-tile; K = 128 two K-tiles. Every recipe for the 128 x 256 tiling (the main candidate),
    one per weight family for the others (their loops differ from it only in warp and span counts)."""
    pairs = _pairs_for(cfg)
    assert len(pairs) >= (10 if cfg.bn == 256 else 3)
    for i, (a_fmt, b_fmt) in enumerate(pairs):
        ops = make_operands(a_fmt, b_fmt, 129, 144, 128, seed=20 + i)
        args, alpha = _launch_args(ops, "bfloat16")
        check_tolerance(run_tiled_grid(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize("cfg", MIXED, ids=_id)
def test_mixed_store_schedules_on_the_emulator(cfg):
    """mix > 0 (`TiledLogic.k_tile`): every recipe for 128 x 256 with mix = 3 (12 store groups over 3
    k-steps), one per weight family for the others; fp8_mma: tensor, block FP8 and MXFP8 (its per-32
    block scales on each k-step's partial sums)."""
    pairs = _pairs_for(cfg)
    if cfg.fp8_mma:
        assert sorted(pairs) == [("fp8_block", "fp8_block"), ("fp8_tensor", "fp8_tensor"), ("mxfp8", "mxfp8")]
    for i, (a_fmt, b_fmt) in enumerate(pairs):
        ops = make_operands(a_fmt, b_fmt, 129, 144, 128, seed=40 + i)
        args, alpha = _launch_args(ops, "bfloat16")
        check_tolerance(run_tiled_grid(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize(
    "cfg, m",
    [
        (KT.TiledConfig(128, 128, 2, 4, group_m=2), 300),  # 3 M-tiles: groups of 2 and 1
        (KT.TiledConfig(128, 256, 2, 4, group_m=3, mix=2), 520),  # 5 M-tiles: groups of 3 and 2
        (KT.TiledConfig(256, 128, 4, 2, group_m=8), 300),
    ],
    ids=_id,
)
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_partial_raster_groups_and_outputs_on_the_emulator(cfg, m, out_dtype):
    ops = make_operands("mxfp8", "mxfp8", m, 400, 128, seed=m)
    args, alpha = _launch_args(ops, out_dtype)
    check_tolerance(run_tiled_grid("mxfp8", "mxfp8", out_dtype, cfg, args, alpha), ops, out_dtype)


@pytest.mark.interpret
def test_invalid_mix_is_rejected():
    with pytest.raises(ValueError, match=r"mix must be 0..4 \(k-steps of a K-tile that carry the next tile's stores\)"):
        KT.TiledLogic("nvfp4", "nvfp4", "bfloat16", KT.TiledConfig(mix=5))


# ---- compile: both archs, no spills ----------------------------------------------------------------
def _check_compiled(fn, arch, threads, cuda_binary, max_stack=0):
    ptx = fn.artifacts.PTX
    assert [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")] == [arch]
    assert "mma.sync.aligned.m16n8k" in ptx and "wgmma" not in ptx and "tcgen05" not in ptx
    usage = cuda_binary.resources(fn.artifacts.CUBIN)
    assert usage["STACK"] <= max_stack and usage["LOCAL"] == 0, f"spills: {usage}"
    assert int(usage["REG"]) * threads <= 65536, usage


def _stack_allowance(cfg):
    """ptxas keeps 128 x 128 / 8 warps at 128 registers (two CTAs per SM) and spills a few words there
    (the unchanged default already does for fp8_tensor: 16 bytes); 64 x 64 warp tiles must not spill."""
    return 16 if (cfg.bm, cfg.bn, cfg.threads) == (128, 128, 256) else 0


def _compile_case(a_fmt, b_fmt, cfg, arch, cuda_binary):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    fn = KT.compile_tiled(a_fmt, b_fmt, "bfloat16", cfg, arch=arch)
    _check_compiled(fn, arch, cfg.threads, cuda_binary, _stack_allowance(cfg))
    return fn


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
@pytest.mark.parametrize("cfg", TILINGS + MIXED, ids=_id)
def test_candidates_compile_without_spills(cfg, fmt, arch, cuda_binary):
    if cfg.fp8_mma:
        fmt = {"nvfp4": "fp8_tensor", "mxfp8": "fp8_block"}[fmt]
        if fmt == "fp8_block":
            pytest.skip("fp8_mma + block-FP8 at 128 x 128 spills like the default fp8_mma config (96 B)")
    _compile_case(fmt, fmt, cfg, arch, cuda_binary)


@pytest.mark.compile
def test_grouped_raster_keeps_the_k_loop(cuda_binary):
    """group_m changes only where a CTA's tile lies (and skips idle CTAs), not its loads or math."""
    fn = _compile_case("nvfp4", "nvfp4", KT.TiledConfig(128, 256, 2, 4, group_m=8), "sm_90a", cuda_binary)
    plain = _compile_case("nvfp4", "nvfp4", KT.TiledConfig(128, 256, 2, 4), "sm_90a", cuda_binary)
    for needle in ("mma.sync.aligned.m16n8k16", "ld.global.nc.v4", "ldmatrix", "st.shared.v4"):
        assert fn.artifacts.PTX.count(needle) == plain.artifacts.PTX.count(needle), needle
    assert fn.artifacts.PTX.count("bra") > plain.artifacts.PTX.count("bra")  # the idle-CTA exit


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cfg", KT.LARGE_M, ids=_id)
def test_every_wide_config_and_recipe_compiles(cfg, arch, cuda_binary):
    for a_fmt, b_fmt in _supported(cfg):
        if cfg.threads == 128 and FORMAT[a_fmt].family == "raw16":
            continue  # 128 x 128 / 4 warps with 16-bit activations: 8 bytes of stack (sm_90a), not a candidate use
        if cfg.fp8_mma and b_fmt == "fp8_block":
            continue  # spills like the default fp8_mma config
        _compile_case(a_fmt, b_fmt, cfg, arch, cuda_binary)


# ---- gpu: the issue's shapes, M = 129 and 2048 --------------------------------------------------
_WEIGHTS: dict = {}


def _gpu_operands(a_fmt, b_fmt, m, n, k):
    key = (b_fmt, n, k)
    if key not in _WEIGHTS:
        _WEIGHTS.clear()
        _WEIGHTS[key] = make_operands("bfloat16", b_fmt, 1, n, k, seed=n + k, device="cuda").weight
    return make_operands(a_fmt, b_fmt, m, n, k, seed=m + 1, device="cuda", weight=_WEIGHTS[key])


def _gpu_run(ops, cfg):
    bucket = L.bucket_for(ops.m)
    query = b12x.gemm.blockscaled.GemmQuery(ops.a_fmt, ops.b_fmt, ops.n, ops.k, max_m=ops.m, m_values=(ops.m,))
    plan = b12x.gemm.blockscaled.plan(query, override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    out = torch.full((ops.m, ops.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    lhs = ops.a_values if ops.a_scales is None else (ops.a_values, ops.a_scales)
    b12x.gemm.blockscaled.mm(lhs, ops.weight, out, plan=plan, alpha=ops.alpha)
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", TILINGS + MIXED, ids=_id)
def test_gpu_candidates_recipes(cfg):
    """M = 129 (tails in M and N) on 7168 x 2048, the recipes `_pairs_for` picks."""
    for a_fmt, b_fmt in _pairs_for(cfg):
        ops = _gpu_operands(a_fmt, b_fmt, 129, 7168, 2048)
        check_tolerance(_gpu_run(ops, cfg), ops, "bfloat16")


@pytest.mark.gpu
@pytest.mark.parametrize("n, k", ISSUE_SHAPES)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
def test_gpu_wide_configs_issue_shapes(fmt, n, k):
    """Every LARGE_M candidate at M = 2048 and 129 on the issue's shapes."""
    for m in (2048, 129):
        ops = _gpu_operands(fmt, fmt, m, n, k)
        for cfg in KT.LARGE_M:
            if KT.can_implement(fmt, fmt, "bfloat16", cfg):
                check_tolerance(_gpu_run(ops, cfg), ops, "bfloat16")
