"""norm.mhc Triton kernels under TRITON_INTERPRET=1, through the real host path (run by
test_mhc_interpret.py in a subprocess: the variable must be set before the kernels are defined).

A plan gets an "interpret" state by hand: the launchers the compile functions would return, an
explicit split target, and a NaN-filled CPU workspace, so run_pre / run_post / run_post_pre go
through validation, the split heuristic, workspace indexing and dispatch exactly as on a GPU.
"""

import dataclasses
import functools
import os

import pytest
import torch

from flashinfer.experimental.b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import (
    _config,
    _execute,
    _kernel,
    _kernel_fused,
    _kernel_last,
    _kernel_row,
    _kernel_small,
    _kernel_tiny,
    _kernel_walk,
    _kernel_wide,
    api,
)
from flashinfer.experimental.b12x.norm.mhc import reference as R

from .mhc_cases import assert_ulps, inputs

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_mhc_interpret.py"

H = 256  # smallest supported hidden size: 8 steps of 32 (pass 1), 2 of 128 (post)
SCAL = dict(rms_eps=1e-6, hc_eps=1e-3, sinkhorn_iters=5)


def interpret_plan(max_tokens, *, target_ctas, split_k=None, config=None, dtype=torch.bfloat16, hidden=H):
    # the split target as given: one "SM" holding target_ctas programs (a SmallLaunch's target scales alike)
    cfg = dataclasses.replace(config or _config.MhcConfig(), ctas_per_sm=target_ctas)
    p = mhc.plan(mhc.Caps(device="cpu", max_tokens=max_tokens, hidden_size=hidden, dtype=dtype, split_k=split_k))
    table = {}
    for k, args in p.kernels(cfg, "sm_90a"):
        if k.__name__ == "compile_stream":
            form, _, hidden, tile = args[:4]
            table[(k.__name__, args[:-2])] = functools.partial(_kernel.launch_stream, _kernel.MODES[form], hidden, tile)
        elif k.__name__ in ("compile_small", "compile_fused"):
            form, _, hidden, _, tile = args[:5]
            module = _kernel_small.launch_small if k.__name__ == "compile_small" else _kernel_fused.launch_fused
            table[(k.__name__, args[:-2])] = functools.partial(module, _kernel.MODES[form], hidden, tile)
        elif k.__name__ == "compile_last":
            form, _, hidden, _, tile = args[:5]
            launch = functools.partial(_kernel_last.launch_last, _kernel.MODES[form], hidden, tile)
            table[(k.__name__, args[:-2])] = launch
        elif k.__name__ == "compile_tiny":
            form, _, hidden, stream, wide = args[:5]
            launch = functools.partial(_kernel_tiny.launch_tiny, _kernel.MODES[form], hidden, stream, wide)
            table[(k.__name__, args[:-2])] = launch
        elif k.__name__ == "compile_wide":
            table[(k.__name__, args[:-2])] = functools.partial(_kernel_wide.launch_wide, args[1], args[2])
        elif k.__name__ == "compile_split_fn":
            table[(k.__name__, args[:-2])] = _kernel.launch_split_fn
        elif k.__name__ == "compile_row":
            table[(k.__name__, args[:-2])] = functools.partial(_kernel_row.launch_row, args[1], args[3])
        elif k.__name__ == "compile_walk":  # execute asks for walk programs an "SM" (sms=1 below)
            table[(k.__name__, args[:-2])] = functools.partial(_kernel_walk.launch_walk, args[1], args[2])
        else:
            table[(k.__name__, args[:-2])] = functools.partial(_kernel.launch_apply, args[1], args[3])
    rows = _config.workspace_rows(cfg, p.forms(), hidden, max_tokens, target_ctas, split_k, sms=1)
    st = p._state
    st.device, st.arch, st.selection = torch.device("cpu"), "interpret", cfg
    counters = torch.zeros(cfg.counters(p.forms(), max_tokens), dtype=torch.int32)
    st.scratch = {"partials": torch.full((rows, 32), float("nan")), "counter": counters}
    if cfg.fn_split_needed(p.forms(), max_tokens):
        st.scratch["fn_split"] = torch.full((2, 24, 4 * hidden), float("nan"), dtype=dtype)
    st.extra = {"launchers": table, "sms": 1}
    p._assign_handle()
    return p


