"""The stream-layout decode kernel (`blockscaled/_kernel_stream`, issue #6) on the GPU: its heuristic
config at the issue's shapes and M in {1, 3, 16}, the sweep's candidates, partial CTAs, the env
selection through a prepared plan, and CUDA-graph replay; outputs NaN-poisoned, fresh random inputs,
against the fp32 reference. Run on the device machine (-m gpu; select with -k stream_layout)."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_stream as KS

from .helpers import check_tolerance, make_operands

pytestmark = pytest.mark.gpu

B = b12x.gemm.blockscaled
SHAPES = ((4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048), (11264, 2048), (2048, 5632))
_WEIGHTS: dict = {}


def _weight(n, k):
    if (n, k) not in _WEIGHTS:
        _WEIGHTS.clear()  # one packed weight at a time
        _WEIGHTS[(n, k)] = make_operands("bfloat16", "nvfp4", 1, n, k, seed=n + k, device="cuda").weight
    return _WEIGHTS[(n, k)]


def _plan(ops, cfg):
    bucket = L.bucket_for(ops.m)
    query = B.GemmQuery("bfloat16", "nvfp4", ops.n, ops.k, max_m=ops.m, m_values=(ops.m,))
    plan = B.plan(query, override=None if cfg is None else {bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    return plan


def _run(ops, cfg):
    plan = _plan(ops, cfg)
    if cfg is not None:
        assert plan.state.selection == ((L.bucket_for(ops.m), cfg),)
    out = torch.full((ops.m, ops.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    B.mm(ops.a_values, ops.weight, out, plan=plan)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("n, k", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 16])
def test_stream_layout_default_at_issue_shapes(m, n, k):
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + n, device="cuda", weight=_weight(n, k))
    check_tolerance(_run(ops, KS.default_config(m, n, k)), ops, "bfloat16")


@pytest.mark.parametrize("n, k, m", [(28672, 4096, 1), (4096, 14336, 16)])
def test_stream_layout_candidates(n, k, m):
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + k, device="cuda", weight=_weight(n, k))
    for cfg in KS.candidate_configs(m, n, k):
        check_tolerance(_run(ops, cfg), ops, "bfloat16")


@pytest.mark.parametrize(
    "cfg, m, a_fmt",
    [
        (KS.StreamConfig(warps=8, wn=8, kc=4, ntiles=2, prefetch=1), 13, "bfloat16"),  # 33 CTAs, last partial
        (KS.StreamConfig(warps=4, wn=4, kc=8, ntiles=1, prefetch=0, unroll=2), 5, "float16"),
        (KS.StreamConfig(warps=16, wn=2, kc=4, ntiles=2, prefetch=1, wcache="ef"), 9, "bfloat16"),  # idle K warps
        (KS.StreamConfig(warps=4, wn=4, kc=4, ntiles=2, load="bulk", stages=3), 16, "bfloat16"),  # phases wrap
        (KS.StreamConfig(warps=2, wn=2, kc=8, ntiles=1, load="bulk", stages=4), 1, "float16"),  # 5 slabs, 4 stages
        (KS.StreamConfig(warps=8, wn=1, kc=4, ntiles=1, load="bulk", stages=2), 8, "bfloat16"),  # uneven K
    ],
)
def test_stream_layout_partial_ctas_and_fp16(cfg, m, a_fmt):
    """N = 4160 (260 tiles: not a multiple of wn = 8 / 4 / 2), K = 5120 (10 slabs of kc 4, 5 of kc 8):
    partial CTAs, warps without slabs, bulk buffers refilled and mbarrier phases wrapping."""
    ops = make_operands(a_fmt, "nvfp4", m, 4160, 5120, seed=11, device="cuda")
    bucket = L.bucket_for(m)
    query = B.GemmQuery(a_fmt, "nvfp4", 4160, 5120, out_dtype="float16", max_m=m, m_values=(m,))
    plan = B.plan(query, override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    out = torch.full((m, 4160), float("nan"), dtype=torch.float16, device="cuda")
    B.mm(ops.a_values, ops.weight, out, plan=plan)
    torch.cuda.synchronize()
    check_tolerance(out, ops, "float16")


def test_stream_layout_env_selection_and_graph_replay(monkeypatch):
    """B12X_GEMM_DECODE_KERNEL=stream: the plan's heuristic is the stream kernel; a captured graph
    replays on new activations equal to eager runs (the layout was made before capture)."""
    monkeypatch.setenv(L.DECODE_KERNEL_ENV, "stream")
    n, k, m = 11264, 2048, 3
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=5, device="cuda", weight=_weight(n, k))
    plan = _plan(ops, None)
    assert L.is_stream(plan.state.selection[0][1])
    x = ops.a_values.clone()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    B.mm(x, ops.weight, out, plan=plan)  # eager first: makes the stream layout
    torch.cuda.synchronize()
    check_tolerance(out, ops, "bfloat16")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        B.mm(x, ops.weight, out, plan=plan)
    for seed in (1, 2):
        fresh = make_operands("bfloat16", "nvfp4", m, n, k, seed=seed, device="cuda", weight=ops.weight)
        x.copy_(fresh.a_values)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        B.mm(x, ops.weight, out, plan=plan)
        torch.cuda.synchronize()
        assert torch.equal(replayed, out)
        check_tolerance(replayed, fresh, "bfloat16")
