"""_lib.cuda_binary: finding nvdisasm / cuobjdump and reading a cubin with them."""

from __future__ import annotations

import pytest

from flashinfer.experimental.b12x._lib import cuda_binary as CB


@pytest.mark.contract
def test_only_the_two_binary_tools_are_looked_up():
    with pytest.raises(ValueError, match=r"tool must be one of \('nvdisasm', 'cuobjdump'\), got 'ptxas'"):
        CB.tool("ptxas")


@pytest.mark.contract
def test_a_missing_tool_is_named(monkeypatch):
    monkeypatch.setattr(CB, "tool", lambda name: None)
    with pytest.raises(CB.MissingTool, match="nvdisasm is neither on PATH nor in Triton's wheel"):
        CB.sass(b"\x7fELF")


@pytest.mark.contract
def test_bytes_that_are_not_a_cubin_are_refused(cuda_binary):
    with pytest.raises(ValueError, match=r"cubin must be the bytes of an ELF cubin, got b'PK\\x03\\x04'"):
        cuda_binary.sass(b"PK\x03\x04rest")


@pytest.mark.compile
def test_sass_and_resources_of_a_compiled_kernel(cuda_binary):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x._lib import _l2_prefetch_kernel as K
    from flashinfer.experimental.b12x._lib import l2_prefetch as P

    fn = K.compile_prefetch(P.PrefetchConfig("line"), arch="sm_90a")
    text = cuda_binary.sass(fn.artifacts.CUBIN)
    assert "EXIT" in text and "CCTL.E.PF2" in text
    usage = cuda_binary.resources(fn.artifacts.CUBIN)
    assert set(usage) == {"REG", "STACK", "SHARED", "LOCAL"} and 0 < usage["REG"] <= 255
