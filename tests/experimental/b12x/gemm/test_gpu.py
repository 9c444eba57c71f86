"""gemm.blockscaled on the GPU: every recipe against the fp32 reference, NaN-poisoned outputs, CUDA graph
replay equal to eager, and the freeze contract after prewarm. Run on the device machine (-m gpu)."""

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x._lib.freeze import KernelResolutionFrozenError
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT
from flashinfer.experimental.b12x.gemm.blockscaled import _twopass as TP
from tests.experimental.b12x.conftest import captured

from .helpers import PAIRS, TORCH, check_tolerance, make_operands

pytestmark = pytest.mark.gpu

B = b12x.gemm.blockscaled
MS = (1, 3, 16, 129, 2048)
SHAPES = ((4096, 4096), (28672, 4096), (4096, 14336), (7168, 2048))
_WEIGHTS: dict = {}


def _weight(b_fmt, n, k):
    """One packed weight per (format, N, K), quantized on the GPU and reused across M and A formats."""
    key = (b_fmt, n, k)
    if key not in _WEIGHTS:
        if len(_WEIGHTS) >= 3:
            _WEIGHTS.pop(next(iter(_WEIGHTS)))
        _WEIGHTS[key] = make_operands("bfloat16", b_fmt, 1, n, k, seed=n + k, device="cuda").weight
    return _WEIGHTS[key]


def _run(ops, out_dtype="bfloat16", **kw):
    out = torch.full((ops.m, ops.n), float("nan"), dtype=TORCH[out_dtype], device="cuda")
    lhs = ops.a_values if ops.a_scales is None else (ops.a_values, ops.a_scales)
    B.mm(lhs, ops.weight, out, alpha=ops.alpha, **kw)
    torch.cuda.synchronize()
    return out


def _cases():
    """The issue's grid: every pair at every M of MS and every shape of SHAPES (session 66: M = 3 and 129 had run at
    4096 x 4096 only; docs/closing/issue6.md gap 5)."""
    out = []
    for n, k in SHAPES:
        for b_fmt in dict.fromkeys(b for _, b in PAIRS):  # group by weight so the cache hits
            for a_fmt, b in PAIRS:
                if b == b_fmt:
                    out += [(a_fmt, b_fmt, m, n, k) for m in MS]
    return out


@pytest.mark.parametrize("a_fmt, b_fmt, m, n, k", _cases())
def test_every_recipe_matches_the_reference(a_fmt, b_fmt, m, n, k):
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=m, device="cuda", weight=_weight(b_fmt, n, k))
    check_tolerance(_run(ops), ops, "bfloat16")


@pytest.mark.parametrize("a_fmt, b_fmt", [("nvfp4", "nvfp4"), ("bfloat16", "nvfp4"), ("mxfp8", "mxfp8")])
@pytest.mark.parametrize("m", [400, 511, 512, 700])
def test_twopass_min_m_boundary(a_fmt, b_fmt, m):
    """The tiled128 default on both sides of TwoPassConfig.min_m (512): its tiled kernel below, the
    two-pass path from there (the same bucket and compiled kernels, chosen at each call)."""
    cfg = L.default_config("tiled128", 4096, 4096, b_fmt, a_fmt=a_fmt, arch=target_arch())
    assert TP.runs_tiled(cfg, m) == (m < 512)
    ops = make_operands(a_fmt, b_fmt, m, 4096, 4096, seed=m, device="cuda", weight=_weight(b_fmt, 4096, 4096))
    check_tolerance(_run(ops), ops, "bfloat16")


@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
@pytest.mark.parametrize("m", [17, 32, 33, 64])
def test_decode32_decode64_every_recipe(a_fmt, b_fmt, m):
    """The decode32 / decode64 buckets (unplanned: their shape-blind configs) on 4096 x 4096."""
    assert L.bucket_for(m) in ("decode32", "decode64")
    ops = make_operands(a_fmt, b_fmt, m, 4096, 4096, seed=m, device="cuda", weight=_weight(b_fmt, 4096, 4096))
    check_tolerance(_run(ops), ops, "bfloat16")