# Every pass-2 kind the selection offers: the legacy apply kernel, the row kernel with the whole
# row in one tile, and the row kernel streaming 128-wide chunks while summing 2 splits a step.
VARIANTS = {
    "apply": _config.MhcConfig(pass2="apply"),
    "row": _config.MhcConfig(pass2="row"),
    # the one-launch path at T <= 4 (4 slices of 64 at H = 256), the row pass 2 above it
    "small": _config.MhcConfig(pass2="row", small=_config.SmallConfig(max_tokens=4, block_h=64, num_warps=4)),
    # post_pre above 2 tokens as post's kernel + pre's pass 1; pre's squares summed per step at small T
    "split": _config.MhcConfig(
        post_pre_split=True, small_max_tokens=2, pre_small=_config.StreamConfig(16, 32, 4, 2, sq="step")
    ),
    # the wide pass 2 at T <= 4 without a norm weight (4 programs of 64 columns at H = 256, the
    # partials summed 4 rows a step), the row pass 2 otherwise
    "wide": _config.MhcConfig(pass2="row", wide=_config.WideConfig(max_tokens=4, block_y=64, block_s=4)),
    # the weights as scalars in the row kernel (one-shot at small T, 128-wide chunks at large T)
    "row_scalar": _config.MhcConfig(
        row_small=_config.RowConfig(block_h=8192, block_s=4, num_warps=4, scalar=True),
        row_large=_config.RowConfig(block_h=128, block_s=2, num_warps=4, stages=2, scalar=True),
    ),
    "row_chunked": _config.MhcConfig(
        pass2="row",
        row_small=_config.RowConfig(block_h=128, block_s=2, num_warps=4),
        row_large=_config.RowConfig(block_h=128, block_s=4, num_warps=4),
    ),
}


# The default tier runs the selection's pass-2 kinds (row, with post_pre split above 2 tokens as by
# default, and wide); the legacy apply kernel, the one-launch small path (off by default), the split
# at a smaller bound with step squares, and the row tile alternatives run in `slow` (~55% of this
# module's ~8 min under the interpreter on 2 CPU cores).
SLOW_VARIANTS = ("apply", "small", "split", "row_scalar", "row_chunked")


@pytest.fixture(params=[v if v not in SLOW_VARIANTS else pytest.param(v, marks=pytest.mark.slow) for v in VARIANTS])
def variant(request):
    return VARIANTS[request.param]


def sfn(fn, dtype=torch.bfloat16):
    """fn as pass 1's hi + lo split sees it (R.split_fn): the kernels then match at fp32 tolerances."""
    return R.split_fn(fn, dtype)


def close_fp32(got, want, name):
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6, msg=lambda m: f"{name}: {m}")


def check_pre_outputs(got, want, *, ulps=1):
    _, post, comb, y = got
    close_fp32(post, want[1], "post")
    close_fp32(comb, want[2], "comb")
    assert_ulps(y, want[3].float(), ulps)


def check_pre(p, tokens, ins, **kw):
    """pre on ins' residual through plan p (NaN-poisoned outputs) against the reference with the same keywords (fn as
    pass 1's hi + lo split sees it)."""
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **kw)
    check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **kw))


@pytest.mark.parametrize(
    "tokens, target, weight",
    [(1, 1000, None), (5, 3, "w_act"), (5, 1, "w_f32"), (64, 8, None), (70, 1, "w_act")],
)
def test_pre(tokens, target, weight, variant):
    p = interpret_plan(80, target_ctas=target, config=variant)
    ins = inputs(tokens, H, seed=tokens)
    w = None if weight is None else ins[weight]
    outs = dict(
        y_out=torch.full((tokens, H), float("nan"), dtype=torch.bfloat16),
        post_out=torch.full((tokens, 4), float("nan")),
    )
    got = mhc.run_pre(
        ins["residual"],
        ins["fn"],
        ins["hc_scale"],
        ins["hc_base"],
        plan=p,
        norm_weight=w,
        norm_eps=1e-5,
        **outs,
        **SCAL,
    )
    want = R.mhc_pre(
        ins["residual"], sfn(ins["fn"]), ins["hc_scale"], ins["hc_base"], norm_weight=w, norm_eps=1e-5, **SCAL
    )
    assert got[0] is ins["residual"] and got[3] is outs["y_out"] and got[1] is outs["post_out"]
    check_pre_outputs(got, want)


@pytest.mark.parametrize("split_k", [1, 3, 100])
def test_pre_fixed_split(split_k, variant):
    p = interpret_plan(16, target_ctas=1, split_k=split_k, config=variant)
    ins = inputs(3, H, seed=split_k)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCAL)
    check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), ins["hc_scale"], ins["hc_base"], **SCAL))


@pytest.mark.parametrize("tokens, folded", [(5, False), (5, True), (70, False)])
def test_broadcast(tokens, folded, variant):
    p = interpret_plan(80, target_ctas=4, config=variant)
    ins = inputs(tokens, H, seed=7)
    fn = ins["fn"].view(24, 4, H).sum(1).contiguous() if folded else ins["fn"]
    res_out = torch.full((tokens, 4, H), float("nan"), dtype=torch.bfloat16)
    got = mhc.run_pre(
        ins["x"], fn, ins["hc_scale"], ins["hc_base"], plan=p, residual_out=res_out, norm_weight=ins["w_f32"], **SCAL
    )
    folded = fn.view(24, 4, H).sum(1) if fn.shape[1] == 4 * H else fn  # the kernel folds, then splits
    want = R.mhc_pre(ins["x"], sfn(folded), ins["hc_scale"], ins["hc_base"], norm_weight=ins["w_f32"], **SCAL)
    assert got[0] is res_out and torch.equal(res_out, ins["x"].unsqueeze(1).expand(tokens, 4, H))
    check_pre_outputs(got, want)


