"""`python -m b12x` doctor / ops / cache."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.contract


def _cli(*args, env=None):
    import os

    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "b12x", *args], capture_output=True, text=True, env=full)


def test_doctor_reports_toolchain_and_ops():
    out = _cli("doctor")
    assert out.returncode == 0, out.stderr
    for word in ("python", "torch", "cutlass-dsl", "tvm-ffi", "triton", "GPU"):
        assert word in out.stdout
    import b12x

    for meta in b12x.list_ops():
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith(meta.qualname + " "))
        assert " yes" in line or " no " in line, line


def test_ops_lists_registry():
    out = _cli("ops")
    assert out.returncode == 0, out.stderr
    import b12x

    for meta in b12x.list_ops():
        assert meta.qualname in out.stdout


def test_cache_show_and_clear(tmp_path):
    cache = tmp_path / "c"
    (cache / "kernels").mkdir(parents=True)
    (cache / "kernels" / "x.bin").write_bytes(b"123")
    env = {"B12X_CACHE_DIR": str(cache)}
    out = _cli("cache", "show", env=env)
    assert out.returncode == 0 and "files: 1" in out.stdout and str(cache) in out.stdout
    assert _cli("cache", env=env).stdout == out.stdout  # show is the default action
    out = _cli("cache", "clear", env=env)
    assert out.returncode == 0 and "removed 1 files" in out.stdout
    assert not cache.exists()


def test_help_is_true():
    out = _cli("--help")
    assert out.returncode == 0
    for cmd in ("doctor", "ops", "cache"):
        assert cmd in out.stdout
    bad = _cli("frobnicate")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
