"""Runs interpret_mhc.py (the Triton kernels under TRITON_INTERPRET=1) in a fresh interpreter.

TRITON_INTERPRET must be set before `triton.jit` decorates the kernels, and other tests of this
session may already have imported them compiled: hence the subprocess.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interpret

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(
    "modules, slow",
    # one subprocess per module, each under its limit (mhc + last together took 545 s of 600 on an idle
    # 2-core machine and timed out beside another test run); their slow cases in a third, slow itself
    [
        (("interpret_mhc.py",), False),
        (("interpret_mhc_last.py",), False),
        (("interpret_mhc_chunks.py", "interpret_mhc_walk.py"), False),
        pytest.param(("interpret_mhc.py", "interpret_mhc_last.py"), True, marks=pytest.mark.slow),
    ],
    ids=["mhc", "last", "chunks_walk", "slow"],
)
def test_kernels_under_the_interpreter(modules, slow):
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    inner = [str(Path(__file__).with_name(name)) for name in modules]
    marks = "interpret and slow" if slow else "interpret"  # the inner conftest skips slow unless selected
    cmd = [sys.executable, "-m", "pytest", *inner, "-q", "-p", "no:cacheprovider", "-m", marks]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800 if slow else 900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout, out.stdout[-2000:]