@pytest.mark.parametrize("tokens, in_place", [(1, False), (5, True), (9, False)])
def test_post(tokens, in_place):
    p = interpret_plan(16, target_ctas=4)
    ins = inputs(tokens, H, seed=20 + tokens)
    exact = R.mhc_post(ins["x"], ins["residual"], ins["post"], ins["comb"], compute_dtype=torch.float64).double()
    out = ins["residual"] if in_place else torch.full((tokens, 4, H), float("nan"), dtype=torch.bfloat16)
    got = mhc.run_post(ins["x"], ins["residual"], ins["post"], ins["comb"], plan=p, out=out)
    assert got is out
    assert_ulps(got, exact, 1)


@pytest.mark.parametrize("tokens, target, in_place", [(1, 64, False), (3, 2, True), (40, 1, False), (70, 4, True)])
def test_post_pre(tokens, target, in_place, variant):
    p = interpret_plan(80, target_ctas=target, config=variant)
    ins = inputs(tokens, H, seed=40 + tokens)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    new_exact = R.mhc_post(*args, compute_dtype=torch.float64).double()
    res_out = ins["residual"].clone() if in_place else torch.full((tokens, 4, H), float("nan"), dtype=torch.bfloat16)
    res_in = res_out if in_place else ins["residual"]
    got = mhc.run_post_pre(
        ins["x"], res_in, ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"],
        plan=p, residual_out=res_out, norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL,
    )  # fmt: skip
    assert got[0] is res_out
    assert_ulps(res_out, new_exact, 1)
    # pre ran on the residual the kernel stored (post's rounding decides what pre sees)
    want = R.mhc_pre(
        res_out, sfn(ins["fn"]), ins["hc_scale"], ins["hc_base"], norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL
    )
    check_pre_outputs(got, want)


def test_float16_and_zero_sinkhorn_rounds(variant):
    p = interpret_plan(8, target_ctas=2, dtype=torch.float16, config=variant)
    ins = inputs(3, H, dtype=torch.float16, seed=3)
    kw = dict(rms_eps=1e-6, hc_eps=0.0, sinkhorn_iters=0)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **kw)
    want = R.mhc_pre(ins["residual"], sfn(ins["fn"], torch.float16), ins["hc_scale"], ins["hc_base"], **kw)
    close_fp32(got[1], want[1], "post")
    close_fp32(got[2], want[2], "comb")
    torch.testing.assert_close(got[3], want[3], rtol=2**-10, atol=1e-5)


def test_split_partials_land_in_the_workspace():
    """Every split writes its rows; apply reads exactly splits x T of them (the rest stays NaN)."""
    p = interpret_plan(4, target_ctas=1000)
    ws = p.state.scratch["partials"]
    ins = inputs(2, H, seed=9)
    mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCAL)
    tile = p.state.selection.stream("pre", 2)
    splits, _ = api.split_for(2, tile.block_t, H // tile.block_h, 1000)
    assert splits == H // tile.block_h
    assert torch.isfinite(ws[: splits * 2, :24]).all() and torch.isnan(ws[splits * 2 :]).all()
    total = ws[: splits * 2, :24].view(splits, 2, 24).sum(0)
    flat = ins["residual"].float().reshape(2, 4 * H)
    torch.testing.assert_close(total, flat @ sfn(ins["fn"]).T, rtol=1e-5, atol=1e-5)
    sq = flat.square().sum(-1)  # column 24: each split's share of the row's sum of squares
    torch.testing.assert_close(ws[: splits * 2, 24].view(splits, 2).sum(0), sq, rtol=1e-5, atol=0)
    assert torch.equal(ws[: splits * 2, 25:], torch.zeros(splits * 2, 7))  # the N = 32 pad columns


def test_interpreter_bf16_dot_is_patched():
    """conftest.py's fix: a bf16 tl.dot under the interpreter equals torch's fp32 matmul of the same
    bf16 values (unpatched, the interpreter multiplies the raw uint16 bits)."""
    import triton
    import triton.language as tl

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr):
        m, k, n = tl.arange(0, 16), tl.arange(0, 16), tl.arange(0, 32)
        a = tl.load(a_ptr + m[:, None] * 16 + k[None, :])
        b = tl.load(b_ptr + k[:, None] * 32 + n[None, :])
        tl.store(c_ptr + m[:, None] * 32 + n[None, :], tl.dot(a, b, tl.zeros([16, 32], dtype=tl.float32)))

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=gen).to(torch.bfloat16)
    b = torch.randn(16, 32, generator=gen).to(torch.bfloat16)
    c = torch.full((16, 32), float("nan"))
    dot_kernel[(1,)](a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-6, atol=1e-5)


