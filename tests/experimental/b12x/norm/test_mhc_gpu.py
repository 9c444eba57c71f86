"""norm.mhc on CUDA: every entry point vs the fp32 reference (DESIGN.md §6 rule), NaN-poisoned
outputs and workspace, CUDA graph replay, freeze, torch.compile, mma.sync (never wgmma), large offsets."""

import dataclasses

import pytest
import torch

import b12x
from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config, _kernel, _kernel_fused, _kernel_row, _kernel_small
from flashinfer.experimental.b12x.norm.mhc import reference as R
from tests.experimental.b12x.conftest import captured

from .mhc_cases import SCALARS, check_rule, inputs, poisoned, pre_refs

pytestmark = pytest.mark.gpu
MAX_T = 8192
_PLANS: dict = {}


def prepared(hidden, dtype=torch.bfloat16, max_tokens=MAX_T, split_k=None, invocation=None, override=None):
    """One prepared plan per configuration for the whole module (each compiles once)."""
    key = (hidden, dtype, max_tokens, split_k, invocation, override)
    if key not in _PLANS:
        caps = mhc.Caps(device="cuda", max_tokens=max_tokens, hidden_size=hidden, dtype=dtype, split_k=split_k)
        _PLANS[key] = mhc.plan(caps, invocation=invocation, override=override)
        b12x.PreparationSession("cuda").prepare([_PLANS[key]])
    p = _PLANS[key]
    p.state.scratch["partials"].fill_(float("nan"))  # a read of an unwritten partial shows up
    return p


def gpu_inputs(tokens, hidden, seed, dtype=torch.bfloat16):
    return inputs(tokens, hidden, dtype=dtype, device="cuda", seed=seed)


def pre_buffers(tokens, hidden, dtype=torch.bfloat16, residual=False):
    outs = dict(
        y_out=torch.full((tokens, hidden), float("nan"), dtype=dtype, device="cuda"),
        post_out=torch.full((tokens, 4), float("nan"), device="cuda"),
        comb_out=torch.full((tokens, 4, 4), float("nan"), device="cuda"),
    )
    if residual:
        outs["residual_out"] = torch.full((tokens, 4, hidden), float("nan"), dtype=dtype, device="cuda")
    return outs


def check_outputs(got, ref32, ref_lo, names=("residual", "post", "comb", "y")):
    for name, g, a, b in zip(names, got, ref32, ref_lo):
        if name == "residual" and g.data_ptr() == a.data_ptr():
            continue
        check_rule(name, g, a, b)


TOKENS = [1, 3, 64, 1000, 8192]
HIDDEN = [4096, 7168]


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("weight", [None, "w_act", "w_f32"])
def test_run_pre(hidden, tokens, weight):
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=tokens)
    w = None if weight is None else ins[weight]
    kw = dict(SCALARS, norm_weight=w, norm_eps=1e-6)
    outs = pre_buffers(tokens, hidden)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **outs, **kw)
    assert got[3] is outs["y_out"] and got[0] is ins["residual"]
    check_outputs(got, *pre_refs(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **kw))


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("folded", [False, True])
def test_run_pre_broadcast(hidden, tokens, folded):
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=100 + tokens)
    fn = ins["fn"].view(24, 4, hidden).sum(1).contiguous() if folded else ins["fn"]
    kw = dict(SCALARS, norm_weight=ins["w_f32"], norm_eps=1e-6)
    outs = pre_buffers(tokens, hidden, residual=True)
    got = mhc.run_pre(ins["x"], fn, ins["hc_scale"], ins["hc_base"], plan=p, **outs, **kw)
    ref32, ref_lo = pre_refs(ins["x"], fn, ins["hc_scale"], ins["hc_base"], **kw)
    assert torch.equal(got[0], ref32[0])
    check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_run_post(hidden, tokens):
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=200 + tokens)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    out = poisoned(ins["residual"])
    assert mhc.run_post(*args, plan=p, out=out) is out
    check_rule("residual", out, R.mhc_post(*args), R.mhc_post(*args, compute_dtype=torch.bfloat16))


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("weight", [None, "w_act"])
def test_run_post_pre(hidden, tokens, weight):
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=300 + tokens)
    w = None if weight is None else ins[weight]
    kw = dict(SCALARS, norm_weight=w, norm_eps=1e-6)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
    outs = pre_buffers(tokens, hidden, residual=True)
    got = mhc.run_post_pre(*args, plan=p, **outs, **kw)
    check_outputs(got, R.mhc_post_pre(*args, **kw), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw))
    # pre saw exactly the residual it stored: recompute pre from it with fn as the tensor-core mixes
    # see it (hi + lo split, reference.split_fn); then only the order of the 4H-term fp32 sums
    # separates the two. Their deterministic bound per mix is 2 * 4H * 2^-24 * sum|flat * fn| (scaled
    # by rsqrt(mean square) and hc_scale[1]); post = 2 sigmoid(z) moves by at most 0.5 |dz|.
    fn = R.split_fn(ins["fn"])
    again = R.mhc_pre(got[0], fn, ins["hc_scale"], ins["hc_base"], **kw)
    flat = got[0].float().reshape(tokens, -1)
    rms = torch.rsqrt(flat.square().mean(-1, keepdim=True) + kw["rms_eps"])
    dz = 2 * flat.shape[1] * 2.0**-24 * (flat.abs() @ fn[4:8].abs().T) * rms * ins["hc_scale"][1].abs()
    excess = ((got[1].float() - again[1].float()).abs() - (0.5 * dz + 1e-6)).max().item()
    assert excess <= 0, f"post differs from pre of the stored residual by {excess:.3e} beyond the fp32 order bound"


