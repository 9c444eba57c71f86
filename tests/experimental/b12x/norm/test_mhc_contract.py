"""norm.mhc contract on the CPU: plan purity, workspace sizing, errors, bind, forms, custom ops."""

import dataclasses
import re
import warnings
from unittest import mock

import pytest
import torch

import b12x
from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config, _validate, api
from flashinfer.experimental.b12x.norm.mhc import reference as R
from flashinfer.experimental.b12x.preparation.plan import PlanNotPreparedError

from .mhc_cases import SCALARS, inputs, sm90_default

pytestmark = pytest.mark.contract
H = 256


def caps(**kw):
    base = dict(device="cpu", max_tokens=16, hidden_size=H)
    return mhc.Caps(**(base | kw))


@pytest.fixture
def prepared():
    p = mhc.plan(caps())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the once-per-process reference-backend warning
        b12x.PreparationSession("cpu").prepare([p])
    return p


def test_registered_and_exports():
    assert b12x.find_op("norm.mhc") is mhc.META
    assert mhc.MULT == R.MULT == 4 and mhc.MIXES == R.MIXES == 24
    assert mhc.is_supported("cpu") is False
    assert "CUDA" in mhc.why_unsupported("cpu")


def test_caps_frozen_keyword_only():
    c = caps()
    with pytest.raises(TypeError):
        mhc.Caps("cpu", 16, H)
    with pytest.raises(AttributeError):
        c.max_tokens = 3
    assert c.device == torch.device("cpu") and c.dtype == torch.bfloat16 and c.split_k is None


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(hidden_size=1000),
            "hidden_size 1000 is not supported by norm.mhc: it must be a multiple of 128 in [256, 16384]",
        ),
        (dict(hidden_size=32768), "hidden_size 32768 is not supported by norm.mhc"),
        (dict(max_tokens=0), "max_tokens must be an int >= 1, got 0"),
        (dict(dtype=torch.float32), "dtype must be torch.bfloat16 or torch.float16, got torch.float32"),
        (dict(split_k=0), "split_k must be None or an int >= 1, got 0"),
    ],
)
def test_caps_errors(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        caps(**kw)


def test_plan_is_pure_and_hashable():
    a, b = mhc.plan(caps()), mhc.plan(caps())
    assert a == b and hash(a) == hash(b) and not a.prepared
    assert mhc.plan(caps(max_tokens=32)) != a
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        a.state
    with mock.patch.object(torch, "empty", side_effect=AssertionError("plan allocated")):
        mhc.plan(caps(hidden_size=7168, max_tokens=8192))
    assert a.forms() == ("pre", "post", "post_pre", "bcast")
    assert mhc.plan(caps(), invocation=("post", "pre")).forms() == ("pre", "post")


@pytest.mark.parametrize(
    "kw, exc, message",
    [
        (dict(invocation=("pre", "nope")), ValueError, "invocation must be None or a non-empty tuple of"),
        (dict(invocation=()), ValueError, "invocation must be None or a non-empty tuple of"),
        (dict(override="fast"), TypeError, "override must be an MhcConfig, got str"),
        (
            dict(override=_config.MhcConfig(post=_config.StreamConfig(block_t=4, block_h=512))),
            ValueError,
            "override: post tile block_h=512 must divide hidden_size=256",
        ),
    ],
)
def test_plan_errors(kw, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        mhc.plan(caps(), **kw)


def test_kernel_jobs_cover_forms_and_weight_dtypes():
    jobs = mhc.plan(caps(max_tokens=100)).kernels(_config.MhcConfig(), "sm_90a")
    names = [(k.__name__, args[0]) for k, args in jobs]
    # 5 pass-1 tiles (pre small / large, post, post_pre small, bcast: post_pre borrows post and pre above 64 tokens)
    # + 2 pass-2 tiles x 2 weight dtypes
    assert len(jobs) == len(set(jobs)) == 9
    # to 16 tokens (small_max_tokens 64): the small tiles alone, pre / post_pre / bcast / post + row_small x 2
    assert len(mhc.plan(caps()).kernels(_config.MhcConfig(), "sm_90a")) == 6
    assert names.count(("compile_stream", "pre")) == 2 and names.count(("compile_stream", "post")) == 1
    assert {args[2] for k, args in jobs if k.__name__ == "compile_row"} == {"bfloat16", "float32"}
    only_post = mhc.plan(caps(), invocation="post").kernels(_config.MhcConfig(), "sm_90a")
    assert [k.__name__ for k, _ in only_post] == ["compile_stream"]
    # post_pre alone borrows post's and pre's pass 1 (post_pre_split), not their pass 2 jobs
    only_pp = mhc.plan(caps(max_tokens=100), invocation="post_pre").kernels(_config.MhcConfig(), "sm_90a")
    forms = sorted({args[0] for k, args in only_pp if k.__name__ == "compile_stream"})
    assert forms == ["post", "post_pre", "pre"] and sum(k.__name__ == "compile_row" for k, _ in only_pp) == 4
    fused = mhc.plan(caps(), invocation="post_pre").kernels(_config.MhcConfig(post_pre_split=False), "sm_90a")
    assert {args[0] for k, args in fused if k.__name__ == "compile_stream"} == {"post_pre"}
    small = mhc.plan(caps()).kernels(_config.MhcConfig(small=_config.SmallConfig()), "sm_90a")
    assert sorted(args[0] for k, args in small if k.__name__ == "compile_small") == sorted(
        ["pre", "post_pre", "bcast"] * 2
    )  # x 2 weight dtypes


@pytest.mark.parametrize("whole_wave", [False, True])
@pytest.mark.parametrize("max_tokens", [1, 7, 64, 65, 300])
@pytest.mark.parametrize("split_k", [None, 3])
def test_workspace_covers_every_live_size(max_tokens, split_k, whole_wave):
    cfg, target = _config.MhcConfig(whole_wave=whole_wave), 4 * api.DEFAULT_SM_COUNT
    p = mhc.plan(caps(max_tokens=max_tokens, split_k=split_k))
    rows = p.workspace_rows(cfg, "cuda")
    for t in range(1, max_tokens + 1):
        for form in ("pre", "post_pre", "bcast"):
            tile = cfg.stream(form, t)
            down = cfg.rounds_down(form)
            assert down == (whole_wave and form == "pre")
            splits, cps = _config.split_for(t, tile.block_t, H // tile.block_h, target, split_k, whole_wave=down)
            assert splits * t <= rows
            assert (splits - 1) * cps < H // tile.block_h <= splits * cps  # no empty split
    spec, counter = p.scratch_specs(cfg, "cuda")
    assert spec.name == "partials" and spec.shape == (rows, 32) and spec.dtype == torch.float32
    assert counter.name == "counter" and counter.shape == (1,) and counter.dtype == torch.int32
    assert p.scratch_specs(cfg, "cpu") == ()


def test_split_heuristic_fills_the_gpu_at_small_t_and_stops_at_large_t():
    n_chunks = 7168 // 32
    assert _config.split_for(1, 16, n_chunks, 528) == (n_chunks, 1)
    splits, cps = _config.split_for(8192, 64, n_chunks, 528)
    assert splits == 5 and splits * cps >= n_chunks
    assert _config.split_for(8192, 64, n_chunks, 528, split_k=2) == (2, 112)


def test_unprepared_plan_raises_naming_preparation_session():
    ins = inputs(2, H)
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=mhc.plan(caps()), **SCALARS)
    with pytest.raises(PlanNotPreparedError, match="PreparationSession"):
        mhc.bind(mhc.plan(caps()), num_tokens=1)


def _pre(prepared, **over):
    ins = inputs(3, H)
    args = dict(residual=ins["residual"], fn=ins["fn"], hc_scale=ins["hc_scale"], hc_base=ins["hc_base"])
    kw = dict(SCALARS, plan=prepared)
    merged = args | kw | over
    positional = [merged.pop(k) for k in list(args)]
    return mhc.run_pre(*positional, **merged)


@pytest.mark.parametrize(
    "over, message",
    [
        (
            dict(residual=torch.zeros(3, 4, H)),
            "residual must be bfloat16 [3, 4, 256] contiguous on cpu, got float32 [3, 4, 256] on cpu",
        ),
        (
            dict(residual=torch.zeros(3, 4, 512, dtype=torch.bfloat16)),
            "residual must be bfloat16 [3, 4, 256] contiguous on cpu, got bfloat16 [3, 4, 512]",
        ),
        (
            dict(residual=torch.zeros(17, 4, H, dtype=torch.bfloat16)),
            "residual has 17 tokens, above the plan's max_tokens=16 (Caps.max_tokens)",
        ),
        (
            dict(residual=torch.zeros(4, H, 3, dtype=torch.bfloat16).transpose(1, 2)),
            "got bfloat16 [4, 3, 256] on cpu (non-contiguous)",
        ),
        (
            dict(residual=torch.zeros(H)),
            "residual must be a tensor [T, 4, H] (or x [T, H], the broadcast form), got float32 [256]",
        ),
        (dict(fn=torch.zeros(24, H)), "fn must be float32 [24, 1024] contiguous on cpu, got float32 [24, 256] on cpu"),
        (
            dict(fn=torch.zeros(24, 4 * H, dtype=torch.bfloat16)),
            "fn must be float32 [24, 1024] contiguous on cpu, got bfloat16",
        ),
        (dict(hc_scale=torch.zeros(2)), "hc_scale must be float32 [3] contiguous on cpu, got float32 [2] on cpu"),
        (
            dict(hc_base=torch.zeros(24, dtype=torch.float64)),
            "hc_base must be float32 [24] contiguous on cpu, got float64 [24]",
        ),
        (
            dict(norm_weight=torch.ones(H, dtype=torch.float16)),
            "norm_weight must be bfloat16 or float32 [256] on cpu, got float16 [256]",
        ),
        (dict(norm_weight=torch.ones(H + 1)), "norm_weight must be float32 [256] contiguous on cpu, got float32 [257]"),
        (dict(y_out=torch.empty(3, H)), "y_out must be bfloat16 [3, 256] contiguous on cpu, got float32 [3, 256]"),
        (
            dict(post_out=torch.empty(3, 4, 1)),
            "post_out must be float32 [3, 4] contiguous on cpu, got float32 [3, 4, 1]",
        ),
        (
            dict(comb_out=torch.empty(2, 4, 4)),
            "comb_out must be float32 [3, 4, 4] contiguous on cpu, got float32 [2, 4, 4]",
        ),
        (
            dict(residual_out=torch.empty(3, 4, H, dtype=torch.bfloat16)),
            "residual_out is written only by the broadcast form (x [T, H])",
        ),
        (dict(rms_eps=-1.0), "rms_eps must be a finite float >= 0, got -1.0"),
        (dict(hc_eps=float("nan")), "hc_eps must be a finite float >= 0, got nan"),
        (dict(sinkhorn_iters=2.0), "sinkhorn_iters must be an int >= 0, got 2.0"),
        (dict(norm_eps=True), "norm_eps must be a finite float >= 0, got True"),
    ],
)
def test_run_pre_errors(prepared, over, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _pre(prepared, **over)


def test_broadcast_fn_shapes_and_post_errors(prepared):
    ins = inputs(3, H)
    with pytest.raises(
        ValueError, match=re.escape("fn must be float32 [24, 1024 or 256] contiguous on cpu, got float32 [24, 512]")
    ):
        mhc.run_pre(ins["x"], torch.zeros(24, 512), ins["hc_scale"], ins["hc_base"], plan=prepared, **SCALARS)
    with pytest.raises(ValueError, match="run_post: plan is required"):
        mhc.run_post(ins["x"], ins["residual"], ins["post"], ins["comb"], plan=None)
    with pytest.raises(
        ValueError, match=re.escape("prev_comb must be float32 [3, 4, 4] contiguous on cpu, got float32 [3, 16]")
    ):
        mhc.run_post(ins["x"], ins["residual"], ins["post"], ins["comb"].view(3, 16), plan=prepared)
    with pytest.raises(
        ValueError, match=re.escape("x must be bfloat16 [3, 256] contiguous on cpu, got bfloat16 [2, 256]")
    ):
        mhc.run_post_pre(
            ins["x"][:2],
            ins["residual"],
            ins["post"],
            ins["comb"],
            ins["fn"],
            ins["hc_scale"],
            ins["hc_base"],
            plan=prepared,
            **SCALARS,
        )


def test_post_and_post_pre_reject_tokens_above_capacity(prepared):
    """run_pre's capacity check (test_run_pre_errors) holds for the other two entry points too."""
    ins = inputs(17, H, seed=3)
    post_args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    message = re.escape("has 17 tokens, above the plan's max_tokens=16 (Caps.max_tokens)")
    with pytest.raises(ValueError, match=message):
        mhc.run_post(*post_args, plan=prepared)
    with pytest.raises(ValueError, match=message):
        mhc.run_post_pre(*post_args, ins["fn"], ins["hc_scale"], ins["hc_base"], plan=prepared, **SCALARS)


def test_every_entry_point_on_cpu_runs_the_reference(prepared):
    ins = inputs(5, H, seed=11)
    kw = dict(SCALARS, norm_weight=ins["w_act"], norm_eps=1e-6)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=prepared, **kw)
    want = R.mhc_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **kw)
    assert got[0] is ins["residual"] and all(torch.equal(a, b) for a, b in zip(got, want))
    got = mhc.run_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=prepared, **kw)
    want = R.mhc_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], **kw)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    post_args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    assert torch.equal(mhc.run_post(*post_args, plan=prepared), R.mhc_post(*post_args))
    got = mhc.run_post_pre(*post_args, ins["fn"], ins["hc_scale"], ins["hc_base"], plan=prepared, **kw)
    want = R.mhc_post_pre(*post_args, ins["fn"], ins["hc_scale"], ins["hc_base"], **kw)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_caller_buffers_are_written_and_returned(prepared):
    ins = inputs(4, H, seed=12)
    outs = dict(
        residual_out=torch.full((4, 4, H), float("nan"), dtype=torch.bfloat16),
        y_out=torch.full((4, H), float("nan"), dtype=torch.bfloat16),
        post_out=torch.full((4, 4), float("nan")),
        comb_out=torch.full((4, 4, 4), float("nan")),
    )
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_post_pre(*args, plan=prepared, **outs, **SCALARS)
    for buf, g in zip((outs["residual_out"], outs["post_out"], outs["comb_out"], outs["y_out"]), got):
        assert g is buf and torch.isfinite(buf.float()).all()
    # in place: residual_out is the residual itself
    expect = R.mhc_post_pre(*args, **SCALARS)
    res = ins["residual"].clone()
    got = mhc.run_post_pre(ins["x"], res, *args[2:], plan=prepared, residual_out=res, **SCALARS)
    assert got[0] is res and torch.equal(res, expect[0]) and torch.equal(got[3], expect[3])


