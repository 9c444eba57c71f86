"""The fused decode kernel on the GPU (-m gpu; select with -k decode_fused): every epilogue x pdl mode at
the demo block's shapes (W4A16 NVFP4), M = 1, 3, 16, outputs NaN-poisoned, against the fp32 reference;
CUDA-graph replay == eager with the inputs written by the kernel before (a programmatic dependent
launch must still wait for them), two PDL GEMMs back to back (gate_up -> down, the second's CTAs
launched early by the first's trigger), and the one-shot mm path."""

from dataclasses import replace

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
from flashinfer.experimental.b12x.gemm._shared import launch as L

from .helpers import make_operands, on_cpu
from .test_decode_fused import check_fused

pytestmark = pytest.mark.gpu

B = b12x.gemm.blockscaled
SHAPES = {"silu_mul": (11264, 2048), "residual": (2048, 5632), "none": (3072, 2048)}  # gate_up, down, qkv
MS = (1, 3, 16)
_PLANS: dict = {}
_WEIGHTS: dict = {}


def _weight(n, k):
    if (n, k) not in _WEIGHTS:
        _WEIGHTS[(n, k)] = make_operands("bfloat16", "nvfp4", 1, n, k, seed=n + k, device="cuda").weight
    return _WEIGHTS[(n, k)]


def _plan(epilogue, pdl, n, k):
    key = (epilogue, pdl, n, k)
    if key not in _PLANS:
        q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max(MS), m_values=MS, epilogue=epilogue, pdl=pdl)
        plan = B.plan(q)
        with b12x.PreparationSession("cuda") as s:
            s.prepare([plan])
        # no epilogue and no PDL is the plain decode kernel's job: the plan keeps it
        fused = epilogue != "none" or pdl != "off"
        assert all(L.is_fused(cfg) == fused for _, cfg in plan.state.selection)
        _PLANS[key] = plan
    return _PLANS[key]


def _residual(m, n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(m, n, generator=g, device="cuda").bfloat16()


def _poisoned(m, n, epilogue):
    """A NaN-filled bf16 output for `epilogue` over a weight of n rows (silu_mul writes n / 2 columns)."""
    return torch.full((m, n // 2 if epilogue == "silu_mul" else n), float("nan"), dtype=torch.bfloat16, device="cuda")


def _prepared(q, override=None):
    """B.plan(q, override), prepared on the GPU."""
    plan = B.plan(q, override=override)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    return plan


@pytest.mark.parametrize("pdl", ["off", "wait", "prefetch"])
@pytest.mark.parametrize("epilogue", ["silu_mul", "residual", "none"])
def test_decode_fused_matches_reference(epilogue, pdl):
    n, k = SHAPES[epilogue]
    plan = _plan(epilogue, pdl, n, k)
    for m in MS:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + n, device="cuda", weight=_weight(n, k))
        res = _residual(m, n, m) if epilogue == "residual" else None
        out = _poisoned(m, n, epilogue)
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue, residual=res)
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), epilogue, "bfloat16", None if res is None else res.cpu())


@pytest.mark.parametrize("pdl, span", [("wait", "rows"), ("prefetch", "step")])
def test_hinted_pdl_configs_match_reference(pdl, span):
    """bench_gemm --sweep-subset pdl's hinted fused configs (cache hints of decode_config_for; at N >=
    16384 and M <= 8 also clamped loads and FP4 placement by left shifts) with the first-step L2
    prefetch, through a plan override: outputs NaN-poisoned, against the fp32 reference."""
    n, k = 16384, 1024
    override = {
        b: L.fused_config(b, n, k, "nvfp4", "bfloat16", pdl=pdl, hints=True, span=span) for b in ("decode8", "decode16")
    }
    assert override["decode8"].decode.clamp and override["decode8"].decode.wcache == "na256"
    q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max(MS), m_values=MS, pdl=pdl)
    plan = B.plan(q, override=override)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert dict(plan.state.selection) == override
    for m in MS:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + 5, device="cuda", weight=_weight(n, k))
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan)
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), "none", "bfloat16", None)


