"""moe.fused_moe's nvfp4 dequant bucket on the GPU (H200): the heuristic's plan with its grouped bucket
taking the dequantized bf16 operands (`ExpertBucket.dequant`, bench_moe's `with_dequant`) against
1. test_fused_moe_gpu.py's numeric bar (outputs and the FC1 intermediate NaN-poisoned, the operands
   read back bit for bit: a1_deq / a2_deq = stand_in.nvfp4_deq of the kernel's inputs in the grouped
   bucket, the packed bytes in the decode buckets; check_staged's three stages);
2. the packed-NVFP4 plan (the default) on the same inputs, bit for bit: both paths give the MMAs
   the same values (e2m1 x e4m3 exactly, times 2^-16 in the packed path's shared tiles) in the same
   K order, and the epilogue's alpha absorbs the power of two exactly;
3. CUDA graph replay equal to eager (E = 128).
The same for the decode buckets with the dequantized operands (`_buckets.DECODE_DEQUANT_FROM`,
bench_moe's `with_decode_dequant`: the decode expert kernels' W4A16 path) at T = 1 .. 100.
At T = 1000 E = 256 and 512 are still in a decode bucket (tiled_from: 512 / 1024 / 1639 with
TILED_ROWS = 32), so the plan's decode path is checked too; T = 4096 runs the grouped bucket at all three."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import b12x
from b12x.moe import fused_moe as fm
from benchmarks.experimental.b12x.bench_moe import with_decode_dequant, with_dequant
from flashinfer.experimental.b12x.moe.fused_moe import api

from .stand_in import check_operands, check_staged, kernel_intermediate
from .test_fused_moe_gpu import DEV, SHAPES, capture, inputs, layer_caps

pytestmark = pytest.mark.gpu


def build_pair(shape, max_tokens=4096, seed=0, buckets=with_dequant, deq_encode="divide"):
    """(dequant plan, packed plan, experts): the heuristic's nvfp4 plan with and without
    ExpertBucket.dequant on its grouped bucket (buckets=with_decode_dequant: on its decode buckets),
    prepared together on one set of weights; deq_encode: the dequant plan's nvfp4_deq_encode."""
    caps, experts = layer_caps("nvfp4", "modelopt_nvfp4", "silu", shape, max_tokens, seed=seed)
    cfg = fm.plan(caps).heuristic("sm_90a")  # the arch only gates the heuristic; the tiles do not depend on it
    cfg = replace(cfg, experts=tuple(replace(b, dequant=False) for b in cfg.experts))  # every bucket packed
    packed = fm.plan(caps, override=cfg)
    routing = replace(cfg.routing, nvfp4_deq_encode=deq_encode)
    combine = replace(cfg.combine, nvfp4_deq_encode=deq_encode)
    dequant = fm.plan(caps, override=replace(cfg, experts=buckets(cfg.experts), routing=routing, combine=combine))
    with b12x.PreparationSession(DEV) as session:
        session.prepare([dequant, packed])
    return dequant, packed, experts


def run(p, experts, a, ids, w):
    """(binding, out) of one NaN-poisoned run (out and FC1's intermediate poisoned first)."""
    out = torch.full_like(a, float("nan"))
    p.state.scratch["c1"].fill_(float("nan"))
    b = fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out)
    fm.run(binding=b)
    torch.cuda.synchronize()
    return b, out


def check_against_packed(dequant, packed, experts, shape, t, seed, what):
    """One T on the dequant plan (its bf16 operands NaN-poisoned first): the operands its bucket's
    gather wrote, check_staged's bar, and the output bit for bit the packed plan's. Returns the binding."""
    e, k, h, _ = shape
    a, ids, w = inputs(t, k, e, h, seed=seed)
    s = dequant.state.scratch
    s["a1_deq"].fill_(float("nan"))
    s["a2_deq"].fill_(float("nan"))
    b, out = run(dequant, experts, a, ids, w)
    bucket = dequant.state.selection.experts[b.bucket]
    check_operands(s, api.gather_formats("nvfp4", bucket), False, experts, a, ids, w)
    check_staged(out, kernel_intermediate(s, ids, e), a, experts, w, ids, what=what, quant_mode="nvfp4")
    _, want = run(packed, experts, a, ids, w)
    same = out.view(torch.int16) == want.view(torch.int16)
    assert bool(same.all()), f"{what}: {int((~same).sum())} elements differ from the packed-NVFP4 plan's"
    return b


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dequant_bucket_vs_reference_and_packed(shape):
    dequant, packed, experts = build_pair(shape)
    tiled_t = api.tiled_from(dequant.caps)
    for t in (1000, 4096):
        what = f"nvfp4 dequant {shape} T={t}"
        b = check_against_packed(dequant, packed, experts, shape, t, 200 + t, what)
        assert b.dequant is (t >= tiled_t), f"{what}: dequant {b.dequant}, grouped bucket from T = {tiled_t}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_decode_dequant_buckets_vs_reference_and_packed(shape):
    dequant, packed, experts = build_pair(shape, max_tokens=128, buckets=with_decode_dequant)
    assert all(b.dequant and not b.tiled for b in dequant.state.selection.experts)
    s = dequant.state.scratch
    for t in (1, 2, 7, 64, 100):  # E = 128: both buckets (8-token groups to T = 80, 16-token above)
        b = check_against_packed(dequant, packed, experts, shape, t, 300 + t, f"nvfp4 decode dequant {shape} T={t}")
        assert b.dequant and b.fc1_args[0] is s["a1_deq"] and b.fc2_args[0] is s["a2_deq"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_search_deq_encode_vs_packed(shape):
    """The staged "search" encode of the dequantized operands (`nvfp4_deq_encode`, session 17): every
    decode bucket on it, bit for bit the packed plan's output and the codec's operands."""
    dequant, packed, experts = build_pair(shape, max_tokens=128, buckets=with_decode_dequant, deq_encode="search")
    assert dequant.state.selection.routing.nvfp4_deq_encode == "search"
    for t in (1, 7, 64, 128):
        b = check_against_packed(dequant, packed, experts, shape, t, 500 + t, f"nvfp4 search deq {shape} T={t}")
        assert b.dequant


@pytest.mark.parametrize("which, t", [("tiled", 4096), ("decode", 16)])
def test_dequant_graph_replay_equals_eager(which, t):
    shape = SHAPES[0]
    e, k, h, _ = shape
    if which == "tiled":
        dequant, _, experts = build_pair(shape)
    else:
        dequant, _, experts = build_pair(shape, max_tokens=64, buckets=with_decode_dequant)
    a, ids, w = inputs(t, k, e, h, seed=7)
    out = torch.full_like(a, float("nan"))
    binding = fm.bind(dequant, a=a, experts=experts, topk_weights=w, topk_ids=ids, output=out)
    assert binding.dequant
    graph = capture(binding)
    for seed in (8, 9):  # other routings and inputs in the captured buffers
        a2, ids2, w2 = inputs(t, k, e, h, seed=seed)
        a.copy_(a2), ids.copy_(ids2), w.copy_(w2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        _, eager = run(dequant, experts, a2, ids2, w2)
        assert torch.equal(replayed.view(torch.int16), eager.view(torch.int16)), f"seed {seed}: replay differs"