_ALLOCATORS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "full_like", "empty_strided")


def test_bind_views_only_never_allocates(prepared):
    bufs = dict(
        residual_out=torch.empty(16, 4, H, dtype=torch.bfloat16),
        y_out=torch.empty(16, H, dtype=torch.bfloat16),
        post_out=torch.empty(16, 4),
        comb_out=torch.empty(16, 4, 4),
    )
    patches = [mock.patch.object(torch, n, side_effect=AssertionError(f"bind called torch.{n}")) for n in _ALLOCATORS]
    for p in patches:
        p.start()
    try:
        binding = mhc.bind(prepared, num_tokens=5, **bufs)
    finally:
        for p in patches:
            p.stop()
    assert binding.num_tokens == 5 and binding.plan is prepared
    for name, buf in bufs.items():
        view = getattr(binding, name)
        assert view.shape[0] == 5 and view.data_ptr() == buf.data_ptr()
    ins = inputs(5, H, seed=13)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_post_pre(*args, binding=binding, **SCALARS)
    assert got[3].data_ptr() == bufs["y_out"].data_ptr()
    assert torch.equal(got[3], R.mhc_post_pre(*args, **SCALARS)[3])


@pytest.mark.parametrize(
    "kw, exc, message",
    [
        (dict(num_tokens=17), ValueError, "num_tokens must be an int in [0, max_tokens=16], got 17"),
        (dict(), ValueError, "num_tokens must be an int in [0, max_tokens=16], got None"),
        (
            dict(num_tokens=4, y_out=torch.empty(3, H, dtype=torch.bfloat16)),
            ValueError,
            "y_out must be bfloat16 [>= 4, 256], got bfloat16 [3, 256]",
        ),
        (
            dict(num_tokens=4, post_out=torch.empty(8, 4, dtype=torch.float64)),
            ValueError,
            "post_out must be float32 [4, 4] contiguous on cpu, got float64 [4, 4]",
        ),
        (dict(num_tokens=1, out=None), TypeError, "bind() got unexpected keyword(s) ['out']"),
    ],
)
def test_bind_errors(prepared, kw, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        mhc.bind(prepared, **kw)


def test_bind_takes_and_checks_a_caller_workspace(prepared):
    """bind(plan, scratch=...): every spec of the plan must be there, shaped as the spec says; the binding keeps the
    caller's views, not the plan's. A CPU plan has no workspace, so its specs are stood in for by one."""
    from flashinfer.experimental.b12x._lib.scratch import ScratchBufferSpec

    spec = ScratchBufferSpec("partials", (6, 4, 24), "float32", "cpu")
    with mock.patch.object(type(prepared), "scratch_specs", return_value=(spec,)):
        with pytest.raises(
            ValueError, match=re.escape("scratch lacks 'partials' (the plan's scratch specs: partials)")
        ):
            mhc.bind(prepared, num_tokens=2, scratch={})
        with pytest.raises(ValueError, match=re.escape("scratch['partials']")):
            mhc.bind(prepared, num_tokens=2, scratch={"partials": torch.empty(6, 4, 23)})
        mine = {"partials": torch.empty(6, 4, 24)}
        binding = mhc.bind(prepared, num_tokens=2, scratch=mine)
    assert binding.scratch is mine and binding.scratch is not prepared.state.scratch


def test_binding_token_count_must_match(prepared):
    ins = inputs(3, H)
    binding = mhc.bind(prepared, num_tokens=2)
    with pytest.raises(ValueError, match="the inputs have 3 tokens but the binding was made for num_tokens=2"):
        mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], binding=binding, **SCALARS)