@pytest.mark.parametrize("pdl", ["prefetch", "wait"])
def test_mxfp8_pdl_plans_match_reference(pdl):
    """MXFP8 x MXFP8 at 7168 x 2048 (15.1 MB: `launch.prefetch_span` gives it the first-step prefetch)
    planned as a programmatic dependent, M = 1 / 3 / 16: outputs NaN-poisoned, the project's tolerance
    against the fp32 reference, and bitwise the same fused kernel launched plainly (the launch mode and
    the L2 prefetch never change a sum)."""
    from .helpers import check_tolerance

    n, k = 7168, 2048
    q = B.GemmQuery("mxfp8", "mxfp8", n, k, max_m=max(MS), m_values=MS, pdl=pdl)
    plan = B.plan(q)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    selection = dict(plan.state.selection)
    assert all(L.is_fused(c) and c.span == ("step" if pdl == "prefetch" else "rows") for c in selection.values())
    plain = B.plan(
        B.GemmQuery("mxfp8", "mxfp8", n, k, max_m=max(MS), m_values=MS),
        override={b: replace(c, pdl="off", span="rows") for b, c in selection.items()},
    )
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plain])
    weight = make_operands("mxfp8", "mxfp8", 1, n, k, seed=3, device="cuda").weight
    for m in MS:
        ops = make_operands("mxfp8", "mxfp8", m, n, k, seed=m + 11, device="cuda", weight=weight)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        again = torch.full_like(out, float("nan"))
        lhs = (ops.a_values, ops.a_scales)
        B.mm(lhs, ops.weight, out, plan=plan, alpha=ops.alpha)
        B.mm(lhs, ops.weight, again, plan=plain, alpha=ops.alpha)
        torch.cuda.synchronize()
        check_tolerance(out, ops, "bfloat16")
        assert torch.equal(out, again)


@pytest.mark.parametrize("pdl", ["off", "prefetch", "wait"])
@pytest.mark.parametrize("m", MS)
def test_decode_fused_graph_replay_equals_eager(m, pdl):
    """A graph of: new activations written by a torch kernel (a multiply: a kernel node, where a copy
    would be a memcpy node and no programmatic edge), gate_up + silu (PDL), down + residual (PDL).
    Replayed after the source changes, it must equal the eager run on the new source: a PDL GEMM that
    read its activations before the previous kernel finished would see the old ones."""
    (n1, k1), (n2, k2) = SHAPES["silu_mul"], SHAPES["residual"]
    up_plan, down_plan = _plan("silu_mul", pdl, n1, k1), _plan("residual", pdl, n2, k2)
    w1, w2 = _weight(n1, k1), _weight(n2, k2)
    src = torch.randn(m, k1, device="cuda").bfloat16()
    x = torch.empty_like(src)
    act = torch.empty(m, n1 // 2, dtype=torch.bfloat16, device="cuda")
    res = _residual(m, n2, 7)
    out = torch.empty(m, n2, dtype=torch.bfloat16, device="cuda")

    def step():
        torch.mul(src, 1.5, out=x)
        B.mm(x, w1, act, plan=up_plan, epilogue="silu_mul")
        B.mm(act, w2, out, plan=down_plan, epilogue="residual", residual=res)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for trial in range(3):
        src.copy_(torch.randn(m, k1, device="cuda").bfloat16() * (trial + 1))
        act.fill_(float("nan"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        got_act, got = act.clone(), out.clone()
        act.fill_(float("nan"))
        out.fill_(float("nan"))
        step()
        torch.cuda.synchronize()
        assert not torch.isnan(got).any()
        assert torch.equal(got_act, act) and torch.equal(got, out), f"trial {trial}: replay differs from eager"


def test_decode_fused_one_shot_mm():
    n, k = SHAPES["silu_mul"]
    ops = make_operands("bfloat16", "nvfp4", 3, n, k, seed=11, device="cuda", weight=_weight(n, k))
    out = B.mm(ops.a_values, ops.weight, epilogue="silu_mul")
    torch.cuda.synchronize()
    check_fused(out.cpu(), on_cpu(ops), "silu_mul", "bfloat16", None)


def _check_gate_up_override(pdl, config_for, seed):
    """The gated gate_up through a plan whose every bucket takes config_for(bucket), M = 1, 3, 16: outputs
    NaN-poisoned, against the fp32 reference."""
    n, k = SHAPES["silu_mul"]
    q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max(MS), m_values=MS, epilogue="silu_mul", pdl=pdl)
    override = {b: config_for(b) for b in q.buckets}
    plan = B.plan(q, override=override)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert dict(plan.state.selection) == override
    for m in MS:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + seed, device="cuda", weight=_weight(n, k))
        out = torch.full((m, n // 2), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue="silu_mul")
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), "silu_mul", "bfloat16", None)


@pytest.mark.parametrize("pdl", ["off", "prefetch"])
def test_decode_fused_gated_pipeline_variant(pdl):
    """The gated gate_up as the 1-chunk weight pipeline (bench_block's "-p1" variants)."""
    n, k = SHAPES["silu_mul"]
    _check_gate_up_override(
        pdl, lambda b: L.fused_config(b, n, k, "nvfp4", "bfloat16", "silu_mul", pdl, "unroll=1,prefetch=1"), 5
    )


@pytest.mark.parametrize("pdl", ["off", "prefetch"])
@pytest.mark.parametrize("epilogue", ["none", "silu_mul"])
def test_decode_fused_norm_matches_reference(epilogue, pdl):
    """norm: A RMS-normalized inside the kernel (the block's qkv and gate_up), M = 1, 3, 16."""
    n, k = SHAPES["silu_mul"] if epilogue == "silu_mul" else SHAPES["none"]
    q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max(MS), m_values=MS, epilogue=epilogue, pdl=pdl, norm=True)
    plan = B.plan(q)
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    g = (1.0 + 0.2 * torch.randn(k, generator=torch.Generator().manual_seed(k))).bfloat16()
    for m in MS:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + 3, device="cuda", weight=_weight(n, k))
        out = _poisoned(m, n, epilogue)
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue, norm_weight=g.cuda(), norm_eps=1e-5)
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), epilogue, "bfloat16", None, norm=(g, 1e-5))


