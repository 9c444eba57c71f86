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


def test_pipeline_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(INNER),
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "interpret",
        "-W",
        "ignore",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    passed = re.search(r"(\d+) passed", out.stdout)
    # routing 14, gather 28, requantize 4, combine 4, layer 8 cases x T x placement x path (96)
    assert passed and int(passed.group(1)) >= 140 and "failed" not in out.stdout and "skipped" not in out.stdout, (
        out.stdout[-2000:]
    )
