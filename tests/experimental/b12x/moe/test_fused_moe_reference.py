"""moe.fused_moe reference and weight packing against independent math (moe_cases.dense_moe)."""

import pytest
import torch

from b12x.gemm.blockscaled import pack_weight
from b12x.moe import fused_moe as fm

from .moe_cases import activations, checkpoint, dense_moe, routing, weight_plan

pytestmark = pytest.mark.reference

RECIPES = [
    ("modelopt_nvfp4", "nvfp4"),
    ("modelopt_nvfp4", "w4a16"),
    ("modelopt_nvfp4", "w4a8_nvfp4"),
    ("fp4_e8m0_k32", "w4a16"),
    ("fp4_e8m0_k32", "w4a8_mx"),
]
ACTS = ("silu", "relu2", "swiglu_oai")
T, K = 5, 2  # odd token count; every token routes to K distinct experts of E = 4


def _run(prepared, wplan, ckpt, mode, a, ids, w, **caps_kw):
    experts = fm.prepare_weights(plan=wplan, **ckpt)
    caps = fm.Caps(max_tokens=8, num_topk=ids.shape[1], device="cpu", weight_plan=wplan, quant_mode=mode, **caps_kw)
    p = prepared(caps)
    return fm.run(binding=fm.bind(p, a=a, experts=experts, topk_weights=w, topk_ids=ids))


def _close(out, dense):
    """out (bf16) against the fp32 dense result: one bf16 rounding, plus fp32 summation order."""
    assert out.dtype == torch.bfloat16
    scale = dense.abs().max().item()
    torch.testing.assert_close(out.float(), dense, rtol=2**-7, atol=1e-3 * scale)


@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("source, mode", RECIPES)
def test_reference_matches_dense(prepared, source, mode, activation):
    wplan = weight_plan(source, activation)
    ckpt = checkpoint(wplan)
    a = activations(T, wplan.hidden_size)
    ids, w = routing(T, K, wplan.num_experts)
    out = _run(prepared, wplan, ckpt, mode, a, ids, w)
    _close(out, dense_moe(a, wplan, ckpt, w, ids, mode))


@pytest.mark.parametrize("activation", ("silu", "swiglu_oai"))
@pytest.mark.parametrize("source, mode", [RECIPES[0], RECIPES[4]])
def test_w13_and_w31_give_identical_results(prepared, source, mode, activation):
    a = activations(T, 64)
    ids, w = routing(T, K, 4)
    outs, packed = [], []
    for layout in ("w13", "w31"):
        wplan = weight_plan(source, activation, layout=layout)
        ckpt = checkpoint(wplan)  # the same fp32 weights, rows in this layout
        packed.append(fm.prepare_weights(plan=wplan, **ckpt))
        outs.append(_run(prepared, wplan, ckpt, mode, a, ids, w))
    assert torch.equal(packed[0].w1_values, packed[1].w1_values)
    assert torch.equal(packed[0].w1_scales.view(torch.uint8), packed[1].w1_scales.view(torch.uint8))
    assert packed[0].fc1_row_order == packed[1].fc1_row_order == "gate_up"
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("activation", ACTS)
def test_router_weight_on_input_follows_its_formula(prepared, activation):
    wplan = weight_plan("modelopt_nvfp4", activation)
    ckpt = checkpoint(wplan)
    a = activations(T, 64)
    ids, w = routing(T, K, 4)
    on_input = _run(prepared, wplan, ckpt, "w4a16", a, ids, w, apply_router_weight_on_input=True)
    _close(on_input, dense_moe(a, wplan, ckpt, w, ids, "w4a16", on_input=True))
    default = _run(prepared, wplan, ckpt, "w4a16", a, ids, w)
    assert not torch.allclose(on_input.float(), default.float(), rtol=0.05, atol=0.0)


def test_relu2_weight_on_input_scales_by_w_squared(prepared):
    # relu(w h)^2 = w^2 relu(h)^2 for w > 0, so with one route: out_on_input = w * out_default.
    wplan = weight_plan("modelopt_nvfp4", "relu2")
    ckpt = checkpoint(wplan)
    a = activations(T, 64)
    ids, _ = routing(T, 1, 4)
    w = torch.tensor([[0.5], [0.25], [0.75], [1.0], [0.125]])
    on_input = _run(prepared, wplan, ckpt, "w4a16", a, ids, w, apply_router_weight_on_input=True)
    default = _run(prepared, wplan, ckpt, "w4a16", a, ids, w)
    _close(on_input, w * default.float())