@pytest.mark.parametrize("hidden", [2048, 5120])
@pytest.mark.parametrize("tokens", [1, 64, 1000])
def test_the_other_hidden_sizes(hidden, tokens):
    """The issue's other hidden sizes (Build: at least 2048, 4096, 5120, 7168; the tests above run 4096 and 7168) on
    the default plan: every entry point against the reference (session 65's audit found 2048 only compiled and 5120
    only under the walk override)."""
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=500 + tokens + hidden)
    kw = dict(SCALARS, norm_weight=ins["w_act"], norm_eps=1e-6)
    got = mhc.run_pre(
        ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **pre_buffers(tokens, hidden), **kw
    )
    check_outputs(got, *pre_refs(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **kw))
    post_args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    out = poisoned(ins["residual"])
    assert mhc.run_post(*post_args, plan=p, out=out) is out
    check_rule("residual", out, R.mhc_post(*post_args), R.mhc_post(*post_args, compute_dtype=torch.bfloat16))
    args = (*post_args, ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    check_outputs(got, R.mhc_post_pre(*args, **kw), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw))


_BASE = _config.MhcConfig()
_MIX_TILES = dict(
    pre_small=_BASE.pre_small,
    pre_large=_BASE.pre_large,
    bcast=_BASE.bcast,
    fused_pre=_config.FUSED_PRE,
)  # (post_pre's tiles spill with sq="diag": not offered)


