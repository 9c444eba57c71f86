"""`scripts/probe_group_barrier.py` (session 35): the one-pass pre skeleton for issue #5. Its kernel computes what
`reference_y` says under the interpreter (one program a group: nothing to wait for), a group that cannot complete
gives up after MAX_SPINS polls and counts the timeouts instead of hanging, every timed row compiles for sm_90a and
sm_120a without spills (the barrier as one release reduction and one thread's acquire loads, the rows without it
with neither), and `cols_for` names the group a hidden size does not divide (its arguments: ../test_probe_arguments.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = "probe_group_barrier"
SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / f"{PROBE}.py"

_INTERPRETED = f"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("probe", {str(SCRIPT)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(1)
x = (torch.randn(11, 4, 64) * 3).to(torch.bfloat16)  # 11 tokens: the last block is partial
want = m.reference_y(x)
for row in (m.Row(1, 4), m.Row(1, 4, lookahead=True), m.Row(1, 2, lookahead=True, pw=8), m.Row(1, 4, barrier=False)):
    reset, go, y, timeouts = m.prepare(x, row, groups=2, max_spins=3)
    reset(); go()
    assert m.close(y, want), (row.label, (y.float() - want.float()).abs().max())
    assert timeouts.tolist() == [0, 0], (row.label, timeouts)
bad = want.clone(); bad[3, 5] += 1.0
assert not m.close(bad, want)
# two programs a group, run one after the other: the first polls a counter only the second can complete
reset, go, y, timeouts = m.prepare(x, m.Row(2, 4), groups=1, max_spins=3)
reset(); go()
assert timeouts.tolist() == [m.rounds_for(11, 1, 4), 0], timeouts
print("INTERPRETED OK")
"""


@pytest.mark.interpret
def test_skeleton_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")  # must be set before triton.jit runs: a fresh interpreter
    out = subprocess.run([sys.executable, "-c", _INTERPRETED], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "INTERPRETED OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_rows_compile_without_spills(arch, load_script, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    from flashinfer.experimental.b12x._lib import cuda_binary as CB

    probe = load_script(PROBE)
    for row in probe.ROWS:
        ck = probe.compiled(row, 7168, arch)
        usage = CB.resources(ck.asm["cubin"])
        assert usage["STACK"] == 0 and usage["LOCAL"] == 0, (row.label, usage)
        ptx = ck.asm["ptx"]
        release = re.search(r"\b(red|atom)\.global\.gpu\.release\.add\.u32\b", ptx)
        acquire = re.search(r"\bld\.global\.gpu\.acquire\.b32\b", ptx)
        assert bool(release) == bool(acquire) == row.barrier, row.label


@pytest.mark.contract
def test_cols_for_names_the_group(load_script):
    with pytest.raises(ValueError, match="multiple of the group"):
        load_script(PROBE).cols_for(7000, 32)
