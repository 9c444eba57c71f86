"""Runs test_fused_moe_pipeline_cases.py (moe.fused_moe's Triton pipeline under TRITON_INTERPRET=1)
in a fresh interpreter: the variable must be set before `triton.jit` decorates the kernels, and other
tests of this session may already have imported them compiled."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interpret

ROOT = Path(__file__).resolve().parents[4]
INNER = Path(__file__).with_name("test_fused_moe_pipeline_cases.py")
DEQUANT = Path(__file__).with_name("test_fused_moe_dequant_cases.py")


def _interpreted(path: Path, min_passed: int, k: str | None = None) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider", "-m", "interpret", "-W", "ignore"]
    out = subprocess.run(cmd + (["-k", k] if k else []), capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed and int(passed.group(1)) >= min_passed and "failed" not in out.stdout, out.stdout[-2000:]
    assert "skipped" not in out.stdout, out.stdout[-2000:]


def test_pipeline_under_the_interpreter():
    # routing 14, gather 28, requantize 4, combine 4, layer 8 cases x T x placement x path (96)
    _interpreted(INNER, 140)


def test_dequant_bucket_under_the_interpreter():
    # gather 16, requantize 3, layer 20, steps 1
    _interpreted(DEQUANT, 40)
