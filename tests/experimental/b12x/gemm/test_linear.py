"""The linear-layer ops (mxfp8_linear, tensor_fp8_linear, block_fp8_linear) on the CPU: reference
semantics, plans and bindings, caller scratch, the block-FP8 quantizer's bits (emulated), compiles."""

import numpy as np
import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x._lib.scratch import allocate_arena, carve
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError

from .emulator import EmuOps, GlobalMemory

MX = b12x.gemm.mxfp8_linear
TF = b12x.gemm.tensor_fp8_linear
BF = b12x.gemm.block_fp8_linear


def _xw(m=5, n=48, k=256, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * 2).to(dtype), torch.randn(n, k, generator=g) * 0.03


@pytest.fixture
def quiet_reference():
    import flashinfer.experimental.b12x.preparation.session as S

    old, S._warned_reference = S._warned_reference, True  # the CPU warning is tested elsewhere
    yield
    S._warned_reference = old


# ---- mxfp8_linear / tensor_fp8_linear ----------------------------------------------------------
@pytest.mark.reference
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mxfp8_linear_quantizes_the_activation_like_the_oracle(dtype, quiet_reference):
    x, w = _xw(dtype=dtype)
    pw = MX.pack_weight(w)
    y = MX.mm(x, pw)
    xq, xs = Q.quantize_mxfp8(x)
    want = R.mm("mxfp8", xq, Q.swizzle_scales(xs, 127), "mxfp8", pw.values, pw.scales, 1.0, "float32")
    assert y.dtype == dtype and torch.equal(y, want.to(dtype))


@pytest.mark.reference
def test_mxfp8_linear_from_block_fp8_checkpoint():
    _, w = _xw(n=160)
    bq, bs = Q.quantize_block_fp8_weight(w)
    pw = MX.pack_weight(bq, bs)
    assert pw.recipe == "mxfp8"
    assert torch.equal(pw.scales, Q.deepseek_block_fp8_linear_to_mx(bq, bs).scales)


@pytest.mark.reference
@pytest.mark.parametrize("static", [False, True])
def test_tensor_fp8_linear_static_and_dynamic_scales(static):
    x, w = _xw(seed=1)
    pw = TF.pack_weight(w, input_scale=0.01 if static else None)
    y = TF.mm(x, pw)
    s = torch.tensor([0.01]) if static else None
    xq, xs = R.quantize_tensor_fp8(x, s)
    if not static:
        assert torch.equal(xs, (x.float().abs().max() / 448).reshape(1))
    want = R.mm("fp8_tensor", xq, xs, "fp8_tensor", pw.values, pw.scales, 1.0, "bfloat16")
    assert torch.equal(y, want)


@pytest.mark.contract
def test_linear_ops_reject_weights_of_another_recipe():
    x, w = _xw()
    with pytest.raises(ValueError, match=r"rhs must be an MXFP8 Weight \(pack_weight\), got Weight\(nvfp4"):
        MX.mm(x, b12x.gemm.blockscaled.pack_weight(w, recipe="nvfp4"))
    with pytest.raises(ValueError, match=r"rhs must be a tensor-FP8 Weight"):
        TF.mm(x, MX.pack_weight(w))
    with pytest.raises(ValueError, match=r"lhs must be bf16/fp16 \[M, K\] or an MXFP8 \(values, scales\) pair"):
        MX.mm(x.float(), MX.pack_weight(w))


# ---- block_fp8_linear ---------------------------------------------------------------------------
def _caps(**kw):
    base = dict(device="cpu", max_tokens=16, in_features=256, out_features=48)
    base.update(kw)
    return BF.Caps(**base)


@pytest.mark.contract
def test_block_fp8_plans_are_pure_and_declare_scratch():
    p = BF.plan(_caps())
    assert p == BF.plan(_caps()) and hash(p) == hash(BF.plan(_caps()))
    names = {s.name: (s.shape, str(s.dtype)) for s in p.scratch_specs(None, "cpu")}
    assert names == {
        "act_values": ((16, 256), "uint8"),
        "act_scales": ((16, 2), "float32"),
        "output": ((16, 48), "bfloat16"),
    }
    assert "output" not in {s.name for s in BF.plan(_caps(output_mode="new")).scratch_specs(None, "cpu")}


