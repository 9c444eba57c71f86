"""Experimental tests are excluded from a plain `pytest tests/` and run when named."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[4]


def _collect(*targets):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *targets],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_plain_pytest_tests_skips_experimental():
    out = _collect("tests/")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tests/test_core_import.py" in out.stdout
    assert "tests/experimental" not in out.stdout


def test_named_experimental_target_is_collected():
    out = _collect("tests/experimental/b12x/contract/test_policy.py")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_policy.py::test_plain_pytest_tests_skips_experimental" in out.stdout
