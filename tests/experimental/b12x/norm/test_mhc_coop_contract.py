"""The coop one-launch path's contract (CPU): off by default, config checks, one compile job per
mixing form with the small stream tile, its int64 "epoch" scratch, and workspace rows."""

import re

import pytest
import torch

from flashinfer.experimental.b12x.norm import mhc
from flashinfer.experimental.b12x.norm.mhc import _config, api

pytestmark = pytest.mark.contract

C = _config.CoopConfig


def test_coop_off_by_default_and_checked():
    assert _config.MhcConfig().coop is None
    for arch in ("sm_90a", "sm_120a"):
        assert _config.default_config(arch).coop is None
    with pytest.raises(ValueError, match="MhcConfig.coop must be a CoopConfig or None, got WideConfig"):
        _config.MhcConfig(coop=_config.WideConfig())
    with pytest.raises(ValueError, match=re.escape("MhcConfig.coop.max_tokens=8 must be <= small_max_tokens=4")):
        _config.MhcConfig(coop=C(max_tokens=8), small_max_tokens=4)
    with pytest.raises(ValueError, match="CoopConfig.poll must be 'ld' or 'atom', got 'spin'"):
        C(poll="spin")
    with pytest.raises(ValueError, match="CoopConfig.block_y must be a power of two >= 1, got 96"):
        C(block_y=96)
    with pytest.raises(ValueError, match="CoopConfig.emulate must be a bool, got 1"):
        C(emulate=1)


def test_coop_jobs_scratch_and_rows():
    caps = mhc.Caps(device="cpu", max_tokens=100, hidden_size=7168, dtype=torch.bfloat16)
    p = mhc.plan(caps)
    cfg = _config.MhcConfig(coop=C())
    jobs = [(k.__name__, args[:-2]) for k, args in p.kernels(cfg, "sm_90a")]
    coop = sorted(a[0] for k, a in jobs if k == "compile_coop")
    assert coop == ["bcast", "post_pre", "pre"]
    assert all(a[3] == cfg.stream(a[0], 1) and a[4] == cfg.coop for k, a in jobs if k == "compile_coop")
    specs = {s.name: s for s in p.scratch_specs(cfg, "cuda")}
    assert specs["epoch"].shape == (1,) and specs["epoch"].dtype == torch.int64
    assert "epoch" not in {s.name for s in p.scratch_specs(_config.MhcConfig(), "cuda")}
    post_only = mhc.plan(caps, invocation=("post",))
    assert "epoch" not in {s.name for s in post_only.scratch_specs(cfg, "cuda")}
    # 56 splits x 4 tokens of partials at most (fewer than the two-pass path's 224 x 1)
    rows = _config.workspace_rows(cfg, api.FORMS, 7168, 4, 528)
    assert rows >= 56 * 4