def test_empty_tokens(prepared):
    ins = inputs(0, H)
    res, post, comb, y = mhc.run_pre(
        ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=prepared, **SCALARS
    )
    assert post.shape == (0, 4) and comb.shape == (0, 4, 4) and y.shape == (0, H)


def test_functional_default_plan_grows_and_obeys_freeze():
    api.clear_caches()
    ins = inputs(3, 384, seed=14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **SCALARS)[3]
    assert torch.equal(y, R.mhc_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **SCALARS)[3])
    first = _validate._default_plans[("cpu", 384, torch.bfloat16)]
    assert first.caps.max_tokens == 256
    b12x.freeze_kernel_resolution("test")
    try:
        mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **SCALARS)  # prepared: fine
        big = inputs(300, 384)
        with pytest.raises(b12x.KernelResolutionFrozenError):
            mhc.run_pre(big["residual"], big["fn"], big["hc_scale"], big["hc_base"], **SCALARS)
    finally:
        b12x.unfreeze_kernel_resolution()
    with pytest.raises(ValueError, match="hidden_size 200 is not supported"):
        mhc.run_pre(
            torch.zeros(1, 4, 200, dtype=torch.bfloat16),
            torch.zeros(24, 800),
            ins["hc_scale"],
            ins["hc_base"],
            **SCALARS,
        )
    api.clear_caches()
    assert not _validate._default_plans


