"""moe.fused_moe's nvfp4 dequant bucket (`ExpertBucket.dequant`) under TRITON_INTERPRET=1 on CPU
tensors (run by test_fused_moe_pipeline.py in a fresh interpreter, as test_fused_moe_pipeline_cases.py).

- the "nvfp4_deq" gather and requantize write deq(quant(x)) = e2m1(q) * e4m3(sf) in bf16, bit for
  bit the `_lib.quant` codec's (stand_in.nvfp4_deq), and the same quantization as the packed NVFP4
  kernels (decoding their bytes gives the same values);
- the whole layer through `api.device_binding` + `api.execute` with a decode bucket and a dequant
  grouped bucket: the binding takes the dequantized operands in the grouped bucket only, its output
  is bit for bit the packed-NVFP4 pipeline's (the stand-in GEMMs see the same fp32 operands), and it
  meets the reference bar.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("runs inside test_fused_moe_pipeline.py's TRITON_INTERPRET=1 subprocess", allow_module_level=True)

from flashinfer.experimental.b12x._lib import quant as Q  # noqa: E402
from flashinfer.experimental.b12x.moe import fused_moe as fm  # noqa: E402
from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing, api  # noqa: E402
from flashinfer.experimental.b12x.moe.fused_moe import reference as REF  # noqa: E402

from .moe_cases import activations, checkpoint, weight_plan  # noqa: E402
from .stand_in import (  # noqa: E402
    assert_same_bits,
    check_layer,
    check_operands,
    dense_layer,
    fc1_stand_in,
    fc2_stand_in,
    nvfp4_deq,
    row_cosine,
)
from .test_fused_moe_pipeline_cases import (  # noqa: E402  (imports its interpreter patches too)
    DYNAMIC,
    INTER,
    MAX_T,
    MICRO,
    E,
    H,
    K,
    check_routing,
    ids_with_ignored,
    make_input,
    poisoned,
    weights,
)

pytestmark = pytest.mark.interpret
DEQ = api.NVFP4_DEQ
T_TILED = 4  # live T from which the test plans' grouped (dequant) bucket runs


def _grouped():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    return G.GroupedConfig()


def buckets(dequant: bool, decode: bool = False) -> tuple:
    """A decode bucket for T < T_TILED (dequant when `decode`), then one grouped bucket (dequant or
    packed NVFP4)."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    small = X.default_buckets(T_TILED - 1)[0]
    g = _grouped()
    return (
        api.ExpertBucket(T_TILED - 1, small.fc1, small.fc2, dequant=decode),
        api.ExpertBucket(MAX_T, g, g, dequant=dequant),
    )


def dequant_layer(wplan, *, dequant=True, routing_cfg=MICRO, on_input=False, decode=False, deq_encode="divide"):
    """(plan, poisoned workspace, Launchers, buckets): the interpreted routing/requantize/combine
    for the recipe's operands and (dequant) the NVFP4_DEQ ones, stand-in GEMMs per variant."""
    caps = fm.Caps(
        max_tokens=MAX_T, num_topk=K, device="cpu", weight_plan=wplan, quant_mode="nvfp4",
        apply_router_weight_on_input=on_input,
    )  # fmt: skip
    p = fm.plan(caps)
    bk = buckets(dequant, decode)
    e, h, i = wplan.num_experts, wplan.hidden_size, wplan.intermediate_size
    config = api.MoeConfig(routing_cfg, _combine.default_config(i), bk)
    s = {spec.name: poisoned(spec) for spec in p.scratch_specs(config, "cuda")}
    api._fill_constants(p, s)
    s["route_row"].fill_(-7777)

    rcfg = replace(routing_cfg, nvfp4_deq_encode=deq_encode)
    ccfg = replace(_combine.default_config(i), nvfp4_deq_encode=deq_encode)

    def routing_and_combine(f1, f2):
        routing = {d: _routing.interpreted_routing(d, K, e, h, f1, on_input, rcfg) for d in api.IDS_DTYPES}
        return routing, _combine.interpreted_combine(K, e, h, i, f2, on_input, ccfg)

    experts = {}
    for grid, idx in api.expert_variants(False, e, K, MAX_T, bk):
        a1, a2 = api.gemm_formats("nvfp4", bk[idx])
        g = "identity" if grid == "tiled" else grid  # the stand-ins visit every expert either way
        experts[(grid, idx)] = (
            fc1_stand_in(a1, wplan.weight_format, wplan.activation, g),
            fc2_stand_in(a2, wplan.weight_format, g),
        )
    routing, combine = routing_and_combine("nvfp4", "nvfp4")
    deq = routing_and_combine(DEQ, DEQ) if dequant or decode else None
    return p, s, api.Launchers(routing, combine, experts, deq), bk


def _wplan(act="silu"):
    return weight_plan("modelopt_nvfp4", act, ("nvfp4",), e=E, h=H, i=INTER)


