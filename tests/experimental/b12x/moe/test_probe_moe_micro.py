"""`scripts/probe_moe_micro.py` (session 63's memory skeleton of a one-launch decode MoE layer) still computes what its
torch stand-in says: its `--check` under TRITON_INTERPRET=1, which also requires the other routing set's answer to
fail (its arguments: ../test_probe_arguments.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "probe_moe_micro.py"


@pytest.mark.interpret
def test_skeleton_check_under_the_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")  # must be set before triton.jit runs: a fresh interpreter
    out = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("check ")]
    assert out.returncode == 0 and len(lines) == 3 and all(line.endswith(" ok") for line in lines), (
        out.stdout[-3000:] + out.stderr[-3000:]
    )
