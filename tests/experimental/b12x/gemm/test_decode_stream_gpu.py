"""The decode kernel's streaming variants (issue #6: `_decode_sweeps.stream_variants` of each case's
heuristic config: cache hints, chunk groups, warp groups along N) on the GPU, against the fp32
reference at the issue's shapes, outputs NaN-poisoned; the FP4 placements (`DecodeConfig.fp4`) give one another's
bits. Run on the device machine (-m gpu; select with -k stream)."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

from .helpers import check_tolerance, make_operands

pytestmark = pytest.mark.gpu

B = b12x.gemm.blockscaled
SHAPES = ((4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048))
_WEIGHTS: dict = {}


def _weight(n, k):
    if (n, k) not in _WEIGHTS:
        _WEIGHTS.clear()  # one packed weight at a time (28672 x 14336 would not be small)
        _WEIGHTS[(n, k)] = make_operands("bfloat16", "nvfp4", 1, n, k, seed=n + k, device="cuda").weight
    return _WEIGHTS[(n, k)]


def _run(ops, cfg, b_fmt="nvfp4"):
    bucket = L.bucket_for(ops.m)
    plan = B.plan(B.GemmQuery("bfloat16", b_fmt, ops.n, ops.k, max_m=ops.m, m_values=(ops.m,)), override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert plan.state.selection == ((bucket, cfg),)
    out = torch.full((ops.m, ops.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    B.mm(ops.a_values, ops.weight, out, plan=plan)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("n, k", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 16])
def test_stream_variants_at_issue_shapes(m, n, k):
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + n, device="cuda", weight=_weight(n, k))
    base = L.default_config(L.bucket_for(m), n, k, "nvfp4")
    for cfg in DS.stream_variants(base):
        check_tolerance(_run(ops, cfg), ops, "bfloat16")


@pytest.mark.parametrize(
    "cfg, m",
    [
        (KD.DecodeConfig(8, 2, 2, 2, wcache="na", acache="el", wn=4), 16),  # 2 warps per group
        (KD.DecodeConfig(4, 1, 1, 1, wcache="na256", kgroup=4), 1),
        (KD.DecodeConfig(16, 1, 1, 2, wcache="ef", acache="el", wn=8), 5),
        (KD.DecodeConfig(8, 2, 2, 2, wcache="na", acache="el", clamp=True, wn=2), 13),
        (KD.DecodeConfig(4, 1, 1, 2, clamp=True, fp4="left"), 1),
        (KD.DecodeConfig(16, 2, 2, 2, wn=4, ashare=True, acache="el"), 16),
        (KD.DecodeConfig(8, 1, 1, 2, wn=2, ashare=True, clamp=True), 7),
        # the wave rules' register bounds (`decode_rules.FOUR_CTA_WAVE`, `DECODE16_ONE_WAVE`; a short stack)
        (KD.DecodeConfig(8, 2, 1, 1, wcache="na256", acache="el", fp4="mul", minctas=4), 5),
        (KD.DecodeConfig(8, 2, 2, 1, wcache="na256", acache="el", fp4="mul", minctas=3), 13),
        # that one with shared activations: no spills at 80 registers (session 53, staged: `s53_a.sh d16s`)
        (KD.DecodeConfig(8, 2, 2, 1, wcache="na256", acache="el", fp4="mul", minctas=3, wn=2, ashare=True), 13),
    ],
)
def test_stream_other_configs_partial_tiles(cfg, m):
    """N = 4160 (not a multiple of BN = 64 / 16 / 128), K = 5632 (44 chunks: groups of 4 plus none)."""
    ops = make_operands("bfloat16", "nvfp4", m, 4160, 5632, seed=7, device="cuda")
    check_tolerance(_run(ops, cfg), ops, "bfloat16")


@pytest.mark.parametrize("n, k", SHAPES)
@pytest.mark.parametrize("m", [1, 16])
def test_fp4_placements_give_the_same_bits(m, n, k):
    """shift, left and mul place the same bits before the same scale multiply and MMAs: outputs equal bitwise. The
    base is the W4A16 heuristic's own config (cache hints, clamps; "mul" at M = 1 since session 49)."""
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=3 * m + n, device="cuda", weight=_weight(n, k))
    _check_placements(ops, L.default_config(L.bucket_for(m), n, k, "nvfp4", a_fmt="bfloat16"), "nvfp4")