# ---- the operands ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "encode, cfg, on_input, data",
    [
        *(("divide", c, o, d) for c in (MICRO, DYNAMIC) for o in (False, True) for d in ("wide", "specials", "ties", "near")),
        # the staged "search" encode (`RoutingConfig.nvfp4_deq_encode`): the same bits
        *(("search", c, False, d) for c in (MICRO, DYNAMIC) for d in ("wide", "specials", "ties", "near")),
    ],
    ids=lambda v: v if isinstance(v, str) else ("micro" if v is MICRO else "dynamic" if v is DYNAMIC else str(v)),
)  # fmt: skip
def test_gather_writes_the_dequantized_codec(encode, cfg, on_input, data):
    p, s, L, _ = dequant_layer(_wplan(), routing_cfg=cfg, on_input=on_input, deq_encode=encode)
    t = 7
    a = make_input(data, t, H, torch.bfloat16, 16, seed=len(data) + on_input)
    ids = ids_with_ignored(t, K, E, seed=5)
    w = weights(t, K, 6) if data != "ties" else torch.ones(t, K)
    g1 = torch.tensor([1.0, 0.5, 2.0, 3.0, 1.0, 0.75]) if data in ("ties", "near") else torch.rand(E) * 100 + 1
    g2 = torch.rand(E) * 10 + 1
    L.routing_for("int32", True)(t, ids, w, a, s, g1, g2)
    check_routing(s, ids, E, K)
    n = int(s["expert_start"][E])
    assert n > 0
    tok, ex = s["sorted_token"][:n].long(), s["sorted_expert"][:n].long()
    slot = torch.tensor(
        [int((s["route_row"][tt * K : tt * K + K] == pp).nonzero()) for pp, tt in enumerate(tok.tolist())]
    )
    x = a[tok].float() * (w[tok, slot][:, None] if on_input else 1.0)
    for r in range(n):
        assert_same_bits(s["a1_deq"][r], nvfp4_deq(x[r : r + 1], g1[ex[r]])[0], f"a1_deq row {r}")
    assert s["a1_deq"][n:].isnan().all(), "rows past start[E] were written"
    assert (s["a1"] == 0xAB).all(), "the dequant gather wrote the packed operand"
    assert torch.equal(s["alpha1"], 1.0 / g1) and torch.equal(s["alpha2"], 1.0 / g2)  # the epilogue's 1 / gs
    # the packed kernels quantize the same way: decoding their bytes gives the same values
    L.routing_for("int32", False)(t, ids, w, a, s, g1, g2)
    grid = Q.unswizzle_scales(s["a1_scales"], s["a1"].shape[0], H // 16)[:n]
    packed = Q.dequantize_nvfp4(s["a1"][:n], grid.view(torch.float8_e4m3fn), 1.0).bfloat16()
    assert_same_bits(s["a1_deq"][:n], packed, "a1_deq vs the packed gather's values")


@pytest.mark.parametrize("encode", ["divide", "search"])
@pytest.mark.parametrize("data", ["wide", "specials", "near"])
def test_requantize_writes_the_dequantized_codec(data, encode):
    p, s, L, _ = dequant_layer(_wplan(), deq_encode=encode)
    t, n = 7, 15  # live rows of 21 routes: the rest must stay untouched
    s["c1"].copy_(make_input(data, MAX_T * K, INTER, torch.bfloat16, 16, seed=11))
    ex = torch.randint(0, E, (MAX_T * K,), generator=torch.Generator().manual_seed(4)).to(torch.int32)
    s["sorted_expert"].copy_(ex)
    s["expert_start"].copy_(torch.tensor([0, 2, 5, 9, 9, 12, n], dtype=torch.int32))
    g2 = torch.rand(E) * 50 + 1
    L.requantizer(True).requantize(t, s, g2)
    for r in range(n):
        want = nvfp4_deq(s["c1"][r : r + 1].float(), g2[ex[r].long()])[0]
        assert_same_bits(s["a2_deq"][r], want, f"a2_deq row {r}")
    assert s["a2_deq"][n:].isnan().all()
    assert (s["a2"] == 0xAB).all(), "the dequant requantize wrote the packed operand"


# ---- the whole layer ---------------------------------------------------------------------------------
def _run(p, s, L, bk, a, experts, w, ids, compact=False):
    out = torch.full((a.shape[0], H), float("nan"), dtype=torch.bfloat16)
    b = api.device_binding(p, s, a, experts, w, ids, out, compact=compact, buckets=bk)
    api.execute(L, b, out)
    return b, out


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
@pytest.mark.parametrize("t", [1, T_TILED - 1, T_TILED, 7, MAX_T])
@pytest.mark.parametrize("act", ["silu", "relu2"])
def test_layer_in_the_dequant_bucket(act, t, cfg):
    wplan = _wplan(act)
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=t))
    a = activations(t, H, seed=t + 10)
    ids = ids_with_ignored(t, K, E, seed=t + 20)
    w = weights(t, K, t + 30)
    p, s, L, bk = dequant_layer(wplan, routing_cfg=cfg)
    b, out = _run(p, s, L, bk, a, experts, w, ids)
    tiled = t >= T_TILED
    assert b.dequant is tiled and b.grid == ("tiled" if tiled else "identity")
    assert (b.fc1_args[0] is s["a1_deq"]) is tiled and (b.fc2_args[0] is s["a2_deq"]) is tiled
    check_operands(s, api.gather_formats("nvfp4", bk[b.bucket]), False, experts, a, ids, w)
    if tiled:
        assert (s["a1"] == 0xAB).all() and (s["a2"] == 0xAB).all(), "the dequant bucket wrote packed operands"
    else:
        assert s["a1_deq"].isnan().all() and s["a2_deq"].isnan().all(), "a decode bucket wrote bf16 operands"
    # the packed NVFP4 pipeline with the same buckets: the GEMMs get the same fp32 values, so bit for bit
    p0, s0, L0, bk0 = dequant_layer(wplan, dequant=False, routing_cfg=cfg)
    _, out0 = _run(p0, s0, L0, bk0, a, experts, w, ids)
    assert torch.equal(out.view(torch.int16), out0.view(torch.int16)), "dequant and packed pipelines differ"
    ref32 = dense_layer(a, experts, w, ids, quant_mode="nvfp4")
    peer = dense_layer(a, experts, w, ids, bf16=True, quant_mode="nvfp4")
    check_layer(out, ref32, peer, what=f"nvfp4 dequant {act} T={t}")
    assert bool((row_cosine(out.float(), ref32) >= 0.9999 - 2e-3).all())  # test_fused_moe_pipeline_cases' room
    if t == MAX_T:  # reference.py's per-route loop once
        ref = REF.fused_moe(a, experts, w, ids, quant_mode="nvfp4").float()
        assert bool((row_cosine(out.float(), ref) >= 0.9999 - 2e-3).all())