def test_custom_op_traces_with_torch_compile_on_cpu(prepared):
    ins = inputs(4, H, seed=15)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])

    def layer(x, residual, post, comb, fn, hc_scale, hc_base):
        residual, post, comb, y = mhc.run_post_pre(
            x, residual, post, comb, fn, hc_scale, hc_base, plan=prepared, **SCALARS
        )
        return residual, post, comb, y * 2

    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True, backend="eager")(*args)
    want = R.mhc_post_pre(*args, **SCALARS)
    assert torch.equal(got[0], want[0]) and torch.equal(got[3], want[3] * 2)
    assert hasattr(torch.ops.b12x, "norm_mhc_post_pre_")


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(block_t=8), "FusedConfig.block_t must be >= 16 (a dot's M), got 8"),
        (dict(block_t=48), "FusedConfig.block_t must be a power of two >= 1, got 48"),
        (dict(block_t=64, num_warps=4), "FusedConfig(block_t=64, num_warps=4) would compile to wgmma on sm_90a"),
        (dict(sq="auto"), "FusedConfig.sq must be step, lazy or gram (no auto), got 'auto'"),
        (dict(sq="fast"), "FusedConfig.sq must be one of ('auto', 'step', 'lazy', 'gram', 'diag'), got 'fast'"),
        (dict(steps_per_split=0), "FusedConfig.steps_per_split must be an int >= 1, got 0"),
        (dict(prefetch=1), "FusedConfig.prefetch must be a bool, got 1"),
        (dict(block_h=4), "FusedConfig.block_h must be >= 8 (a dot's K), got 4"),
    ],
)
def test_fused_config_errors(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _config.FusedConfig(**kw)


def test_fused_selection_jobs_workspace_and_counters():
    """The heuristic runs the one-launch kernel from fused_min_tokens (post_pre there as post's kernel
    + the one-launch pre); its workspace covers splits x max_tokens and it has a counter per block."""
    with pytest.raises(ValueError, match="MhcConfig.fused_min_tokens must be an int >= 1, got 0"):
        _config.MhcConfig(fused_min_tokens=0)
    with pytest.raises(ValueError, match="MhcConfig.fused_pre must be a FusedConfig or None, got Str"):
        _config.MhcConfig(fused_pre=_config.StreamConfig(16, 16))
    cfg = _config.fused_config("sm_90a")  # session 6's default (sm_120a's now)
    assert cfg.fused("pre", cfg.fused_min_tokens - 1) is None and cfg.fused("bcast", cfg.fused_min_tokens) is not None
    assert cfg.fused("post_pre", 8192) is None  # post_pre_split: post's kernel, then fused("pre")
    assert _config.FUSED_PRE.split(7168) == (28, 16) and _config.FUSED_PRE.split(7168, split_k=5) == (5, 90)
    big = cfg.fused_min_tokens
    p = mhc.plan(caps(max_tokens=big))
    jobs = [(k.__name__, args[0]) for k, args in p.kernels(cfg, "sm_90a") if k.__name__ == "compile_fused"]
    assert sorted(jobs) == sorted([("compile_fused", "pre"), ("compile_fused", "bcast")] * 2)  # 2 weight dtypes
    splits = _config.FUSED_PRE.split(H)[0]
    assert p.workspace_rows(cfg, "cuda") >= splits * big
    assert cfg.counters(api.FORMS, big) == -(-big // _config.FUSED_PRE.block_t)
    assert mhc.plan(caps(max_tokens=100)).kernels(cfg, "sm_90a") == mhc.plan(caps(max_tokens=100)).kernels(
        _config.MhcConfig(wide=cfg.wide), "sm_90a"
    )  # below fused_min_tokens: the two-pass jobs (and the default's wide pass 2) only
    with pytest.raises(ValueError, match=re.escape("override: pre tile block_h=512 must divide hidden_size=256")):
        mhc.plan(caps(), override=_config.MhcConfig(fused_pre=_config.FusedConfig(block_h=512)))


def test_entry_point_outside_the_invocation_names_itself():
    """A plan prepared for some forms refuses the others at the entry point, naming the form called
    (post_pre used to surface its inner post step's name on the GPU above 64 tokens)."""
    p = mhc.plan(caps(), invocation=("pre",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with b12x.PreparationSession("cpu") as session:
            session.prepare([p])
    ins = inputs(3, H)
    a = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    with pytest.raises(ValueError, match=r"prepared for forms \('pre',\); post_pre is not one of them"):
        mhc.run_post_pre(*a, ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCALARS)
    with pytest.raises(ValueError, match=r"prepared for forms \('pre',\); post is not one of them"):
        mhc.run_post(*a, plan=p)
    with pytest.raises(ValueError, match=r"prepared for forms \('pre',\); bcast is not one of them"):
        mhc.run_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCALARS)
    mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCALARS)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(block_y=96), "WideConfig.block_y must be a power of two >= 1, got 96"),
        (dict(block_y=16), "WideConfig.block_y must be >= 32, got 16"),
        (dict(max_tokens=0), "WideConfig.max_tokens must be a power of two >= 1, got 0"),
        (dict(num_warps=3), "WideConfig.num_warps must be a power of two >= 1, got 3"),
    ],
)
def test_wide_config_errors(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _config.WideConfig(**kw)


def test_wide_and_tiny_selection_jobs_and_counters():
    """wide adds one pass-2 job (no norm weight dtype: it never runs with one); tiny one job per
    mixing form with the small stream tile, and 3 counters; both off in a bare MhcConfig, and the
    heuristic turns wide on (block_y 128: the 13:31 H200 sweep's fastest T <= 4 row; on sm_90a with the
    fast Sinkhorn and post and comb apart: session 29), tiny not."""
    assert _config.MhcConfig().wide is None and _config.MhcConfig().tiny is None
    for arch, kw in (("sm_90a", dict(fast=True, apart=True)), ("sm_120a", {})):
        assert _config.default_config(arch).wide == _config.WideConfig(block_y=128, **kw)
        assert _config.default_config(arch).tiny is None
    with pytest.raises(ValueError, match="MhcConfig.wide must be a WideConfig or None, got RowConfig"):
        _config.MhcConfig(wide=_config.RowConfig())
    with pytest.raises(ValueError, match="MhcConfig.tiny must be a WideConfig or None, got int"):
        _config.MhcConfig(tiny=4)
    with pytest.raises(ValueError, match=re.escape("MhcConfig.tiny.max_tokens=8 must be <= small_max_tokens=4")):
        _config.MhcConfig(tiny=_config.WideConfig(max_tokens=8), small_max_tokens=4)
    p = mhc.plan(caps(max_tokens=100))
    cfg = _config.MhcConfig(wide=_config.WideConfig(), tiny=_config.WideConfig(block_y=128))
    jobs = [(k.__name__, args[:-2]) for k, args in p.kernels(cfg, "sm_90a")]
    wide = [a for k, a in jobs if k == "compile_wide"]
    tiny = sorted(a[0] for k, a in jobs if k == "compile_tiny")
    assert wide == [("bfloat16", H, cfg.wide)] and tiny == ["bcast", "post_pre", "pre"]
    assert all(a[3] == cfg.stream(a[0], 1) for k, a in jobs if k == "compile_tiny")
    assert cfg.counters(api.FORMS, 100) == 3 and _config.MhcConfig().counters(api.FORMS, 100) == 1
    assert cfg.counters(("post",), 100) == 1


def test_fn_split_config_jobs_and_scratch():
    """fn_split "pre" / "hi" on a pre tile adds the split launch's job and the [2, 24, 4H] scratch;
    the default and the tiles of other forms do not."""
    with pytest.raises(ValueError, match=re.escape("StreamConfig.fn_split must be one of ('kernel', 'pre', 'hi')")):
        _config.StreamConfig(16, 32, fn_split="lo")
    with pytest.raises(ValueError, match=re.escape("FusedConfig.fn_split must be one of ('kernel', 'pre', 'hi')")):
        _config.FusedConfig(fn_split=True)
    p = mhc.plan(caps(max_tokens=100))
    # sm_90a's pre_large reads fn split once from fn_split_min_tokens (2049); sm_120a keeps the in-loop split
    assert _config.default_config("sm_90a").fn_split_needed(api.FORMS, 2049)
    assert not _config.default_config("sm_90a").fn_split_needed(api.FORMS, 2048)  # session 59: plans to 2048 skip it
    assert not _config.default_config("sm_90a").fn_split_needed(("post", "bcast"), 8192)
    assert not _config.default_config("sm_120a").fn_split_needed(api.FORMS, _config.FUSED_MIN_TOKENS)
    assert _config.fused_config("sm_90a").fn_split_needed(api.FORMS, _config.FUSED_MIN_TOKENS)
    assert not _config.fused_config("sm_90a").fn_split_needed(api.FORMS, 100)
    assert not any(s.name == "fn_split" for s in p.scratch_specs(_config.MhcConfig()))
    cfg = _config.MhcConfig(pre_large=_config.StreamConfig(64, 16, 2, 4, fn_split="pre"))
    assert cfg.fn_split_needed(api.FORMS, 100) and not cfg.fn_split_needed(("pre",), 64)  # pre_large from T = 65
    assert cfg.fn_split_needed(("post_pre",), 100) and not cfg.fn_split_needed(("post_pre",), 64)  # borrowed pre
    assert not cfg.fn_split_needed(("bcast",), 100)
    jobs = [(k.__name__, args[:-2]) for k, args in p.kernels(cfg, "sm_90a")]
    assert ("compile_split_fn", ("bfloat16", H)) in jobs
    (spec,) = [s for s in p.scratch_specs(cfg) if s.name == "fn_split"]
    assert spec.shape == (2, 24, 4 * H) and spec.dtype == torch.bfloat16
    fused = _config.MhcConfig(fused_pre=_config.FusedConfig(fn_split="hi"), fused_min_tokens=64)
    assert fused.fn_split_needed(("pre",), 64) and not fused.fn_split_needed(("pre",), 63)


def test_diag_squares_config():
    with pytest.raises(ValueError, match=re.escape("StreamConfig(sq='diag') needs block_t >= 16 and block_h >= 16")):
        _config.StreamConfig(4, 128, sq="diag")
    with pytest.raises(ValueError, match=re.escape("FusedConfig(sq='diag') needs block_t >= 16 and block_h >= 16")):
        _config.FusedConfig(block_h=8, sq="diag")
    assert _config.StreamConfig(64, 16, 2, sq="diag").sq == "diag"


def test_row_config_stages():
    with pytest.raises(ValueError, match=re.escape("RowConfig.stages must be an int >= 1, got 0")):
        _config.RowConfig(2048, 16, 4, stages=0)
    assert _config.RowConfig().stages == 1 and _config.MhcConfig().row_large.stages == 1  # default unchanged
    with pytest.raises(ValueError, match=re.escape("RowConfig.scalar must be a bool, got 1")):
        _config.RowConfig(scalar=1)


def test_default_selection_by_arch():
    """sm_90a: two passes at every T (no one-launch tile); above small_max_tokens pre's pass 1 reads
    fn split once (split in its loop below 2049 tokens, session 59) with diagonal-block squares and pass 2 streams its row (the 14:37 H200 sweep's
    two_pass_fn_pre_diag_stream) from mid_max_tokens + 1 = 129, session 6's large tiles at 65..128 (18.6
    against 20.9 µs for pre at T = 65); T <= small_max_tokens keeps session 6's tiles and the wide pass 2.
    sm_120a keeps fused_config's selection (the sm_90a tiles spill there)."""
    # LARGE_PDL_90 and MID_ROW_PDL_90 (session 61's rules) mark the large tiles and row_mid pdl, MID_PRE_EXIT_90
    # (session 62's) pre_mid pdl released at exit: the tiles compared below are those without them
    cfg, old = sm90_default(), _config.fused_config("sm_90a")
    marked = _config.with_tile_fields(cfg, ("row_mid",), pdl=True)
    marked = _config.with_tile_fields(marked, ("pre_mid",), pdl=True, pdl_at_exit=True)
    default = _config.default_config("sm_90a")
    assert default.row_mid.pdl == _config.MID_ROW_PDL_90 and not default.row_mid.pdl_at_exit
    assert default.pre_mid.pdl == default.pre_mid.pdl_at_exit == _config.MID_PRE_EXIT_90
    flags = _config.LARGE_PDL_90 and _config.MID_ROW_PDL_90 and _config.MID_PRE_EXIT_90
    assert (default == _config.with_large_t_pdl(marked)) == flags
    assert cfg.fused_pre is None and cfg.fused_post_pre is None and cfg.fused_forms(api.FORMS, 8192) == ()
    assert cfg.fused("pre", 8192) is None and cfg.post_pre_split and cfg.pass2 == "row"
    large = _config.StreamConfig(64, 16, 2, 4, sq="diag", fn_split="pre")
    assert cfg.pre_large == large and cfg.fn_split_min_tokens == 2049  # session 59: fn split in the loop below
    assert cfg.stream("pre", 129) == cfg.stream("pre", 2048) == dataclasses.replace(large, fn_split="kernel")
    assert cfg.stream("pre", 2049) == large
    assert cfg.mid_max_tokens == 128 and cfg.stream("pre", 65) == old.stream("pre", 65) == cfg.stream("pre", 128)
    assert cfg.apply(65) == old.apply(65) == cfg.apply(128) and cfg.stream("pre", 65).fn_split == "kernel"
    assert cfg.stream("pre", 64) == old.stream("pre", 64) and cfg.stream("pre", 64).fn_split == "kernel"
    assert cfg.stream("post_pre", 64) == dataclasses.replace(old.stream("post_pre", 64), pdl=True)  # small_launches
    assert cfg.stream("post", 1) == old.post
    assert cfg.bcast == dataclasses.replace(old.bcast, sq="diag")
    assert cfg.apply(129) == _config.RowConfig(2048, 16, 4, stages=3) and cfg.apply(64) == old.apply(64)
    assert _config.MhcConfig().apply(65) == _config.MhcConfig().row_large  # no mid tiles: large from 65
    assert old.wide == _config.WideConfig(block_y=128) and cfg.tiny is None and cfg.small is None
    assert cfg.wide == dataclasses.replace(old.wide, fast=True, apart=True)  # fast: H200 16:41; apart: session 29
    assert cfg.counters(api.FORMS, 8192) == 1
    assert _config.default_config(None) == _config.default_config(
        "sm_90a"
    )  # no arch at hand (scratch_specs): the sm_90a tiles
    assert _config.default_config("sm_120a") == _config.fused_config("sm_120a")
    jobs = {(k.__name__, args[0]) for k, args in mhc.plan(caps(max_tokens=8192)).kernels(cfg, "sm_90a")}
    assert ("compile_split_fn", "bfloat16") in jobs and not any(k == "compile_fused" for k, _ in jobs)


_DENSE = tuple(_config.SmallLaunch(f, 1, 64, 8) for f in ("pre", "post_pre"))  # more programs than ctas_per_sm


@pytest.mark.parametrize("sms", [1, 48, 132, 170, 188])
@pytest.mark.parametrize("hidden", [2048, 7168])
@pytest.mark.parametrize("max_tokens", [8, 300])
@pytest.mark.parametrize("launches", [None, _DENSE], ids=["default", "dense"])
def test_workspace_covers_every_live_split(sms, hidden, max_tokens, launches):
    """The partials hold splits x T rows for every live T and form the sm_90a default runs, with its
    small_launches' split targets (and with entries denser than ctas_per_sm), on GPUs of 1..188 SMs (H200
    132, RTX 5090 170, RTX PRO 6000 188): no entry can make pass 1 write past the workspace."""
    cfg = _config.default_config("sm_90a")
    cfg = cfg if launches is None else dataclasses.replace(cfg, small_launches=launches)
    rows = _config.workspace_rows(cfg, api.FORMS, hidden, max_tokens, cfg.ctas_per_sm * sms, sms=sms)
    for form in ("pre", "post_pre", "bcast"):
        for t in range(1, max_tokens + 1):
            run = "pre" if form == "post_pre" and cfg.splits_post_pre(t) else form
            tile = cfg.stream(run, t)
            target = cfg.target_ctas(t, sms, run)
            splits = cfg.pass1_splits(run, t, tile.block_t, hidden // tile.block_h, target)[0]
            assert splits * t <= rows, (form, t, splits, rows)


@pytest.mark.parametrize("tokens, chunk", [(1, None), (8192, None), (300, 300), (301, 300), (8192, 512), (1000, 129)])
def test_chunks_are_even_and_cover_every_token(tokens, chunk):
    """MhcConfig.chunks: cdiv(T, chunk_tokens) runs of consecutive tokens, none over chunk_tokens, none
    at or under small_max_tokens (so every chunk takes the large / mid tiles), together T exactly."""
    cfg = _config.MhcConfig(chunk_tokens=chunk)
    runs = cfg.chunks(tokens)
    assert sum(n for _, n in runs) == tokens and [t0 for t0, _ in runs] == [
        sum(n for _, n in runs[:i]) for i in range(len(runs))
    ]
    if chunk is None:
        assert runs == ((0, tokens),)
    else:
        assert len(runs) == -(-tokens // chunk) and all(cfg.small_max_tokens < n <= chunk for _, n in runs)
        assert max(n for _, n in runs) - min(n for _, n in runs) <= 1


@pytest.mark.parametrize("chunk", [128, 0, 256.0, "512"])
def test_chunk_tokens_errors(chunk):
    with pytest.raises(
        ValueError, match=re.escape("MhcConfig.chunk_tokens must be None or an int > 2 * small_max_tokens = 128")
    ):
        _config.MhcConfig(chunk_tokens=chunk)


@pytest.mark.parametrize(
    "tokens, up, down",
    # sm_90a's pre_large at H = 7168 (64-token blocks, 448 chunks of 16) against a 528-program target (4 an SM on 132)
    [(1, 448, 448), (200, 112, 112), (1024, 32, 32), (2048, 17, 16), (4096, 9, 8), (8192, 5, 4), (16384, 3, 2)],
)
def test_whole_wave_splits_never_exceed_the_target(tokens, up, down):
    """split_for rounds the split count up by default (640 programs at T = 8192: 1.21 waves of 528) and down with
    whole_wave (512: one wave); both leave no split empty, and split_k wins over either."""
    blocks = -(-tokens // 64)
    assert _config.split_for(tokens, 64, 448, 528)[0] == up
    splits, cps = _config.split_for(tokens, 64, 448, 528, whole_wave=True)
    assert splits == down and (splits - 1) * cps < 448 <= splits * cps
    assert blocks * splits <= max(528, blocks)
    assert _config.split_for(tokens, 64, 448, 528, 3, whole_wave=True) == _config.split_for(tokens, 64, 448, 528, 3)


def test_whole_wave_must_be_a_bool():
    with pytest.raises(ValueError, match=re.escape("MhcConfig.whole_wave must be a bool, got 1")):
        _config.MhcConfig(whole_wave=1)


WALK = _config.RowConfig(block_h=1024, block_s=16, num_warps=4, stages=6, walk=5)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: _config.RowConfig(walk=-1), "RowConfig.walk must be an int >= 0, got -1"),
        (lambda: _config.RowConfig(walk=True), "RowConfig.walk must be an int >= 0, got True"),
        (lambda: _config.RowConfig(walk=2, scalar=True), "RowConfig.walk takes the weights as tiles"),
        (lambda: _config.MhcConfig(row_walk=_config.RowConfig()), "MhcConfig.row_walk must be None or a RowConfig"),
        (lambda: _config.MhcConfig(row_walk=WALK, walk_max_tokens=0), "MhcConfig.walk_max_tokens must be an int"),
        (lambda: _config.MhcConfig(walk_all_max_hidden=-1), "MhcConfig.walk_all_max_hidden must be an int >= 0"),
        (
            lambda: _config.MhcConfig(fn_split_min_tokens=-1),
            "MhcConfig.fn_split_min_tokens must be an int >= 0, got -1",
        ),
        (lambda: _config.MhcConfig(fn_split_min_tokens=True), "MhcConfig.fn_split_min_tokens must be an int >= 0"),
    ],
)
def test_walk_config_errors(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_fn_split_min_tokens_regimes():
    """fn_split_min_tokens cuts pre's large regime: below it the large tile splits fn in its loop (no split launch),
    from it the tile's own fn_split; the compile jobs hold both; the other forms and 0 keep the regimes as they were."""
    base = dataclasses.replace(_config.default_config("sm_90a"), fn_split_min_tokens=0)
    assert base.pre_large.fn_split == "pre"
    sel = dataclasses.replace(base, fn_split_min_tokens=2048)
    inline = dataclasses.replace(base.pre_large, fn_split="kernel")
    assert sel.regimes("pre", 8192) == (
        (base.pre_small, 1, 64), (base.pre_mid, 65, 128), (inline, 129, 2047), (base.pre_large, 2048, 8192)
    )  # fmt: skip
    assert sel.regimes("pre", 1000)[-1] == (inline, 129, 1000)
    assert sel.stream("pre", 2047) == inline and sel.stream("pre", 2048) == base.pre_large
    assert sel.stream("pre", 129) == inline and sel.stream("pre", 128) == base.pre_mid
    assert inline in sel.streams("pre") and base.pre_large in sel.streams("pre")
    assert sel.regimes("post_pre", 8192) == base.regimes("post_pre", 8192)
    assert base.regimes("pre", 8192)[-1] == (base.pre_large, 129, 8192) and inline not in base.streams("pre")
    # at or under the mid tiles' range the cut does nothing
    assert dataclasses.replace(base, fn_split_min_tokens=100).regimes("pre", 8192) == base.regimes("pre", 8192)


def test_walk_selection_bounds_and_jobs():
    """The walk pass 2 runs above the small (or mid) tiles' range up to walk_max_tokens, never with a norm weight or
    the apply pass 2; a plan compiles it once (no weight dtype in its key), beside the row tiles it falls back on."""
    cfg = _config.MhcConfig(row_walk=WALK, walk_max_tokens=4096)
    assert [cfg.walk_for(t, False) for t in (64, 65, 4096, 4097)] == [None, WALK, WALK, None]
    assert cfg.walk_for(1000, True) is None and _config.MhcConfig().walk_for(1000, False) is None
    assert dataclasses.replace(cfg, pass2="apply").walk_for(1000, False) is None
    mid = dataclasses.replace(_config.default_config("sm_90a"), row_walk=WALK)
    assert mid.walk_for(128, False) is None and mid.walk_for(129, False) is WALK
    jobs = [(k.__name__, args[:-2]) for k, args in mhc.plan(caps(max_tokens=8192)).kernels(mid, "sm_90a")]
    assert [j for j in jobs if j[0] == "compile_walk"] == [("compile_walk", ("bfloat16", H, WALK))]
    assert ("compile_row", ("bfloat16", H, "bfloat16", mid.row_large)) in jobs
    sm90 = _config.default_config("sm_90a")  # the walk is sm_90a's alone (SM120's 100 KB of shared memory)
    assert (
        sm90.row_walk == dataclasses.replace(_config.WALK_90, pdl=_config.LARGE_PDL_90)
        and _config.default_config("sm_120a").row_walk is None
    )
    assert _config.WALK_90 is None or (sm90.walk_max_tokens == _config.WALK_MAX_90 and _config.WALK_90.walk > 0)
    assert _config.WALK_90 is None or sm90.walk_all_max_hidden == _config.WALK_ALL_MAX_HIDDEN_90


def test_walk_all_max_hidden():
    """Hidden sizes up to walk_all_max_hidden walk at every T above the mid tiles (walk_max_tokens bounds the wider
    ones, and a call whose hidden size is not given); a plan of such a hidden size to 8192 tokens compiles the walk
    and, for weighted calls, the row tile; a wider one's plan the same tiles (the walk up to walk_max_tokens)."""
    cfg = _config.MhcConfig(row_walk=WALK, walk_max_tokens=4096, walk_all_max_hidden=5120)
    assert [cfg.walk_for(t, False, 5120) for t in (64, 65, 4097, 1 << 20)] == [None, WALK, WALK, WALK]
    assert [cfg.walk_for(t, False, 5376) for t in (65, 4096, 4097)] == [WALK, WALK, None]
    assert cfg.walk_for(4097, False) is None and cfg.walk_for(8192, True, 4096) is None
    assert _config.MhcConfig(row_walk=WALK, walk_max_tokens=4096).walk_for(4097, False, 256) is None
    for h in (H, 6144):
        jobs = [k.__name__ for k, _ in mhc.plan(caps(max_tokens=8192, hidden_size=h)).kernels(cfg, "sm_90a")]
        assert jobs.count("compile_walk") == 1 and "compile_row" in jobs, h
