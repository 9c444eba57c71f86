"""_lib.triton_build: the Triton options every kernel group builds and launches with (CPU only)."""

import pytest

from flashinfer.experimental.b12x._lib import arch as A
from flashinfer.experimental.b12x._lib import triton_build as TB


@pytest.mark.parametrize("value, expected", [("", False), ("0", False), ("1", True), ("true", True)])
def test_interpreting_follows_the_env(monkeypatch, value, expected):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert TB.interpreting() is expected


def test_interpreting_without_the_env(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert TB.interpreting() is False


def test_compiled_options_and_pdl_constexpr(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert TB.jit_options(fp_fusion=True) == {"enable_fp_fusion": True}
    assert TB.jit_options(True, fp_fusion=False) == {"enable_fp_fusion": False, "launch_pdl": True}
    assert (TB.pdl_constexpr(False), TB.pdl_constexpr(True)) == (0, 1)


def test_the_interpreter_gets_no_options_and_no_pdl(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert TB.jit_options(True, fp_fusion=True) == {}
    assert TB.pdl_constexpr(True) == 0


def test_aot_options():
    assert TB.aot_options(4) == {"num_warps": 4, "num_stages": 1, "enable_fp_fusion": False}
    full = TB.aot_options(8, pdl=True, fp_fusion=True, maxnreg=64)
    assert full == {"num_warps": 8, "num_stages": 1, "enable_fp_fusion": True, "maxnreg": 64, "launch_pdl": True}
    assert "maxnreg" not in TB.aot_options(8, maxnreg=None)


def test_every_known_arch_has_a_triton_target():
    assert set(TB.CC_BY_ARCH) == set(A.KNOWN_ARCHS)