@pytest.mark.parametrize("cfg", [MICRO, DYNAMIC], ids=["micro", "dynamic"])
@pytest.mark.parametrize("t", [1, T_TILED - 1])
def test_layer_in_a_dequant_decode_bucket(t, cfg):
    """`_buckets.DECODE_DEQUANT_FROM`'s buckets: the decode expert GEMMs read the bf16 operands (their
    W4A16 path), bit for bit the packed pipeline's output."""
    wplan = _wplan()
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=t + 40))
    a, ids, w = activations(t, H, seed=t + 50), ids_with_ignored(t, K, E, seed=t + 60), weights(t, K, t + 70)
    p, s, L, bk = dequant_layer(wplan, dequant=False, routing_cfg=cfg, decode=True)
    b, out = _run(p, s, L, bk, a, experts, w, ids)
    assert b.dequant and b.bucket == 0 and b.grid == "identity"
    assert b.fc1_args[0] is s["a1_deq"] and b.fc2_args[0] is s["a2_deq"]
    check_operands(s, api.gather_formats("nvfp4", bk[b.bucket]), False, experts, a, ids, w)
    assert (s["a1"] == 0xAB).all() and (s["a2"] == 0xAB).all(), "the dequant bucket wrote packed operands"
    p0, s0, L0, bk0 = dequant_layer(wplan, dequant=False, routing_cfg=cfg)
    _, out0 = _run(p0, s0, L0, bk0, a, experts, w, ids)
    assert torch.equal(out.view(torch.int16), out0.view(torch.int16)), "dequant and packed pipelines differ"
    check_layer(out, dense_layer(a, experts, w, ids, quant_mode="nvfp4"),
                dense_layer(a, experts, w, ids, bf16=True, quant_mode="nvfp4"), what=f"nvfp4 decode dequant T={t}")  # fmt: skip


def test_steps_run_the_dequant_kernels():
    """api.steps (the bench's prefixes) issues execute's launches, the dequant ones included."""
    wplan = _wplan()
    experts = fm.prepare_weights(plan=wplan, **checkpoint(wplan, seed=2))
    t = MAX_T
    a, ids, w = activations(t, H, seed=3), ids_with_ignored(t, K, E, seed=4), weights(t, K, 5)
    p, s, L, bk = dequant_layer(wplan)
    b, out = _run(p, s, L, bk, a, experts, w, ids)
    names = [name for name, _ in api.steps(L, b, out)]
    assert names == ["route+gather", "fc1", "requantize", "fc2", "combine"]
    first = out.clone()
    out.fill_(float("nan"))
    s["a2_deq"].fill_(float("nan"))
    for _, fn in api.steps(L, b, out):
        fn()
    assert torch.equal(out.view(torch.int16), first.view(torch.int16))
