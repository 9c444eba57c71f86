"""Frozen resolution: nothing compiles or loads once serving starts, even from a warm disk."""

import pytest

import b12x
from flashinfer.experimental.b12x._lib import freeze

from .fake_kernels import compile_square

pytestmark = pytest.mark.contract


def test_frozen_raises_even_when_the_disk_has_the_kernel():
    assert compile_square.precompile(5, "sm_90a") == "compiled"
    before = (compile_square.compile_count, compile_square.load_count)
    b12x.freeze_kernel_resolution("serving")
    with pytest.raises(b12x.KernelResolutionFrozenError) as info:
        compile_square(5, "sm_90a")
    err = info.value
    assert (err.op, err.key, err.reason) == (
        "spine.square",
        "n=5 dtype=bfloat16 tile=Tile(m=64,n=128) mode=FAST (sm_90a)",
        "serving",
    )
    assert "PreparationSession" in str(err) and "frozen (serving)" in str(err)
    assert (compile_square.compile_count, compile_square.load_count) == before  # the disk was not read
    b12x.unfreeze_kernel_resolution()
    assert compile_square(5, "sm_90a")["square"] == 25
    assert compile_square.load_count == before[1] + 1


def test_resolved_kernels_keep_working_while_frozen():
    value = compile_square(6, "sm_90a")
    b12x.freeze_kernel_resolution("serving")
    assert compile_square(6, "sm_90a") is value
    assert compile_square(n=6, arch="sm_90a") is value  # another spelling of a resolved key
    with pytest.raises(b12x.KernelResolutionFrozenError):
        compile_square(6, "sm_120a")


def test_precompile_is_refused_while_frozen():
    b12x.freeze_kernel_resolution("serving")
    with pytest.raises(b12x.KernelResolutionFrozenError):
        compile_square.precompile(8, "sm_90a")


def test_graph_capture_of_an_unresolved_kernel_raises(monkeypatch):
    monkeypatch.setattr(freeze, "_capturing", lambda: True)  # what a capturing CUDA stream reports
    with pytest.raises(b12x.KernelResolutionFrozenError, match="a CUDA graph is being captured"):
        compile_square(9, "sm_90a")
    assert not b12x.kernel_resolution_frozen()


def test_root_names_are_the_spine_objects():
    assert b12x.KernelResolutionFrozenError is freeze.KernelResolutionFrozenError
    assert b12x.freeze_kernel_resolution is freeze.freeze_kernel_resolution