def test_interpreter_bf16_rounding_is_patched():
    """conftest.py's second fix: fp32 -> bf16 under the interpreter rounds to nearest even, as the
    GPU does (including mantissas that round up into the next binade)."""
    import triton
    import triton.language as tl

    @triton.jit
    def cast_kernel(x_ptr, y_ptr, z_ptr):
        i = tl.arange(0, 1024)
        x = tl.load(x_ptr + i)
        tl.store(y_ptr + i, x.to(tl.bfloat16))
        tl.store(z_ptr + i, x.to(tl.bfloat16, fp_downcast_rounding="rtne"))

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1024, generator=gen)
    x[:4] = torch.tensor([1.99999, -3.99998, 2.0**-130, 0.0])  # carry into the exponent, a subnormal
    y = torch.empty(1024, dtype=torch.bfloat16)
    z = torch.empty(1024, dtype=torch.bfloat16)
    cast_kernel[(1,)](x, y, z)
    assert torch.equal(y, x.to(torch.bfloat16)) and torch.equal(z, x.to(torch.bfloat16))


@pytest.mark.parametrize("op", ["pre", "post_pre"])
def test_bench_per_pass_calls_match_the_entry_point(op, variant):
    """bench_norm --per-pass times pass 1 and pass 2 through _execute._stream / _apply: run back to
    back they must write exactly what the entry point writes (same launchers, splits, workspace)."""
    from benchmarks.experimental.b12x import bench_norm

    t, scal = 5, dict(SCAL)
    p = interpret_plan(8, target_ctas=3, config=variant)
    ins = inputs(t, H, seed=77)

    def fresh():
        return dict(
            residual=torch.full((t, 4, H), float("nan"), dtype=torch.bfloat16),
            y=torch.full((t, H), float("nan"), dtype=torch.bfloat16),
            post=torch.full((t, 4), float("nan")),
            comb=torch.full((t, 4, 4), float("nan")),
        )

    outs = fresh()
    splits, passes = bench_norm.per_pass_calls(_execute, p, op, ins, outs, scal)
    assert splits > 1 and set(passes) == {"pass1", "pass2"}
    passes["pass2"]()
    passes["pass1"]()  # timed alone and repeated: idempotent
    passes["pass2"]()
    ref = fresh()
    kw = dict(plan=p, y_out=ref["y"], post_out=ref["post"], comb_out=ref["comb"], **scal)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    if op == "pre":
        mhc.run_pre(ins["residual"], *mix, **kw)
    else:
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        mhc.run_post_pre(*args, *mix, residual_out=ref["residual"], **kw)
        assert torch.equal(outs["residual"], ref["residual"])
    for name in ("y", "post", "comb"):
        assert torch.isfinite(outs[name].float()).all(), name
        assert torch.equal(outs[name], ref[name]), name


# ---------------------------------------------------------------------------------------------
# The one-launch ("fused") kernel: split-K programs, the last of each token block finishes it.
# ---------------------------------------------------------------------------------------------

F = _config.FusedConfig
# At H = 256: 2 steps a split -> 8 splits of pre (block_h 16) and 4 of post_pre (block_h 32); the
# finisher sums its partials 2 or 4 rows a step. Every square-sum mode, 16- and 32-token blocks.
FUSED = {
    "gram": _config.MhcConfig(
        fused_pre=F(16, 16, 2, sq="gram", block_s=4, finish_h=64),
        fused_post_pre=F(16, 32, 2, sq="gram", block_s=4),
        fused_min_tokens=1,
    ),
    "lazy_step": _config.MhcConfig(
        fused_pre=F(32, 16, 2, sq="lazy", block_s=2, finish_h=128, prefetch=False),
        fused_post_pre=F(32, 16, 4, sq="step", block_s=2),
        post_pre_split=False,
        fused_min_tokens=2,
    ),
    # the heuristic's selection: post_pre above small_max_tokens = post's kernel + fused pre
    "default": dataclasses.replace(_config.fused_config("sm_90a"), small_max_tokens=8, fused_min_tokens=2),
}


@pytest.fixture(params=list(FUSED))
def fused(request):
    return FUSED[request.param]


def counting(p):
    """Wrap the plan's fused launchers: returns the list each launch appends its form to."""
    launched = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):
        if key[0] == "compile_fused":

            def wrapped(*a, _launch=launch, _form=key[1][0], **kw):
                launched.append(_form)
                return _launch(*a, **kw)

            table[key] = wrapped
    return launched


def poisoned_outs(tokens, hidden, residual=False):
    outs = dict(
        y_out=torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16),
        post_out=torch.full((tokens, 4), float("nan")),
        comb_out=torch.full((tokens, 4, 4), float("nan")),
    )
    if residual:
        outs["residual_out"] = torch.full((tokens, 4, hidden), float("nan"), dtype=torch.bfloat16)
    return outs


@pytest.mark.parametrize("tokens, weight", [(1, None), (3, "w_f32"), (17, "w_act"), (40, None)])
def test_fused_pre_twice(tokens, weight, fused):
    """T not a multiple of the token block; a second call on fresh inputs (the counters must be back
    at 0, the partials of the first call must not leak in); outputs NaN-poisoned each time."""
    p = interpret_plan(48, target_ctas=4, config=fused)
    launched = counting(p)
    for seed in (tokens, 1000 + tokens):
        ins = inputs(tokens, H, seed=seed)
        w = None if weight is None else ins[weight]
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(
            ins["residual"], *mix, plan=p, norm_weight=w, norm_eps=1e-5, **poisoned_outs(tokens, H), **SCAL
        )
        want = R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], norm_weight=w, norm_eps=1e-5, **SCAL)
        check_pre_outputs(got, want)
        assert torch.equal(p.state.scratch["counter"], torch.zeros_like(p.state.scratch["counter"]))
    assert launched == (["pre", "pre"] if tokens >= fused.fused_min_tokens else [])


