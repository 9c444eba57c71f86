"""Contract tier for quantization.nvfp4 and quantization.mxfp8 on the CPU (reference backend).

Registry and META, plan purity, the planned lifecycle on CPU tensors (bitwise the oracle, live rows
below capacity), and every bad input raising a ValueError that names the argument.
"""

import re
import warnings

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import (
    quantize_mxfp8,
    quantize_nvfp4,
    swizzle_scales,
    swizzled_size,
)
from flashinfer.experimental.b12x.preparation import session as session_mod
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

nvfp4 = b12x.quantization.nvfp4
mxfp8 = b12x.quantization.mxfp8


def _prepared(p):
    flag = session_mod._warned_reference  # module fixtures run outside the per-test fixtures
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b12x.PreparationSession("cpu").prepare([p])
    session_mod._warned_reference = flag
    return p


def _x(m, k, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * torch.logspace(-4, 4, k)).to(dtype)


# -- registry and META ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "qualname, entry_points",
    [
        ("quantization.nvfp4", ("plan", "allocate_outputs", "run", "quantize", "is_supported")),
        ("quantization.mxfp8", ("plan", "quantize_rows", "is_supported")),
    ],
)
def test_registry_and_meta(qualname, entry_points):
    meta = b12x.find_op(qualname)
    assert meta in b12x.list_ops()
    assert meta.api_style == "planned" and meta.entry_points == entry_points
    assert meta.archs == ("sm_90a", "sm_120a", "sm_121a")
    assert meta.dtypes == ("bfloat16", "float16") and "triton" in meta.requires
    module = getattr(b12x.quantization, qualname.split(".")[1])
    assert sorted(module.__all__) == sorted([*entry_points, "META"])
    assert module.is_supported("cpu") is False
    assert "CPU tensors run the reference backend" in module.why_unsupported("cpu")


def test_plan_does_not_import_triton_or_compile(run_python):
    out = run_python(
        "import sys, b12x\n"
        "from flashinfer.experimental.b12x._lib import compile\n"
        "p = b12x.quantization.nvfp4.plan(128, 4096)\n"
        "q = b12x.quantization.mxfp8.plan((4096, 'bfloat16', 128))\n"
        "assert hash(p) and hash(q)\n"
        "assert 'triton' not in sys.modules, 'plan imported triton'\n"
        "assert all(k.compile_count == 0 for k in compile.kernels())\n"
    )
    assert out.returncode == 0, out.stderr


# -- plans ----------------------------------------------------------------------------------------
def test_nvfp4_plan_is_a_pure_value():
    a, b = nvfp4.plan(128, 4096), nvfp4.plan(128, 4096, invocation=torch.bfloat16)
    assert a == b and hash(a) == hash(b) and not a.prepared
    assert a != nvfp4.plan(256, 4096) and a != nvfp4.plan(128, 7168)
    assert a != nvfp4.plan(128, 4096, invocation="float16")
    assert a.caps.max_rows == 128 and a.caps.k == 4096 and a.dtype == "bfloat16"
    assert a.memory_requirements() == 1024  # the fp32 global-scale slot, at arena alignment
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        a.state


def test_mxfp8_plan_query_forms():
    q = mxfp8.MxFp8Query(k=4096, dtype=torch.float16, max_rows=64)
    assert q.dtype == "float16"
    a = mxfp8.plan(q)
    assert a == mxfp8.plan((4096, "float16", 64)) and hash(a) == hash(mxfp8.plan((4096, torch.float16, 64)))
    assert a != mxfp8.plan((4096, "bfloat16", 64)) and a != mxfp8.plan((4096, "float16", 65))
    assert a.memory_requirements() == 0


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((0, 4096), {}, "m must be an int in [1, 2147483520] (the row capacity), got 0"),
        ((128.0, 4096), {}, "m must be an int in [1, 2147483520] (the row capacity), got 128.0"),
        ((1 << 31, 4096), {}, "m must be an int in [1, 2147483520] (the row capacity), got 2147483648"),
        ((128, 4100), {}, "k must be a positive multiple of 16, got 4100"),
        ((128, 0), {}, "k must be a positive multiple of 16, got 0"),
        ((128, 4096), {"invocation": torch.float32}, "invocation must be the activation dtype, one of"),
        (
            (128, 4096),
            {"override": (16, 256, 4)},
            "override must be an NvFp4Config, CuteTile or NvFp4Dispatch valid for k=4096",
        ),
    ],
)
def test_nvfp4_plan_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        nvfp4.plan(*args, **kwargs)


