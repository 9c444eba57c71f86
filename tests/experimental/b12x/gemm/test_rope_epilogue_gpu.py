"""The fused decode GEMM's "rope_append" epilogue on the GPU (-m gpu; select with -k rope_append): W4A16
NVFP4 at the demo block's qkv (Hq 16, Hkv 4, D 128, page 16, K 2048) and a wider one (Hq 32, Hkv 8,
K 4096), T = 1, 8, 32, pdl off / prefetch, with the norm prologue, the one-shot mm and CUDA-graph
replay; q and the slots' cache rows NaN-poisoned first, every other cache row bitwise untouched,
values against the fp32 composition (the 2x rule of the CPU tests: `check_outputs`)."""

import dataclasses

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import api as API

from .helpers import make_operands, on_cpu
from .test_rope_epilogue import check_outputs, check_untouched, make_rope

pytestmark = pytest.mark.gpu

B = b12x.gemm.blockscaled
SHAPES = {"demo": (API.RopeLayout(16, 4, 128, 16), 2048), "wide": (API.RopeLayout(32, 8, 128, 16), 4096)}
TS = (1, 8, 32)
_WEIGHTS: dict = {}


def _weight(n, k):
    if (n, k) not in _WEIGHTS:
        _WEIGHTS[(n, k)] = make_operands("bfloat16", "nvfp4", 1, n, k, seed=n + k, device="cuda").weight
    return _WEIGHTS[(n, k)]


def _plan(lay, k, pdl, norm=False):
    q = B.GemmQuery("bfloat16", "nvfp4", lay.rows, k, max_m=max(TS), m_values=TS, epilogue="rope_append", pdl=pdl,
                    norm=norm, rope=lay)  # fmt: skip
    plan = B.plan(q)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert all(L.is_fused(cfg) and cfg.rope == lay for _, cfg in plan.state.selection)
    return plan


def _run_and_check(lay, k, t, seed, plan=None, norm=None):
    ops = make_operands("bfloat16", "nvfp4", t, lay.rows, k, seed=seed, device="cuda", weight=_weight(lay.rows, k))
    rope, before = make_rope(lay, t, torch.bfloat16, seed, device="cuda")
    q = torch.full((t, lay.q_heads, lay.head_dim), float("nan"), dtype=torch.bfloat16, device="cuda")
    kw = {} if norm is None else {"norm_weight": norm[0].cuda(), "norm_eps": norm[1]}
    B.mm(ops.a_values, ops.weight, q, plan=plan, epilogue="rope_append", rope=rope, **kw)
    torch.cuda.synchronize()
    k_rows = check_untouched(rope.k_cache, before[0], rope)
    v_rows = check_untouched(rope.v_cache, before[1], rope)
    check_outputs(q.cpu(), k_rows, v_rows, on_cpu(ops), lay, rope, "bfloat16", norm)


@pytest.mark.parametrize("pdl", ["off", "prefetch"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_rope_append_matches_reference(shape, pdl):
    lay, k = SHAPES[shape]
    plan = _plan(lay, k, pdl)
    for t in TS:
        _run_and_check(lay, k, t, seed=t + k, plan=plan)


def test_rope_append_with_norm():
    """The block's six-launch qkv: RMSNorm prologue + rope_append epilogue, pdl prefetch."""
    lay, k = SHAPES["demo"]
    plan = _plan(lay, k, "prefetch", norm=True)
    g = (1.0 + 0.2 * torch.randn(k, generator=torch.Generator().manual_seed(k))).bfloat16()
    for t in TS:
        _run_and_check(lay, k, t, seed=t + 1, plan=plan, norm=(g, 1e-5))


def test_rope_append_one_shot_mm():
    lay, k = SHAPES["demo"]
    _run_and_check(lay, k, 3, seed=5)


@pytest.mark.parametrize("t", [1, 8])
def test_rope_append_graph_replay_equals_eager(t):
    """A graph of: new activations written by a torch kernel, then the rope GEMM (pdl prefetch). Replayed
    after the source changes it must equal the eager run (q and the cache rows): a PDL GEMM that read its
    activations before the previous kernel finished would see the old ones."""
    lay, k = SHAPES["demo"]
    plan = _plan(lay, k, "prefetch")
    w = _weight(lay.rows, k)
    src = torch.randn(t, k, device="cuda").bfloat16()
    x = torch.empty_like(src)
    rope, _ = make_rope(lay, t, torch.bfloat16, 3, device="cuda")
    q = torch.empty(t, lay.q_heads, lay.head_dim, dtype=torch.bfloat16, device="cuda")

    def step():
        torch.mul(src, 1.5, out=x)
        B.mm(x, w, q, plan=plan, epilogue="rope_append", rope=rope)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    slots = (rope.slot_page, rope.slot_off)
    for trial in range(3):
        src.copy_(torch.randn(t, k, device="cuda").bfloat16() * (trial + 1))
        q.fill_(float("nan"))
        rope.k_cache[slots] = float("nan")
        rope.v_cache[slots] = float("nan")
        graph.replay()
        torch.cuda.synchronize()
        got = (q.clone(), rope.k_cache.clone(), rope.v_cache.clone())
        q.fill_(float("nan"))
        rope.k_cache[slots] = float("nan")
        rope.v_cache[slots] = float("nan")
        step()
        torch.cuda.synchronize()
        assert not torch.isnan(got[0]).any() and not torch.isnan(got[1][slots]).any()
        for a, b in zip(got, (q, rope.k_cache, rope.v_cache)):
            assert torch.equal(a, b), f"trial {trial}: replay differs from eager"


@pytest.mark.parametrize("pdl", ["off", "prefetch"])
def test_rope_append_early_tables(pdl):
    """FusedConfig.early (cos, sin and slots loaded before the K loop): a plan override, T = 1, 8, 32."""
    lay, k = SHAPES["demo"]
    q = B.GemmQuery("bfloat16", "nvfp4", lay.rows, k, max_m=max(TS), m_values=TS, epilogue="rope_append", pdl=pdl,
                    rope=lay)  # fmt: skip
    override = {
        b: dataclasses.replace(
            L.fused_config(b, lay.rows, k, "nvfp4", "bfloat16", "rope_append", pdl, rope=lay), early=True
        )
        for b in q.buckets
    }
    plan = B.plan(q, override=override)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert all(cfg.early for _, cfg in plan.state.selection)
    for t in TS:
        _run_and_check(lay, k, t, seed=t + 7, plan=plan)