@pytest.mark.parametrize("tokens, folded", [(5, False), (33, True)])
def test_fused_broadcast(tokens, folded, fused):
    p = interpret_plan(48, target_ctas=4, config=fused)
    launched = counting(p)
    ins = inputs(tokens, H, seed=70 + tokens)
    fn = ins["fn"].view(24, 4, H).sum(1).contiguous() if folded else ins["fn"]
    outs = poisoned_outs(tokens, H, residual=True)
    got = mhc.run_pre(ins["x"], fn, ins["hc_scale"], ins["hc_base"], plan=p, norm_weight=ins["w_f32"], **outs, **SCAL)
    folded_fn = fn.view(24, 4, H).sum(1) if fn.shape[1] == 4 * H else fn
    want = R.mhc_pre(ins["x"], sfn(folded_fn), ins["hc_scale"], ins["hc_base"], norm_weight=ins["w_f32"], **SCAL)
    assert torch.equal(outs["residual_out"], ins["x"].unsqueeze(1).expand(tokens, 4, H))
    check_pre_outputs(got, want)
    assert launched == ["bcast"]


@pytest.mark.parametrize("tokens, in_place", [(2, False), (17, True), (40, False)])
def test_fused_post_pre_twice(tokens, in_place, fused):
    p = interpret_plan(48, target_ctas=4, config=fused)
    launched = counting(p)
    for seed in (tokens, 500 + tokens):
        ins = inputs(tokens, H, seed=seed)
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        new_exact = R.mhc_post(*args, compute_dtype=torch.float64).double()
        outs = poisoned_outs(tokens, H, residual=True)
        if in_place:
            outs["residual_out"] = ins["residual"].clone()
        res_in = outs["residual_out"] if in_place else ins["residual"]
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        kw = dict(norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
        got = mhc.run_post_pre(ins["x"], res_in, ins["post"], ins["comb"], *mix, plan=p, **outs, **kw)
        assert got[0] is outs["residual_out"]
        assert_ulps(got[0], new_exact, 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **kw))
        assert torch.equal(p.state.scratch["counter"], torch.zeros_like(p.state.scratch["counter"]))
    sel = p.state.selection
    want = "pre" if sel.post_pre_split and tokens > sel.small_max_tokens else "post_pre"
    assert launched == [want, want]


def test_fused_split_k_and_float16():
    """Caps.split_k sets the one-launch kernel's splits too (3 here, uneven steps); fp16 activations."""
    cfg = FUSED["gram"]
    p = interpret_plan(8, target_ctas=1, split_k=3, config=cfg, dtype=torch.float16)
    assert cfg.fused_pre.split(H, 3) == (3, 6)
    launched = counting(p)
    ins = inputs(5, H, dtype=torch.float16, seed=3)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCAL)
    want = R.mhc_pre(ins["residual"], sfn(ins["fn"], torch.float16), ins["hc_scale"], ins["hc_base"], **SCAL)
    close_fp32(got[1], want[1], "post")
    close_fp32(got[2], want[2], "comb")
    torch.testing.assert_close(got[3], want[3], rtol=2**-10, atol=1e-5)
    assert launched == ["pre"]


@pytest.mark.parametrize("tokens", [1, 3])
def test_fused_at_hidden_7168(tokens):
    """The real hidden size with the heuristic's tiles (28 splits, 16 steps each)."""
    hidden, cfg = 7168, dataclasses.replace(_config.fused_config("sm_90a"), fused_min_tokens=1)
    p = interpret_plan(4, target_ctas=4, config=cfg, hidden=hidden)
    launched = counting(p)
    ins = inputs(tokens, hidden, seed=tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, hidden), **SCAL)
    check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **SCAL))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, hidden, residual=True), **SCAL)
    assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
    assert launched == ["pre", "post_pre"]
    assert torch.equal(p.state.scratch["counter"], torch.zeros_like(p.state.scratch["counter"]))


# ---------------------------------------------------------------------------------------------
# The wide pass 2 (_kernel_wide.py): y over H / block_y programs, scalar Sinkhorn in program 0.
# ---------------------------------------------------------------------------------------------


def counting_kind(p, kind):
    """Wrap the plan's `kind` launchers (compile_wide, ...): returns the list of their launches."""
    launched = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):
        if key[0] == kind:

            def wrapped(*a, _launch=launch, **kw):
                launched.append(kw["T"])
                return _launch(*a, **kw)

            table[key] = wrapped
    return launched