@pytest.mark.parametrize(
    "query, kwargs, message",
    [
        ((4100, "bfloat16", 8), {}, "query.k must be a positive multiple of 32, got 4100"),
        ((16, "bfloat16", 8), {}, "query.k must be a positive multiple of 32, got 16"),
        ((4096, "float32", 8), {}, "query.dtype must be one of ('bfloat16', 'float16'), got 'float32'"),
        ((4096, "bfloat16", 0), {}, "query.max_rows must be an int in [1, 2^31), got 0"),
        ((4096, "bfloat16"), {}, "query must be MxFp8Query or a tuple (k, dtype, max_rows), got (4096, 'bfloat16')"),
        ((4096, "bfloat16", 8), {"invocation": "x"}, "invocation must be None for quantization.mxfp8"),
        (
            (4096, "bfloat16", 8),
            {"override": 3},
            "override must be an MxFp8Config or CuteMxTile valid for k=4096, got 3",
        ),
    ],
)
def test_mxfp8_plan_errors(query, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mxfp8.plan(query, **kwargs)


def test_overrides_are_kept_in_the_plan():
    from flashinfer.experimental.b12x.quantization.mxfp8._kernel import MxFp8Config
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel import NvFp4Config

    p = nvfp4.plan(64, 256, override=NvFp4Config(32, 128, 4))
    assert p.override == NvFp4Config(32, 128, 4) and p != nvfp4.plan(64, 256)
    q = mxfp8.plan((256, "bfloat16", 64), override=MxFp8Config(8, 64, 2))
    assert q.override == MxFp8Config(8, 64, 2)
    with pytest.raises(ValueError, match="override must be an NvFp4Config, CuteTile or NvFp4Dispatch valid for k=256"):
        nvfp4.plan(64, 256, override=NvFp4Config(3, 128, 4))  # block_m must be a power of two


# -- the lifecycle on CPU tensors -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nvfp4_run_on_cpu_is_the_oracle_below_capacity(dtype):
    p = _prepared(nvfp4.plan(300, 160, invocation=dtype))
    assert p.selection is None and p.state.arch is None
    out = nvfp4.allocate_outputs(p, device="cpu")
    assert out.packed.shape == (300, 80) and out.scales.shape == (swizzled_size(300, 10),)
    assert out.scales.dtype == torch.float8_e4m3fn
    out.packed.fill_(0xFF)
    out.scales.view(torch.uint8).fill_(0xFF)
    x = _x(7, 160, dtype)
    nvfp4.run(plan=p, x=x, global_scale=torch.tensor([3.5]), outputs=out)
    ref_packed, ref_scales = quantize_nvfp4(x, 3.5)
    packed, scales = out.view(7)
    assert torch.equal(packed, ref_packed)
    assert torch.equal(scales.view(torch.uint8), swizzle_scales(ref_scales, 0).view(torch.uint8))
    assert (out.packed[7:] == 0xFF).all() and (out.scales.view(torch.uint8)[swizzled_size(7, 10) :] == 0xFF).all()
    nvfp4.run(plan=p, x=x[:0], global_scale=1.0, outputs=out)  # M = 0 is a no-op


def test_nvfp4_quantize_one_call_on_cpu():
    x = _x(5, 64)
    packed, scales = nvfp4.quantize(x, 2.0)
    ref_packed, ref_scales = quantize_nvfp4(x, 2.0)
    assert torch.equal(packed, ref_packed) and scales.dtype == torch.float8_e4m3fn
    assert torch.equal(scales.view(torch.uint8), swizzle_scales(ref_scales, 0).view(torch.uint8))
    again, _ = nvfp4.quantize(_x(9, 64), torch.tensor([2.0]))  # same (K, dtype): no new plan
    assert again.shape == (9, 32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mxfp8_quantize_rows_on_cpu_keeps_padding(dtype):
    k = 160  # 5 scale columns: the swizzled storage pads them to 8
    p = _prepared(mxfp8.plan((k, dtype, 200)))
    x = _x(130, k, dtype)
    values = torch.empty(130, k, dtype=torch.float8_e4m3fn)
    rows = torch.empty(130, 5, dtype=torch.uint8)
    mma = torch.full((swizzled_size(200, 5),), 0xAB, dtype=torch.uint8)  # capacity-sized storage
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    ref_values, ref_rows = quantize_mxfp8(x)
    assert torch.equal(values.view(torch.uint8), ref_values.view(torch.uint8)) and torch.equal(rows, ref_rows)
    assert torch.equal(mma, swizzle_scales(ref_rows, 0xAB))
    values2 = torch.empty(3, k, dtype=torch.uint8)
    rows2 = torch.empty(3, 5, dtype=torch.uint8)
    mma2 = torch.full((swizzled_size(3, 5),), 127, dtype=torch.uint8)
    mxfp8.quantize_rows(x[:3], values2, rows2, mma2)  # plan=None: the default session
    assert torch.equal(mma2, swizzle_scales(ref_rows[:3], 127)) and torch.equal(rows2, ref_rows[:3])


def test_unprepared_plans_name_the_session():
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        nvfp4.run(
            plan=nvfp4.plan(8, 64),
            x=_x(1, 64),
            global_scale=1.0,
            outputs=nvfp4.allocate_outputs(nvfp4.plan(8, 64), device="cpu"),
        )
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        mxfp8.quantize_rows(_x(1, 64), None, None, None, plan=mxfp8.plan((64, "bfloat16", 8)))


# -- bad inputs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nv_plan():
    return _prepared(nvfp4.plan(16, 64))


def _nv_run(p, x=None, gs=1.0, packed=None, scales=None):
    out = nvfp4.allocate_outputs(p, device="cpu")
    out = nvfp4.api.Outputs(out.packed if packed is None else packed, out.scales if scales is None else scales)
    nvfp4.run(plan=p, x=_x(4, 64) if x is None else x, global_scale=gs, outputs=out)


NV_BAD = [
    (dict(x=_x(4, 64, torch.float16)), "x must be bfloat16 [M, 64] contiguous on cpu, got float16 [4, 64] on cpu"),
    (dict(x=_x(4, 48)), "x must be bfloat16 [M, 64] contiguous on cpu, got bfloat16 [4, 48] on cpu"),
    (
        dict(x=_x(64, 4).t()),
        "x must be bfloat16 [M, 64] contiguous on cpu, got bfloat16 [4, 64] on cpu (non-contiguous)",
    ),
    (dict(x=_x(4, 64)[0]), "x must be bfloat16 [M, 64] contiguous on cpu, got bfloat16 [64] on cpu"),
    (dict(x=torch.empty(4, 64, dtype=torch.bfloat16, device="meta")), "got bfloat16 [4, 64] on meta"),
    (dict(x=_x(17, 64)), "x has 17 rows, above the plan's capacity m=16"),
    (
        dict(packed=torch.empty(8, 32, dtype=torch.uint8)),
        "outputs.packed must be uint8 [16, 32] contiguous on cpu, got uint8 [8, 32] on cpu",
    ),
    (
        dict(packed=torch.empty(16, 32, dtype=torch.int8)),
        "outputs.packed must be uint8 [16, 32] contiguous on cpu, got int8 [16, 32] on cpu",
    ),
    (
        dict(packed=torch.empty(16, 32, dtype=torch.uint8, device="meta")),
        "outputs.packed must be uint8 [16, 32] contiguous on cpu, got uint8 [16, 32] on meta",
    ),
    (
        dict(scales=torch.empty(512, dtype=torch.float32)),
        "outputs.scales must be uint8 or float8_e4m3fn [512] contiguous on cpu, got float32 [512] on cpu",
    ),
    (
        dict(scales=torch.empty(512, dtype=torch.uint8, device="meta")),
        "outputs.scales must be uint8 or float8_e4m3fn [512] contiguous on cpu, got uint8 [512] on meta",
    ),
    (dict(gs=float("nan")), "global_scale must be finite and > 0 as fp32, got nan"),
    (dict(gs=0.0), "global_scale must be finite and > 0 as fp32, got 0.0"),
    (dict(gs=-2.0), "global_scale must be finite and > 0 as fp32, got -2.0"),
    (dict(gs=1e39), "global_scale must be finite and > 0 as fp32, got 1e+39"),
    (dict(gs=1e-50), "global_scale must be finite and > 0 as fp32, got 1e-50"),
    (dict(gs=True), "global_scale must be a float or a 1-element float32 tensor, got bool"),
    (dict(gs="1"), "global_scale must be a float or a 1-element float32 tensor, got str"),
    (
        dict(gs=torch.ones(2)),
        "global_scale must be a float32 tensor of 1 element on cpu (or a float), got float32 [2] on cpu",
    ),
    (
        dict(gs=torch.ones(1, dtype=torch.float64)),
        "global_scale must be a float32 tensor of 1 element on cpu (or a float), got float64 [1] on cpu",
    ),
]


@pytest.mark.parametrize("kwargs, message", NV_BAD, ids=[m[:40] for _, m in NV_BAD])
def test_nvfp4_bad_inputs(nv_plan, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _nv_run(nv_plan, **kwargs)


def test_nvfp4_overlap_and_record_errors(nv_plan):
    out = nvfp4.allocate_outputs(nv_plan, device="cpu")
    shared = torch.empty(16 * 32 + 512, dtype=torch.uint8)
    overlapping = nvfp4.api.Outputs(shared[: 16 * 32].view(16, 32), shared[16 * 32 - 1 : 16 * 32 + 511])
    with pytest.raises(ValueError, match="outputs.packed and outputs.scales overlap in memory"):
        nvfp4.run(plan=nv_plan, x=_x(4, 64), global_scale=1.0, outputs=overlapping)
    x_in_packed = out.packed.view(-1).view(torch.bfloat16).view(4, 64)  # x aliasing the output
    with pytest.raises(ValueError, match="x and outputs.packed overlap in memory"):
        nvfp4.run(plan=nv_plan, x=x_in_packed, global_scale=1.0, outputs=out)
    with pytest.raises(ValueError, match=r"outputs must be the Outputs of allocate_outputs\(plan\), got tuple"):
        nvfp4.run(plan=nv_plan, x=_x(4, 64), global_scale=1.0, outputs=(out.packed, out.scales))
    with pytest.raises(ValueError, match=r"plan must come from b12x.quantization.nvfp4.plan\(m, k\), got MxFp8Plan"):
        nvfp4.run(plan=mxfp8.plan((64, "bfloat16", 8)), x=_x(4, 64), global_scale=1.0, outputs=out)


def test_nvfp4_quantize_errors():
    with pytest.raises(ValueError, match=re.escape("x must be a 2-D tensor [M, K], got bfloat16 [64] on cpu")):
        nvfp4.quantize(_x(1, 64)[0], 1.0)
    with pytest.raises(ValueError, match="x must be bfloat16 or float16, got float32"):
        nvfp4.quantize(torch.ones(2, 64), 1.0)
    with pytest.raises(ValueError, match=re.escape("x must have K % 16 == 0 (K >= 16), got K=40")):
        nvfp4.quantize(_x(2, 40), 1.0)
    with pytest.raises(ValueError, match="global_scale must be finite and > 0 as fp32, got inf"):
        nvfp4.quantize(_x(2, 64), float("inf"))


@pytest.fixture(scope="module")
def mx_plan():
    return _prepared(mxfp8.plan((64, "bfloat16", 16)))


def _mx_args(m=4, k=64, **kw):
    args = dict(
        source=_x(m, k),
        values=torch.empty(m, k, dtype=torch.float8_e4m3fn),
        scale_rows=torch.empty(m, k // 32, dtype=torch.uint8),
        scale_mma=torch.full((swizzled_size(m, k // 32),), 127, dtype=torch.uint8),
    )
    args.update(kw)
    return args


MX_BAD = [
    (
        dict(source=_x(4, 64, torch.float16)),
        "source must be bfloat16 [M, 64] contiguous on cpu, got float16 [4, 64] on cpu",
    ),
    (dict(source=_x(4, 96)), "source must be bfloat16 [M, 64] contiguous on cpu, got bfloat16 [4, 96] on cpu"),
    (dict(source=_x(64, 4).t()), "got bfloat16 [4, 64] on cpu (non-contiguous)"),
    (dict(source=_x(17, 64)), "source has 17 rows, above the plan's capacity max_rows=16"),
    (
        dict(values=torch.empty(4, 64, dtype=torch.bfloat16)),
        "values must be uint8 or float8_e4m3fn [4, 64] contiguous on cpu, got bfloat16 [4, 64] on cpu",
    ),
    (
        dict(values=torch.empty(5, 64, dtype=torch.uint8)),
        "values must be uint8 or float8_e4m3fn [4, 64] contiguous on cpu, got uint8 [5, 64] on cpu",
    ),
    (dict(values=torch.empty(64, 4, dtype=torch.uint8).t()), "got uint8 [4, 64] on cpu (non-contiguous)"),
    (
        dict(values=torch.empty(4, 64, dtype=torch.uint8, device="meta")),
        "values must be uint8 or float8_e4m3fn [4, 64] contiguous on cpu, got uint8 [4, 64] on meta",
    ),
    (dict(scale_rows=torch.empty(4, 3, dtype=torch.uint8)), "scale_rows must be uint8"),
    (dict(scale_rows=torch.empty(4, 2, dtype=torch.int32)), "[4, 2] contiguous on cpu, got int32 [4, 2] on cpu"),
    (
        dict(scale_rows=torch.empty(4, 2, dtype=torch.uint8, device="meta")),
        "contiguous on cpu, got uint8 [4, 2] on meta",
    ),
    (
        dict(scale_mma=torch.empty(256, dtype=torch.uint8)),
        "scale_mma must be uint8",
    ),
    (dict(scale_mma=torch.empty(1024, dtype=torch.uint8)[:700]), "with numel a multiple of 512 and >= 512"),
    (dict(scale_mma=torch.empty(2, 256, dtype=torch.uint8)), "got uint8 [2, 256] on cpu"),
    (dict(scale_mma=torch.empty(512, dtype=torch.uint8, device="meta")), "got uint8 [512] on meta"),
]


@pytest.mark.parametrize("kwargs, message", MX_BAD, ids=[m[:40] for _, m in MX_BAD])
def test_mxfp8_bad_inputs(mx_plan, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mxfp8.quantize_rows(**_mx_args(**kwargs), plan=mx_plan)


def test_mxfp8_overlap_and_oneshot_errors(mx_plan):
    buf = torch.empty(4 * 64 + 4 * 2, dtype=torch.uint8)
    args = _mx_args(values=buf[: 4 * 64].view(4, 64), scale_rows=buf[4 * 64 - 2 : 4 * 64 + 6].view(4, 2))
    with pytest.raises(ValueError, match="values and scale_rows overlap in memory"):
        mxfp8.quantize_rows(**args, plan=mx_plan)
    mma = torch.full((512 + 64 * 2,), 127, dtype=torch.uint8)
    args = _mx_args(scale_mma=mma[:512], scale_rows=mma[512:].view(64, 2)[:4])
    mxfp8.quantize_rows(**args, plan=mx_plan)  # adjacent, not overlapping
    args = _mx_args(scale_mma=mma[:512], scale_rows=mma[510:518].view(4, 2))
    with pytest.raises(ValueError, match="scale_rows and scale_mma overlap in memory"):
        mxfp8.quantize_rows(**args, plan=mx_plan)
    with pytest.raises(ValueError, match=re.escape("source must have K % 32 == 0 (K >= 32), got K=48")):
        mxfp8.quantize_rows(**_mx_args(k=48))
    with pytest.raises(ValueError, match="source must be bfloat16 or float16, got float32"):
        mxfp8.quantize_rows(**_mx_args(source=torch.ones(4, 64)))
    with pytest.raises(ValueError, match=r"plan must come from b12x.quantization.mxfp8.plan\(query\), got NvFp4Plan"):
        mxfp8.quantize_rows(**_mx_args(), plan=nvfp4.plan(8, 64))


def test_kernel_grid_covers_the_padded_scale_rows():
    from flashinfer.experimental.b12x.quantization.nvfp4._kernel import NvFp4Config, can_implement, grid

    assert grid(1, 4096, NvFp4Config(16, 256, 4)) == (8, 16, 1)  # 128 rows of scales for 1 live row
    assert grid(129, 48, NvFp4Config(16, 32, 4)) == (16, 2, 1)  # K 48 -> 64 columns (4 scale columns)
    assert not can_implement(4096, NvFp4Config(256, 256, 4))  # block_m must divide 128
