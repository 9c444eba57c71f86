"""norm.mhc's two-pass path in token chunks (MhcConfig.chunk_tokens) and with whole-wave splits
(MhcConfig.whole_wave) under TRITON_INTERPRET=1 (run by test_mhc_interpret.py in a subprocess): every form
through the real host path against the reference, outputs and partials NaN-poisoned, fn split once a call
whatever the number of chunks."""

import dataclasses
import os

import pytest
import torch

from flashinfer.experimental.b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import reference as R
from flashinfer.experimental.b12x.norm.mhc._config import split_for

from .interpret_mhc import DEFAULT_TWO_PASS, SCAL, H, check_pre, check_pre_outputs, interpret_plan, poisoned_outs, sfn
from .mhc_cases import assert_ulps, inputs

pytestmark = pytest.mark.interpret
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_mhc_interpret.py"

# small_max_tokens 8, mid_max_tokens 12 (DEFAULT_TWO_PASS): chunks of more than 8 tokens; 17 gives 40 tokens as
# 13 / 13 / 14 (the large tiles, fn split once: fn_split_min_tokens 0, not DEFAULT_TWO_PASS's 16) and 20 tokens as
# 10 / 10 (the mid tiles, fn split in the kernel)
CHUNKED = dataclasses.replace(DEFAULT_TWO_PASS, chunk_tokens=17, fn_split_min_tokens=0)


def _check_bcast_and_post_pre(p, tokens, ins, mix):
    """bcast (with an fp32 norm weight; its residual is x repeated) and post_pre (post's residual to 1 ulp, then pre
    on what it stored) through plan p, NaN-poisoned outputs, against the reference."""
    kw = dict(norm_weight=ins["w_f32"], **SCAL)
    got = mhc.run_pre(ins["x"], *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **kw)
    assert torch.equal(got[0], ins["x"].unsqueeze(1).expand(tokens, 4, H))
    check_pre_outputs(got, R.mhc_pre(ins["x"], sfn(ins["fn"].view(24, 4, H).sum(1)), *mix[1:], **kw))
    args = (ins["x"], ins["residual"], ins["post"], ins["comb"])
    got = mhc.run_post_pre(*args, *mix, plan=p, **poisoned_outs(tokens, H, residual=True), **SCAL)
    assert_ulps(got[0], R.mhc_post(*args, compute_dtype=torch.float64).double(), 1)
    check_pre_outputs(got, R.mhc_pre(got[0], sfn(ins["fn"]), *mix[1:], **SCAL))


def _count_fn_splits(p):
    table = p.state.extra["launchers"]
    key = next(k for k in table if k[0] == "compile_split_fn")
    calls, launch = [], table[key]
    table[key] = lambda *a, **kw: (calls.append(1), launch(*a, **kw))[1]
    return calls


@pytest.mark.parametrize("post_pre_split", [True, False])
@pytest.mark.parametrize("tokens", [20, 40])
def test_chunked_two_pass(tokens, post_pre_split):
    """pre (with and without a norm weight), bcast and post_pre (post's kernel + pre's passes per chunk, or
    post_pre's own pass 1) in chunks, each against the reference of the whole call."""
    cfg = dataclasses.replace(CHUNKED, post_pre_split=post_pre_split)
    assert len(cfg.chunks(tokens)) == (2 if tokens == 20 else 3)
    p = interpret_plan(48, target_ctas=4, config=cfg)
    splits = _count_fn_splits(p)
    ins = inputs(tokens, H, seed=120 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    for w in (None, ins["w_act"]):
        p.state.scratch["partials"].fill_(float("nan"))
        check_pre(p, tokens, ins, norm_weight=w, norm_eps=1e-5, **SCAL)
    assert len(splits) == (2 if tokens == 40 else 0)  # once a call (the large tile splits fn), never per chunk
    _check_bcast_and_post_pre(p, tokens, ins, mix)


def test_chunks_match_the_whole_call_in_place():
    """post_pre in place (residual_out is the residual): each chunk's post reads only its own rows, so the
    chunked call equals the whole one (to the partial sums' order: pass 1's split depends on the chunk)."""
    tokens = 40
    ins = inputs(tokens, H, seed=7)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    got = {}
    for name, cfg in (("whole", DEFAULT_TWO_PASS), ("chunked", CHUNKED)):
        p = interpret_plan(48, target_ctas=4, config=cfg)
        res = ins["residual"].clone()
        outs = poisoned_outs(tokens, H)
        got[name] = mhc.run_post_pre(
            ins["x"], res, ins["post"], ins["comb"], *mix, plan=p, residual_out=res, **outs, **SCAL
        )
    assert torch.equal(got["whole"][0], got["chunked"][0])
    check_pre_outputs(got["chunked"], got["whole"][:3] + (got["whole"][3].float(),))


@pytest.mark.parametrize("tokens", [40, 130])
def test_whole_wave_splits(tokens):
    """The default's two passes with pre's pass-1 split count rounded down against a 7-program target: its 64-token
    tile at 130 tokens (3 blocks) takes 2 splits where rounding up gives 3 (40 tokens: 1 block, 7 either way); pre,
    bcast (rounding up: whole_wave is pre's) and post_pre (post, then pre's passes) against the reference."""
    cfg = dataclasses.replace(DEFAULT_TWO_PASS, whole_wave=True)
    tile = cfg.stream("pre", tokens)
    down, up = (split_for(tokens, tile.block_t, H // tile.block_h, 7, whole_wave=w)[0] for w in (True, False))
    assert (down < up) == (tokens > 64)
    p = interpret_plan(160, target_ctas=7, config=cfg)
    ins = inputs(tokens, H, seed=140 + tokens)
    mix = (ins["fn"], ins["hc_scale"], ins["hc_base"])
    check_pre(p, tokens, ins, norm_weight=ins["w_act"], norm_eps=1e-5, **SCAL)
    _check_bcast_and_post_pre(p, tokens, ins, mix)
