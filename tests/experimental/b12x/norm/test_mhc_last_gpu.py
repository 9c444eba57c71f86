"""The "last" one-launch path of norm.mhc (`MhcConfig.last`, _kernel_last.py) on CUDA: pre, bcast and
post_pre vs the fp32 reference (DESIGN.md §6 rule) with NaN-poisoned outputs and partials, at
T = 1, 3 and the bound, with and without a norm weight; CUDA graph capture, replays on changing
inputs equal to eager, the ticket back at 0 after every replay."""

import pytest
import torch

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config
from flashinfer.experimental.b12x.norm.mhc import reference as R
from tests.experimental.b12x.conftest import captured

from .mhc_cases import SCALARS
from .test_mhc_gpu import check_outputs, gpu_inputs, pre_buffers, prepared

pytestmark = pytest.mark.gpu

LAST = {
    "last": _config.LastConfig(),
    "last8_pf": _config.LastConfig(max_tokens=8, prefetch=True),
    "last16_h64": _config.LastConfig(max_tokens=16, block_h=64),
    "last_r128": _config.LastConfig(maxnreg=128),
}


def _override(name):
    return _config.MhcConfig(last=LAST[name])


def counting_last(p):
    """Wrap the plan's compile_last launchers: returns the T of each launch."""
    launched = []
    table = p.state.extra["launchers"]
    for key, launch in list(table.items()):
        if key[0] == "compile_last":

            def wrapped(*a, _launch=launch, **kw):
                launched.append(kw["T"])
                return _launch(*a, **kw)

            table[key] = wrapped
    return launched


def _cases():
    for name, cfg in LAST.items():
        for hidden in (4096, 7168):
            for tokens in sorted({1, 3, cfg.max_tokens}):
                yield pytest.param(name, hidden, tokens, id=f"{name}-H{hidden}-T{tokens}")


@pytest.mark.parametrize("name, hidden, tokens", list(_cases()))
def test_last_matches_reference(name, hidden, tokens):
    p = prepared(hidden, max_tokens=16, override=_override(name))
    launched = counting_last(p)
    ins = gpu_inputs(tokens, hidden, seed=40 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    n = 0
    for w in (None, ins["w_act"], ins["w_f32"]):
        kw = dict(norm_weight=w, norm_eps=1e-5, **SCALARS)
        p.state.scratch["partials"].fill_(float("nan"))
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **pre_buffers(tokens, hidden), **kw)
        ref32 = R.mhc_pre(ins["residual"], *mix, **kw)
        ref_lo = R.mhc_pre(ins["residual"], *mix, compute_dtype=torch.bfloat16, **kw)
        check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
        outs = pre_buffers(tokens, hidden, residual=True)
        got = mhc.run_pre(ins["x"], *mix, plan=p, **outs, **kw)
        assert torch.equal(outs["residual_out"], ins["x"].unsqueeze(1).expand(tokens, 4, hidden))
        ref32 = R.mhc_pre(ins["x"], *mix, **kw)
        ref_lo = R.mhc_pre(ins["x"], *mix, compute_dtype=torch.bfloat16, **kw)
        check_outputs(got[1:], ref32[1:], ref_lo[1:], names=("post", "comb", "y"))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **pre_buffers(tokens, hidden, residual=True), **kw)
        ref32 = R.mhc_post_pre(*args, *mix, **kw)
        ref_lo = R.mhc_post_pre(*args, *mix, compute_dtype=torch.bfloat16, **kw)
        check_outputs(got, ref32, ref_lo)
        assert torch.count_nonzero(p.state.scratch["counter"]).item() == 0
        n += 3
    torch.cuda.synchronize()
    assert launched == [tokens] * n


@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_last_graph_replay_equals_eager(tokens):
    """post_pre captured once, replayed on changing inputs: each replay equals an eager call on the
    same inputs (bitwise: same kernel, same order of sums), and the ticket is back at 0."""
    hidden = 7168
    p = prepared(hidden, max_tokens=16, override=_override("last8_pf"))
    static = gpu_inputs(tokens, hidden, seed=60 + tokens)
    outs = pre_buffers(tokens, hidden, residual=True)
    a = (static["x"], static["residual"], static["post"], static["comb"], static["fn"], static["hc_scale"])
    kw = dict(norm_weight=static["w_act"], norm_eps=1e-5, **SCALARS)

    def step():
        mhc.run_post_pre(*a, static["hc_base"], plan=p, **outs, **kw)

    graph = captured(step)
    for i in range(3):  # replays 2 and 3 need the ticket reset by the replay before
        fresh = gpu_inputs(tokens, hidden, seed=700 + i)
        for k in ("x", "residual", "post", "comb"):
            static[k].copy_(fresh[k])
        for buf in outs.values():
            buf.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.count_nonzero(p.state.scratch["counter"]).item() == 0
        replayed = {k: v.clone() for k, v in outs.items()}
        eager = pre_buffers(tokens, hidden, residual=True)
        mhc.run_post_pre(*a, static["hc_base"], plan=p, **eager, **kw)
        torch.cuda.synchronize()
        for k in outs:
            assert torch.equal(replayed[k], eager[k]), f"replay {i}: {k} differs from eager"
        args = a + (static["hc_base"],)
        ref32 = R.mhc_post_pre(*args, **kw)
        ref_lo = R.mhc_post_pre(*args, compute_dtype=torch.bfloat16, **kw)
        got = (replayed["residual_out"], replayed["post_out"], replayed["comb_out"], replayed["y_out"])
        check_outputs(got, ref32, ref_lo)
