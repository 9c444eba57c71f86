"""gemm.blockscaled on the CPU: the reference against independent math, the CPU path of every entry
point, plans, launch-argument roles, and the exact errors."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import api as A
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

from .helpers import PAIRS, make_operands

B = b12x.gemm.blockscaled


# ---- reference --------------------------------------------------------------------------------
@pytest.mark.reference
def test_reference_nvfp4_against_elementwise_math():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 64, generator=g), torch.randn(40, 64, generator=g)
    xq, xs = Q.quantize_nvfp4(x, 2.0)
    wq, ws = Q.quantize_nvfp4(w, 3.0)
    table = Q.e2m1_values()

    def deq(packed, sf):  # from the row-major scales, before any swizzling
        codes = Q.unpack_e2m1(packed).long()
        return table[codes] * Q.e4m3_decode(sf).repeat_interleave(16, dim=1)

    want = (deq(xq, xs) @ deq(wq, ws).t()) * 0.25
    got = R.mm("nvfp4", xq, Q.swizzle_scales(xs, 0), "nvfp4", wq, Q.swizzle_scales(ws, 0), 0.25, "float32")
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.reference
def test_reference_block_fp8_uses_per_token_and_per_block_scales():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 256, generator=g), torch.randn(130, 256, generator=g)
    xq, xs = Q.quantize_block_fp8_act(x)
    wq, ws = Q.quantize_block_fp8_weight(w)
    xd = Q.e4m3_decode(xq) * xs.repeat_interleave(128, dim=1)
    wd = Q.e4m3_decode(wq) * ws.repeat_interleave(128, 0).repeat_interleave(128, 1)[:130]
    got = R.mm("fp8_block", xq, xs, "fp8_block", wq, ws, 1.0, "float32")
    assert torch.allclose(got, xd @ wd.t(), rtol=1e-6, atol=1e-5)


@pytest.mark.reference
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_cpu_mm_is_the_reference(a_fmt, b_fmt):
    ops = make_operands(a_fmt, b_fmt, 7, 48, 256, seed=2)
    lhs = ops.a_values if ops.a_scales is None else (ops.a_values, ops.a_scales)
    got = B.mm(lhs, ops.weight, alpha=ops.alpha)
    assert got.dtype == torch.bfloat16 and got.shape == (7, 48)
    assert torch.equal(got, ops.reference("bfloat16"))
    out = torch.full((7, 48), float("nan"), dtype=torch.float32)
    assert B.mm(lhs, ops.weight, out, alpha=torch.tensor([ops.alpha])) is out
    assert torch.allclose(out, ops.reference("float32"))


@pytest.mark.reference
def test_batched_operands_run_per_slice():
    ops = [make_operands("mxfp8", "mxfp8", 4, 32, 128, seed=s) for s in (3, 4)]
    a = torch.stack([o.a_values.view(torch.uint8) for o in ops]).permute(1, 2, 0).view(torch.float8_e4m3fn)
    sa = torch.stack([o.a_scales for o in ops]).movedim(0, -1)  # per-batch slices stay contiguous
    b = torch.stack([o.b_values.view(torch.uint8) for o in ops]).permute(1, 2, 0).view(torch.float8_e4m3fn)
    sb = torch.stack([o.b_scales for o in ops]).movedim(0, -1)
    out = B.mm((a, sa), (b, sb), ab_dtype="float8_e4m3fn", sf_dtype="float8_e8m0fnu", sf_vec_size=32)
    assert out.shape == (4, 32, 2)
    for i, o in enumerate(ops):
        assert torch.equal(out[..., i], o.reference("bfloat16"))


@pytest.mark.reference
def test_recipe_shorthands_and_w4a16_on_cpu():
    o = make_operands("nvfp4", "nvfp4", 3, 32, 128, seed=5)
    alpha = torch.tensor([o.alpha]) * o.weight.alpha
    got = B.mm_nvfp4(o.a_values, o.a_scales, o.b_values, o.b_scales, alpha, out_dtype=torch.float16)
    assert torch.equal(got, o.reference("float16"))

    m = make_operands("mxfp4", "mxfp4", 3, 32, 128, seed=6)
    assert torch.equal(B.mm_mxfp4(m.a_values, m.a_scales, m.b_values, m.b_scales), m.reference("bfloat16"))

    f = make_operands("fp8_block", "fp8_block", 3, 32, 256, seed=7)
    assert torch.equal(B.mm_block_fp8(f.a_values, f.a_scales, f.b_values, f.b_scales), f.reference("bfloat16"))

    # w4a16 from ModelOpt-style checkpoint tensors (row-major E4M3 scales, weight_scale_2)
    w = torch.randn(32, 128, generator=torch.Generator().manual_seed(8)) * 0.02
    gs = Q.nvfp4_global_scale(w)
    packed, sf = Q.quantize_nvfp4(w, gs)
    x = torch.randn(5, 128).to(torch.bfloat16)
    y = B.w4a16(x, packed, sf, 1.0 / gs, global_scale_kind="dequant")
    want = (x.float() @ Q.dequantize_nvfp4(packed, sf, gs).t()).to(torch.bfloat16)
    assert y.dtype == torch.bfloat16 and torch.allclose(y.float(), want.float(), rtol=2**-7, atol=1e-6)


# ---- launch arguments -------------------------------------------------------------------------
@pytest.mark.contract
def test_launch_args_route_every_scalar_to_the_device():
    o = make_operands("fp8_tensor", "fp8_tensor", 2, 16, 128, seed=9)
    out = torch.empty(2, 16, dtype=torch.bfloat16)
    alpha = torch.tensor([3.0])
    (a, sfa, b, sfb, c, s0, s1, s2), alpha_f = L.launch_args(
        "fp8_tensor", o.a_values, o.a_scales, None, "fp8_tensor", o.b_values, o.b_scales, o.weight.alpha, alpha, out
    )
    assert alpha_f == 1.0 and s0.data_ptr() == alpha.data_ptr()
    assert torch.equal(s1, o.a_scales.reshape(1)) and torch.equal(s2, o.b_scales.reshape(1))
    assert a.dtype == b.dtype == torch.uint8 and c is out
    n = make_operands("bfloat16", "nvfp4", 2, 16, 128, seed=9)
    (a, sfa, b, sfb, c, s0, s1, s2), alpha_f = L.launch_args(
        "bfloat16", n.a_values, None, None, "nvfp4", n.b_values, n.b_scales, n.weight.alpha, 2.0, out
    )
    assert alpha_f == 2.0 and float(s0) == 1.0 and float(s1) == 1.0 and s2 is not None
    assert torch.equal(s2, n.weight.alpha) and a is n.a_values and sfb.dtype == torch.uint8


# ---- plans ------------------------------------------------------------------------------------
@pytest.mark.contract
def test_plans_are_pure_and_pick_buckets():
    q = A.GemmQuery("bfloat16", "nvfp4", 4096, 4096)
    p1, p2 = B.plan(q), B.plan(q)
    assert p1 == p2 and hash(p1) == hash(p2) and not p1.prepared
    assert q.buckets == L.BUCKETS
    assert B.plan(q, invocation=1).caps.buckets == ("decode8",)
    assert A.GemmQuery("nvfp4", "nvfp4", 256, 256, max_m=16).buckets == ("decode8", "decode16")
    assert A.GemmQuery("nvfp4", "nvfp4", 256, 256, m_values=(3, 4096)).buckets == ("decode8", "tiled128")
    assert A.GemmQuery("bfloat16", "nvfp4", 256, 256, max_m=64).buckets == L.BUCKETS[:4]
    assert L.BUCKETS[:4] == ("decode8", "decode16", "decode32", "decode64")
    wanted = A.GemmQuery("bfloat16", "nvfp4", 256, 256, m_values=(17, 64, 65)).buckets
    assert wanted == ("decode32", "decode64", "tiled64")
    w = B.pack_weight(torch.randn(256, 128), recipe="mxfp8")
    assert B.plan(w).caps == A.GemmQuery("mxfp8", "mxfp8", 256, 128)
    import flashinfer.experimental.b12x.preparation.session as S

    old, S._warned_reference = S._warned_reference, False  # the warning fires once per process
    try:
        with b12x.PreparationSession("cpu") as s, pytest.warns(UserWarning, match="reference backend"):
            s.prepare([p1])
    finally:
        S._warned_reference = old
    assert p1.prepared and p1.selection is None


@pytest.mark.contract
@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: A.GemmQuery("bfloat16", "nvfp4", 4096, 4000), r"K must be a positive multiple of 128 for the b12x"),
        (lambda: A.GemmQuery("bfloat16", "nvfp4", 4100, 4096), r"N must be a positive multiple of 16 for the b12x"),
        (lambda: A.GemmQuery("nvfp4", "mxfp8", 256, 256), r"query formats nvfp4 x mxfp8 are not a supported pair"),
        (lambda: A.GemmQuery("bfloat16", "nvfp4", 256, 256, out_dtype="int8"), r"query.out_dtype must be one of"),
        (lambda: B.plan(A.GemmQuery("bfloat16", "nvfp4", 256, 256), invocation=0), r"invocation must be None or"),
        (
            lambda: B.plan(A.GemmQuery("bfloat16", "nvfp4", 256, 256), override={"decode8": "fast"}),
            r"override for decode8: config must be a DecodeConfig, got str",
        ),
        (lambda: B.plan((256, 256)), r"query must be a GemmQuery or a packed Weight, got tuple"),
    ],
)
def test_plan_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---- argument errors --------------------------------------------------------------------------
def _nv(m=4, n=32, k=128):
    o = make_operands("nvfp4", "nvfp4", m, n, k, seed=1)
    return (o.a_values, o.a_scales), (o.b_values, o.b_scales)


@pytest.mark.contract
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: B.mm(_nv()[0], "w"), r"rhs must be a \(values, scales\) pair or a packed Weight, got str"),
        (
            lambda: B.mm(torch.zeros(4, 128, dtype=torch.int8), _nv()[1]),
            r"lhs must be a \(values, scales\) pair or bf16",
        ),
        (
            lambda: B.mm(torch.zeros(4, 100, dtype=torch.bfloat16), _nv()[1]),
            r"lhs must have 128 columns \(bfloat16, K=128 from rhs uint8 \[32, 64\] on cpu\), got bfloat16 \[4, 100\]",
        ),
        (
            lambda: B.mm((_nv()[0][0], _nv()[0][1][:100]), _nv()[1]),
            r"lhs scales must be one-byte swizzled storage of at least 1024 bytes \(nvfp4, 4 rows, K=128\)",
        ),
        (
            lambda: B.mm(*_nv(), torch.empty(4, 31, dtype=torch.bfloat16)),
            r"out must be bfloat16 \[4, 32\], got bfloat16 \[4, 31\]",
        ),
        (
            lambda: B.mm(*_nv(), torch.empty(4, 32), c_dtype=torch.float16),
            r"c_dtype float16 does not match out float32 \[4, 32\]",
        ),
        (lambda: B.mm(*_nv(), alpha=float("nan")), r"alpha must be a finite float or a 1-element float32 tensor"),
        (lambda: B.mm(*_nv(), alpha=torch.ones(2)), r"alpha must be a float or a float32 tensor of 1 element on cpu"),
        (
            lambda: B.mm(*_nv(), ab_dtype="float8_e4m3fn", sf_dtype="float8_e4m3fn", sf_vec_size=16),
            r"\(ab_dtype, sf_dtype, sf_vec_size\) = \('float8_e4m3fn', 'float8_e4m3fn', 16\) is not a recipe",
        ),
        (
            lambda: B.w4a16(
                torch.zeros(2, 128, dtype=torch.bfloat16),
                B.pack_weight(torch.randn(32, 128), recipe="nvfp4"),
                torch.zeros(1),
            ),
            r"block_scale and global_scale must be None when weight is a packed Weight",
        ),
        (lambda: B.prewarm("w", [1]), r"weight must be a packed Weight \(pack_weight\), got str"),
        (
            lambda: B.prewarm(B.pack_weight(torch.randn(32, 128), recipe="nvfp4"), [0]),
            r"token_counts must be positive ints, got \[0\]",
        ),
    ],
)
def test_mm_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.contract
def test_alpha_none_is_one():
    a, b = _nv()
    assert torch.equal(B.mm(a, b, alpha=None), B.mm(a, b, alpha=1.0)) and torch.equal(B.mm(a, b), B.mm(a, b, alpha=1))


@pytest.mark.contract
def test_empty_m_returns_an_empty_output():
    o = make_operands("bfloat16", "nvfp4", 1, 32, 128)
    out = B.mm(torch.zeros(0, 128, dtype=torch.bfloat16), o.weight)
    assert out.shape == (0, 32)


@pytest.mark.contract
def test_prewarm_is_a_no_op_on_cpu():
    B.prewarm(B.pack_weight(torch.randn(32, 128), recipe="mxfp4"), [1, 64])
    with pytest.raises(ValueError, match="activation nvfp4 does not pair with a mxfp4 weight"):
        B.prewarm(B.pack_weight(torch.randn(32, 128), recipe="mxfp4"), [1], activation="nvfp4")