def _check_placements(ops, base, b_fmt):
    """`base` within the tolerance of the fp32 reference, and every other FP4 placement of it bitwise equal."""
    want = _run(ops, base, b_fmt)
    check_tolerance(want, ops, "bfloat16")
    variants = DS.fp4_variants(base)
    assert {cfg.fp4 for cfg in variants} | {base.fp4} == set(KD.FP4)
    for cfg in variants:
        assert torch.equal(_run(ops, cfg, b_fmt), want), cfg.fp4


@pytest.mark.parametrize(
    "m, n, k, knobs",
    [(1, 11264, 2048, (1, 0)), (8, 14336, 4096, (1, 4)), (16, 11264, 2048, (1, 3)), (9, 4096, 4096, (2, 0))],
)
def test_mxfp4_heuristic_configs(m, n, k, knobs):
    """W4A16 MXFP4 at the heuristic's configs since `decode_rules.MXFP4_HINTS` (NVFP4's cache hints, and its wave rules:
    unroll 1 over one wave of 3 CTAs an SM, then 4; 9..16 tokens at 3), against the fp32 reference, NaN-poisoned."""
    cfg = L.default_config(L.bucket_for(m), n, k, "mxfp4", a_fmt="bfloat16")
    assert (cfg.wcache, cfg.acache, cfg.unroll, cfg.minctas) == ("na256", "el", *knobs)
    ops = make_operands("bfloat16", "mxfp4", m, n, k, seed=11 * m + n, device="cuda")
    check_tolerance(_run(ops, cfg, "mxfp4"), ops, "bfloat16")


@pytest.mark.parametrize("n,warps", [(28672, 4), (16384, 8)])
@pytest.mark.parametrize("m", [9, 16])
def test_mxfp4_wide_one_wave_config(monkeypatch, m, n, warps):
    """W4A16 MXFP4's shared-activation tiling unrolled once (`decode_rules.MXFP4_WIDE_ONE_WAVE`, on; forced here) at
    N x 4096 over its 4- and 8-warp grids, against the fp32 reference, NaN-poisoned."""
    monkeypatch.setattr(R, "MXFP4_WIDE_ONE_WAVE", True)
    cfg = L.default_config("decode16", n, 4096, "mxfp4", a_fmt="bfloat16")
    assert (cfg.wn, cfg.ashare, cfg.unroll, cfg.warps) == (2, True, 1, warps)
    ops = make_operands("bfloat16", "mxfp4", m, n, 4096, seed=17 * m + n, device="cuda")
    check_tolerance(_run(ops, cfg, "mxfp4"), ops, "bfloat16")


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (16, 11264, 2048), (8, 14336, 4096), (16, 4096, 14336)])
def test_mxfp4_fp4_placements_give_the_same_bits(m, n, k):
    """W4A16 MXFP4's E2M1 codes placed by shift, left and mul (`decode_rules.MXFP4_FP4_MUL`, on since session 53)
    from its heuristic's config: outputs equal bitwise, NaN-poisoned, and within the tolerance of the fp32 reference."""
    base = L.default_config(L.bucket_for(m), n, k, "mxfp4", a_fmt="bfloat16")
    assert base.fp4 == ("mul" if R.MXFP4_FP4_MUL else "shift")  # every case, M = 16 at K >= LONG_K included
    ops = make_operands("bfloat16", "mxfp4", m, n, k, seed=13 * m + n, device="cuda")
    _check_placements(ops, base, "mxfp4")


@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("m", [9, 16])
def test_eight_warp_wave16_config(monkeypatch, m, b_fmt):
    """`decode_rules.EIGHT_WARP_WAVE16` (on since session 55; forced here): 9..16 tokens at 6144 x 4096 on 8 warps x 2 tiles (the
    grid of 192 CTAs in one wave), against the fp32 reference, NaN-poisoned."""
    monkeypatch.setattr(R, "EIGHT_WARP_WAVE16", True)
    cfg = L.default_config("decode16", 6144, 4096, b_fmt, a_fmt="bfloat16")
    assert (cfg.warps, cfg.tiles, cfg.ntiles) == (8, 2, 2)
    ops = make_operands("bfloat16", b_fmt, m, 6144, 4096, seed=11 * m, device="cuda")
    check_tolerance(_run(ops, cfg, b_fmt), ops, "bfloat16")
