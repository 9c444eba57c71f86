"""DecodeConfig.pdl_wait: the plain decode kernel launched as a programmatic dependent, and the switch (on
since session 39) that gives pdl queries without an epilogue that kernel where the heuristic has warp groups.

The fused kernel, which pdl queries ran before, gets one warp group from `fused_config`; pdl_wait lets the plain kernel's warp groups,
ashare and ksplit run under PDL. CPU: the wait and the release precede every global load in the PTX of both
archs, the predicate, and the heuristic with the switch on and off. GPU (-m gpu): a pdl query's plan with
the switch on, eager against the reference and a captured chain of calls against eager.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

from .helpers import check_tolerance, make_operands

CFG = KD.DecodeConfig


# the K loops whose prologues load right after the wait: ashare, the prefetch pipeline, upfront, chunk groups,
# a cluster split, and block-FP8 (its per-chunk block scale); (a_fmt, b_fmt, config)
PDL_CASES = [
    ("bfloat16", "nvfp4", CFG(8, 2, 2, 1, wn=2, ashare=True, wcache="na", acache="el", pdl_wait=True)),
    ("bfloat16", "nvfp4", CFG(8, 2, 1, 1, prefetch=2, pdl_wait=True)),
    ("bfloat16", "nvfp4", CFG(8, 2, 1, 2, upfront=2, pdl_wait=True)),
    ("bfloat16", "nvfp4", CFG(8, 2, 1, 2, kgroup=2, pdl_wait=True)),
    ("bfloat16", "nvfp4", CFG(8, 2, 2, 1, wn=4, ashare=True, ksplit=4, pdl_wait=True)),
    ("fp8_block", "fp8_block", CFG(8, 2, 1, 1, pdl_wait=True)),
]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("case", range(len(PDL_CASES)))
def test_pdl_wait_waits_before_any_global_load(arch, case):
    """pdl_wait: griddepcontrol.wait, then launch_dependents, ahead of every global load; none without it."""
    pytest.importorskip("cutlass")
    a_fmt, b_fmt, cfg = PDL_CASES[case]
    ptx = KD.compile_decode(a_fmt, b_fmt, "bfloat16", cfg, arch=arch).artifacts.PTX
    wait = ptx.index("griddepcontrol.wait")
    assert wait < ptx.index("griddepcontrol.launch_dependents") < ptx.index("ld.global")
    plain = KD.compile_decode(a_fmt, b_fmt, "bfloat16", dataclasses.replace(cfg, pdl_wait=False), arch=arch)
    assert "griddepcontrol" not in plain.artifacts.PTX


def test_pdl_wait_predicate():
    assert KD.why_not("bfloat16", "nvfp4", "bfloat16", CFG(8, 2, 1, 2, pdl_wait=True)) is None
    assert "pdl_wait must be a bool" in KD.why_not("bfloat16", "nvfp4", "bfloat16", CFG(8, 2, 1, 2, pdl_wait="wait"))
    fused = F.FusedConfig(CFG(8, 2, 1, 2, pdl_wait=True), "none", "wait")
    assert "no pdl_wait" in F.why_not("bfloat16", "nvfp4", "bfloat16", fused)
    assert L.with_decode_opts(CFG(8, 2, 2, 1), "pdl_wait=true").pdl_wait is True


def test_the_stack_wide_options_do_not_reach_the_fused_kernel(monkeypatch):
    """B12X_GEMM_DECODE_OPTS may set the plain kernel's ksplit / pdl_wait on the decode heuristic; the fused
    kernel's configs (epilogues, norm, rope, pdl) start from that heuristic and must drop them."""
    monkeypatch.setenv(L.DECODE_OPTS_ENV, "ksplit=2,pdl_wait=true")
    assert L.default_config("decode16", 4096, 4096, "nvfp4", a_fmt="bfloat16").ksplit == 2
    for epilogue, pdl in (("residual", "off"), ("none", "wait"), ("silu_mul", "prefetch")):
        cfg = L.fused_config("decode16", 4096, 4096, "nvfp4", "bfloat16", epilogue, pdl)
        assert cfg.decode.ksplit == 1 and not cfg.decode.pdl_wait
        assert F.why_not("bfloat16", "nvfp4", "bfloat16", cfg) is None
        plain = L.fused_config("decode16", 4096, 4096, "nvfp4", "bfloat16", epilogue, pdl, opts="")
        assert cfg.decode.warps == plain.decode.warps  # not halved by a rejected option


