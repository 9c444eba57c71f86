"""moe.fused_moe contract: plan purity, bind is views and checks only, exact bad-input messages."""

import dataclasses

import pytest
import torch

from b12x.moe import fused_moe as fm
from flashinfer.experimental.b12x.moe.fused_moe import api
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError

from .moe_cases import activations, checkpoint, routing, weight_plan

pytestmark = pytest.mark.contract

MODES_NV = "('nvfp4', 'w4a16', 'w4a8_nvfp4')"
ALL_MODES = "('nvfp4', 'w4a16', 'w4a8_mx', 'w4a8_nvfp4')"


def exact(exc, message, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert str(info.value) == message


def _wp_kwargs(**over):
    kw = dict(
        quant_modes=("nvfp4", "w4a16", "w4a8_nvfp4"),
        source_format="modelopt_nvfp4",
        activation="silu",
        params_dtype="bfloat16",
        num_experts=4,
        hidden_size=64,
        intermediate_size=32,
    )
    kw.update(over)
    return kw


def _caps(wplan=None, **over):
    kw = dict(max_tokens=8, num_topk=2, device="cpu", weight_plan=wplan or weight_plan("modelopt_nvfp4", "silu"))
    kw.update(quant_mode="nvfp4")
    kw.update(over)
    return fm.Caps(**kw)


# ---- support ------------------------------------------------------------------------------------
def test_support_follows_the_device_pipeline():
    """The device pipeline (Triton routing/combine + CuTe expert GEMMs) targets sm_90a and sm_120a;
    without CUDA the op is unsupported and says why (CPU tensors still run the reference)."""
    assert set(fm.META.archs) >= {"sm_90a", "sm_120a"} and fm.META.api_style == "planned"
    if not torch.cuda.is_available():
        assert fm.is_supported() is False and fm.is_supported("cuda") is False
        assert fm.why_unsupported()


# ---- plan_weights ---------------------------------------------------------------------------------
def test_plan_weights_is_pure_and_normalised():
    a, b = fm.plan_weights(**_wp_kwargs()), fm.plan_weights(**_wp_kwargs(params_dtype=torch.bfloat16))
    assert a == b and hash(a) == hash(b)
    assert a.w13_layout == "w13" and a.fc1_rows == 64 and a.fc1_row_order == "gate_up" and a.weight_format == "nvfp4"
    relu = fm.plan_weights(**_wp_kwargs(activation="relu2", quant_modes="w4a16"))
    assert relu.quant_modes == ("w4a16",) and relu.fc1_rows == 32 and relu.fc1_row_order == "single"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.num_experts = 8


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(source_format="gguf"), "source_format must be one of ('modelopt_nvfp4', 'fp4_e8m0_k32'), got 'gguf'"),
        (dict(quant_modes=()), f"quant_modes must be a recipe name or a non-empty sequence of {ALL_MODES}, got ()"),
        (dict(quant_modes=("fp8",)), f"quant_modes entries must be in {ALL_MODES}, got 'fp8'"),
        (
            dict(source_format="fp4_e8m0_k32", quant_modes="nvfp4"),
            "quant mode 'nvfp4' does not run on fp4_e8m0_k32 weights (allowed: ('w4a16', 'w4a8_mx'))",
        ),
        (
            dict(quant_modes="w4a8_mx"),
            "quant mode 'w4a8_mx' does not run on modelopt_nvfp4 weights (allowed: " + MODES_NV + ")",
        ),
        (dict(activation="gelu"), "activation must be one of ('silu', 'relu2', 'swiglu_oai'), got 'gelu'"),
        (dict(params_dtype=torch.float16), "params_dtype must be one of ('bfloat16',), got torch.float16"),
        (dict(w13_layout="w21"), "w13_layout must be one of ('w13', 'w31'), got 'w21'"),
        (dict(num_experts=0), "num_experts must be an int >= 1, got 0"),
        (dict(hidden_size=64.0), "hidden_size must be an int >= 1, got 64.0"),
        (dict(intermediate_size=True), "intermediate_size must be an int >= 1, got True"),
        (
            dict(hidden_size=48),
            f"hidden_size must be a multiple of 32 for modelopt_nvfp4 with {MODES_NV}, got 48",
        ),
        (
            dict(quant_modes="nvfp4", intermediate_size=8),
            "intermediate_size must be a multiple of 16 for modelopt_nvfp4 with ('nvfp4',), got 8",
        ),
        (
            dict(source_format="fp4_e8m0_k32", quant_modes="w4a16", intermediate_size=48),
            "intermediate_size must be a multiple of 32 for fp4_e8m0_k32 with ('w4a16',), got 48",
        ),
    ],
)
def test_plan_weights_errors(over, message):
    exact(ValueError, message, fm.plan_weights, **_wp_kwargs(**over))


