"""MXFP8 `hw_nan` (session 32): the lean kernel without its per-value NaN select, on sm_90a only.

Why it exists: the MXFP8 quantizer wrote 0x7F for every NaN value itself (a NaN test and a select per
value, plus the byte unpacking around them), though the H200's `cvt.rn.satfinite.e4m3x2.f32` already
writes 0x7F for every NaN of either sign and payload (`scripts/probe_e4m3_nan.py`). CPU checks: the
config rules, the arch gate (compile, candidates, default), that the select and only the select is
gone from the PTX, and that the tiles are offered on sm_90a only (they passed test_gpu_candidates on the
H200, whose extreme blocks hold NaN and Inf, before they moved to `_VALIDATED`; session 32). Bits under the interpreter:
`_interpret_run.MXFP8_VARIANTS` (the interpreter keeps the select: its fp8 emulation writes 0x7C for NaN).
"""

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx

HW_NAN = [mx.MxFp8Config(*c) for c in mx._VALIDATED if len(c) > 7 and c[7]]


def test_hw_nan_rules_and_offer(monkeypatch):
    assert HW_NAN and all(c.hw_nan and c.lean for c in HW_NAN)
    assert not mx.can_implement(7168, mx.MxFp8Config(4, 512, 2, lean=False, hw_nan=True))  # the lean kernels only
    assert mx.can_implement(7168, mx.MxFp8Config(4, 512, 2, lean=True, layout="rows", hw_nan=True))
    assert not mx.can_implement(7168, mx.MxFp8Config(4, 512, 2, lean=True, hw_nan=1))
    cfg = HW_NAN[0]
    assert mx.constexprs(7168, cfg)[-2] == 1 and mx.constexprs(7168, cfg, compiled=False)[-2] == 0
    monkeypatch.delenv(mx.UNVALIDATED_ENV, raising=False)
    assert set(HW_NAN) <= set(mx.candidate_configs(7168, arch="sm_90a"))
    assert not [c for c in mx.candidate_configs(7168, unvalidated=True, arch="sm_120a") if c.hw_nan]
    # The default takes it only where the probe ran (and the H200 passed and timed it).
    assert mx.HW_NAN_DEFAULT and mx.default_config(7168, "sm_90a") == mx.MxFp8Config(*mx._VALIDATED[-3])
    assert mx.default_config(7168, "sm_90a").hw_nan
    assert not mx.default_config(7168, "sm_120a").hw_nan and not mx.default_config(7168).hw_nan


def test_hw_nan_refused_off_sm_90a():
    with pytest.raises(ValueError, match=r"hw_nan=True .*sm_90a.*'sm_120a'"):
        mx.compile_for_target("bfloat16", 7168, HW_NAN[0], "sm_120a")


@pytest.mark.compile
def test_hw_nan_drops_only_the_select(cuda_binary):
    cfg = HW_NAN[0]
    with_select = mx.compile_for_target("bfloat16", 4096, dataclasses.replace(cfg, hw_nan=False), "sm_90a")
    without = mx.compile_for_target("bfloat16", 4096, cfg, "sm_90a")
    a, b = with_select.asm["ptx"], without.asm["ptx"]
    # Same conversion and stores; one NaN test a value fewer (the per-block amax test stays).
    assert a.count("cvt.rn.satfinite.e4m3x2.f32") == b.count("cvt.rn.satfinite.e4m3x2.f32") > 0
    assert len(re.findall(r"\bst\.global", a)) == len(re.findall(r"\bst\.global", b))
    values = cfg.block_m * cfg.block_k // (32 * cfg.num_warps)  # values a thread owns
    assert a.count("setp.nan.f32") - b.count("setp.nan.f32") == values, (
        a.count("setp.nan.f32"),
        b.count("setp.nan.f32"),
    )
    assert len(cuda_binary.instructions(without.asm["cubin"])) < 0.8 * len(
        cuda_binary.instructions(with_select.asm["cubin"])
    )