@pytest.mark.contract
@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(in_features=200), r"K must be a positive multiple of 128"),
        (dict(block_size=(64, 64)), r"caps.block_size must be \(128, 128\)"),
        (dict(source_dtype=torch.float32), r"caps.source_dtype must be one of \('bfloat16', 'float16'\)"),
        (dict(output_mode="inplace"), r"caps.output_mode must be one of \('scratch', 'new'\)"),
        (dict(max_tokens=0), r"caps.max_tokens must be an int >= 1, got 0"),
    ],
)
def test_block_fp8_caps_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        _caps(**kw)


@pytest.mark.reference
@pytest.mark.parametrize("mode", ["scratch", "new"])
def test_block_fp8_linear_runs_the_reference_on_cpu(mode, quiet_reference):
    x, w = _xw(m=6, seed=2)
    wq, ws = Q.quantize_block_fp8_weight(w)
    pw = BF.pack_weight(wq, ws)
    bias = torch.randn(48).to(torch.bfloat16)
    p = BF.plan(_caps(output_mode=mode))
    with b12x.PreparationSession("cpu") as s:
        s.prepare([p])
    y = BF.run(x, pw, plan=p, bias=bias)
    xq, xs = Q.quantize_block_fp8_act(x)
    want = (R.mm("fp8_block", xq, xs, "fp8_block", wq, ws, 1.0, "float32") + bias.float()).to(torch.bfloat16)
    assert y.shape == (6, 48) and torch.equal(y, want)
    if mode == "scratch":
        assert y.data_ptr() == p.state.scratch["output"].data_ptr()
    y2 = BF.run(binding=BF.bind(p, source=x, packed_weight=pw, bias=bias))
    assert torch.equal(y2, want)


@pytest.mark.reference
def test_block_fp8_linear_with_caller_scratch_and_quantize_input(quiet_reference):
    x, w = _xw(m=3, seed=3, dtype=torch.float16)
    pw = BF.pack_weight(w.to(torch.float32))
    p = BF.plan(_caps(source_dtype=torch.float16))
    with b12x.PreparationSession("cpu") as s:
        s.prepare([p])
    specs = p.scratch_specs(None, "cpu")
    arena, lay = allocate_arena(specs, "cpu")
    ws = carve(arena, specs, lay)
    y = BF.run(x, pw, plan=p, workspace=ws)
    assert y.data_ptr() == ws["output"].data_ptr() and y.dtype == torch.float16
    q, sc = BF.quantize_input(x, plan=p)
    rq, rs = Q.quantize_block_fp8_act(x)
    assert torch.equal(q, rq.view(torch.uint8)) and torch.equal(sc, rs)
    assert torch.equal(ws["act_values"][:3], q) and torch.equal(ws["act_scales"][:3], sc)


@pytest.mark.contract
def test_block_fp8_bind_errors(quiet_reference):
    x, w = _xw(m=3, seed=4)
    pw = BF.pack_weight(w)
    p = BF.plan(_caps())
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        BF.bind(p, source=x, packed_weight=pw)
    with b12x.PreparationSession("cpu") as s:
        s.prepare([p])
    with pytest.raises(ValueError, match=r"source has 17 tokens, above the plan's capacity max_tokens=16"):
        BF.bind(p, source=torch.zeros(17, 256, dtype=torch.bfloat16), packed_weight=pw)
    with pytest.raises(ValueError, match=r"source must be bfloat16 \[T, 256\] contiguous on cpu, got float32"):
        BF.bind(p, source=x.float(), packed_weight=pw)
    with pytest.raises(ValueError, match=r"packed_weight must be a block-FP8 Weight \[48, 256\]"):
        BF.bind(p, source=x, packed_weight=MX.pack_weight(w))
    with pytest.raises(ValueError, match=r"bias must be bfloat16 \[48\] on cpu or None, got float32 \[48\]"):
        BF.bind(p, source=x, packed_weight=pw, bias=torch.zeros(48))
    with pytest.raises(ValueError, match=r"workspace lacks buffer 'act_values'"):
        BF.bind(p, source=x, packed_weight=pw, workspace={})
    with pytest.raises(ValueError, match=r"pass either a binding or \(source, packed_weight, plan\), not both"):
        BF.run(x, binding=BF.bind(p, source=x, packed_weight=pw))
    for bad, message in (
        (x.float(), r"source_tk must be bfloat16 \[T, 256\] contiguous on cpu, got float32 \[3, 256\]"),
        (
            torch.zeros(17, 256, dtype=torch.bfloat16),
            r"source_tk has 17 tokens, above the plan's capacity max_tokens=16",
        ),
        (torch.zeros(256, 3, dtype=torch.bfloat16).t(), r"source_tk must be .* \(non-contiguous\)"),
        (torch.zeros(3, 128, dtype=torch.bfloat16), r"source_tk must be bfloat16 \[T, 256\] contiguous on cpu, got"),
    ):
        with pytest.raises(ValueError, match=message):
            BF.quantize_input(bad, plan=p)


