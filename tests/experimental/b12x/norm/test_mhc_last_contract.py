"""The "last" one-launch path's configuration (LastConfig, MhcConfig.last) on the CPU: validation
errors name the field, the plan's compile jobs and workspace, and the defaults leave it off."""

import re

import pytest

from b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config

pytestmark = pytest.mark.contract

L = _config.LastConfig


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(max_tokens=3), "LastConfig.max_tokens must be a power of two >= 1, got 3"),
        (dict(max_tokens=32), "LastConfig.max_tokens must be <= 16 (the pass-1 tile's tokens), got 32"),
        (dict(block_h=48), "LastConfig.block_h must be a power of two >= 1, got 48"),
        (dict(block_h=4), "LastConfig.block_h must be >= 8 (a dot's K), got 4"),
        (dict(steps=0), "LastConfig.steps must be an int >= 1, got 0"),
        (dict(num_warps=6), "LastConfig.num_warps must be a power of two >= 1, got 6"),
        (dict(sq="lazy"), "LastConfig.sq must be 'step', 'gram' or 'diag', got 'lazy'"),
        (dict(fast=1), "LastConfig.fast must be a bool, got 1"),
        (dict(maxnreg=300), "LastConfig.maxnreg must be None or an int in [24, 255], got 300"),
    ],
)
def test_last_config_validation(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        L(**kw)


def test_mhc_config_last_field_and_mid_tokens():
    with pytest.raises(ValueError, match=re.escape("MhcConfig.last must be a LastConfig or None, got WideConfig")):
        _config.MhcConfig(last=_config.WideConfig())
    with pytest.raises(ValueError, match=re.escape("MhcConfig.mid_max_tokens must be an int >= small_max_tokens=64")):
        _config.MhcConfig(mid_max_tokens=32)
    for arch in ("sm_90a", "sm_120a", None):
        assert _config.default_config(arch).last is None  # opt-in until timed


def test_plan_jobs_workspace_and_override():
    cfg = _config.MhcConfig(last=L(max_tokens=8, block_h=32, steps=2))
    caps = mhc.Caps(device="cpu", max_tokens=16, hidden_size=7168)
    jobs = [args for k, args in mhc.plan(caps).kernels(cfg, "sm_90a") if k.__name__ == "compile_last"]
    assert {(a[0], a[3]) for a in jobs} == {
        (f, w) for f in ("pre", "post_pre", "bcast") for w in ("bfloat16", "float32")
    }
    assert all(a[4] == cfg.last for a in jobs)
    rows = _config.workspace_rows(cfg, ("pre", "post_pre"), 7168, 16, 528)
    assert rows >= (7168 // 32 // 2) * 8  # 112 programs x 8 tokens
    post_only = mhc.plan(caps, invocation=("post",)).kernels(cfg, "sm_90a")
    assert not any(k.__name__ == "compile_last" for k, _ in post_only)
    bad = _config.MhcConfig(last=L(block_h=256))
    with pytest.raises(ValueError, match=re.escape("override: last.block_h=256 must divide hidden_size=2176")):
        mhc.plan(mhc.Caps(device="cpu", max_tokens=4, hidden_size=2176), override=bad)
