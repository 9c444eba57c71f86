"""moe.fused_moe with its launches as programmatic dependents (`api.with_pdl`) on the GPU (H200).

PDL changes when a kernel's CTAs start, not what they compute, so each mode's output must be the plain
plan's bit for bit; a kernel reading before the one it depends on finished would read the previous
call's or the poisoned (NaN) intermediates instead and differ. Checked:
1. every T path (micro routing at T * k <= 1024, the counting sort above it, the decode buckets and the
   grouped bucket) of each shape, w4a16 and nvfp4 (its requantize in the chain), plus the issue's
   numeric bar on one T (check_staged);
2. CUDA graph replay with other inputs in the captured buffers (the launch attribute as programmatic
   edges), against the plain plan's eager output;
3. eight layers queued back to back without a sync in between (each PDL routing launch waits for the
   combine before it), each against the plain plan."""

from __future__ import annotations

import pytest
import torch

import b12x
from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import api

from .stand_in import check_staged, kernel_intermediate
from .test_fused_moe_gpu import DEV, SHAPES, capture, inputs, layer_caps, run_poisoned

pytestmark = pytest.mark.gpu
RECIPES = (("w4a16", "modelopt_nvfp4"), ("nvfp4", "modelopt_nvfp4"))


def build_modes(shape, mode, source, max_tokens=4096, pdl_modes=("wait",), act="silu"):
    """({pdl mode: prepared plan}, experts): the heuristic's plan plain ("off") and with each of
    pdl_modes (bench_moe's --pdl entries), prepared together on one set of weights."""
    caps, experts = layer_caps(mode, source, act, shape, max_tokens, seed=1)
    cfg = fm.plan(caps).heuristic("sm_90a")  # the arch only gates the heuristic; the tiles do not depend on it
    plans = {}
    for m in ("off", *pdl_modes):
        plans[m] = fm.plan(caps, override=api.with_pdl(cfg, m))
    with b12x.PreparationSession(DEV) as session:
        session.prepare(list(plans.values()))
    assert all(p.state.selection.routing.pdl == (m != "off") for m, p in plans.items())
    return plans, experts


def same_bits(got, want, what):
    same = got.view(torch.int16) == want.view(torch.int16)
    assert bool(same.all()), f"{what}: {int((~same).sum())} of {same.numel()} elements differ from plain launches"


@pytest.mark.parametrize("mode, source", RECIPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pdl_equals_plain_launches(shape, mode, source):
    e, k, h, _ = shape
    modes = ("wait",)  # api.PDL, the heuristic's
    plans, experts = build_modes(shape, mode, source, pdl_modes=modes)
    for t in (1, 7, 64, 100, 1000, 4096):
        a, ids, w = inputs(t, k, e, h, seed=600 + t)
        want = run_poisoned(plans["off"], experts, a, ids, w)
        for m in modes:
            got = run_poisoned(plans[m], experts, a, ids, w)
            same_bits(got, want, f"{mode} {shape} T={t} pdl={m}")
            if t == 64:
                s = plans[m].state.scratch
                check_staged(got, kernel_intermediate(s, ids, e), a, experts, w, ids, what=f"pdl {m}", quant_mode=mode)


def test_pdl_graph_replay_equals_plain():
    pdl = "wait"
    shape = SHAPES[0]
    e, k, h, _ = shape
    plans, experts = build_modes(shape, "nvfp4", "modelopt_nvfp4", max_tokens=256, pdl_modes=(pdl,))
    for t in (1, 5, 64, 256):  # list and identity grids; micro routing, then the counting sort
        a, ids, w = inputs(t, k, e, h, seed=700 + t)
        out = torch.full_like(a, float("nan"))
        graph = capture(fm.bind(plans[pdl], a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out))
        for seed in (1, 2, 3):
            a2, ids2, w2 = inputs(t, k, e, h, seed=800 + 10 * t + seed)
            a.copy_(a2), ids.copy_(ids2), w.copy_(w2)
            out.fill_(float("nan"))
            plans[pdl].state.scratch["c1"].fill_(float("nan"))
            graph.replay()
            want = run_poisoned(plans["off"], experts, a2, ids2, w2)
            same_bits(out, want, f"graph T={t} pdl={pdl} seed={seed}")


def test_pdl_layers_back_to_back():
    shape = SHAPES[0]
    e, k, h, _ = shape
    plans, experts = build_modes(shape, "nvfp4", "modelopt_nvfp4", max_tokens=128)
    cases = [inputs(t, k, e, h, seed=900 + t) for t in (1, 64, 3, 128, 16, 2, 100, 7)]
    outs = [torch.full_like(a, float("nan")) for a, _, _ in cases]
    bindings = [
        fm.bind(plans["wait"], a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out)
        for (a, ids, w), out in zip(cases, outs)
    ]
    plans["wait"].state.scratch["c1"].fill_(float("nan"))
    for b in bindings:  # queued without a sync: each layer's first launch waits for the last one's combine
        fm.run(binding=b)
    torch.cuda.synchronize()
    for (a, ids, w), got in zip(cases, outs):
        same_bits(got, run_poisoned(plans["off"], experts, a, ids, w), f"back to back wait T={a.shape[0]}")


def test_pdl_modes_compile_their_own_kernels():
    """A plain and a PDL plan of the same caps resolve different launchers (launch_pdl and the
    kernels' griddepcontrol are part of their keys), so preparing one never hands out the other's."""
    plans, _ = build_modes(SHAPES[0], "w4a16", "modelopt_nvfp4", max_tokens=16)
    assert plans["wait"].state.selection == fm.plan(plans["off"].caps).heuristic("sm_90a")  # api.PDL
    off, pre = (plans[m].state.extra["launchers"] for m in ("off", "wait"))
    assert off.combine.combine.pdl is False and pre.combine.combine.pdl is True
    for key, (fc1, fc2) in pre.experts.items():
        assert fc1 is not off.experts[key][0] and fc2 is not off.experts[key][1]