# The pass-2 kinds the selection can run, each as an override (the default one runs above too).
PASS2 = {
    "apply": _config.MhcConfig(pass2="apply"),
    "row": _config.MhcConfig(pass2="row"),
    "row_chunked": _config.MhcConfig(
        pass2="row", row_small=_config.RowConfig(2048, 64, 4), row_large=_config.RowConfig(2048, 16, 4)
    ),
    "small": _config.MhcConfig(pass2="row", small=_config.SmallConfig()),
    "post_pre_fused": _config.MhcConfig(post_pre_split=False),
    "small16": _config.MhcConfig(pass2="row", small=_config.SmallConfig(max_tokens=16)),
    "row_w8_small_h128": _config.MhcConfig(
        pass2="row",
        row_small=_config.RowConfig(8192, 256, 8),
        row_large=_config.RowConfig(8192, 16, 8),
        pre_small=_config.StreamConfig(16, 128, 4, 2),
        post_pre_small=_config.StreamConfig(16, 64, 4, 2),
    ),
    # the one-launch kernel everywhere (T = 1 too; post_pre in one launch at every T), the
    # elementwise square sums, and a 16-token post_pre block
    "fused_all": _config.MhcConfig(
        fused_pre=_config.FUSED_PRE, fused_post_pre=_config.FUSED_POST_PRE, fused_min_tokens=1, post_pre_split=False
    ),
    "fused_lazy": _config.MhcConfig(
        fused_pre=_config.FusedConfig(32, 16, 16, 4, 3, sq="lazy"),
        fused_post_pre=_config.FusedConfig(16, 32, 8, 8, 2, sq="step"),
        post_pre_split=False,
    ),
    "fused_step_split": _config.MhcConfig(fused_pre=_config.FusedConfig(32, 16, 8, 4, 3, sq="step", finish_h=32)),
    # T <= 4 without a norm weight: the wide pass 2 (y over H / 256 programs), or the whole call in
    # one launch (tiny: pass 1 producers, then y programs waiting on them); two passes otherwise
    # pre's fn split once per call by its own launch (hi + lo; or hi only) in every pre pass 1 (the
    # two-pass small / large tiles and the one-launch pre from 1000 tokens)
    "fn_pre": dataclasses.replace(
        _config.MhcConfig(),
        pre_small=dataclasses.replace(_config.MhcConfig().pre_small, fn_split="pre"),
        pre_large=dataclasses.replace(_config.MhcConfig().pre_large, fn_split="pre"),
        fused_pre=dataclasses.replace(_config.FUSED_PRE, fn_split="pre"),
        fused_min_tokens=1000,
    ),
    "fn_hi": dataclasses.replace(
        _config.MhcConfig(),
        pre_small=dataclasses.replace(_config.MhcConfig().pre_small, fn_split="hi"),
        pre_large=dataclasses.replace(_config.MhcConfig().pre_large, fn_split="hi"),
        fused_pre=dataclasses.replace(_config.FUSED_PRE, fn_split="hi"),
        fused_min_tokens=1000,
    ),
    # square sums from the 16 x 16 diagonal blocks of a @ a^T on every pass-1 tile (with and without
    # fn split once), the one-launch pre from 1000 tokens
    "diag": _config.MhcConfig(
        fused_min_tokens=1000, **{k: dataclasses.replace(v, sq="diag") for k, v in _MIX_TILES.items()}
    ),
    "fn_pre_diag": _config.MhcConfig(
        fused_min_tokens=1000, **{k: dataclasses.replace(v, sq="diag", fn_split="pre") for k, v in _MIX_TILES.items()}
    ),
    # the row pass 2 streaming its row in 2048-wide chunks, 3 stages deep (cp.async), 4 warps
    "row_stream": _config.MhcConfig(
        row_small=_config.RowConfig(2048, 64, 4, stages=3), row_large=_config.RowConfig(2048, 16, 4, stages=3)
    ),
    "row_scalar": _config.MhcConfig(
        row_small=_config.RowConfig(1024, 256, 4, stages=3, scalar=True),
        row_large=_config.RowConfig(1024, 16, 4, stages=3, scalar=True),
    ),
    "wide": _config.MhcConfig(wide=_config.WideConfig()),
    "tiny": _config.MhcConfig(tiny=_config.WideConfig()),
    # the default with every two-pass kernel launched with programmatic dependent launch (pass 2
    # waiting in griddepcontrol.wait on pass 1) and the wide pass 2's approximate Sinkhorn reciprocals
    "pdl_fast": _config.with_pdl(_config.default_config("sm_90a"), fast=True),
    # the default with the kernels of calls above small_max_tokens as programmatic dependents (LARGE_PDL_90's form)
    "pdl_large": _config.with_large_t_pdl(_config.default_config("sm_90a")),
    # every large tile and pre_mid as dependents that release the next kernel as their programs exit (pdl_at_exit;
    # bench_norm's large_exit and pdl_mid_exit)
    "pdl_exit": _config.with_tile_fields(
        _config.default_config("sm_90a"), ("pre_mid", *_config.LARGE_T_PDL_TILES), pdl=True, pdl_at_exit=True
    ),
    # the wide pass 2 with post and comb in an extra program of their own (which writes no y)
    "wide_apart": _config.MhcConfig(wide=_config.WideConfig(block_y=128, fast=True, apart=True)),
    # the default's two passes in chunks of at most 150 tokens (1000 tokens: 7 chunks of the large tiles; 200
    # in the graph test: 2 of the mid tiles), and post_pre's own pass 1 (no split) chunked alike
    "chunks": dataclasses.replace(_config.default_config("sm_90a"), chunk_tokens=150),
    "chunks_post_pre": _config.MhcConfig(post_pre_split=False, chunk_tokens=150),
    # the default with pass 1's split count rounded up, as before session 57 (T = 8192: 5 splits of 90 chunks where the
    # default's whole_wave runs 4 of 112)
    "round_up": dataclasses.replace(_config.default_config("sm_90a"), whole_wave=False),
}


@pytest.mark.parametrize("variant", list(PASS2))
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_pass2_variants(variant, hidden, tokens):
    """pre (norm weight and none), broadcast and post_pre through every pass-2 variant."""
    p = prepared(hidden, override=PASS2[variant])
    ins = gpu_inputs(tokens, hidden, seed=400 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    for w in (None, ins["w_act"], ins["w_f32"]):
        kw = dict(SCALARS, norm_weight=w, norm_eps=1e-6)
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **kw)
        check_outputs(got, *pre_refs(ins["residual"], *mix, **kw))
    kw = dict(SCALARS, norm_weight=ins["w_f32"], norm_eps=1e-6)
    got = mhc.run_pre(ins["x"], *mix, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    ref32, ref_lo = pre_refs(ins["x"], *mix, **kw)
    assert torch.equal(got[0], ref32[0])
    check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
    kw = dict(SCALARS, norm_weight=ins["w_act"], norm_eps=1e-6)
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    check_outputs(got, R.mhc_post_pre(*args, **kw), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw))