# ---- prepare_weights ------------------------------------------------------------------------------
def _nv():
    wplan = weight_plan("modelopt_nvfp4", "silu")
    return wplan, checkpoint(wplan)


def _mx():
    wplan = weight_plan("fp4_e8m0_k32", "silu")
    return wplan, checkpoint(wplan)


@pytest.mark.parametrize(
    "case, change, message",
    [
        (
            "nv",
            dict(w1_fp4=torch.zeros(4, 32, 32, dtype=torch.uint8)),
            "w1_fp4 must be uint8 [4, 64, 32], got uint8 [4, 32, 32] on cpu",
        ),
        ("nv", dict(w2_fp4=torch.zeros(4, 64, 16)), "w2_fp4 must be uint8 [4, 64, 16], got float32 [4, 64, 16] on cpu"),
        (
            "mx",
            dict(w1_fp4=torch.zeros(4, 64, 32, 2, dtype=torch.uint8)),
            "w1_fp4 must be uint8 [4, 64, 32] (or [4, 64, 2, 16]), got uint8 [4, 64, 32, 2] on cpu",
        ),
        (
            "nv",
            dict(w1_blockscale=torch.zeros(4, 64, 4, dtype=torch.uint8)),
            "w1_blockscale must be float8_e4m3fn [4, 64, 4], got uint8 [4, 64, 4] on cpu",
        ),
        (
            "mx",
            dict(w2_blockscale=torch.zeros(4, 64, 2, dtype=torch.uint8)),
            "w2_blockscale must be UE8M0 uint8 [4, 64, 1], got uint8 [4, 64, 2] on cpu",
        ),
        (
            "mx",
            dict(w1_global_scale=1.0),
            "w1_global_scale must be None for fp4_e8m0_k32 weights (MX has no global scale)",
        ),
        ("mx", dict(a2_gscale=1.0), "a2_gscale must be None for fp4_e8m0_k32 weights (MX has no global scale)"),
        (
            "nv",
            dict(w1_global_scale=None),
            "w1_global_scale is required for modelopt_nvfp4 weights (gs_w, a multiplier)",
        ),
        ("nv", dict(a1_gscale=None), "a1_gscale is required for quant mode 'nvfp4' (per-expert gs_a, a multiplier)"),
        (
            "nv",
            dict(a2_gscale=torch.ones(3)),
            "a2_gscale must be a float32 tensor [4] or a scalar, got float32 [3] on cpu",
        ),
        ("nv", dict(a1_gscale="1"), "a1_gscale must be a float32 tensor [4] or a scalar, got str"),
        (
            "nv",
            dict(w2_global_scale=torch.tensor([1.0, 0.0, 1.0, float("inf")])),
            "w2_global_scale must be finite and > 0 for every expert, got [1.0, 0.0, 1.0, inf]",
        ),
        (
            "nv",
            dict(w2_fp4=torch.zeros(4, 64, 16, dtype=torch.uint8, device="meta")),
            "w2_fp4 must be on cpu (w1_fp4's device), got meta",
        ),
    ],
)
def test_prepare_weights_errors(case, change, message):
    wplan, ckpt = _nv() if case == "nv" else _mx()
    ckpt.update(change)
    exact(ValueError, message, fm.prepare_weights, plan=wplan, **ckpt)


def test_prepare_weights_plan_type_and_keywords():
    _, ckpt = _nv()
    exact(ValueError, "plan must be a WeightPlan from plan_weights(...), got dict", fm.prepare_weights, plan={}, **ckpt)
    with pytest.raises(TypeError):
        fm.prepare_weights(weight_plan("modelopt_nvfp4", "silu"), **ckpt)  # keyword-only