@pytest.mark.contract
@pytest.mark.parametrize("module, recipe", [(MX, "mxfp8"), (TF, "fp8_tensor")])
def test_linear_pack_weight_takes_blockscaled_keywords(module, recipe):
    """mxfp8_linear / tensor_fp8_linear.pack_weight have gemm.blockscaled.pack_weight's keywords: their own recipe
    (or None) packs the same bytes, another recipe or NVFP4's global_scale is an error naming it."""
    _, w = _xw()
    a, b = module.pack_weight(w, recipe=recipe), module.pack_weight(w)
    assert a.recipe == b.recipe == recipe and torch.equal(a.values.view(torch.uint8), b.values.view(torch.uint8))
    with pytest.raises(
        ValueError, match=f"packs recipe '{recipe}' only \\(recipe=None or '{recipe}'\\), got recipe='nvfp4'"
    ):
        module.pack_weight(w, recipe="nvfp4")
    with pytest.raises(ValueError, match="global_scale is an NVFP4 argument"):
        module.pack_weight(w, global_scale=2.0)


# ---- the quantizer kernel ---------------------------------------------------------------------
@pytest.mark.interpret
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t, k", [(5, 384), (1, 128), (3, 1152)])
def test_block_fp8_quantizer_is_bit_exact_on_the_emulator(dtype, t, k):
    from flashinfer.experimental.b12x.gemm.block_fp8_linear import _kernel_quant as KQ

    x = (torch.randn(t, k) * torch.logspace(-4, 4, k)).to(dtype)
    x[0, 5] = float("nan")
    x[-1, :3] = -0.0
    if t > 2:
        x[1, 130:200] = 0
        x[1, 128:256] = 0  # an all-zero group: scale 1.0
        x[2, 7] = float("inf")
    g = GlobalMemory()
    xb = g.put(x)
    qb = g.put(torch.full((t, k), 0xAB, dtype=torch.uint8))
    sb = g.put(torch.full((t, k // 128), float("nan")))
    cfg = KQ.QuantConfig(2)
    logic = KQ.QuantLogic(str(dtype).removeprefix("torch."), cfg)
    lane = np.arange(32, dtype=np.int32)
    pairs = t * (k // 128)
    per_cta = 2 * cfg.warps
    for bidx in range((pairs + per_cta - 1) // per_cta):
        for w in range(cfg.warps):
            with np.errstate(invalid="ignore", divide="ignore"):
                logic.warp(EmuOps(g), xb, qb, sb, np.int32(t), np.int32(k), np.int32(bidx * cfg.warps + w), lane)
    q = torch.from_numpy(g.get(qb)[: t * k].copy()).reshape(t, k)
    s = torch.from_numpy(g.get(sb)[: t * (k // 128) * 4].copy()).view(torch.float32).reshape(t, k // 128)
    rq, rs = Q.quantize_block_fp8_act(x)
    assert torch.equal(q, rq.view(torch.uint8))
    assert torch.equal(s.view(torch.int32), rs.view(torch.int32))


@pytest.mark.compile
def test_block_fp8_quantizer_compiles_for_both_archs():
    pytest.importorskip("cutlass")
    from flashinfer.experimental.b12x.gemm.block_fp8_linear import _kernel_quant as KQ

    for arch in ("sm_90a", "sm_120a"):
        fn = KQ.compile_quant("bfloat16", KQ.QuantConfig(), arch=arch)
        assert [ln.split()[1] for ln in fn.artifacts.PTX.splitlines() if ln.startswith(".target")] == [arch]
        assert "div.rn.f32" in fn.artifacts.PTX and ".local" not in fn.artifacts.PTX
