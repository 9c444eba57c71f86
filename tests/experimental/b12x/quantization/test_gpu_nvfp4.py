"""GPU tier: the NVFP4 live-M dispatch (`nvfp4/_dispatch.py`) and the "pairs" encode (`nvfp4/_pairs.py`)
bit for bit on the device.

Dispatch: a plan with capacity >= LARGE_FROM_M selects two tiles; every live M below the threshold
runs the small one, every M from it the large one. Pairs: its inline PTX (`set.gt.u32.bf16x2`
mask sums, the fma-corrected division by 6, `mul.rm.f32`, `max.bf16x2`, `prmt`) runs only here. Checked against
the oracle with outputs poisoned first (0xFF bytes): M on both sides of the threshold and at it, K
from 32 to 16384 (tails: K/16 not a multiple of 4, K not a multiple of the tile), random rows over
ten decades and extreme blocks (zero, NaN, Inf, max, subnormal), the global scale as a float and as
a device tensor and at its extremes (the smallest fp32 to 3e38); CUDA-graph capture of every tile (small, mid, large);
freeze after prepare (a new M on either side compiles nothing).
"""

import importlib.util
from pathlib import Path

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import nvfp4_global_scale
from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv_kernel

_spec = importlib.util.spec_from_file_location("_b12x_quant_gpu_helpers_nv", Path(__file__).with_name("test_gpu.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)  # the gpu tier's input makers and bitwise checks
_check_nvfp4, _extreme, _poison_nvfp4, _random = (
    _helpers._check_nvfp4,
    _helpers._extreme,
    _helpers._poison_nvfp4,
    _helpers._random,
)

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
T = _dispatch.LARGE_FROM_M
DISPATCH_MS = [1, 7, 128, T - 1, T, 4097]
DISPATCH_KS = [32, 160, 4096, 7168, 16384]


@pytest.fixture(scope="module")
def plans(session):
    """One dispatch plan per K at capacity 4097, prepared once."""
    cache = {}

    def get(k, dtype=torch.bfloat16):
        if (k, dtype) not in cache:
            p = nvfp4.plan(4097, k, invocation=dtype)
            session.prepare([p])
            assert isinstance(p.selection, _dispatch.NvFp4Dispatch)
            assert len(p.state.kernels) == len(p.selection.configs()) >= 2
            cache[(k, dtype)] = (p, nvfp4.allocate_outputs(p))
        return cache[(k, dtype)]

    return get


@pytest.mark.parametrize("k", DISPATCH_KS)
@pytest.mark.parametrize("m", DISPATCH_MS)
def test_dispatch_bitwise(plans, m, k):
    p, out = plans(k)
    for seed, kind in ((m * 31 + k, "random"), (m * 31 + k + 1, "extreme")):
        x = _random(m, k, torch.bfloat16, seed) if kind == "random" else _extreme(m, k, torch.bfloat16, seed, 16)
        gs = nvfp4_global_scale(x)
        for as_tensor in (True, False):
            _poison_nvfp4(out)
            nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1) if as_tensor else float(gs), outputs=out)
            _check_nvfp4(out, x, gs)


@pytest.mark.parametrize("k", [4096, 7168])  # 4096: the mid tile K-major (session 31), fp16 through "steps"
@pytest.mark.parametrize("m", [5, T + 3])
def test_dispatch_float16_and_scaled(plans, m, k):
    p, out = plans(k, torch.float16)
    x = _random(m, k, torch.float16, m)
    for gs in (1.0, 2.0**-100, 1e30, float(nvfp4_global_scale(x))):
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=gs, outputs=out)
        _check_nvfp4(out, x, gs)