def test_expert_weights_records_layout():
    wplan, ckpt = _nv()
    experts = fm.prepare_weights(plan=wplan, **ckpt)
    assert repr(experts) == "ExpertWeights(nvfp4, E=4, H=64, I=32, silu, fc1 rows gate_up, on cpu)"
    assert experts.fc1_row_order == "gate_up" and experts.weight_format == "nvfp4"
    assert experts.w1_values.shape == (4, 64, 32) and experts.w1_scales.shape == (4, 128 * 4)
    assert experts.w1_scales.dtype == torch.float8_e4m3fn and experts.w2_scales.shape == (4, 128 * 4)
    exact(ValueError, "expert_weight takes fc 1 or 2 and e in [0, 4), got fc=3, e=0", experts.expert_weight, 3, 0)


# ---- Caps and plan ------------------------------------------------------------------------------
def test_caps_defaults_and_purity():
    swiglu = _caps(weight_plan("fp4_e8m0_k32", "swiglu_oai"), quant_mode="w4a16", device=torch.device("cpu"))
    assert (swiglu.swiglu_limit, swiglu.swiglu_alpha, swiglu.swiglu_beta) == (7.0, 1.702, 1.0)
    assert swiglu.device == "cpu" and swiglu.apply_router_weight_on_input is False
    silu = _caps()
    assert (silu.swiglu_limit, silu.swiglu_alpha, silu.swiglu_beta) == (None, None, None)
    p1, p2 = fm.plan(_caps()), fm.plan(_caps())
    assert p1 == p2 and hash(p1) == hash(p2) and not p1.prepared
    assert p1.memory_requirements("cpu") == 0 and p1.heuristic(None) is None
    assert fm.plan(_caps(), invocation=3) != p1
    with pytest.raises(dataclasses.FrozenInstanceError):
        silu.max_tokens = 4
    with pytest.raises(TypeError):
        fm.Caps(8, 2, "cpu", weight_plan("modelopt_nvfp4", "silu"), "nvfp4")  # keyword-only


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(max_tokens=0), "max_tokens must be an int >= 1, got 0"),
        (dict(weight_plan="wp"), "weight_plan must be a WeightPlan from plan_weights(...), got str"),
        (dict(num_topk=5), "num_topk must be an int in [1, num_experts=4], got 5"),
        (dict(device="gpu0"), "device must be a torch.device or a device string, got 'gpu0'"),
        (
            dict(quant_mode="w4a8_mx"),
            f"quant_mode must be one of the weight plan's quant_modes {MODES_NV}, got 'w4a8_mx'",
        ),
        (dict(apply_router_weight_on_input=1), "apply_router_weight_on_input must be a bool, got 1"),
        (
            dict(swiglu_limit=7.0),
            "swiglu_limit applies to activation 'swiglu_oai' only, got swiglu_limit=7.0 with 'silu'",
        ),
    ],
)
def test_caps_errors(over, message):
    exact(ValueError, message, _caps, **over)


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(swiglu_alpha=float("nan")), "swiglu_alpha must be a finite float, got nan"),
        (dict(swiglu_beta="1"), "swiglu_beta must be a finite float, got '1'"),
        (dict(swiglu_limit=-1.0), "swiglu_limit must be > 0, got -1.0"),
    ],
)
def test_caps_swiglu_errors(over, message):
    exact(ValueError, message, _caps, weight_plan("modelopt_nvfp4", "swiglu_oai"), **over)


def test_plan_errors():
    exact(ValueError, "caps must be a moe.fused_moe Caps, got dict", fm.plan, {})
    msg = "invocation must be None or the expected token count in [1, 8], got 0"
    exact(ValueError, msg, fm.plan, _caps(), invocation=0)
    msg = "override must be None or a moe.fused_moe MoeConfig, got {'x': 1}"
    exact(ValueError, msg, fm.plan, _caps(), override={"x": 1})


def _experts_buckets(max_tokens):
    pytest.importorskip("cutlass")  # the expert GEMMs' configs are gemm DecodeConfigs
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts

    return _kernel_experts.default_buckets(max_tokens)


