"""The "coop" one-launch kernel (_kernel_coop.py) under TRITON_INTERPRET=1 (run by
test_mhc_interpret.py): every program a pass-1 split and a y slice. Programs run one after the other
here, so the kernel runs as its two-launch emulation (PHASE 1, then PHASE 2: the same arithmetic,
no waiting); the gpu tier runs the waiting form."""

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
C = _config.CoopConfig
COOP = {
    # 2 programs of 128 columns (4 pass-1 steps of 32 each)
    "y128": _config.MhcConfig(coop=C()),
    # 4 programs of 64 columns, partials summed 2 rows a step, exact reciprocals, the RMW poll
    "y64_s2": _config.MhcConfig(coop=C(max_tokens=2, block_y=64, block_s=2, fast=False, poll="atom")),
    # post_pre's pass 1 16 x 16 with gram squares, pre's on 2 warps with per-step squares, 16 tokens
    "y32_gram": _config.MhcConfig(
        coop=C(max_tokens=16, block_y=32),
        pre_small=_config.StreamConfig(16, 32, 2, 2, sq="step"),
        post_pre_small=_config.StreamConfig(16, 16, 4, 2, sq="gram"),
        bcast=_config.StreamConfig(16, 32, 4, 2),
    ),
}


@pytest.mark.parametrize("coop", list(COOP))
@pytest.mark.parametrize("tokens", [1, 3, 5, 16])
def test_coop_one_launch(tokens, coop):
    """pre, bcast and post_pre in the coop kernel (twice, fresh NaN-poisoned outputs and partials);
    above max_tokens or with a norm weight another path runs instead."""
    cfg = COOP[coop]
    p = interpret_plan(16, target_ctas=6, config=cfg)
    launched = counting_kind(p, "compile_coop")
    for seed in (tokens, 500 + tokens):
        p.state.scratch["partials"].fill_(float("nan"))
        ins = inputs(tokens, H, seed=seed)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **SCAL)
        check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **SCAL))
        outs = poisoned_outs(tokens, H, residual=True)
        got = mhc.run_pre(ins["x"], *mix, plan=p, **outs, **SCAL)
        assert torch.equal(outs["residual_out"], ins["x"].unsqueeze(1).expand(tokens, 4, H))
        check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"]), *mix[1:], **SCAL))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
    n = 6 if tokens <= cfg.coop.max_tokens else 0
    assert launched == [tokens] * n
    assert int(p.state.scratch["epoch"]) == 0  # the emulation never counts
    ins = inputs(tokens, H, seed=23)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    kw = dict(norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
    got = mhc.run_pre(ins["residual"], *mix, plan=p, **poisoned_outs(tokens, H), **kw)
    check_pre_outputs(got, R.mhc_pre(ins["residual"], sfn(ins["fn"]), *mix[1:], **kw))
    assert launched == [tokens] * n  # a norm weight: two passes


def test_coop_at_hidden_7168_in_place():
    """The real hidden size (56 programs of 128 columns at T = 1), post_pre in place, 20 rounds."""
    hidden = 7168
    p = interpret_plan(2, target_ctas=528, config=_config.MhcConfig(coop=C()), hidden=hidden)
    launched = counting_kind(p, "compile_coop")
    ins = inputs(1, hidden, seed=13)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    new_exact = R.mhc_post(*args, compute_dtype=torch.float64).double()
    kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=20)
    res = ins["residual"].clone()
    outs = poisoned_outs(1, hidden)
    got = mhc.run_post_pre(ins["x"], res, ins["post"], ins["comb"], *mix, plan=p, residual_out=res, **outs, **kw)
    assert_ulps(got[0], new_exact, 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **kw))
    assert launched == [1]