def test_dispatch_graph_captures_every_tile(plans):
    # K = 16384: the preload (mid) tile runs up to 2^26 / K = 4096 rows, then the large tile (the Triton one since
    # session 46; with the CuTe switch on, the CuTe tile from CUTE_FROM_M): 100 / 2000 / 4097 rows take the small, mid
    # and large tiles either way
    K = 16384
    p, out = plans(K)
    small, mid, large = p.state.extra["launchers"][1][0]
    cute = _dispatch.CUTE_ABOVE_SMALL is not None
    assert len({id(small), id(mid), id(large)}) == 3 and p.selection.mid_until == (3072 if cute else 4097)
    assert [p.selection.tile(m) for m in (100, 2000, 4097)] == [0, 1, 2]
    xs = [torch.empty(m, K, dtype=torch.bfloat16, device="cuda") for m in (100, 2000, 4097)]
    outs = [out, nvfp4.allocate_outputs(p), nvfp4.allocate_outputs(p)]
    gs = torch.empty(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x, o in zip(xs, outs):
            nvfp4.run(plan=p, x=x, global_scale=gs, outputs=o)
    for seed, value in ((2, 0.25), (3, 7000.0)):
        for x in xs:
            x.copy_(_random(x.shape[0], K, torch.bfloat16, seed + x.shape[0]))
        gs.fill_(value)
        for o in outs:
            _poison_nvfp4(o)
        graph.replay()
        for x, o in zip(xs, outs):
            _check_nvfp4(o, x, value)


def test_dispatch_freeze_compiles_nothing(session):
    p = nvfp4.plan(8192, 2048)
    session.prepare([p])
    out = nvfp4.allocate_outputs(p)
    count = nv_kernel.compile_nvfp4.compile_count
    session.freeze("test")
    try:
        for m in (1, T - 1, T, 8192):
            x = _random(m, 2048, torch.bfloat16, m)
            _poison_nvfp4(out)
            nvfp4.run(plan=p, x=x, global_scale=4.0, outputs=out)
            _check_nvfp4(out, x, 4.0)
    finally:
        b12x.unfreeze_kernel_resolution()
    assert nv_kernel.compile_nvfp4.compile_count == count


# -- "pairs" --------------------------------------------------------------------------------------
PAIRS = [c for c in nv_kernel.candidate_configs(7168, unvalidated=True) if c.encode == "pairs"]
PAIRS_MAIN = [  # 8x256x4 k_iters 4; its skip_dead + scale_words twin; its prefetch twin
    PAIRS[0],
    next(c for c in PAIRS if c.skip_dead and c.scale_words),
    next(c for c in PAIRS if c.prefetch),
]
PAIRS_MS = [1, 7, 128, 4097]
EXTREME_GS = [1.0, 1e-45, 2.0**-100, 2.0**-64, 1e-20, 1e30, 3e38]


@pytest.fixture(scope="module")
def pair_plans(session):
    cache = {}

    def get(cfg, k, dtype=torch.bfloat16):
        cfg = nv_kernel.capped_config(k, cfg)
        if (cfg, k, dtype) not in cache:
            p = nvfp4.plan(4097, k, invocation=dtype, override=cfg)
            session.prepare([p])
            assert p.selection == cfg
            cache[(cfg, k, dtype)] = (p, nvfp4.allocate_outputs(p))
        return cache[(cfg, k, dtype)]

    return get


@pytest.mark.parametrize("k", DISPATCH_KS)
@pytest.mark.parametrize("m", PAIRS_MS)
@pytest.mark.parametrize("cfg", PAIRS_MAIN, ids=lambda c: "-".join(str(v) for v in vars(c).values()))
def test_pairs_bitwise(pair_plans, cfg, m, k):
    p, out = pair_plans(cfg, k)
    for seed, kind in ((m * 37 + k, "random"), (m * 37 + k + 1, "extreme")):
        x = _random(m, k, torch.bfloat16, seed) if kind == "random" else _extreme(m, k, torch.bfloat16, seed, 16)
        gs = nvfp4_global_scale(x)
        for as_tensor in (True, False):
            _poison_nvfp4(out)
            nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1) if as_tensor else float(gs), outputs=out)
            _check_nvfp4(out, x, gs)


@pytest.mark.parametrize("gs", EXTREME_GS)
@pytest.mark.parametrize("cfg", PAIRS, ids=lambda c: "-".join(str(v) for v in vars(c).values()))
def test_pairs_global_scale_extremes(pair_plans, cfg, gs):
    p, out = pair_plans(cfg, 4096)
    for x in (_extreme(300, 4096, torch.bfloat16, 5, 16), _random(300, 4096, torch.bfloat16, 6)):
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=torch.tensor([gs], device="cuda"), outputs=out)
        _check_nvfp4(out, x, gs)


def test_pairs_on_float16_runs_steps(pair_plans):
    p, out = pair_plans(PAIRS[0], 7168, torch.float16)
    for m in (1, 4097):
        x = _random(m, 7168, torch.float16, m)
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=float(nvfp4_global_scale(x)), outputs=out)
        _check_nvfp4(out, x, float(nvfp4_global_scale(x)))