WIDE = {
    "y64_s4": _config.WideConfig(max_tokens=4, block_y=64, block_s=4),
    "y256_s256_w8": _config.WideConfig(max_tokens=2, block_y=256, block_s=256, num_warps=8),
    "y32_s1_w1": _config.WideConfig(max_tokens=4, block_y=32, block_s=1, num_warps=1),
    # the Sinkhorn's tree sums and rsqrt-squared reciprocals (exact rsqrt here; PDL is a no-op here)
    "y64_s4_fast_pdl": _config.WideConfig(max_tokens=4, block_y=64, block_s=4, fast=True, pdl=True),
    # post and comb in an extra program of their own (which writes no y)
    "y64_s4_fast_apart": _config.WideConfig(max_tokens=4, block_y=64, block_s=4, fast=True, apart=True),
    "y32_s1_w1_apart": _config.WideConfig(max_tokens=4, block_y=32, block_s=1, num_warps=1, apart=True),
}


@pytest.mark.parametrize("wide", list(WIDE))
@pytest.mark.parametrize("tokens", [1, 2, 3, 4])
def test_wide_pass2(tokens, wide):
    """pre, bcast and post_pre through the wide pass 2 (twice, fresh NaN-poisoned outputs); above
    max_tokens, or with a norm weight, the row pass 2 runs instead."""
    cfg = _config.MhcConfig(wide=WIDE[wide])
    p = interpret_plan(8, target_ctas=6, config=cfg)
    launched = counting_kind(p, "compile_wide")
    for seed in (tokens, 300 + tokens):
        ins = inputs(tokens, H, seed=seed)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **SCAL)
        check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **SCAL))
        outs = poisoned_outs(tokens, H, residual=True)
        got = mhc.run_pre(ins["x"], *mix, plan=p, **outs, **SCAL)
        check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"]), *mix[1:], **SCAL))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
    n = 6 if tokens <= WIDE[wide].max_tokens else 0
    assert launched == [tokens] * n
    ins = inputs(tokens, H, seed=9)
    check_pre(p, tokens, ins, norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
    assert launched == [tokens] * n  # a norm weight: the row pass 2


def test_small_launches_take_their_programmatic_dependent_tiles():
    """MhcConfig.small_launches: a call its entry covers runs the pdl pass-1 tile and the pdl wide or row pass 2
    (their own compiled kernels) with the entry's split, a call no entry covers the plain ones with
    ctas_per_sm's; all match the reference."""
    rules = (_config.SmallLaunch("post_pre", 1, 1, 2), _config.SmallLaunch("post_pre", 3, 8, 1))
    cfg = dataclasses.replace(_config.default_config("sm_90a"), small_launches=rules)
    p = interpret_plan(8, target_ctas=6, config=cfg)
    seen = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):
        if key[0] in ("compile_stream", "compile_wide", "compile_row"):

            def wrapped(*a, _launch=launch, _key=key, **kw):
                seen.append((_key[0], kw["T"], _key[1][-1].pdl, kw["splits"]))
                return _launch(*a, **kw)

            table[key] = wrapped
    for tokens in (1, 2, 6):
        ins = inputs(tokens, H, seed=70 + tokens)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
    # H = 256: 8 chunks of 32; split targets 2 (T = 1), 6 (T = 2: 4 splits of 2 chunks), 1 (T = 6) programs
    want = [("compile_stream", 1, True, 2), ("compile_wide", 1, True, 2), ("compile_stream", 2, False, 4)]
    want += [("compile_wide", 2, False, 4), ("compile_stream", 6, True, 1), ("compile_row", 6, True, 1)]
    assert seen == want


def test_wide_pass2_float16_at_hidden_7168():
    """The real hidden size (28 programs of 256 columns, 224 partial rows at T = 1), fp16."""
    hidden = 7168
    cfg = _config.MhcConfig(wide=_config.WideConfig())
    p = interpret_plan(2, target_ctas=1000, config=cfg, hidden=hidden, dtype=torch.float16)
    launched = counting_kind(p, "compile_wide")
    ins = inputs(1, hidden, dtype=torch.float16, seed=11)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    outs = poisoned_outs(1, hidden)
    outs["y_out"] = outs["y_out"].to(torch.float16)
    kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **outs, **kw)
    want = R.mhc_pre(ins["residual"], sfn(ins["fn"], torch.float16), *mix[1:], **kw)
    close_fp32(got[1], want[1], "post")
    close_fp32(got[2], want[2], "comb")
    torch.testing.assert_close(got[3], want[3], rtol=2**-10, atol=1e-5)
    assert launched == [1]


# ---------------------------------------------------------------------------------------------
# The tiny one-launch kernel (_kernel_tiny.py): pass 1 producers, then wide-finish consumers that
# wait on them (under the interpreter programs run in ticket order, so no wait spins).
# ---------------------------------------------------------------------------------------------

TINY = {
    "y64_s4": _config.MhcConfig(tiny=_config.WideConfig(max_tokens=4, block_y=64, block_s=4)),
    # post_pre's pass 1 in "gram" squares, pre's in "step", 2 warps; y in 128-wide programs
    "y128_gram": _config.MhcConfig(
        tiny=_config.WideConfig(max_tokens=2, block_y=128, block_s=8),
        pre_small=_config.StreamConfig(16, 32, 2, 2, sq="step"),
        post_pre_small=_config.StreamConfig(16, 16, 4, 2, sq="gram"),
    ),
}