def _pdl_plan(n, k, max_m, epilogue="none"):
    import b12x

    B = b12x.gemm.blockscaled
    ms = (max_m,)  # one bucket: smaller live M run its kernel
    return B.plan(B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max_m, m_values=ms, pdl="wait", epilogue=epilogue))


def test_the_switch_ships_on_since_its_gpu_run():
    """Session 39's s38_c turned it on; off, the query runs the fused kernel as before."""
    assert L.PLAIN_PDL_GROUPS is True
    ((_, cfg),) = _pdl_plan(28672, 4096, 16).heuristic("sm_90a")
    assert not L.is_fused(cfg) and cfg.pdl_wait


def test_the_switch_off_runs_the_fused_kernel(monkeypatch):
    monkeypatch.setattr(L, "PLAIN_PDL_GROUPS", False)
    ((_, cfg),) = _pdl_plan(28672, 4096, 16).heuristic("sm_90a")
    assert L.is_fused(cfg) and cfg.pdl == "wait"


def test_the_switch_on_takes_the_plain_kernel_where_it_has_warp_groups(monkeypatch):
    monkeypatch.setattr(L, "PLAIN_PDL_GROUPS", True)
    ((_, cfg),) = _pdl_plan(28672, 4096, 16).heuristic("sm_90a")
    base = L.default_config("decode16", 28672, 4096, "nvfp4", a_fmt="bfloat16", arch="sm_90a")
    assert base.wn > 1 and cfg == dataclasses.replace(base, pdl_wait=True)
    ((_, cfg),) = _pdl_plan(4096, 4096, 1).heuristic("sm_90a")  # one warp group: the fused kernel as before
    assert L.is_fused(cfg)
    ((_, cfg),) = _pdl_plan(28672, 4096, 16, epilogue="residual").heuristic("sm_90a")  # an epilogue: fused
    assert L.is_fused(cfg) and cfg.epilogue == "residual"


@pytest.mark.gpu
def test_the_switch_on_the_gpu(monkeypatch):
    """A pdl "wait" plan with the switch on (the plain kernel, wn 2, ashare, pdl_wait) at M = 3 / 9 / 16 against
    the reference, NaN-poisoned outputs; two dependent calls captured in a CUDA graph equal eager."""
    import b12x

    from .test_gpu import _weight

    monkeypatch.setattr(L, "PLAIN_PDL_GROUPS", True)
    B = b12x.gemm.blockscaled
    n, k = 28672, 4096
    plan = _pdl_plan(n, k, 16)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    ((_, cfg),) = plan.state.selection
    assert not L.is_fused(cfg) and cfg.pdl_wait
    weight = _weight("nvfp4", n, k)
    for m in (3, 9, 16):
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m, device="cuda", weight=weight)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan)
        torch.cuda.synchronize()
        check_tolerance(out, ops, "bfloat16")
    first = torch.full((16, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    second = torch.full_like(first, float("nan"))
    x2 = torch.randn(16, k, dtype=torch.bfloat16, device="cuda")
    B.mm(ops.a_values, weight, first, plan=plan)
    B.mm(x2, weight, second, plan=plan)
    eager = (first.clone(), second.clone())
    first.fill_(float("nan"))
    second.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        B.mm(ops.a_values, weight, first, plan=plan)
        B.mm(x2, weight, second, plan=plan)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(first, eager[0]) and torch.equal(second, eager[1])