def test_functional_form_and_in_place():
    hidden, tokens = 4096, 37
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=5)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
    functional = mhc.run_post_pre(*args, plan=p, **SCALARS)
    res = ins["residual"].clone()
    in_place = mhc.run_post_pre(ins["x"], res, *args[2:], plan=p, residual_out=res, **SCALARS)
    assert in_place[0] is res
    for a, b in zip(functional, in_place):
        assert torch.equal(a, b)
    default = mhc.run_post_pre(*args, **SCALARS)  # plan=None: the default plan of the device
    for a, b in zip(functional, default):
        assert torch.equal(a, b)


def test_split_k_cap_and_float16():
    hidden = 4096
    p = prepared(hidden, split_k=3)
    for tokens in (1, 100):
        ins = gpu_inputs(tokens, hidden, seed=tokens)
        got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCALARS)
        check_outputs(got, *pre_refs(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **SCALARS))
    p16 = prepared(hidden, dtype=torch.float16, max_tokens=256, invocation=("pre",))
    ins = gpu_inputs(70, hidden, seed=7, dtype=torch.float16)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p16, **SCALARS)
    check_outputs(got, *pre_refs(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **SCALARS))
    with pytest.raises(ValueError, match="prepared for forms \\('pre',\\); post_pre is not one of them"):
        a = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
        mhc.run_post_pre(*a, plan=p16, **SCALARS)


@pytest.mark.parametrize(
    "variant",
    [
        None,
        "small",
        "fused_all",
        "row",
        "wide",
        "tiny",
        "fn_pre",
        "pdl_fast",
        "pdl_large",
        "pdl_exit",
        "wide_apart",
        "chunks",
    ],
)  # None: the heuristic
def test_graph_replay_equals_eager(variant):
    hidden, cap = 7168, 256
    p = prepared(hidden, override=None if variant is None else PASS2[variant])
    bufs = dict(
        residual_out=torch.empty(cap, 4, hidden, dtype=torch.bfloat16, device="cuda"),
        y_out=torch.empty(cap, hidden, dtype=torch.bfloat16, device="cuda"),
        post_out=torch.empty(cap, 4, device="cuda"),
        comb_out=torch.empty(cap, 4, 4, device="cuda"),
    )
    for tokens in (1, 200):
        static = gpu_inputs(tokens, hidden, seed=1)
        binding = mhc.bind(p, num_tokens=tokens, **bufs)
        post_out = torch.empty(tokens, 4, hidden, dtype=torch.bfloat16, device="cuda")
        a = (static["x"], static["residual"], static["post"], static["comb"])
        m = (static["fn"], static["hc_scale"], static["hc_base"])

        def step(binding=binding, a=a, m=m, post_out=post_out, w=static["w_act"]):
            mhc.run_post_pre(*a, *m, binding=binding, norm_weight=w, norm_eps=1e-6, **SCALARS)
            mhc.run_post(*a, plan=p, out=post_out)
            mhc.run_pre(
                binding.residual_out,
                *m,
                plan=p,
                y_out=binding.y_out,
                post_out=binding.post_out,
                comb_out=binding.comb_out,
                **SCALARS,
            )

        graph = captured(step)
        fresh = gpu_inputs(tokens, hidden, seed=2)
        for k in ("x", "residual", "post", "comb", "fn", "hc_scale", "hc_base", "w_act"):
            static[k].copy_(fresh[k])
        for buf in (*bufs.values(), post_out):
            buf.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = [binding.residual_out.clone(), binding.y_out.clone(), binding.post_out.clone(), post_out.clone()]
        step()
        eager = [binding.residual_out, binding.y_out, binding.post_out, post_out]
        for r, e in zip(replayed, eager):
            assert torch.isfinite(r.float()).all() and torch.equal(r, e)


def _jit_cache_size():
    kernels = (_kernel._mhc_stream_kernel, _kernel._mhc_apply_kernel, _kernel_row._mhc_row_kernel)
    kernels += (_kernel_small._mhc_small_kernel, _kernel_fused._mhc_fused_kernel)
    return sum(len(c[0]) for k in kernels for c in k.device_caches.values())


def test_freeze_new_tokens_run_new_hidden_raises():
    p = prepared(4096)
    ins = gpu_inputs(5, 4096, seed=1)
    mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **SCALARS)
    compiles = _kernel.compile_stream.compile_count + _kernel.compile_apply.compile_count
    compiles += _kernel_row.compile_row.compile_count + _kernel_small.compile_small.compile_count
    compiles += _kernel_fused.compile_fused.compile_count
    jit = _jit_cache_size()
    b12x.freeze_kernel_resolution("test")
    for tokens in (2, 77, 4999):
        ins = gpu_inputs(tokens, 4096, seed=tokens)
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])
        mhc.run_post_pre(*args, plan=p, **SCALARS)
        mhc.run_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, norm_weight=ins["w_f32"], **SCALARS)
    torch.cuda.synchronize()
    now = _kernel.compile_stream.compile_count + _kernel.compile_apply.compile_count
    now += _kernel_row.compile_row.compile_count + _kernel_small.compile_small.compile_count
    assert now + _kernel_fused.compile_fused.compile_count == compiles
    assert _jit_cache_size() == jit  # Triton compiled nothing behind our back either
    with pytest.raises(b12x.KernelResolutionFrozenError):
        b12x.PreparationSession("cuda").prepare([mhc.plan(mhc.Caps(device="cuda", max_tokens=8, hidden_size=5120))])
    big = gpu_inputs(2, 5120, seed=3)
    with pytest.raises(b12x.KernelResolutionFrozenError):
        mhc.run_pre(big["residual"], big["fn"], big["hc_scale"], big["hc_base"], **SCALARS)


