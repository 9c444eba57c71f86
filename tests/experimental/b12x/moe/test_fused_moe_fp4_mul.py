"""moe.fused_moe's FP4 placement by a multiply on the host (`_buckets.DECODE_FP4_MUL`, `with_fp4_mul`, on by
default since session 65): the heuristic gives it to the decode buckets of plans on NVFP4 weights under the w4a16 and nvfp4 recipes
only, in `fp4_mul_range` (T >= 16 at H >= 4096), never to the grouped bucket; the expert kernels accept the option; bench_moe's --fp4-mul rows. The bits:
test_fused_moe_fp4_mul_gpu.py; the builds: test_experts_compile.py."""

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig
from flashinfer.experimental.b12x.moe.fused_moe import _buckets, api

from .moe_cases import weight_plan

pytestmark = pytest.mark.contract


def _heuristic(mode, source="modelopt_nvfp4", max_tokens=4096, hidden=2048):
    wp = weight_plan(source, "silu", (mode,), e=128, h=hidden, i=768)
    caps = api.Caps(max_tokens=max_tokens, num_topk=8, device="cpu", weight_plan=wp, quant_mode=mode)
    return caps, api.heuristic_buckets(caps)


def test_the_flag_is_on_in_its_range_only():
    """On since its rule passed on measured runs (docs/predictions/moe.md, session 64): by default the decode buckets
    from T = 16 at hidden 4096 take the multiply, those below 16 and every bucket at hidden 2048 keep the shift."""
    assert _buckets.DECODE_FP4_MUL is True
    for mode in ("w4a16", "nvfp4"):
        for hidden in (2048, 4096):
            _, got = _heuristic(mode, hidden=hidden)
            lo = 1
            for b in got:
                want = "mul" if hidden >= 4096 and lo >= _buckets.FP4_MUL_FROM else "shift"
                assert b.tiled or (b.fc1.fp4, b.fc2.fp4) == (want, want), (mode, hidden, b)
                lo = b.max_tokens + 1
            assert hidden < 4096 or any(not b.tiled and b.fc1.fp4 == "mul" for b in got)


@pytest.mark.parametrize("hidden", [2048, 4096])
@pytest.mark.parametrize(
    "mode, source, applies",
    [
        ("w4a16", "modelopt_nvfp4", True),
        ("nvfp4", "modelopt_nvfp4", True),
        ("w4a16", "fp4_e8m0_k32", False),  # MXFP4 weights: FC2 spills on sm_120a with it
        ("w4a8_mx", "fp4_e8m0_k32", False),
    ],
)
def test_the_flag_moves_its_range_of_the_decode_buckets(mode, source, applies, hidden, monkeypatch):
    """On: the decode buckets' live T from FP4_MUL_FROM (16) take the multiply at hidden sizes >= 4096 (a bucket
    holding 15 and 16 is cut there); below 4096, for MXFP4 weights and for the grouped bucket nothing moves."""
    monkeypatch.setattr(_buckets, "DECODE_FP4_MUL", False)
    _, before = _heuristic(mode, source, hidden=hidden)
    monkeypatch.setattr(_buckets, "DECODE_FP4_MUL", True)
    caps, got = _heuristic(mode, source, hidden=hidden)
    assert _buckets.fp4_mul_applies(caps) is applies
    api.check_buckets(caps, got)  # the moved buckets pass the override check
    if not applies or hidden < _buckets.FP4_MUL_MIN_HIDDEN:
        assert got == before
        return
    assert _buckets.fp4_mul_range(caps) == (16, None)
    lo = 1
    for b in got:  # every live T's bucket: shift below 16, mul from 16 (decode), else what served that T before
        was = _bucket_for(before, lo)
        if b.tiled:
            assert b == was
        else:
            fp4 = "mul" if lo >= 16 else "shift"
            assert (b.fc1.fp4, b.fc2.fp4) == (fp4, fp4)
            assert dataclasses.replace(b.fc1, fp4=was.fc1.fp4) == was.fc1 and b.dequant == was.dequant
            assert dataclasses.replace(b.fc2, fp4=was.fc2.fp4) == was.fc2
        lo = b.max_tokens + 1
    assert [b for b in got if b.tiled] == [b for b in before if b.tiled]
    assert any(b.max_tokens == 15 for b in got) and not any(b.max_tokens == 15 for b in before)


def _bucket_for(buckets, t):
    return next(b for b in buckets if b.max_tokens >= t)


def test_with_fp4_mul_is_idempotent():
    _, got = _heuristic("w4a16")
    once = _buckets.with_fp4_mul(got)
    assert _buckets.with_fp4_mul(once) == once != got


def test_the_expert_kernels_accept_the_placement():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    for fp4 in ("shift", "left", "mul"):
        cfg = DecodeConfig(4, 2, 1, 2, 1, fp4=fp4)
        assert X.why_not(1, "bfloat16", "nvfp4", "silu", cfg) is None
        assert X.why_not(2, "nvfp4", "nvfp4", None, cfg) is None
    bad = X.why_not(2, "bfloat16", "nvfp4", None, DecodeConfig(4, 2, 1, 2, 1, fp4="sideways"))
    assert bad is not None and "fp4" in bad


def test_bench_rows():
    from benchmarks.experimental.b12x import bench_moe

    args = argparse.Namespace(fp4_mul=True)
    labels = {r: [label for label, _ in bench_moe.expert_variants(args, 4, 64, r)] for r in bench_moe.RECIPES}
    assert labels["w4a16"] == labels["nvfp4"] == ["", " mul"]
    rule = argparse.Namespace(fp4_mul_rule=True)
    assert [label for label, _ in bench_moe.expert_variants(rule, 4, 64, "nvfp4")] == ["", " mulr"]
    assert [label for label, _ in bench_moe.expert_variants(rule, 4, 64, "w4a8_mx")] == [""]
    assert labels["w4a16_mxfp4"] == labels["w4a8_mx"] == [""]
    override = dict(bench_moe.expert_variants(args, 4, 64, "w4a16"))[" mul"]
    _, got = _heuristic("w4a16")
    assert override(got, None) == _buckets.with_fp4_mul(got)
    root = Path(__file__).resolve().parents[4]
    out = subprocess.run([sys.executable, "-m", bench_moe.MODULE, "--help"], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0 and "--fp4-mul" in out.stdout and "--fp4-mul-rule" in out.stdout, out.stderr