@pytest.mark.parametrize("tiny", list(TINY))
@pytest.mark.parametrize("tokens", [1, 3, 5])
def test_tiny_one_launch(tokens, tiny):
    """pre, bcast and post_pre in one launch (twice: counters back at 0, fresh NaN-poisoned outputs);
    above max_tokens or with a norm weight the two-pass path runs instead."""
    cfg = TINY[tiny]
    p = interpret_plan(8, target_ctas=6, config=cfg)
    launched = counting_kind(p, "compile_tiny")
    zero = torch.zeros_like(p.state.scratch["counter"])
    for seed in (tokens, 400 + tokens):
        ins = inputs(tokens, H, seed=seed)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **SCAL)
        check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **SCAL))
        assert torch.equal(p.state.scratch["counter"], zero)
        outs = poisoned_outs(tokens, H, residual=True)
        got = mhc.run_pre(ins["x"], *mix, plan=p, **outs, **SCAL)
        assert torch.equal(outs["residual_out"], ins["x"].unsqueeze(1).expand(tokens, 4, H))
        check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"]), *mix[1:], **SCAL))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
        assert torch.equal(p.state.scratch["counter"], zero)
    n = 6 if tokens <= cfg.tiny.max_tokens else 0
    assert launched == [tokens] * n
    ins = inputs(tokens, H, seed=19)
    check_pre(p, tokens, ins, norm_weight=ins["w_f32"], norm_eps=1e-5, **SCAL)
    assert launched == [tokens] * n  # a norm weight: two passes


def test_tiny_at_hidden_7168_in_place():
    """The real hidden size (224 producers + 28 y programs at T = 1), post_pre in place, 20 rounds."""
    hidden = 7168
    cfg = _config.MhcConfig(tiny=_config.WideConfig())
    p = interpret_plan(2, target_ctas=528, config=cfg, hidden=hidden)
    launched = counting_kind(p, "compile_tiny")
    ins = inputs(1, hidden, seed=12)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    new_exact = R.mhc_post(*args, compute_dtype=torch.float64).double()
    kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)
    outs = poisoned_outs(1, hidden)
    res = ins["residual"].clone()
    got = mhc.run_post_pre(ins["x"], res, ins["post"], ins["comb"], *mix, plan=p, residual_out=res, **outs, **kw)
    assert_ulps(got[0], new_exact, 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **kw))
    assert launched == [1]


# ---------------------------------------------------------------------------------------------
# fn split once per call (StreamConfig / FusedConfig fn_split "pre": hi + lo; "hi": hi only).
# ---------------------------------------------------------------------------------------------


def _fn_split_config(mode):
    return _config.MhcConfig(
        pre_small=_config.StreamConfig(16, 32, 4, 2, fn_split=mode),
        pre_large=_config.StreamConfig(64, 16, 2, 2, fn_split=mode),
        fused_pre=_config.FusedConfig(16, 16, 2, sq="gram", block_s=4, finish_h=64, fn_split=mode),
        fused_min_tokens=40,
        small_max_tokens=8,
    )


@pytest.mark.parametrize("mode", ["pre", "hi"])
@pytest.mark.parametrize("tokens, weight", [(1, None), (5, "w_act"), (20, None), (45, "w_f32")])
def test_fn_split_once(mode, tokens, weight):
    """pre through the two-pass small / large tiles (T 1, 5, 20) and the fused kernel (T 45) with fn
    split by its own launch; post_pre above small_max_tokens borrows pre's pass 1 (fused at 45);
    bcast ignores fn_split (the kernel folds fp32 fn). "hi" matches the reference with fn rounded to
    bf16, "pre" with fn = hi + lo (split_fn)."""
    p = interpret_plan(48, target_ctas=4, config=_fn_split_config(mode))
    assert p.state.scratch["fn_split"].shape == (2, 24, 4 * H)
    ins = inputs(tokens, H, seed=60 + tokens)
    w = None if weight is None else ins[weight]
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    seen = sfn(ins["fn"]) if mode == "pre" else ins["fn"].to(torch.bfloat16).float()
    kw = dict(norm_weight=w, norm_eps=1e-5, **SCAL)
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **kw)
    check_pre_outputs(got, R.mhc_pre(ins["residual"], seen, *mix[1:], **kw))
    split = p.state.scratch["fn_split"].float()
    hi = ins["fn"].to(torch.bfloat16).float()
    assert torch.equal(split[0], hi) and torch.equal(split[1], (ins["fn"] - hi).to(torch.bfloat16).float())
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
    post_pre_seen = seen if tokens > p.state.selection.small_max_tokens else sfn(ins["fn"])
    check_pre_outputs(got, R.mhc_pre(got[0], post_pre_seen, *mix[1:], **kw))
    got = mhc.run_pre(ins["x"], *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"]), *mix[1:], **kw))


def test_fn_split_hi_differs_from_hi_plus_lo():
    """The "hi" tile really drops lo: its mixes differ from the hi + lo ones (so the test above,
    which compares each mode with its own reference, can tell them apart)."""
    ins = inputs(3, H, seed=5)
    outs = {}
    for mode in ("pre", "hi"):
        p = interpret_plan(8, target_ctas=4, config=_fn_split_config(mode))
        outs[mode] = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCAL)
    assert not torch.equal(outs["pre"][2], outs["hi"][2])


