"""norm.mhc's walk pass 2 (MhcConfig.row_walk, _kernel_walk.py) under TRITON_INTERPRET=1 (run by
test_mhc_interpret.py in a subprocess): pre, bcast and post_pre through the real host path against the
reference, outputs and partials NaN-poisoned, over program counts whose runs of (token, chunk) units start and
end inside tokens; a norm weight, or a call above walk_max_tokens, takes the row pass 2."""

import dataclasses
import os

import pytest
import torch

from flashinfer.experimental.b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config
from flashinfer.experimental.b12x.norm.mhc import reference as R

from .interpret_mhc import (
    DEFAULT_TWO_PASS,
    SCAL,
    H,
    check_pre,
    check_pre_outputs,
    counting_kind,
    interpret_plan,
    poisoned_outs,
    sfn,
)
from .mhc_cases import assert_ulps, inputs

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_mhc_interpret.py"


def walk_config(programs, max_tokens=64, all_max_hidden=0):
    """DEFAULT_TWO_PASS (large tiles above 12 tokens) with the walk pass 2 up to max_tokens (at every T up to
    all_max_hidden): 128-wide units, two a token at H = 256, `programs` programs (one "SM")."""
    walk = _config.RowConfig(block_h=128, block_s=2, num_warps=4, stages=3, walk=programs)
    return dataclasses.replace(
        DEFAULT_TWO_PASS, row_walk=walk, walk_max_tokens=max_tokens, walk_all_max_hidden=all_max_hidden
    )


@pytest.mark.parametrize("tokens, programs", [(13, 3), (17, 5), (21, 40), (40, 7)])
def test_walk_pass2(tokens, programs):
    """pre, bcast and post_pre through the walk (runs of 2 T / programs units: a program's first and last tokens
    are shared with its neighbours; 40 programs for 42 units at 21 tokens: most hold one unit), twice on fresh
    NaN-poisoned outputs and partials; then pre with a norm weight, which runs the row pass 2."""
    p = interpret_plan(48, target_ctas=4, config=walk_config(programs))
    walked = counting_kind(p, "compile_walk")
    rows = counting_kind(p, "compile_row")
    for seed in (tokens, 500 + tokens):
        p.state.scratch["partials"].fill_(float("nan"))
        ins = inputs(tokens, H, seed=seed)
        mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
        check_pre(p, tokens, ins, **SCAL)
        got = mhc.run_pre(ins["x"], *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"].view(24, 4, H).sum(1)), *mix[1:], **SCAL))
        args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
        got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
        assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
        check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))
    assert walked == [tokens] * 6 and rows == []
    check_pre(p, tokens, ins, norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
    assert walked == [tokens] * 6 and rows == [tokens]


@pytest.mark.parametrize("all_max_hidden", [0, H])
def test_walk_bounds(all_max_hidden):
    """The walk runs above the mid tiles' range (12 tokens here) up to walk_max_tokens, or at every T where the hidden
    size is at most walk_all_max_hidden; outside it the row pass 2."""
    p = interpret_plan(48, target_ctas=4, config=walk_config(3, max_tokens=20, all_max_hidden=all_max_hidden))
    walked = counting_kind(p, "compile_walk")
    rows = counting_kind(p, "compile_row")
    for tokens in (12, 13, 20, 21):
        check_pre(p, tokens, inputs(tokens, H, seed=tokens), **SCAL)
    assert (walked, rows) == (([13, 20], [12, 21]) if all_max_hidden < H else ([13, 20, 21], [12]))


def test_walk_launch_refuses_a_norm_weight():
    from flashinfer.experimental.b12x.norm.mhc import _kernel_walk

    ins = inputs(2, H, seed=1)
    with pytest.raises(ValueError, match="norm weight"):
        _kernel_walk.launch_walk(H, walk_config(2).row_walk, ins["residual"], None, None, None, ins["w_act"], None,
                                 None, None, T=2, splits=1, programs=2, rms_eps=1e-6, hc_eps=1e-3, sinkhorn_iters=1)  # fmt: skip