def test_plan_override_checks_the_expert_buckets():
    import dataclasses

    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig
    from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing, api

    caps = _caps()  # max_tokens 8
    h, i = caps.weight_plan.hidden_size, caps.weight_plan.intermediate_size
    good = _experts_buckets(caps.max_tokens)
    cfg = api.MoeConfig(_routing.default_config(h), _combine.default_config(i), good)
    assert fm.plan(caps, override=cfg).override is cfg
    b = good[0]
    two = (dataclasses.replace(b, max_tokens=2), b)  # T <= 2, then T <= 8
    assert fm.plan(caps, override=dataclasses.replace(cfg, experts=two)).override.experts == two
    cases = [
        (None, "override.experts must be a non-empty tuple of moe.fused_moe ExpertBucket, got None"),
        ((), "override.experts must be a non-empty tuple of moe.fused_moe ExpertBucket, got ()"),
        ([b], "override.experts must be a non-empty tuple of moe.fused_moe ExpertBucket, got [ExpertBucket("),
        ((b, b), "override.experts: bucket max_tokens must be ints >= 1, strictly ascending, got [8, 8]"),
        ((dataclasses.replace(b, max_tokens=0), b), "override.experts: bucket max_tokens must be ints >= 1, strictly"),
        (
            (dataclasses.replace(b, max_tokens=4),),
            "override.experts: the last bucket must hold the caps' max_tokens = 8, got [4]",
        ),
        ((dataclasses.replace(b, fc1=DecodeConfig(8, 1, 1, 1)),), "override.experts[0].fc1: a gated FC1 needs tiles"),
        ((dataclasses.replace(b, fc2=DecodeConfig(3, 2, 1, 1)),), "override.experts[0].fc2: config DecodeConfig("),
        ((dataclasses.replace(b, fc2="w8t2"),), "override.experts[0].fc2: config must be a DecodeConfig, got str"),
    ]
    for experts, message in cases:
        with pytest.raises(ValueError) as info:
            fm.plan(caps, override=dataclasses.replace(cfg, experts=experts))
        assert str(info.value).startswith(message), str(info.value)


def test_plan_override_is_a_checked_moe_config():
    import dataclasses

    from flashinfer.experimental.b12x.moe.fused_moe import _combine, _routing, api

    caps = _caps()
    h, i = caps.weight_plan.hidden_size, caps.weight_plan.intermediate_size
    cfg = api.MoeConfig(_routing.default_config(h), _combine.default_config(i), _experts_buckets(caps.max_tokens))
    compact = dataclasses.replace(cfg, routing=dataclasses.replace(cfg.routing, compact_grid=True))
    p = fm.plan(caps, override=compact)
    assert p.override is compact and p != fm.plan(caps) and hash(p) == hash(fm.plan(caps, override=compact))
    bad = dataclasses.replace(cfg, routing=dataclasses.replace(cfg.routing, block_h=3 * h))
    with pytest.raises(ValueError, match=f"override.routing cannot implement H={h}"):
        fm.plan(caps, override=bad)
    bad = dataclasses.replace(cfg, combine=dataclasses.replace(cfg.combine, block_t=3))
    with pytest.raises(ValueError, match=f"override.combine cannot implement I={i}"):
        fm.plan(caps, override=bad)


# ---- bind and run --------------------------------------------------------------------------------
@pytest.fixture
def layer(prepared):
    wplan, ckpt = _nv()
    experts = fm.prepare_weights(plan=wplan, **ckpt)
    ids, w = routing(5, 2, 4)
    return prepared(_caps(wplan)), dict(a=activations(5, 64), experts=experts, topk_weights=w, topk_ids=ids)


def test_bind_unprepared_names_preparation_session(layer):
    _, tensors = layer
    with pytest.raises(PlanNotPreparedError, match="moe.fused_moe: this plan is not prepared.*PreparationSession"):
        fm.bind(fm.plan(_caps()), **tensors)


