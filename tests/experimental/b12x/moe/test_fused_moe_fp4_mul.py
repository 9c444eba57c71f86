"""moe.fused_moe's FP4 placement by a multiply on the host (`_buckets.DECODE_FP4_MUL`, `with_fp4_mul`, off by
default): the heuristic gives it to the decode buckets of plans on NVFP4 weights under the w4a16 and nvfp4 recipes
only, never to the grouped bucket; the expert kernels accept the option; bench_moe's --fp4-mul rows. The bits:
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


def _heuristic(mode, source="modelopt_nvfp4", max_tokens=4096):
    wp = weight_plan(source, "silu", (mode,), e=128, h=2048, i=768)
    caps = api.Caps(max_tokens=max_tokens, num_topk=8, device="cpu", weight_plan=wp, quant_mode=mode)
    return caps, api.heuristic_buckets(caps)


def test_the_flag_is_off():
    """Flipped only by its rule on measured runs (docs/predictions/moe.md, session 64)."""
    assert _buckets.DECODE_FP4_MUL is False
    for mode in ("w4a16", "nvfp4"):
        _, got = _heuristic(mode)
        assert all(b.tiled or (b.fc1.fp4, b.fc2.fp4) == ("shift", "shift") for b in got)


@pytest.mark.parametrize(
    "mode, source, applies",
    [
        ("w4a16", "modelopt_nvfp4", True),
        ("nvfp4", "modelopt_nvfp4", True),
        ("w4a16", "fp4_e8m0_k32", False),  # MXFP4 weights: FC2 spills on sm_120a with it
        ("w4a8_mx", "fp4_e8m0_k32", False),
    ],
)
def test_the_flag_moves_the_decode_buckets_only(mode, source, applies, monkeypatch):
    monkeypatch.setattr(_buckets, "DECODE_FP4_MUL", False)
    _, before = _heuristic(mode, source)
    monkeypatch.setattr(_buckets, "DECODE_FP4_MUL", True)
    caps, got = _heuristic(mode, source)
    assert _buckets.fp4_mul_applies(caps) is applies
    api.check_buckets(caps, got)  # the moved buckets pass the override check
    assert [(b.max_tokens, b.tiled, b.dequant) for b in got] == [(b.max_tokens, b.tiled, b.dequant) for b in before]
    assert any(not b.tiled for b in got) and (any(b.tiled for b in got) or mode == "w4a8_mx")
    for old, new in zip(before, got):
        if old.tiled or not applies:
            assert new == old
            continue
        assert (new.fc1.fp4, new.fc2.fp4) == ("mul", "mul")
        assert dataclasses.replace(new.fc1, fp4="shift") == old.fc1
        assert dataclasses.replace(new.fc2, fp4="shift") == old.fc2
        assert type(new.fc1) is type(old.fc1)  # an ExpertConfig (pdl, early) stays one


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
    assert labels["w4a16_mxfp4"] == labels["w4a8_mx"] == [""]
    override = dict(bench_moe.expert_variants(args, 4, 64, "w4a16"))[" mul"]
    _, got = _heuristic("w4a16")
    assert override(got, None) == _buckets.with_fp4_mul(got)
    root = Path(__file__).resolve().parents[4]
    out = subprocess.run([sys.executable, "-m", bench_moe.MODULE, "--help"], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0 and "--fp4-mul" in out.stdout, out.stderr