# ---------------------------------------------------------------------------------------------
# Square sums on the tensor cores' 16 x 16 diagonal blocks (sq="diag", _kernel._diag_sq).
# ---------------------------------------------------------------------------------------------

D = _config.StreamConfig
DIAG = _config.MhcConfig(
    pre_small=D(16, 32, 4, 2, sq="diag"),
    pre_large=D(64, 16, 2, 2, sq="diag", fn_split="pre"),
    post_pre_small=D(32, 16, 4, 2, sq="diag"),
    bcast=D(32, 32, 4, 2, sq="diag"),
    fused_pre=_config.FusedConfig(32, 16, 2, sq="diag", block_s=4, finish_h=64),
    fused_post_pre=_config.FusedConfig(16, 32, 2, sq="diag", block_s=4),
    post_pre_split=False,
    fused_min_tokens=40,
    small_max_tokens=8,
)


@pytest.mark.parametrize("tokens", [1, 5, 20, 45])
def test_diag_square_sums(tokens):
    """pre (small, large with fn split once, fused), post_pre (small tile, fused from 40 tokens) and
    bcast with the squares from the diagonal blocks; the partials' column 24 holds each split's sum
    of squares exactly as the plain sum gives it (fp32 order aside)."""
    p = interpret_plan(48, target_ctas=4, config=DIAG)
    ins = inputs(tokens, H, seed=80 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    kw = dict(norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
    check_pre(p, tokens, ins, **kw)
    if tokens < DIAG.fused_min_tokens:  # two passes: pass 1's partials are still in the workspace
        ws = p.state.scratch["partials"]
        tile = DIAG.stream("pre", tokens)
        splits, _ = api.split_for(tokens, tile.block_t, H // tile.block_h, 4)
        flat = ins["residual"].float().reshape(tokens, 4 * H)
        got_sq = ws[: splits * tokens, 24].view(splits, tokens).sum(0)
        torch.testing.assert_close(got_sq, flat.square().sum(-1), rtol=1e-5, atol=0)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **kw))
    got = mhc.run_pre(ins["x"], *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"]), *mix[1:], **kw))


# The sm_90a default (two passes at every T: pre_large with fn split once and diagonal-block squares,
# bcast's squares on the diagonal blocks, the row pass 2 streamed) at H = 256: small_max_tokens 8 and
# mid_max_tokens 12 so that 10 tokens run the mid tiles and 20 the large ones, and the row streamed
# in 128-wide chunks (the default's 2048 is one chunk at H = 256; the GPU tier runs the real tile). The default's
# fn split in pass 1's loop below 2049 tokens (fn_split_min_tokens) is scaled to 16 here: 13-15 tokens split in the
# loop, 16 and up launch the split once (test_default_two_pass runs both).
DEFAULT_TWO_PASS = dataclasses.replace(
    _config.default_config("sm_90a"),
    small_max_tokens=8,
    mid_max_tokens=12,
    fn_split_min_tokens=16,
    row_large=_config.RowConfig(block_h=128, block_s=16, num_warps=4, stages=3),
)


@pytest.mark.parametrize("tokens", [3, 10, 14, 20])
def test_default_two_pass(tokens):
    """pre (norm weight and none), bcast and post_pre (post's kernel + pre's pass 1 above 8 tokens)
    through the default's tiles, NaN-poisoned outputs and partials."""
    p = interpret_plan(24, target_ctas=4, config=DEFAULT_TWO_PASS)
    assert (DEFAULT_TWO_PASS.stream("pre", tokens).fn_split == "pre") == (tokens >= 16)
    inline = dataclasses.replace(DEFAULT_TWO_PASS.pre_large, fn_split="kernel")
    assert (DEFAULT_TWO_PASS.stream("pre", tokens) == inline) == (12 < tokens < 16)
    assert (DEFAULT_TWO_PASS.stream("pre", tokens) == DEFAULT_TWO_PASS.pre_mid) == (8 < tokens <= 12)
    ins = inputs(tokens, H, seed=90 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    for w in (None, ins["w_act"]):
        check_pre(p, tokens, ins, norm_weight=w, norm_eps=1e-5, **SCAL)
    kw = dict(norm_weight=ins["w_f32"], **SCAL)
    p.state.scratch["partials"].fill_(float("nan"))
    got = mhc.run_pre(ins["x"], *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    assert torch.equal(got[0], ins["x"].unsqueeze(1).expand(tokens, 4, H))
    folded = ins["fn"].view(24, 4, H).sum(1)  # the kernel folds fn, then splits it
    check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(folded), *mix[1:], **kw))
    p.state.scratch["partials"].fill_(float("nan"))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
    assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