BLOCK_SHAPES = ((3072, 2048), (2048, 2048), (11264, 2048), (2048, 5632))  # the demo block's linears


@pytest.mark.parametrize("m", [1, 8, 32, 64])
@pytest.mark.parametrize("n, k", BLOCK_SHAPES)
def test_decode_planned_block_shapes(m, n, k):
    """What the demo block runs at T = 1 / 8 / 32 / 64: a plan per linear, its shape-aware config (at
    T <= 8 on 11264 x 2048 the one-wave unroll-1 tiling, `decode_rules.ONE_WAVE_CTAS`)."""
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=n + m, device="cuda")
    plan = B.plan(B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=m, m_values=(m,)))
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    bucket = L.bucket_for(m)
    assert plan.state.selection == ((bucket, L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16")),)
    check_tolerance(_run(ops, plan=plan), ops, "bfloat16")


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("a_fmt, b_fmt", [("nvfp4", "nvfp4"), ("bfloat16", "mxfp8"), ("float16", "nvfp4")])
@pytest.mark.parametrize("m", [5, 300])
def test_output_dtypes(a_fmt, b_fmt, m, out_dtype):
    ops = make_operands(a_fmt, b_fmt, m, 1040, 1024, seed=3, device="cuda")
    check_tolerance(_run(ops, out_dtype), ops, out_dtype)


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("a_fmt, b_fmt", [("nvfp4", "nvfp4"), ("bfloat16", "mxfp8"), ("float16", "nvfp4")])
def test_twopass_output_dtypes(a_fmt, b_fmt, out_dtype):
    """The two-pass path (forced from M = 1: min_m 0) in every output dtype and the f16 compute path."""
    ops = make_operands(a_fmt, b_fmt, 300, 1040, 1024, seed=3, device="cuda")
    plan = B.plan(
        B.GemmQuery(a_fmt, b_fmt, 1040, 1024, out_dtype, max_m=300), override={"tiled128": TP.TwoPassConfig(min_m=0)}
    )
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    check_tolerance(_run(ops, out_dtype, plan=plan), ops, out_dtype)


@pytest.mark.parametrize("bucket", ["decode8", "decode32", "decode64", "tiled128"])
def test_candidate_configs_are_correct(bucket):
    """Every config the heuristic may pick or autotune may measure computes the same product."""
    m = {"decode8": 7, "decode32": 29, "decode64": 64, "tiled128": 300}[bucket]
    cfgs = DS.candidate_configs(m) if bucket.startswith("decode") else KT.candidate_configs(m)
    if bucket == "tiled128":  # the two-pass path's GEMM tiles (min_m 0: M = 300 runs them), a B split in
        # three panels, the plain dequantize stores, and the default (M = 300 below its min_m: its tiled kernel)
        cfgs += tuple(TP.TwoPassConfig(gemm=g, min_m=0) for g in KM.CANDIDATES)
        plain, pdl = TP.KD.DequantConfig(staged=False), TP.KD.DequantConfig(pdl=True)
        cfgs += (TP.TwoPassConfig(panel_elems=384 * 2048, min_m=0), TP.TwoPassConfig(dequant=plain, min_m=0))
        cfgs += (TP.TwoPassConfig(gemm=KM.Mma16Config(pdl=True), dequant=pdl, panel_elems=384 * 2048, min_m=0),)
        cfgs += (TP.TwoPassConfig(),)
    ops = make_operands("bfloat16", "nvfp4", m, 1056, 2048, seed=4, device="cuda")
    for cfg in cfgs:
        if L.why_not("bfloat16", "nvfp4", "bfloat16", bucket, cfg) is not None:
            continue
        query = B.GemmQuery("bfloat16", "nvfp4", 1056, 2048, max_m=m, m_values=(m,))
        plan = B.plan(query, override={bucket: cfg})
        with b12x.PreparationSession("cuda") as s:
            s.prepare([plan])
        out = torch.full((m, 1056), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan)
        torch.cuda.synchronize()
        check_tolerance(out, ops, "bfloat16")


def _check_override(ops, a_fmt, b_fmt, n, k, m, bucket, cfg):
    """Plan a_fmt x b_fmt at N x K with `cfg` for the bucket, prepare it, run M rows into a NaN-poisoned
    output and compare with the reference."""
    plan = B.plan(B.GemmQuery(a_fmt, b_fmt, n, k, max_m=m, m_values=(m,)), override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    B.mm((ops.a_values, ops.a_scales), ops.weight, out, plan=plan, alpha=ops.alpha)
    torch.cuda.synchronize()
    check_tolerance(out, ops, "bfloat16")


@pytest.mark.parametrize("m", [1100, 2100])
@pytest.mark.parametrize("path", ["twopass", "tiled"])
def test_grouped_raster_short_last_group(m, path):
    """M-tiles not a multiple of group_m (16): 1100 is one short group of 9 M-tiles, 2100 a whole group
    and a short one of 1; the idle CTAs sit at the end of the short group's row (session 23). N = 1056
    is not a multiple of the tile; the two-pass run splits B in three panels."""
    ops = make_operands("nvfp4", "nvfp4", m, 1056, 2048, seed=m + 1, device="cuda")
    if path == "twopass":
        cfg = TP.TwoPassConfig(panel_elems=384 * 2048, min_m=0)
    else:
        cfg = KT.TiledConfig(128, 128, 2, 4, group_m=16)
    _check_override(ops, "nvfp4", "nvfp4", 1056, 2048, m, "tiled128", cfg)


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_block", "mxfp8"])
@pytest.mark.parametrize("m", [300, 2048])
def test_fp8_mma_tiled_variant(fmt, m):
    ops = make_operands(fmt, fmt, m, 4096, 4096, seed=12, device="cuda")
    for cfg in KT.candidate_configs(m):
        if cfg.fp8_mma:
            _check_override(ops, fmt, fmt, 4096, 4096, m, L.bucket_for(m), cfg)


@pytest.mark.parametrize("m", [300, 2048])
def test_e4m3_twopass_candidates(m):
    """Mma16Config.e4m3: tensor-FP8 x tensor-FP8 on the raw E4M3 operands (no dequantize pass), every
    e4m3 tiling of the two-pass candidates, 4096 x 4096."""
    ops = make_operands("fp8_tensor", "fp8_tensor", m, 4096, 4096, seed=14, device="cuda")
    cands = [TP.TwoPassConfig(gemm=g, min_m=0) for g in KM.CANDIDATES if g.e4m3]
    assert cands
    for cfg in cands:
        _check_override(ops, "fp8_tensor", "fp8_tensor", 4096, 4096, m, "tiled128", cfg)


@pytest.mark.parametrize("a_fmt, b_fmt, m", [("bfloat16", "nvfp4", 1), ("mxfp8", "mxfp8", 2048), ("nvfp4", "nvfp4", 9)])
def test_graph_replay_equals_eager_and_follows_a_device_alpha(a_fmt, b_fmt, m):
    ops = make_operands(a_fmt, b_fmt, m, 4096, 4096, seed=5, device="cuda")
    lhs = ops.a_values if ops.a_scales is None else (ops.a_values, ops.a_scales)
    alpha = torch.tensor([ops.alpha], dtype=torch.float32, device="cuda")
    B.prewarm(ops.weight, [m], activation=ops.a_values.dtype if ops.a_scales is None else None)
    eager = B.mm(lhs, ops.weight, alpha=alpha)
    out = torch.empty_like(eager)
    graph = captured(lambda: B.mm(lhs, ops.weight, out, alpha=alpha))
    out.fill_(float("nan"))  # poisoned after the warm-up call wrote it
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    alpha.mul_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.float(), (eager.float() * 2).to(eager.dtype).float())


def test_freeze_after_prewarm_holds_for_warmed_buckets():
    w = make_operands("bfloat16", "nvfp4", 1, 2048, 1024, seed=6, device="cuda").weight
    b12x.clear_all_caches()  # earlier tests resolved other buckets of these kernels in this process
    B.prewarm(w, [1, 16, 2048], activation=torch.bfloat16)
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import compile_decode
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled import compile_tiled

    counts = lambda: compile_decode.compile_count + compile_tiled.compile_count + compile_decode.load_count  # noqa: E731
    before = counts()
    b12x.freeze_kernel_resolution("test")
    try:
        for m in (1, 5, 8, 12, 16, 300, 2048, 3000):  # every bucket warmed by 1, 16 and 2048
            x = torch.randn(m, 1024, device="cuda").to(torch.bfloat16)
            y = B.mm(x, w)
            torch.cuda.synchronize()
            assert not torch.isnan(y).any()
        with pytest.raises(KernelResolutionFrozenError, match="gemm.blockscaled.tiled"):
            B.mm(torch.randn(100, 1024, device="cuda").to(torch.bfloat16), w)  # tiled64 was never warmed
    finally:
        b12x.unfreeze_kernel_resolution()
    assert counts() == before


def test_batched_operands_on_the_gpu():
    ops = [make_operands("mxfp8", "mxfp8", 33, 256, 512, seed=s, device="cuda") for s in (7, 8)]
    a = torch.stack([o.a_values.view(torch.uint8) for o in ops]).permute(1, 2, 0).view(torch.float8_e4m3fn)
    sa = torch.stack([o.a_scales for o in ops]).movedim(0, -1)  # per-batch slices stay contiguous
    b = torch.stack([o.b_values.view(torch.uint8) for o in ops]).permute(1, 2, 0).view(torch.float8_e4m3fn)
    sb = torch.stack([o.b_scales for o in ops]).movedim(0, -1)
    out = B.mm((a, sa), (b, sb), ab_dtype="float8_e4m3fn", sf_dtype="float8_e8m0fnu", sf_vec_size=32)
    torch.cuda.synchronize()
    for i, o in enumerate(ops):
        check_tolerance(out[..., i], o, "bfloat16")


def test_w4a16_and_shorthands_on_the_gpu():
    o = make_operands("nvfp4", "nvfp4", 4, 512, 1024, seed=9, device="cuda")
    alpha = (torch.tensor([o.alpha], device="cuda") * o.weight.alpha).float()
    got = B.mm_nvfp4(o.a_values, o.a_scales, o.b_values, o.b_scales, alpha)
    torch.cuda.synchronize()
    check_tolerance(got, o, "bfloat16")
    x = make_operands("float16", "nvfp4", 3, 512, 1024, seed=10, device="cuda", weight=o.weight)
    y = B.w4a16(x.a_values, o.weight)
    torch.cuda.synchronize()
    assert y.dtype == torch.float16
    check_tolerance(y, x, "float16")


# ---- linear ops ---------------------------------------------------------------------------------
LINEAR_SHAPES = ((4096, 4096), (7168, 2048))


def _linear_case(op, m, n, k, seed):
    from flashinfer.experimental.b12x._lib import quant as Q
    from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.03
    if op == "mxfp8":
        pw = b12x.gemm.mxfp8_linear.pack_weight(w)
        xq, xs = Q.quantize_mxfp8(x)
        a = (xq, Q.swizzle_scales(xs, 127))
        y = b12x.gemm.mxfp8_linear.mm(x, pw)
    else:
        pw = b12x.gemm.tensor_fp8_linear.pack_weight(w)
        a = R.quantize_tensor_fp8(x)
        y = b12x.gemm.tensor_fp8_linear.mm(x, pw)
    torch.cuda.synchronize()
    from .helpers import Operands

    ops = Operands(pw.recipe, pw.recipe, a[0], a[1], pw, 1.0, m, n, k)
    return y, ops


@pytest.mark.parametrize("n, k", LINEAR_SHAPES)
@pytest.mark.parametrize("m", [1, 16, 129, 2048])
@pytest.mark.parametrize("op", ["mxfp8", "tensor_fp8"])
def test_mxfp8_and_tensor_fp8_linear(op, m, n, k):
    y, ops = _linear_case(op, m, n, k, seed=m + n)
    assert y.dtype == torch.bfloat16
    check_tolerance(y, ops, "bfloat16")


@pytest.mark.parametrize("op", ["mxfp8_linear", "tensor_fp8_linear"])
def test_linear_prewarm_then_freeze_and_graph_replay(op):
    """The linear modules' prewarm (the issue: "freeze after prewarm holds for the prewarmed M"): after prewarm(w,
    [1, 16]) a frozen process runs M = 1 / 5 / 16 without resolving a kernel, and a captured mm(x, w, out) replays
    the eager bits on new inputs. The audit found prewarm tested for gemm.blockscaled only."""
    mod = getattr(b12x.gemm, op)
    g = torch.Generator(device="cuda").manual_seed(torch.seed())
    pw = mod.pack_weight(torch.randn(2048, 1024, device="cuda", generator=g) * 0.03)
    b12x.clear_all_caches()  # earlier tests resolved other buckets of these kernels in this process
    mod.prewarm(pw, [1, 16])
    x = (torch.randn(16, 1024, device="cuda", generator=g) * 2).to(torch.bfloat16)
    out = torch.full((16, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
    b12x.freeze_kernel_resolution("test")
    try:
        for m in (1, 5, 16):
            y = mod.mm(x[:m], pw)
            torch.cuda.synchronize()
            assert y.shape == (m, 2048) and torch.isfinite(y.float()).all()
        graph = captured(lambda: mod.mm(x, pw, out))
        x.copy_((torch.randn(16, 1024, device="cuda", generator=g) * 2).to(torch.bfloat16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, mod.mm(x, pw))
    finally:
        b12x.unfreeze_kernel_resolution()


@pytest.mark.parametrize("n, k", LINEAR_SHAPES)
@pytest.mark.parametrize("t", [1, 16, 129, 2048])
def test_block_fp8_linear_run_and_quantizer_bits(t, n, k):
    from flashinfer.experimental.b12x._lib import quant as Q

    BF = b12x.gemm.block_fp8_linear
    g = torch.Generator(device="cuda").manual_seed(t)
    x = (torch.randn(t, k, device="cuda", generator=g) * 3).to(torch.bfloat16)
    wq, ws = Q.quantize_block_fp8_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02)
    pw = BF.pack_weight(wq, ws)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    p = BF.plan(BF.Caps("cuda", max_tokens=2048, in_features=k, out_features=n))
    with b12x.PreparationSession("cuda") as s:
        s.prepare([p])
    p.state.scratch["output"].fill_(float("nan"))
    y = BF.run(x, pw, plan=p, bias=bias)
    q, sc = BF.quantize_input(x, plan=p)
    torch.cuda.synchronize()
    rq, rs = Q.quantize_block_fp8_act(x)
    assert torch.equal(q, rq.view(torch.uint8)) and torch.equal(sc, rs)  # the quantizer is bit-exact
    from .helpers import Operands

    ops = Operands("fp8_block", "fp8_block", rq, rs, pw, 1.0, t, n, k)
    check_tolerance(y, ops, "bfloat16", bias=bias)


def test_block_fp8_linear_graph_replay_equals_eager():
    BF = b12x.gemm.block_fp8_linear
    from flashinfer.experimental.b12x._lib import quant as Q

    x = torch.randn(7, 2048, device="cuda").to(torch.bfloat16)
    wq, ws = Q.quantize_block_fp8_weight(torch.randn(1024, 2048, device="cuda") * 0.02)
    pw = BF.pack_weight(wq, ws)
    p = BF.plan(BF.Caps("cuda", max_tokens=64, in_features=2048, out_features=1024))
    with b12x.PreparationSession("cuda") as s:
        s.prepare([p])
        s.freeze("graph test")
    try:
        binding = BF.bind(p, source=x, packed_weight=pw)
        eager = BF.run(binding=binding).clone()
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            BF.run(binding=binding)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            BF.run(binding=binding)
        binding.output.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(binding.output, eager)
    finally:
        b12x.unfreeze_kernel_resolution()


# ---- the Triton GEMV (weight-only decode at M <= 16, blockscaled/_kernel_gemv; select with -k gemv) --
GEMV_SHAPES = ((28672, 4096), (4096, 4096), (11264, 2048), (2048, 5632))  # issue #6's decode shapes


def _gemv_plan(a_fmt, b_fmt, m, n, k, config=None):
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC

    cfg = config or GC.default_config(n, k, b_fmt)
    bucket = L.bucket_for(m)
    plan = B.plan(B.GemmQuery(a_fmt, b_fmt, n, k, max_m=m, m_values=(m,)), override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert plan.state.selection == ((bucket, cfg),)
    return plan


@pytest.mark.parametrize("m", [1, 7, 16])
@pytest.mark.parametrize("n, k", GEMV_SHAPES)
def test_gemv_nvfp4_decode_shapes(m, n, k):
    """W4A16 NVFP4 at the issue's shapes through a prepared plan with the GEMV heuristic's config
    (split-K at N <= 11264), outputs NaN-poisoned."""
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + n, device="cuda", weight=_weight("nvfp4", n, k))
    check_tolerance(_run(ops, plan=_gemv_plan("bfloat16", "nvfp4", m, n, k)), ops, "bfloat16")


@pytest.mark.parametrize("m", [1, 16])
@pytest.mark.parametrize(
    "a_fmt, b_fmt", [("bfloat16", "mxfp4"), ("bfloat16", "mxfp8"), ("float16", "nvfp4"), ("float16", "mxfp8")]
)
def test_gemv_other_formats(a_fmt, b_fmt, m):
    n, k = 2048, 5632  # split 8: the workspace path
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=m, device="cuda", weight=_weight(b_fmt, n, k))
    check_tolerance(_run(ops, plan=_gemv_plan(a_fmt, b_fmt, m, n, k)), ops, "bfloat16")


@pytest.mark.parametrize("n", [4112, 28688])  # a 16-row partial last tile at block_n 64 and 128
def test_gemv_partial_last_row_tile(n):
    ops = make_operands("bfloat16", "nvfp4", 3, n, 2048, seed=n, device="cuda")
    check_tolerance(_run(ops, plan=_gemv_plan("bfloat16", "nvfp4", 3, n, 2048)), ops, "bfloat16")


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_gemv_output_dtypes(out_dtype):
    ops = make_operands("bfloat16", "nvfp4", 5, 4096, 4096, seed=11, device="cuda", weight=_weight("nvfp4", 4096, 4096))
    q = B.GemmQuery("bfloat16", "nvfp4", 4096, 4096, out_dtype=out_dtype, max_m=8, m_values=(5,))
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC

    plan = B.plan(q, override={"decode8": GC.default_config(4096, 4096, "nvfp4")})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    check_tolerance(_run(ops, out_dtype, plan=plan), ops, out_dtype)


def test_gemv_candidate_configs_are_correct():
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC

    n, k = 4096, 4096
    ops = make_operands("bfloat16", "nvfp4", 9, n, k, seed=12, device="cuda", weight=_weight("nvfp4", n, k))
    for cfg in GC.candidate_configs(n, k, "nvfp4"):
        check_tolerance(_run(ops, plan=_gemv_plan("bfloat16", "nvfp4", 9, n, k, cfg)), ops, "bfloat16")


def test_gemv_split_k_graph_replay_equals_eager_and_follows_a_device_alpha():
    """Split-K tickets reset themselves: replays of a captured split-K launch stay equal to eager."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_gemv as KG

    n, k, m = 2048, 5632, 3
    ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=13, device="cuda")
    plan = _gemv_plan("bfloat16", "nvfp4", m, n, k)
    assert plan.state.selection[0][1].split_k > 1
    alpha = torch.tensor([1.0], dtype=torch.float32, device="cuda")
    eager = B.mm(ops.a_values, ops.weight, plan=plan, alpha=alpha)
    out = torch.full_like(eager, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        B.mm(ops.a_values, ops.weight, out, plan=plan, alpha=alpha)
    torch.cuda.current_stream().wait_stream(side)
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        B.mm(ops.a_values, ops.weight, out, plan=plan, alpha=alpha)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
    alpha.mul_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.float(), (eager.float() * 2).to(eager.dtype).float())
    _, cnt = KG.WORKSPACES.get(out.device, n, plan.state.selection[0][1])
    assert int(cnt.abs().sum()) == 0
    check_tolerance(eager, ops, "bfloat16")


def test_gemv_env_selection_prewarm_and_freeze(monkeypatch):
    """B12X_GEMM_DECODE_KERNEL=triton routes unplanned weight-only mm at M <= 16 to the GEMV; after
    prewarm a frozen process runs new M in the warmed buckets without compiling."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_gemv import compile_gemv

    monkeypatch.setenv(GC.ENV, "triton")
    w = _weight("nvfp4", 4096, 4096)
    b12x.clear_all_caches()
    B.prewarm(w, [1, 16], activation=torch.bfloat16)
    before = compile_gemv.compile_count
    assert before >= 1
    b12x.freeze_kernel_resolution("test")
    try:
        for m in (1, 2, 8, 13, 16):
            ops = make_operands("bfloat16", "nvfp4", m, 4096, 4096, seed=m, device="cuda", weight=w)
            check_tolerance(_run(ops), ops, "bfloat16")
    finally:
        b12x.unfreeze_kernel_resolution()
    assert compile_gemv.compile_count == before


@pytest.mark.parametrize("recipe,n,k,message", [("nvfp4", 256, 160, "K must be a positive multiple of 128"),
                                                ("mxfp8", 100, 256, "N must be a positive multiple of 16")])  # fmt: skip
def test_pack_weight_rejects_shapes_no_kernel_takes(recipe, n, k, message):
    """The issue's "rejected with a clear error at plan/pack time": a CUDA weight no kernel takes fails in pack_weight
    (a CPU one packs: test_pack_weight.py), naming the dim."""
    w = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(n)) * 0.02
    with pytest.raises(ValueError, match=f"pack_weight: {message} for the b12x GEMM kernels, got"):
        b12x.gemm.blockscaled.pack_weight(w, recipe=recipe)


def test_autotune_selects_a_candidate_and_caches_it(tmp_path):
    """PreparationSession(autotune=True) times the plan's candidates (`_autotune`), keeps one of them, stores it, and
    a later session without autotune takes the stored one; the tuned plan's products match the reference."""
    q = B.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=16, m_values=(1, 16))
    p = B.plan(q)
    with b12x.PreparationSession("cuda", autotune=True, cache_dir=tmp_path) as s:
        s.prepare([p])
    arch = target_arch()
    parts = p.candidate_parts(arch)
    assert p.state.selection_source == "measured" and len(p.state.selection) == len(parts)
    assert all(choice in alts for choice, alts in zip(p.state.selection, parts))
    again = B.plan(q)
    with b12x.PreparationSession("cuda", cache_dir=tmp_path) as s:
        s.prepare([again])
    assert again.state.selection_source == "cached" and again.state.selection == p.state.selection
    w = _weight("nvfp4", 4096, 4096)
    for m in (1, 16):
        ops = make_operands("bfloat16", "nvfp4", m, 4096, 4096, seed=m, device="cuda", weight=w)
        check_tolerance(_run(ops, plan=p), ops, "bfloat16")
