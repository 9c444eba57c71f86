"""The "last" one-launch kernel (_kernel_last.py) under TRITON_INTERPRET=1 (run by
test_mhc_interpret.py): split-H producers, the last program to draw a ticket finishes the call.
Programs run one after the other here, so the last program id is the finisher."""

import os

import pytest
import torch

from flashinfer.experimental.b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config
from flashinfer.experimental.b12x.norm.mhc import reference as R

from .interpret_mhc import SCAL, check_pre_outputs, counting_kind, interpret_plan, poisoned_outs, sfn
from .mhc_cases import assert_ulps, inputs

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_mhc_interpret.py"

H = 256
L = _config.LastConfig
LAST = {
    # 8 programs of 32 columns a stream, 4 warps
    "h32_w4": _config.MhcConfig(last=L(max_tokens=4, block_h=32, num_warps=4)),
    # 2 steps of 16 a program (8 programs), squares on the diagonal blocks, approximate off
    "h16_s2_diag": _config.MhcConfig(last=L(max_tokens=2, block_h=16, steps=2, num_warps=4, sq="diag", fast=False)),
    # 3 steps of 32 (3 programs, the last one with 2 steps), gram squares, 2 warps, the bound 16
    "h32_s3_gram": _config.MhcConfig(last=L(max_tokens=16, block_h=32, steps=3, num_warps=2, sq="gram")),
    # token t + 1's loads issued before token t's y
    "h32_prefetch": _config.MhcConfig(last=L(max_tokens=8, block_h=32, num_warps=4, prefetch=True)),
}


def _mix(ins):
    return ins["fn"], ins["hc_scale"], ins["hc_base"]


def _last_cases():
    """(tokens, last): 1 and 5 tokens for every tile, 16 (the bound of h32_s3_gram; the two-pass path
    above the others' bounds) for two of them; the rest in `slow`."""
    for tokens in (1, 3, 5, 16):
        for last in LAST:
            quick = tokens in (1, 5) or (tokens == 16 and last in ("h32_s3_gram", "h32_w4"))
            yield (tokens, last) if quick else pytest.param(tokens, last, marks=pytest.mark.slow)


@pytest.mark.parametrize("tokens, last", list(_last_cases()))
def test_last_one_launch(tokens, last):
    """pre, bcast and post_pre (norm weight none / bf16 / fp32), twice on fresh inputs with
    NaN-poisoned outputs and partials: the ticket is back at 0 after every call and the first call's
    partials do not leak into the second; above max_tokens the two-pass path runs instead."""
    cfg = LAST[last]
    p = interpret_plan(16, target_ctas=6, config=cfg)
    launched = counting_kind(p, "compile_last")
    zero = torch.zeros_like(p.state.scratch["counter"])
    weights = (None, "w_act", "w_f32")
    for seed in (tokens, 500 + tokens):
        for wname in weights:
            ins = inputs(tokens, H, seed=seed)
            w = None if wname is None else ins[wname]
            kw = dict(norm_weight=w, norm_eps=1e-5, **SCAL)
            p.state.scratch["partials"].fill_(float("nan"))
            got = mhc.run_pre(ins["residual"], *_mix(ins), plan=p, **poisoned_outs(tokens, H), **kw)
            check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *_mix(ins)[1:], **kw))
            assert torch.equal(p.state.scratch["counter"], zero)
            outs = poisoned_outs(tokens, H, residual=True)
            got = mhc.run_pre(ins["x"], *_mix(ins), plan=p, **outs, **kw)
            assert torch.equal(outs["residual_out"], ins["x"].unsqueeze(1).expand(tokens, 4, H))
            folded = ins["fn"].view(24, 4, H).sum(1)  # the bcast tile folds fn, then splits it
            check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(folded), *_mix(ins)[1:], **kw))
            args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
            got = mhc.run_post_pre(*args, *_mix(ins), plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
            assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
            check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *_mix(ins)[1:], **kw))
            assert torch.equal(p.state.scratch["counter"], zero)
    n = 2 * 3 * len(weights) if tokens <= cfg.last.max_tokens else 0
    assert launched == [tokens] * n


def test_last_at_hidden_7168_in_place():
    """The real hidden size (224 programs at T = 1: the finisher's [256, 32] partial tile is
    masked to 224 rows), post_pre in place, 20 Sinkhorn rounds, fast reciprocals."""
    hidden = 7168
    cfg = _config.MhcConfig(last=L())
    p = interpret_plan(2, target_ctas=528, config=cfg, hidden=hidden)
    launched = counting_kind(p, "compile_last")
    ins = inputs(1, hidden, seed=13)
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    new_exact = R.mhc_post(*args, compute_dtype=torch.float64).double()
    kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)
    res = ins["residual"].clone()
    outs = poisoned_outs(1, hidden)
    got = mhc.run_post_pre(ins["x"], res, ins["post"], ins["comb"], *_mix(ins), plan=p, residual_out=res, **outs, **kw)
    assert_ulps(got[0], new_exact, 1)
    want = R.mhc_pre(got[0], sfn(ins["fn"]), *_mix(ins)[1:], **kw)
    torch.testing.assert_close(got[1], want[1], rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-6)  # rsqrt^2 reciprocals (exact here)
    assert_ulps(got[3], want[3].float(), 1)
    assert launched == [1]