@pytest.mark.parametrize("source, mode", [RECIPES[0], RECIPES[3]])
def test_ignored_routes_contribute_nothing(prepared, source, mode):
    wplan = weight_plan(source, "silu")
    ckpt = checkpoint(wplan)
    a = activations(T, 64)
    ids, w = routing(T, K, 4)
    bad = ids.clone()
    bad[0, 1], bad[2, 0], bad[3] = -1, 4, torch.tensor([-1, 1 << 20])  # remote (EP), past E, both
    same = ids.clone()
    same[0, 1], same[2, 0], same[3] = 0, 0, 0
    w_zero = w.clone()
    w_zero[0, 1], w_zero[2, 0], w_zero[3] = 0.0, 0.0, 0.0
    out_bad = _run(prepared, wplan, ckpt, mode, a, bad, w)
    assert torch.equal(out_bad, _run(prepared, wplan, ckpt, mode, a, same, w_zero))
    assert torch.equal(out_bad[3], torch.zeros(64, dtype=torch.bfloat16))
    assert torch.equal(out_bad, _run(prepared, wplan, ckpt, mode, a, bad.long(), w))
    _close(out_bad, dense_moe(a, wplan, ckpt, w, bad, mode))


def test_swiglu_parameters(prepared):
    wplan = weight_plan("fp4_e8m0_k32", "swiglu_oai")
    ckpt = checkpoint(wplan)
    a = activations(T, 64) * 8  # large enough that the limit clamps
    ids, w = routing(T, K, 4)
    custom = dict(swiglu_limit=0.5, swiglu_alpha=1.0, swiglu_beta=0.5)
    out = _run(prepared, wplan, ckpt, "w4a16", a, ids, w, **custom)
    _close(out, dense_moe(a, wplan, ckpt, w, ids, "w4a16", limit=0.5, alpha=1.0, beta=0.5))
    assert not torch.equal(out, _run(prepared, wplan, ckpt, "w4a16", a, ids, w))


def test_empty_batch(prepared):
    wplan = weight_plan("modelopt_nvfp4", "silu")
    ids, w = torch.empty(0, K, dtype=torch.int32), torch.empty(0, K)
    out = _run(prepared, wplan, checkpoint(wplan), "nvfp4", torch.empty(0, 64, dtype=torch.bfloat16), ids, w)
    assert out.shape == (0, 64)


@pytest.mark.parametrize("source", ("modelopt_nvfp4", "fp4_e8m0_k32"))
@pytest.mark.parametrize("activation", ("silu", "relu2"))
def test_expert_weight_is_gemm_pack_weight(source, activation):
    """Each expert of the packed layout is byte-for-byte what gemm's pack_weight makes of that expert
    (FC1 rows gate first), so the gemm FP4 kernels read it unchanged."""
    wplan = weight_plan(source, activation)
    ckpt = checkpoint(wplan)
    experts = fm.prepare_weights(plan=wplan, **ckpt)
    i = wplan.intermediate_size
    for e in range(wplan.num_experts):
        for fc in (1, 2):
            values, scale = ckpt[f"w{fc}_fp4"][e], ckpt[f"w{fc}_blockscale"][e]
            if fc == 1 and wplan.gated:  # checkpoint w13 (up, gate) -> packed (gate, up)
                values, scale = torch.cat([values[i:], values[:i]]), torch.cat([scale[i:], scale[:i]])
            gs = ckpt.get(f"w{fc}_global_scale")
            want = pack_weight(values, scale, global_scale=None if gs is None else gs[e])
            got = experts.expert_weight(fc, e)
            assert (got.recipe, got.n, got.k) == (want.recipe, want.n, want.k)
            assert torch.equal(got.values, want.values)
            assert torch.equal(got.scales.view(torch.uint8), want.scales.view(torch.uint8))
            assert torch.equal(got.alpha, want.alpha)
    assert experts.w1_values.is_contiguous() and experts.w1_scales.is_contiguous()


