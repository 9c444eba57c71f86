"""GPU tier: the CuTe NVFP4 quantizer (`nvfp4/_kernel_cute.py`, a plan's `override=CuteTile(...)`) bit for bit
against the oracle: M from 1 to 4097 (live M below the capacity, rows past it untouched), K from 32 to 16384
(K / 16 not a multiple of 4, several CTA columns), bf16 and fp16, random rows over ten decades and extreme
blocks (zero, NaN, Inf, max, subnormal), the global scale as a float and as a device tensor and at its
extremes, halves beside every threshold, every tile shape, a mixed dispatch (Triton small tile, CuTe large tile), PDL, and CUDA-graph replay."""

import importlib.util
from pathlib import Path

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import nvfp4_global_scale
from flashinfer.experimental.b12x.quantization.nvfp4 import _dispatch
from flashinfer.experimental.b12x.quantization.nvfp4._kernel import default_config
from flashinfer.experimental.b12x.quantization.nvfp4._kernel_cute import CuteTile

_spec = importlib.util.spec_from_file_location("_b12x_quant_gpu_helpers_cute", Path(__file__).with_name("test_gpu.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
_check, _extreme, _poison, _random = _helpers._check_nvfp4, _helpers._extreme, _helpers._poison_nvfp4, _helpers._random
_spec = importlib.util.spec_from_file_location("_b12x_nvfp4_cute_cpu", Path(__file__).with_name("test_nvfp4_cute.py"))
_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cpu)

pytestmark = pytest.mark.gpu
nvfp4 = b12x.quantization.nvfp4
CAP = 4100
MS = [1, 7, 128, 129, 4097]
KS = [32, 48, 160, 4096, 7168, 16384]
TILES = [
    CuteTile(),
    CuteTile(4, 4),  # the default from 4096 rows in session 44
    CuteTile(4, 2),  # the default from 3072 rows in session 45; `_dispatch.CUTE_TILE` (the switch, off since 46)
    CuteTile(4, 8),
    CuteTile(16, 2),
    CuteTile(8, 1),
    CuteTile(8, 2, repeat=4),
    CuteTile(4, 1, repeat=3),
]


@pytest.fixture(scope="module")
def plans(session):
    cache = {}

    def get(k, tile=TILES[0], dtype=torch.bfloat16, pdl=False):
        key = (k, tile, dtype, pdl)
        if key not in cache:
            p = nvfp4.plan(CAP, k, invocation=dtype, override=tile, pdl=pdl)
            session.prepare([p])
            cache[key] = (p, nvfp4.allocate_outputs(p))
        return cache[key]

    return get


def _run_checked(p, out, x, gs, as_tensor):
    _poison(out)
    nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1) if as_tensor else float(gs), outputs=out)
    _check(out, x, gs)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("m", MS)
def test_cute_bitwise(plans, m, k):
    p, out = plans(k)
    for seed, kind in ((m * 31 + k, "random"), (m * 31 + k + 1, "extreme")):
        x = _random(m, k, torch.bfloat16, seed) if kind == "random" else _extreme(m, k, torch.bfloat16, seed, 16)
        gs = nvfp4_global_scale(x)
        for as_tensor in (True, False):
            _run_checked(p, out, x, gs, as_tensor)


@pytest.mark.parametrize("tile", TILES[1:], ids=repr)
@pytest.mark.parametrize("m, k", [(7, 4096), (4097, 7168), (129, 48)])
def test_cute_tiles(plans, tile, m, k):
    p, out = plans(k, tile)
    x = _extreme(m, k, torch.bfloat16, m + k, 16)
    _run_checked(p, out, x, nvfp4_global_scale(x), True)


@pytest.mark.parametrize("m, k", [(5, 4096), (4097, 7168), (33, 160)])
def test_cute_float16(plans, m, k):
    p, out = plans(k, CuteTile(), torch.float16)
    for seed, kind in ((m + k, "random"), (m + k + 1, "extreme")):
        x = _random(m, k, torch.float16, seed) if kind == "random" else _extreme(m, k, torch.float16, seed, 16)
        _run_checked(p, out, x, nvfp4_global_scale(x), True)


@pytest.mark.parametrize("gs", [2.0**-126, 1.2e-38, 1e-20, 1.0, 3.0, 1e20, 3.0e38])
def test_cute_global_scale_extremes(plans, gs):
    p, out = plans(4096)
    x = _random(129, 4096, torch.bfloat16, 5)
    _run_checked(p, out, x, torch.tensor(gs, dtype=torch.float32, device="cuda"), True)
    _run_checked(p, out, x, torch.tensor(gs, dtype=torch.float32, device="cuda"), False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cute_at_every_threshold(plans, dtype):
    """Halves on and beside every threshold of every reachable scale (`test_nvfp4_cute.threshold_rows`), at global
    scales where some thresholds are the rule's third candidate."""
    name = str(dtype).removeprefix("torch.")
    for gs in _cpu.THIRD_CANDIDATE[name]:
        x, _ = _cpu.threshold_rows(name, gs)
        for tile in (CuteTile(), CuteTile(4, 2), CuteTile(4, 1, repeat=3)):
            p, out = plans(32, tile, dtype)
            _run_checked(p, out, x.cuda(), torch.tensor(gs, dtype=torch.float32, device="cuda"), True)


@pytest.mark.parametrize("tile", [CuteTile(), CuteTile(4, 2)], ids=["8x4", "4x2"])
def test_cute_pdl_and_graph_replay(plans, tile):
    p, out = plans(7168, tile, torch.bfloat16, True)
    x = _random(300, 7168, torch.bfloat16, 11)
    gs = nvfp4_global_scale(x).reshape(1)
    _run_checked(p, out, x, gs, True)
    _poison(out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nvfp4.run(plan=p, x=x, global_scale=gs, outputs=out)
    for seed in (12, 13):
        x.copy_(_random(300, 7168, torch.bfloat16, seed))
        gs.copy_(nvfp4_global_scale(x).reshape(1))
        _poison(out)
        graph.replay()
        _check(out, x, gs[0])


def test_cute_in_a_dispatch(session):
    """A Triton small tile and the CuTe large tile in one plan: the live M picks, both bit-exact."""
    k = 4096
    sel = _dispatch.NvFp4Dispatch(default_config(k), CuteTile(), large_from=64)
    p = nvfp4.plan(CAP, k, override=sel)
    session.prepare([p])
    assert len(p.state.kernels) == 2
    out = nvfp4.allocate_outputs(p)
    for m in (1, 63, 64, 4097):
        x = _extreme(m, k, torch.bfloat16, m, 16)
        _run_checked(p, out, x, nvfp4_global_scale(x), True)
