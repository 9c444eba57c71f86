"""moe.fused_moe with its decode buckets placing FP4 weight codes by a multiply (`_buckets.with_fp4_mul`,
`DECODE_FP4_MUL`) on the GPU (H200).

The placement changes the instructions that expand the codes, not the values they expand to, so the plan's output must
be the heuristic's shift placement bit for bit at every T path (micro routing, counting sort, 8- and 16-token decode
buckets, nvfp4's packed T = 1 bucket and its dequantized buckets, the grouped bucket, which the change leaves alone),
plus the issue's numeric bar on one T (check_staged)."""

from __future__ import annotations

import dataclasses

import pytest

import b12x
from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import _buckets

from .stand_in import check_staged, kernel_intermediate
from .test_fused_moe_gpu import DEV, SHAPES, inputs, layer_caps, run_poisoned
from .test_fused_moe_pdl_gpu import RECIPES, same_bits

pytestmark = pytest.mark.gpu


def build_pair(shape, mode, source, max_tokens=4096):
    """(shift plan, mul plan, experts): the heuristic's plan with the flag off, and the same with `with_fp4_mul`."""
    caps, experts = layer_caps(mode, source, "silu", shape, max_tokens, seed=2)
    cfg = fm.plan(caps).heuristic("sm_90a")
    assert all(b.tiled or b.fc1.fp4 == "shift" for b in cfg.experts), "the flag is meant to be off in this test"
    mul_cfg = dataclasses.replace(cfg, experts=_buckets.with_fp4_mul(cfg.experts))
    assert any(b.fc1.fp4 == "mul" and b.fc2.fp4 == "mul" for b in mul_cfg.experts)
    shift, mul = fm.plan(caps, override=cfg), fm.plan(caps, override=mul_cfg)
    with b12x.PreparationSession(DEV) as session:
        session.prepare([shift, mul])
    return shift, mul, experts


@pytest.mark.parametrize("mode, source", RECIPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fp4_mul_equals_shift(shape, mode, source, monkeypatch):
    monkeypatch.setattr(_buckets, "DECODE_FP4_MUL", False)
    e, k, h, _ = shape
    shift, mul, experts = build_pair(shape, mode, source)
    for t in (1, 2, 7, 64, 100, 1000, 4096):
        a, ids, w = inputs(t, k, e, h, seed=1600 + t)
        want = run_poisoned(shift, experts, a, ids, w)
        got = run_poisoned(mul, experts, a, ids, w)
        same_bits(got, want, f"{mode} {shape} T={t} fp4=mul")
        if t == 64:
            s = mul.state.scratch
            check_staged(got, kernel_intermediate(s, ids, e), a, experts, w, ids, what="fp4 mul", quant_mode=mode)