def test_bind_is_views_and_checks_only(layer, monkeypatch):
    p, tensors = layer
    out = torch.full((5, 64), float("nan"), dtype=torch.bfloat16)

    def no_alloc(*args, **kwargs):
        raise AssertionError("bind allocated")

    for name in ("empty", "zeros", "empty_like", "zeros_like", "full", "ones"):
        monkeypatch.setattr(torch, name, no_alloc)
    binding = fm.bind(p, output=out, **tensors)
    monkeypatch.undo()
    assert binding.a is tensors["a"] and binding.topk_ids is tensors["topk_ids"] and binding.output is out
    assert torch.isnan(out.float()).all()  # bind never writes
    got = fm.run(binding=binding)
    assert got is out and torch.equal(out, fm.run(binding=fm.bind(p, **tensors)))


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(scratch={"x": 1}), "scratch must be None (moe.fused_moe has no workspace yet), got dict"),
        (dict(a=torch.zeros(5, 64)), "a must be bfloat16 [T, 64], got float32 [5, 64] on cpu"),
        (dict(a=torch.zeros(5, 32, dtype=torch.bfloat16)), "a must be bfloat16 [T, 64], got bfloat16 [5, 32] on cpu"),
        (dict(a=torch.zeros(9, 64, dtype=torch.bfloat16)), "a has T = 9 tokens, above the caps' max_tokens = 8"),
        (
            dict(a=torch.zeros(5, 64, dtype=torch.bfloat16, device="meta")),
            "a must be on cpu (the caps' device), got bfloat16 [5, 64] on meta",
        ),
        (dict(experts={}), "experts must be an ExpertWeights from prepare_weights(...), got dict"),
        (dict(topk_ids=torch.zeros(5, 2)), "topk_ids must be int32 (or int64) [5, 2], got float32 [5, 2] on cpu"),
        (
            dict(topk_ids=torch.zeros(5, 3, dtype=torch.int32)),
            "topk_ids must be int32 (or int64) [5, 2], got int32 [5, 3] on cpu",
        ),
        (
            dict(topk_weights=torch.zeros(5, 2, dtype=torch.bfloat16)),
            "topk_weights must be float32 [5, 2], got bfloat16 [5, 2] on cpu",
        ),
        (dict(output=torch.zeros(5, 64)), "output must be bfloat16 [5, 64], got float32 [5, 64] on cpu"),
    ],
)
def test_bind_errors(layer, change, message):
    p, tensors = layer
    tensors.update(change)
    exact(ValueError, message, fm.bind, p, **tensors)


def test_bind_rejects_experts_of_another_weight_plan(layer):
    p, tensors = layer
    other_plan = weight_plan("modelopt_nvfp4", "silu", layout="w31")
    tensors["experts"] = fm.prepare_weights(plan=other_plan, **checkpoint(other_plan))
    msg = f"experts were prepared for {other_plan}, not for the caps' weight plan {p.caps.weight_plan}"
    exact(ValueError, msg, fm.bind, p, **tensors)
    exact(ValueError, "plan must come from moe.fused_moe.plan(caps), got str", fm.bind, "p", **tensors)


def test_run_errors_and_a_binding_without_device_launchers(layer):
    p, tensors = layer
    exact(ValueError, "binding must come from moe.fused_moe.bind(...), got NoneType", fm.run, binding=None)
    # A device binding (meta stands in for CUDA) of a plan prepared on the CPU has no launchers: run says so.
    meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}
    binding = api.FusedMoeBinding(p, meta["a"], meta["experts"], meta["topk_weights"], meta["topk_ids"], None)
    msg = (
        "moe.fused_moe: this binding has no device launchers (its plan was prepared on cpu, the tensors are on "
        "meta); bind a plan prepared in PreparationSession on that device"
    )
    exact(ValueError, msg, fm.run, binding=binding)


# ---- route_topk -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(router_logits=torch.zeros(5, 4, dtype=torch.int64)),
            "router_logits must be bfloat16/float16/float32 [T, 4], got int64 [5, 4] on cpu",
        ),
        (
            dict(router_logits=torch.zeros(5, 8)),
            "router_logits must be bfloat16/float16/float32 [T, 4], got float32 [5, 8] on cpu",
        ),
        (dict(router_logits=torch.zeros(9, 4)), "router_logits has T = 9 tokens, above the caps' max_tokens = 8"),
        (
            dict(topk_logits=torch.zeros(5, 2, dtype=torch.bfloat16)),
            "topk_logits must be float32 [5, 2], got bfloat16 [5, 2] on cpu",
        ),
        (
            dict(topk_ids=torch.zeros(5, 2, dtype=torch.int16)),
            "topk_ids must be int32 (or int64) [5, 2], got int16 [5, 2] on cpu",
        ),
        (dict(topk_weights=torch.zeros(4, 2)), "topk_weights must be float32 [5, 2], got float32 [4, 2] on cpu"),
        (dict(plan="p"), "plan must come from moe.fused_moe.plan(caps), got str"),
    ],
)
def test_route_topk_errors(layer, change, message):
    p, _ = layer
    args = dict(
        plan=p,
        router_logits=torch.zeros(5, 4),
        topk_logits=torch.zeros(5, 2),
        topk_ids=torch.zeros(5, 2, dtype=torch.int32),
        topk_weights=torch.zeros(5, 2),
    )
    args.update(change)
    exact(ValueError, message, fm.route_topk, **args)
