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


class _FakeCompiled:
    """Stands in for a Triton CompiledKernel: indexing by a grid gives its launcher."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __getitem__(self, grid):  # (Triton loads the module onto the current device here)
        self.indexed = grid
        return lambda *args, stream=None: self.calls.append((self.name, grid, args, stream))


@pytest.fixture
def fake_cuda(monkeypatch):
    import contextlib

    import torch

    entered = []

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        yield

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 100 + index, raising=False)
    return entered


def test_device_loader_compiles_now_then_once_per_further_device(fake_cuda):
    calls, built = [], []

    def compile():
        built.append(len(built))
        return _FakeCompiled(f"m{len(built)}", calls)

    load = TB.device_loader(compile)
    assert built == [0]  # the first module is compiled when the loader is made, not at the first launch
    first, second = load(0), load(1)
    assert (first.name, second.name, built) == ("m1", "m2", [0, 1])
    assert first.indexed == second.indexed == (1, 1, 1) and calls == []  # loaded, not launched
    assert fake_cuda == [0, 1]
    given = _FakeCompiled("given", calls)
    assert TB.device_loader(compile, first=given)(0) is given


def test_per_device_loads_once_a_device_and_not_while_frozen(fake_cuda):
    from flashinfer.experimental.b12x._lib.freeze import (
        KernelResolutionFrozenError,
        freeze_kernel_resolution,
        unfreeze_kernel_resolution,
    )

    loads = []
    modules = TB.PerDevice("op.x", "key-1", lambda index: loads.append(index) or f"module{index}")
    assert (modules.get(0), modules.get(0), modules.get(1)) == ("module0", "module0", "module1")
    assert loads == [0, 1]
    freeze_kernel_resolution("test")
    try:
        assert modules.get(1) == "module1"  # already loaded: no resolution
        with pytest.raises(KernelResolutionFrozenError, match=r"key-1 \(load on device 2\)"):
            modules.get(2)
    finally:
        unfreeze_kernel_resolution()
    assert loads == [0, 1]


def test_launch_on_stream_uses_the_devices_current_stream(fake_cuda):
    calls = []
    fn = _FakeCompiled("k", calls)
    TB.launch_on_stream(fn, (3, 1, 1), 0, "a", 7)
    TB.launch_on_stream(fn, (2, 2, 1), 1, "b")
    assert calls == [("k", (3, 1, 1), ("a", 7), 100), ("k", (2, 2, 1), ("b",), 101)]
    assert fake_cuda == [1]  # only the launch on a device other than the current one switches to it
