"""Spine fixtures: a clean compile state per test, and fresh interpreters that can import the fakes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPINE_PARENT = str(Path(__file__).resolve().parent.parent)  # so `import spine.fake_kernels` works


@pytest.fixture(autouse=True)
def _clean_compile_state(monkeypatch):
    for var in ("B12X_PRINT_COMPILE_PROGRESS", "B12X_TIMING", "B12X_DISK_CACHE"):
        monkeypatch.delenv(var, raising=False)
    from flashinfer.experimental.b12x._lib import compile as compile_mod

    compile_mod.clear_memory_cache()
    yield
    compile_mod.clear_memory_cache()


def _spawn(code: str, env: dict | None = None) -> subprocess.Popen:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [SPINE_PARENT, full.get("PYTHONPATH")]))
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full
    )


@pytest.fixture
def spawn():
    """Start `code` in a fresh interpreter that sees this test's env (cache dir) and the fakes."""
    return _spawn


@pytest.fixture
def run_fresh():
    """Run `code` in a fresh interpreter to completion; returns (returncode, stdout, stderr)."""

    def run(code: str, env: dict | None = None, timeout: float = 120):
        proc = _spawn(code, env)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    return run