def test_bind_does_not_allocate():
    p = prepared(4096)
    y = torch.empty(MAX_T, 4096, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    binding = mhc.bind(p, num_tokens=100, y_out=y)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert binding.y_out.data_ptr() == y.data_ptr()


def _allocations() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["allocation.all.allocated"]


def test_runs_with_caller_buffers_do_not_allocate():
    """The caller-buffer form (the graph-capture form) of every entry point allocates nothing on the device, after a
    first call has loaded its kernels: capture would not catch it (a graph takes allocations from its own pool)."""
    hidden, tokens = 4096, 1000
    p = prepared(hidden)
    ins = gpu_inputs(tokens, hidden, seed=41)
    bufs = pre_buffers(tokens, hidden, residual=True)
    binding = mhc.bind(p, num_tokens=tokens, **bufs)
    post_out = torch.empty(tokens, 4, hidden, dtype=torch.bfloat16, device="cuda")
    a = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    m = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    y_bcast = pre_buffers(tokens, hidden, residual=True)
    calls = [
        lambda: mhc.run_post_pre(*a, *m, binding=binding, norm_weight=ins["w_act"], norm_eps=1e-6, **SCALARS),
        lambda: mhc.run_post(*a, plan=p, out=post_out),
        lambda: mhc.run_pre(
            binding.residual_out,
            *m,
            plan=p,
            y_out=binding.y_out,
            post_out=binding.post_out,
            comb_out=binding.comb_out,
            **SCALARS,
        ),  # fmt: skip
        lambda: mhc.run_pre(ins["x"], *m, plan=p, **y_bcast, **SCALARS),  # the broadcast form
    ]
    for call in calls:  # first calls load the kernels
        call()
    before = _allocations()
    for i, call in enumerate(calls):
        call()
        assert _allocations() == before, f"call {i} allocated on the device"


def test_broadcast_graph_replay_at_1000_tokens():
    """The broadcast first layer (run_pre on x [T, H]) captured once and replayed on new inputs equals eager, at a
    live T past the small-T kernels (test_graph_replay_equals_eager covers the [T, 4, H] forms at T = 1 / 200)."""
    hidden, tokens = 7168, 1000
    p = prepared(hidden)
    static = gpu_inputs(tokens, hidden, seed=5)
    bufs = pre_buffers(tokens, hidden, residual=True)
    m = (static["fn"], static["hc_scale"], static["hc_base"])

    def step():
        mhc.run_pre(static["x"], *m, plan=p, norm_weight=static["w_f32"], norm_eps=1e-6, **bufs, **SCALARS)

    graph = captured(step)
    fresh = gpu_inputs(tokens, hidden, seed=6)
    for k in ("x", "fn", "hc_scale", "hc_base", "w_f32"):
        static[k].copy_(fresh[k])
    for buf in bufs.values():
        buf.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    replayed = {k: v.clone() for k, v in bufs.items()}
    step()
    for k, v in bufs.items():
        assert torch.isfinite(replayed[k].float()).all() and torch.equal(replayed[k], v), k
    ref32, ref_lo = pre_refs(fresh["x"], fresh["fn"], fresh["hc_scale"], fresh["hc_base"], norm_weight=fresh["w_f32"],
                             norm_eps=1e-6, **SCALARS)  # fmt: skip
    got = (bufs["residual_out"], bufs["post_out"], bufs["comb_out"], bufs["y_out"])
    assert torch.equal(got[0], ref32[0])
    check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))