def test_fp4x2_and_ocp_block_inputs_pack_the_same():
    wplan = weight_plan("fp4_e8m0_k32", "silu")
    ckpt = checkpoint(wplan)
    base = fm.prepare_weights(plan=wplan, **ckpt)
    e, n, kb = ckpt["w1_fp4"].shape
    blocks = dict(ckpt, w1_fp4=ckpt["w1_fp4"].reshape(e, n, kb // 16, 16))
    assert torch.equal(fm.prepare_weights(plan=wplan, **blocks).w1_values, base.w1_values)
    fp4x2 = getattr(torch, "float4_e2m1fn_x2", None)
    if fp4x2 is not None:
        alt = dict(ckpt, w2_fp4=ckpt["w2_fp4"].view(fp4x2))
        assert torch.equal(fm.prepare_weights(plan=wplan, **alt).w2_values, base.w2_values)


def test_scalar_global_scales_broadcast():
    wplan = weight_plan("modelopt_nvfp4", "silu", modes=("w4a16",))
    ckpt = checkpoint(wplan)
    ckpt.update(w1_global_scale=2.0, w2_global_scale=torch.tensor(4.0), a1_gscale=None, a2_gscale=None)
    experts = fm.prepare_weights(plan=wplan, **ckpt)
    assert torch.equal(experts.w1_alpha, torch.full((4,), 0.5))
    assert torch.equal(experts.w2_alpha, torch.full((4,), 0.25))
    assert experts.a1_gscale is None and experts.a2_gscale is None


@pytest.mark.parametrize("logit_dtype", (torch.float32, torch.bfloat16))
def test_route_topk_softmax_renormalised(prepared, logit_dtype):
    wplan = weight_plan("modelopt_nvfp4", "silu", e=8)
    p = prepared(fm.Caps(max_tokens=8, num_topk=3, device="cpu", weight_plan=wplan, quant_mode="nvfp4"))
    logits = torch.randn(6, 8, generator=torch.Generator().manual_seed(3)).to(logit_dtype)
    tl, ids, tw = torch.empty(6, 3), torch.empty(6, 3, dtype=torch.int32), torch.empty(6, 3)
    got = fm.route_topk(p, logits, tl, ids, tw)
    assert got[0] is ids and got[1] is tw
    lf = logits.float()
    want_ids = lf.argsort(dim=-1, descending=True)[:, :3]  # no ties in random logits
    assert torch.equal(ids.long(), want_ids)
    assert torch.equal(tl, lf.gather(1, want_ids))
    probs = torch.softmax(lf, -1).gather(1, want_ids)
    torch.testing.assert_close(tw, probs / probs.sum(-1, keepdim=True), rtol=0, atol=0)
    torch.testing.assert_close(tw.sum(-1), torch.ones(6), rtol=0, atol=2e-7)
    torch.testing.assert_close(tw, torch.softmax(tl, -1), rtol=1e-6, atol=1e-7)  # same as softmax of the k
    fm.route_topk(p, logits, tl, ids, tw, renormalize=False)
    assert torch.equal(tw, probs)


def test_route_topk_ties_go_to_the_higher_expert_id(prepared):
    wplan = weight_plan("modelopt_nvfp4", "silu", e=4)
    p = prepared(fm.Caps(max_tokens=8, num_topk=2, device="cpu", weight_plan=wplan, quant_mode="nvfp4"))
    logits = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0],  # all tied: 3, 2
            [1.0, 3.0, 3.0, 0.0],  # top two tied: 2, 1
            [5.0, 2.0, 0.0, 2.0],  # 0 first, then the tie 1|3 -> 3
            [-1.0, 0.5, -1.0, -1.0],  # 1 first, then the three-way tie -> 3
        ]
    )
    tl, ids, tw = torch.empty(4, 2), torch.empty(4, 2, dtype=torch.int64), torch.empty(4, 2)
    fm.route_topk(p, logits, tl, ids, tw)
    assert ids.tolist() == [[3, 2], [2, 1], [0, 3], [1, 3]]
    assert tw[0].tolist() == [0.5, 0.5] and tw[1].tolist() == [0.5, 0.5]