@pytest.mark.parametrize("unroll", [1, 2])
def test_minctas_gate_up_matches_reference(unroll):
    """DecodeConfig.minctas = 3 (session 28: the gate_up's registers bounded to 3 CTAs an SM, a few words
    spilled)."""
    n, k = SHAPES["silu_mul"]

    def config_for(bucket):
        cfg = L.fused_config(bucket, n, k, "nvfp4", "bfloat16", "silu_mul", "prefetch")
        return replace(cfg, decode=replace(cfg.decode, minctas=3, unroll=unroll))

    _check_gate_up_override("prefetch", config_for, 7)


@pytest.mark.parametrize(
    "epilogue, n, k, m",
    [("silu_mul", 28672, 4096, 1), ("silu_mul", 28672, 4096, 16), ("residual", 4096, 4096, 1),
     ("residual", 4096, 4096, 16), ("silu_mul", 11264, 2048, 1), ("residual", 12288, 4096, 8),
     ("silu_mul", 14336, 4096, 8)],
)  # fmt: skip
def test_fused_fp4_placements_give_the_same_bits(epilogue, n, k, m):
    """The fused kernel's FP4 placements (shift, left, mul; "mul" is its heuristic at these shapes since session 51,
    `decode_rules.FUSED_FP4_MUL`) place the same bits before the same scale multiply, MMAs and epilogue: outputs equal
    bitwise, NaN-poisoned, and the heuristic's within the project's tolerance of the fp32 reference. The last three
    cases are one-wave grids (`decode_rules.ONE_WAVE_EPILOGUES`: unroll 1; 14336 x 4096 at 4 CTAs an SM,
    `FOUR_CTA_WAVE`)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    bucket = L.bucket_for(m)
    base = L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, "off")
    assert base.decode.fp4 == ("mul" if R.FUSED_FP4_MUL else "shift")
    assert (base.decode.unroll == 1) == (n in (11264, 12288, 14336))
    assert base.decode.minctas == (4 if n == 14336 else 0)
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=5 * m + n, device="cuda", weight=_weight(n, k))
    res = _residual(m, n, m + 1) if epilogue == "residual" else None
    outs = {}
    for fp4 in KD.FP4:
        cfg = replace(base, decode=replace(base.decode, fp4=fp4))
        q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=m, m_values=(m,), epilogue=epilogue)
        plan = _prepared(q, override={bucket: cfg})
        assert plan.state.selection == ((bucket, cfg),)
        outs[fp4] = _poisoned(m, n, epilogue)
        B.mm(ops.a_values, ops.weight, outs[fp4], plan=plan, epilogue=epilogue, residual=res)
    torch.cuda.synchronize()
    want = outs[base.decode.fp4]
    check_fused(want.cpu(), on_cpu(ops), epilogue, "bfloat16", None if res is None else res.cpu())
    for fp4, out in outs.items():
        assert torch.equal(out, want), fp4


@pytest.mark.parametrize(
    "epilogue, n, k, m, knobs",
    [("silu_mul", 11264, 2048, 1, (1, 0)), ("silu_mul", 14336, 4096, 8, (1, 4)), ("residual", 4096, 4096, 16, (2, 0))],
)
def test_fused_mxfp4_hinted_configs(monkeypatch, epilogue, n, k, m, knobs):
    """The fused kernel with W4A16 MXFP4 weights at the configs `decode_rules.FUSED_MXFP4_HINTS` gives (switched on
    here: NVFP4's cache hints, the one-wave unroll 1, four CTAs an SM), planned for the device, NaN-poisoned, against
    the fp32 reference; its other FP4 placement (shift / mul: `FUSED_MXFP4_SILU_MUL`, on for silu_mul) bitwise equal."""
    monkeypatch.setattr(R, "FUSED_MXFP4_HINTS", True)
    q = B.GemmQuery("bfloat16", "mxfp4", n, k, max_m=m, m_values=(m,), epilogue=epilogue)
    plan = _prepared(q)
    ((bucket, cfg),) = plan.state.selection
    assert (cfg.decode.wcache, cfg.decode.acache, cfg.decode.unroll, cfg.decode.minctas) == ("na256", "el", *knobs)
    ops = make_operands("bfloat16", "mxfp4", m, n, k, seed=7 * m + n, device="cuda")
    res = _residual(m, n, m + 2) if epilogue == "residual" else None
    out = _poisoned(m, n, epilogue)
    B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue, residual=res)
    other = replace(cfg, decode=replace(cfg.decode, fp4="mul" if cfg.decode.fp4 == "shift" else "shift"))
    again = _poisoned(m, n, epilogue)
    B.mm(ops.a_values, ops.weight, again, plan=_prepared(q, override={bucket: other}), epilogue=epilogue, residual=res)
    torch.cuda.synchronize()
    check_fused(out.cpu(), on_cpu(ops), epilogue, "bfloat16", None if res is None else res.cpu())
    assert torch.equal(out, again), other.decode.fp4


@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("epilogue, n, k", [("silu_mul", 8192, 4096), ("residual", 6144, 6144)])
def test_fused_eight_warp_wave(monkeypatch, b_fmt, epilogue, n, k):
    """`decode_rules.FUSED_EIGHT_WARP_WAVE` (on since session 55; forced here): the fused kernel's 16-warp grids of 133-264 CTAs
    on 8 warps, planned for the device at M = 1 / 16 (both buckets), NaN-poisoned, against the fp32 reference."""
    monkeypatch.setattr(R, "FUSED_EIGHT_WARP_WAVE", True)
    for m in (1, 16):
        q = B.GemmQuery("bfloat16", b_fmt, n, k, max_m=m, m_values=(m,), epilogue=epilogue)
        plan = _prepared(q)
        ((_, cfg),) = plan.state.selection
        assert (cfg.decode.warps, cfg.decode.tiles) == (8, 2), m
        ops = make_operands("bfloat16", b_fmt, m, n, k, seed=5 * m + n, device="cuda")
        res = _residual(m, n, m + 3) if epilogue == "residual" else None
        out = _poisoned(m, n, epilogue)
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue, residual=res)
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), epilogue, "bfloat16", None if res is None else res.cpu())