def test_torch_compile_fullgraph():
    hidden = 4096
    p = prepared(hidden)
    ins = gpu_inputs(33, hidden, seed=9)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"], ins["hc_base"])

    def layer(x, residual, post, comb, fn, hc_scale, hc_base):
        residual, post, comb, y = mhc.run_post_pre(x, residual, post, comb, fn, hc_scale, hc_base, plan=p, **SCALARS)
        return residual, post, comb, y.float() * 2

    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True)(*args)
    want = layer(*args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_compiled_kernels_use_mma_sync_never_wgmma():
    prepared(4096)
    stream = [k for c in _kernel._mhc_stream_kernel.device_caches.values() for k in c[0].values()]
    stream += [k for c in _kernel_fused._mhc_fused_kernel.device_caches.values() for k in c[0].values()]
    prepared(4096, override=PASS2["row"])
    apply = [k for c in _kernel._mhc_apply_kernel.device_caches.values() for k in c[0].values()]
    apply += [k for c in _kernel_row._mhc_row_kernel.device_caches.values() for k in c[0].values()]
    assert stream and apply
    for k in stream + apply:
        assert "wgmma" not in k.asm["ptx"]
    assert any("mma.sync.aligned.m16n8k16" in k.asm["ptx"] for k in stream)  # pass 1 mixes on tensor cores
    for k in apply:
        assert "mma." not in k.asm["ptx"]


def test_offsets_past_2_to_the_31():
    hidden, tokens = 7168, 75_000  # 75000 * 4 * 7168 = 2.15e9 elements > 2^31
    p = prepared(hidden, max_tokens=tokens, invocation=("post_pre",))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(tokens, hidden, device="cuda", generator=gen).to(torch.bfloat16)
    residual = torch.randn(tokens, 4, hidden, device="cuda", generator=gen).to(torch.bfloat16)
    post = 2 * torch.rand(tokens, 4, device="cuda", generator=gen)
    comb = torch.softmax(torch.randn(tokens, 4, 4, device="cuda", generator=gen), -1)
    fn = torch.randn(24, 4 * hidden, device="cuda", generator=gen) / 170
    hc_scale = torch.rand(3, device="cuda", generator=gen) + 0.5
    hc_base = torch.randn(24, device="cuda", generator=gen) * 0.5
    got = mhc.run_post_pre(x, residual, post, comb, fn, hc_scale, hc_base, plan=p, **SCALARS)
    tail = slice(tokens - 16, tokens)
    args = (x[tail], residual[tail], post[tail], comb[tail], fn, hc_scale, hc_base)
    ref32, ref_lo = R.mhc_post_pre(*args, **SCALARS), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS)
    check_outputs([g[tail] for g in got], ref32, ref_lo)


@pytest.mark.parametrize("tokens", [3, 1000])
def test_fused_counters_reset_and_repeat(tokens):
    """The heuristic's one-launch tiles (from 2 tokens here): the ticket counters are back at 0 after
    every call, so back-to-back calls on fresh inputs (and the prime before them) stay right."""
    hidden = 7168
    p = prepared(hidden, override=dataclasses.replace(_config.fused_config("sm_90a"), fused_min_tokens=2))
    assert p.state.selection.fused("pre", tokens) is not None
    counter = p.state.scratch["counter"]
    assert counter.numel() == -(-MAX_T // _config.FUSED_PRE.block_t)
    for seed in (1, 2, 3):
        ins = gpu_inputs(tokens, hidden, seed=600 + seed)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **SCALARS)
        check_outputs(got, *pre_refs(ins["residual"], *mix, **SCALARS))
        assert torch.count_nonzero(counter).item() == 0
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
        got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **SCALARS)
        check_outputs(
            got, R.mhc_post_pre(*args, **SCALARS), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS)
        )
        assert torch.count_nonzero(counter).item() == 0


def counting_kind(p, kind):
    """Wrap the plan's `kind` launchers (compile_wide, compile_tiny): returns the T of each launch."""
    launched = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):
        if key[0] == kind:

            def wrapped(*a, _launch=launch, **kw):
                launched.append(kw["T"])
                return _launch(*a, **kw)

            table[key] = wrapped
    return launched


_PDL_FAST = PASS2["pdl_fast"]
SMALL_T = {
    "wide": ("compile_wide", _config.MhcConfig(wide=_config.WideConfig())),
    "tiny": ("compile_tiny", _config.MhcConfig(tiny=_config.WideConfig())),
    # bench_norm's T = 1 candidates: PDL + fast Sinkhorn, with pass 1's small tiles 64 / 16 wide
    "pdl_fast": ("compile_wide", _PDL_FAST),
    "pdl_fast_h64": (
        "compile_wide",
        dataclasses.replace(
            _PDL_FAST,
            pre_small=_config.StreamConfig(16, 64, 4, 2, pdl=True),
        ),
    ),
    "pdl_fast_h16": (
        "compile_wide",
        dataclasses.replace(
            _PDL_FAST,
            pre_small=_config.StreamConfig(16, 16, 4, 2, pdl=True),
            post_pre_small=_config.StreamConfig(16, 16, 4, 2, pdl=True),
        ),
    ),
}


