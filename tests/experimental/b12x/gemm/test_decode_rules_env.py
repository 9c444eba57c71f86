"""B12X_DECODE_RULES (`decode_rules.rules_from_env`): the device jobs' way to time a staged rule's own code path. It
sets the named switches, leaves the others, and refuses names that are not switches and values that are not truth
values, naming the variable and the choices."""

import os
import subprocess
import sys

import pytest

from flashinfer.experimental.b12x.gemm._shared import decode_rules as R


@pytest.fixture
def restore(monkeypatch):
    """Every switch restored after the test (rules_from_env writes the module's globals)."""
    for name in R.switches():
        monkeypatch.setattr(R, name, getattr(R, name))


def test_switches_are_the_bool_rules():
    names = R.switches()
    assert {"FUSED_SILU_GROUPS", "EIGHT_WARP_WAVE", "MXFP4_WIDE_ONE_WAVE", "DECODE8_FP4_MUL"} <= set(names)
    assert "WIDE_DECODE_N" not in names and "ONE_WAVE_CTAS" not in names  # ints and tuples are bounds, not switches


def test_named_switches_are_set(restore):
    was = R.EIGHT_WARP_WAVE
    fsg, d16s = not R.FUSED_SILU_GROUPS, not R.DECODE16_SHARED_A  # each set to the other value than its default
    got = R.rules_from_env(f" FUSED_SILU_GROUPS = {'on' if fsg else 'off'}, DECODE16_SHARED_A={int(d16s)} ,")
    assert got == {"FUSED_SILU_GROUPS": fsg, "DECODE16_SHARED_A": d16s}
    assert (R.FUSED_SILU_GROUPS, R.DECODE16_SHARED_A) == (fsg, d16s)
    assert R.EIGHT_WARP_WAVE == was
    assert R.rules_from_env("") == {}


@pytest.mark.parametrize("bad", ["FUSED_SILU_GROUPS", "FUSED_SILU_GROUPS=maybe", "WIDE_DECODE_N=1", "NOPE=1"])
def test_bad_entries_raise_naming_the_variable(restore, bad):
    before = {name: getattr(R, name) for name in R.switches()}
    with pytest.raises(ValueError, match=r"B12X_DECODE_RULES: .* is not NAME=1 or NAME=0 for a switch of .*EIGHT"):
        R.rules_from_env(f"DECODE16_SHARED_A=1,{bad}")
    assert {name: getattr(R, name) for name in R.switches()} == before  # nothing half-set


def test_the_variable_is_read_at_import():
    code = "from flashinfer.experimental.b12x.gemm._shared import decode_rules as R; print(R.FUSED_SILU_GROUPS)"
    want = not R.FUSED_SILU_GROUPS  # the other value than the default, so the variable must have been read
    env = dict(os.environ, B12X_DECODE_RULES=f"FUSED_SILU_GROUPS={int(want)}")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(want)
