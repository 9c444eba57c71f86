"""norm.mhc's persistent one-launch pre (_kernel_persist.py) on CUDA: the waiting kernel (and its
no-wait emulation) vs the fp32 reference with NaN-poisoned outputs and partials, counters back at 0
after every call, graph replays (twice: the counters are reset by the kernel itself)."""

import dataclasses

import pytest
import torch

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config
from flashinfer.experimental.b12x.norm.mhc import reference as R

from .mhc_cases import SCALARS, inputs, pre_refs
from .test_mhc_gpu import HIDDEN, TOKENS, check_outputs, pre_buffers, prepared

pytestmark = pytest.mark.gpu

P = _config.PersistConfig
PERSIST = {
    # the sweep's tile at every T (post_pre above 64 tokens: post's kernel, then this)
    "persist": _config.MhcConfig(fused_pre=P(), fused_min_tokens=1),
    # one lane (a program walks every token block: the most waits per program), 512-wide splits,
    # each program mixing its next block before it waits on the previous one
    "persist_lane1_w512": _config.MhcConfig(
        fused_pre=P(block_w=512, lanes=1, sq="step", lookahead=True), fused_min_tokens=1
    ),
    # y of a whole 256-wide slice in registers (one read, the norm without a second): 2 programs per SM
    "persist_y256_c2": _config.MhcConfig(fused_pre=P(block_y=256, ctas_per_sm=2), fused_min_tokens=1),
    # the interpreter's form on the GPU: stages as 2-3 launches, no waiting
    "persist_emulate": _config.MhcConfig(fused_pre=P(emulate=True), fused_min_tokens=1),
}
FORMS = ("pre", "post_pre")  # what the persist tile serves (plans compile only these forms' kernels)


def _zero_counters(p):
    assert torch.count_nonzero(p.state.scratch["counter"]).item() == 0


@pytest.mark.parametrize("variant", list(PERSIST))
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_persist_pre_and_post_pre(variant, hidden, tokens):
    p = prepared(hidden, invocation=FORMS, override=PERSIST[variant])
    assert isinstance(p.state.selection.fused("pre", tokens), P)
    ins = inputs(tokens, hidden, device="cuda", seed=700 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    for w in (None, ins["w_act"], ins["w_f32"]):
        kw = dict(SCALARS, norm_weight=w, norm_eps=1e-6)
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **kw)
        check_outputs(got, *pre_refs(ins["residual"], *mix, **kw))
        _zero_counters(p)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], *mix)
    kw = dict(SCALARS, norm_weight=ins["w_act"], norm_eps=1e-6)
    got = mhc.run_post_pre(*args, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
    check_outputs(got, R.mhc_post_pre(*args, **kw), R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw))
    _zero_counters(p)


@pytest.mark.parametrize("variant", ["persist", "persist_y256_c2"])
@pytest.mark.parametrize("tokens", [3, 1000])
def test_persist_graph_replays(variant, tokens):
    """Captured pre + post_pre replayed twice on fresh inputs equal eager calls, bit for bit."""
    hidden = 7168
    p = prepared(hidden, invocation=FORMS, override=PERSIST[variant])
    static = inputs(tokens, hidden, device="cuda", seed=1)
    outs = [pre_buffers(tokens, hidden), pre_buffers(tokens, hidden, residual=True)]
    a = (static["x"], static["residual"], static["post"], static["comb"])
    m = (static["fn"], static["hc_scale"], static["hc_base"])

    def step():
        mhc.run_pre(static["residual"], *m, plan=p, norm_weight=static["w_f32"], **outs[0], **SCALARS)
        mhc.run_post_pre(*a, *m, plan=p, norm_weight=static["w_act"], **outs[1], **SCALARS)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (2, 3):
        fresh = inputs(tokens, hidden, device="cuda", seed=seed)
        for k in ("x", "residual", "post", "comb", "fn", "hc_scale", "hc_base", "w_act", "w_f32"):
            static[k].copy_(fresh[k])
        for o in outs:
            for buf in o.values():
                buf.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _zero_counters(p)
        replayed = [buf.clone() for o in outs for buf in o.values()]
        step()
        eager = [buf for o in outs for buf in o.values()]
        for r, e in zip(replayed, eager):
            assert torch.isfinite(r.float()).all() and torch.equal(r, e)
    kw = dict(SCALARS, norm_weight=static["w_f32"], norm_eps=0.0)
    check_outputs(
        (static["residual"], outs[0]["post_out"], outs[0]["comb_out"], outs[0]["y_out"]),
        *pre_refs(static["residual"], *m, **kw),
    )


def test_persist_lanes_follow_the_sm_count():
    """lanes_for: ctas_per_sm programs per SM over the splits, at most the token blocks."""
    from flashinfer.experimental.b12x.norm.mhc._kernel_persist import lanes_for

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tile = P()
    assert lanes_for(tile, 7168, 8192, sms) == max(1, sms * 3 // 28)
    assert lanes_for(tile, 7168, 33, sms) == 2
    assert lanes_for(dataclasses.replace(tile, lanes=5), 7168, 8192, sms) == 5