@pytest.mark.parametrize("variant", list(SMALL_T))
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", [1, 2, 3, 4, 5])
def test_small_t_variants_without_norm_weight(variant, hidden, tokens):
    """The wide pass 2 / tiny one launch run at T <= 4 without a norm weight: pre, broadcast (fn
    folded and not) and post_pre (in place and not), three rounds of fresh inputs and NaN-poisoned
    outputs and partials; the tiny kernel's 3 counters are back at 0 after each call."""
    kind, cfg = SMALL_T[variant]
    p = prepared(hidden, max_tokens=64, override=cfg)
    launched = counting_kind(p, kind)
    counter = p.state.scratch["counter"]
    for seed in (1, 2, 3):
        p.state.scratch["partials"].fill_(float("nan"))
        ins = gpu_inputs(tokens, hidden, seed=700 + 10 * seed + tokens)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **SCALARS)
        check_outputs(got, *pre_refs(ins["residual"], *mix, **SCALARS))
        assert torch.count_nonzero(counter).item() == 0
        fn = ins["fn"].view(24, 4, hidden).sum(1).contiguous() if seed == 2 else ins["fn"]
        got = mhc.run_pre(ins["x"], fn, *mix[1:], plan=p, **pre_buffers(tokens, hidden, residual=True), **SCALARS)
        ref32, ref_lo = pre_refs(ins["x"], fn, *mix[1:], **SCALARS)
        assert torch.equal(got[0], ref32[0])
        check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
        ref32 = R.mhc_post_pre(*args, **SCALARS)
        ref_lo = R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS)
        outs = pre_buffers(tokens, hidden, residual=True)
        if seed == 3:  # in place
            outs["residual_out"] = ins["residual"].clone()
            args = (ins["x"], outs["residual_out"], *args[2:])
        got = mhc.run_post_pre(*args, plan=p, **outs, **SCALARS)
        check_outputs(got, ref32, ref_lo)
        assert torch.count_nonzero(counter).item() == 0
    assert launched == ([tokens] * 9 if tokens <= 4 else [])
    ins = gpu_inputs(tokens, hidden, seed=799)
    kw = dict(SCALARS, norm_weight=ins["w_f32"], norm_eps=1e-6)
    got = mhc.run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], plan=p, **kw)
    check_outputs(got, *pre_refs(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], **kw))
    assert len(launched) == (9 if tokens <= 4 else 0)  # a norm weight: the two-pass path


def test_tiny_graph_replays_back_to_back():
    """The tiny one launch captured once, replayed 50 times back to back on changing inputs (the
    counters must return to 0 between replays or a replay would wait forever or read stale partials)."""
    hidden = 7168
    p = prepared(hidden, max_tokens=64, override=PASS2["tiny"])
    static = gpu_inputs(1, hidden, seed=31)
    outs = pre_buffers(1, hidden, residual=True)
    a = (static["x"], static["residual"], static["post"], static["comb"], static["fn"], static["hc_scale"])

    def step():
        mhc.run_post_pre(*a, static["hc_base"], plan=p, **outs, **SCALARS)

    graph = captured(step)
    for i in range(50):
        fresh = gpu_inputs(1, hidden, seed=900 + i)
        for k in ("x", "residual", "post", "comb"):
            static[k].copy_(fresh[k])
        graph.replay()
    torch.cuda.synchronize()
    args = (static["x"], static["residual"], static["post"], static["comb"], static["fn"], static["hc_scale"])
    args += (static["hc_base"],)
    ref32 = R.mhc_post_pre(*args, **SCALARS)
    ref_lo = R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS)
    got = (outs["residual_out"], outs["post_out"], outs["comb_out"], outs["y_out"])
    check_outputs(got, ref32, ref_lo)
    assert torch.count_nonzero(p.state.scratch["counter"]).item() == 0


def counting_launches(p):
    """Wrap every launcher of the plan: returns the list of (kind, key) of each launch, in order."""
    launched = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):

        def wrapped(*a, _launch=launch, _key=key, **kw):
            launched.append(_key)
            return _launch(*a, **kw)

        table[key] = wrapped
    return launched


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", [65, 128, 129, 1000, 8192])
@pytest.mark.parametrize("weight", [None, "w_act"])
def test_default_above_small_max_tokens(hidden, tokens, weight):
    """The sm_90a default above small_max_tokens (two passes; above mid_max_tokens = 128 fn split
    once, pre's large tile with diagonal-block squares, the row pass 2 streamed in 2048-wide chunks, or
    without a norm weight up to WALK_MAX_90 tokens (at every T up to WALK_ALL_MAX_HIDDEN_90) the walk pass 2;
    65..128 session 6's large tiles, no split launch) on pre, broadcast (diag squares) and post_pre (post's kernel +
    pre's pass 1 + pass 2), NaN-poisoned outputs and partials, and the launches."""
    p = prepared(hidden)
    sel = p.state.selection
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm_90a default")
    assert sel == _config.default_config("sm_90a") and sel.fused_pre is None and tokens > sel.small_max_tokens
    launched = counting_launches(p)
    ins = gpu_inputs(tokens, hidden, seed=1100 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    kw = dict(SCALARS, norm_weight=None if weight is None else ins[weight], norm_eps=1e-6)
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **kw)
    check_outputs(got, *pre_refs(ins["residual"], *mix, **kw))
    mid = tokens <= sel.mid_max_tokens
    split = [] if sel.stream("pre", tokens).fn_split == "kernel" else ["compile_split_fn"]  # fn_split_min_tokens
    walk = sel.walk_for(tokens, weight is not None, hidden)
    pass2 = "compile_row" if walk is None else "compile_walk"
    pre_launches = [k for k, _ in launched]
    assert pre_launches == split + ["compile_stream", pass2], pre_launches
    launched[:] = launched[len(split) :]  # the indices below as without the split launch
    want = (sel.pre_mid, sel.row_mid) if mid else (sel.stream("pre", tokens), walk or sel.row_large)
    assert (launched[0][1][3], launched[1][1][-1]) == want
    p.state.scratch["partials"].fill_(float("nan"))
    got = mhc.run_pre(ins["x"], *mix, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    ref32, ref_lo = pre_refs(ins["x"], *mix, **kw)
    assert torch.equal(got[0], ref32[0])
    check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
    assert [k for k, _ in launched[2:]] == ["compile_stream", pass2]
    assert launched[2][1][0] == "bcast" and launched[2][1][3].sq == "diag"
    p.state.scratch["partials"].fill_(float("nan"))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    check_outputs(got, R.mhc_post_pre(*args, **kw), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw))
    kinds = [k for k, _ in launched[4:]]
    assert kinds == ["compile_stream", *split, "compile_stream", pass2], kinds
    assert launched[4][1][0] == "post" and launched[5 + len(split)][1][0] == "pre"


@pytest.mark.parametrize("hidden", [4096, 7168])
@pytest.mark.parametrize("tokens", [129, 1000, 2048])
def test_fn_split_min_tokens(tokens, hidden):
    """MhcConfig.fn_split_min_tokens = 2048: pre and post_pre (its borrowed pre pass 1) split fn in pass 1's loop
    below 2048 tokens (no split launch), launch the split from 2048; NaN-poisoned outputs against the reference."""
    p = prepared(hidden, override=dataclasses.replace(_config.default_config("sm_90a"), fn_split_min_tokens=2048))
    launched = counting_launches(p)
    ins = gpu_inputs(tokens, hidden, seed=1300 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **SCALARS)
    check_outputs(got, *pre_refs(ins["residual"], *mix, **SCALARS))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **SCALARS)
    check_outputs(got, R.mhc_post_pre(*args, **SCALARS), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS))
    splits = [k for k, _ in launched].count("compile_split_fn")
    assert splits == (0 if tokens < 2048 else 2), [k for k, _ in launched]
    fn_splits = {a[3].fn_split for k, a in launched if k == "compile_stream" and a[0] == "pre"}
    assert fn_splits == {"kernel" if tokens < 2048 else "pre"}


# The walk pass 2 (bench_norm's row_walk): the default with it at every T above the mid tiles.
WALK = dataclasses.replace(
    _config.default_config("sm_90a"),
    row_walk=_config.RowConfig(block_h=1024, block_s=16, num_warps=4, stages=6, walk=5),
    walk_max_tokens=1 << 20,
)


@pytest.mark.parametrize("hidden", [4096, 5120, 7168])
@pytest.mark.parametrize("tokens", [129, 1000, 3001, 8192])
def test_walk_pass2(tokens, hidden):
    """pre, bcast and post_pre without a norm weight through the walk (one launch each, counted), NaN-poisoned
    outputs, against the reference; pre with a norm weight takes the row pass 2."""
    p = prepared(hidden, override=WALK)
    walked = counting_kind(p, "compile_walk")
    ins = gpu_inputs(tokens, hidden, seed=700 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **SCALARS)
    check_outputs(got, *pre_refs(ins["residual"], *mix, **SCALARS))
    got = mhc.run_pre(ins["x"], *mix, plan=p, **pre_buffers(tokens, hidden, residual=True), **SCALARS)
    ref32, ref_lo = pre_refs(ins["x"], *mix, **SCALARS)
    check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **SCALARS)
    check_outputs(got, R.mhc_post_pre(*args, **SCALARS), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **SCALARS))
    assert walked == [tokens] * 3
    kw = dict(SCALARS, norm_weight=ins["w_act"], norm_eps=1e-6)
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **kw)
    check_outputs(got, *pre_refs(ins["residual"], *mix, **kw))
    assert walked == [tokens] * 3
