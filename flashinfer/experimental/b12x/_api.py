"""b12x: kernels for local LLM inference on consumer Blackwell GPUs (SM120/SM121), in FlashInfer.

This module IS `b12x` and `flashinfer.experimental.b12x` (one object; see `_lib/identity.py`).
Importing it loads no torch, no CuTe DSL and no Triton: groups (`b12x.gemm`, ...) and the serving
names (`PreparationSession`, ...) are resolved on first use.

    import b12x
    b12x.list_ops()                         # every op's OpMeta
    b12x.find_op("quantization.nvfp4")      # one op's OpMeta
    b12x.quantization.nvfp4.is_supported()  # can it run here?
"""

from __future__ import annotations

import importlib
import sys

from ._lib.freeze import (
    KernelResolutionFrozenError,
    freeze_kernel_resolution,
    kernel_resolution_frozen,
    unfreeze_kernel_resolution,
)
from ._lib.meta import GROUPS, OpMeta

# The registry: qualname -> op package (relative to this package). Static on purpose: listing ops
# must not walk the disk or import kernels. tests/experimental/b12x/contract/test_registry.py keeps
# it in lockstep with the op folders on disk.
_OPS: dict[str, str] = {
    "quantization.nvfp4": ".quantization.nvfp4",
    "quantization.mxfp8": ".quantization.mxfp8",
    "attention.paged": ".attention.paged",
    "norm.mhc": ".norm.mhc",
    "gemm.blockscaled": ".gemm.blockscaled",
    "gemm.mxfp8_linear": ".gemm.mxfp8_linear",
    "gemm.tensor_fp8_linear": ".gemm.tensor_fp8_linear",
    "gemm.block_fp8_linear": ".gemm.block_fp8_linear",
    "moe.fused_moe": ".moe.fused_moe",
}

# Root names resolved lazily (module relative to this package, attribute).
_LAZY_ROOT: dict[str, tuple[str, str]] = {
    "PreparationSession": (".preparation.session", "PreparationSession"),
    "PreparationRequest": (".preparation.plan", "PreparationRequest"),
    "PreparationResult": (".preparation.session", "PreparationResult"),
    "Plan": (".preparation.plan", "Plan"),
    "ScratchBufferSpec": ("._lib.scratch", "ScratchBufferSpec"),
}

# Subsystems that are not ops (no OpMeta), resolved like the groups.
_LAZY_MODULES = ("loader",)

__all__ = [
    "OpMeta",
    "list_ops",
    "find_op",
    "clear_all_caches",
    "freeze_kernel_resolution",
    "unfreeze_kernel_resolution",
    "kernel_resolution_frozen",
    "KernelResolutionFrozenError",
    *_LAZY_ROOT,
    *GROUPS,
    *_LAZY_MODULES,
]


def _op_module(qualname: str):
    return importlib.import_module(_OPS[qualname], __package__)


def list_ops() -> tuple[OpMeta, ...]:
    """Every registered op's metadata, sorted by qualname (imports only the cheap op packages)."""
    return tuple(_op_module(q).META for q in sorted(_OPS))


def find_op(qualname: str) -> OpMeta:
    """The OpMeta of `qualname` ("group.op"); KeyError lists the known ops."""
    if qualname not in _OPS:
        known = ", ".join(sorted(_OPS)) or "(none)"
        raise KeyError(f"unknown b12x op {qualname!r}; known ops: {known}")
    return _op_module(qualname).META


def clear_all_caches() -> None:
    """Drop in-memory compiled kernels and selections of every op imported so far.

    Ops never imported have nothing cached; they are not imported just to be cleared. The disk
    cache is left alone (`python -m b12x cache clear` removes it).
    """
    for rel in _OPS.values():
        module = sys.modules.get(__package__ + rel)
        clear = getattr(module, "clear_caches", None) if module is not None else None
        if clear is not None:
            clear()
    compile_mod = sys.modules.get(__package__ + "._lib.compile")
    if compile_mod is not None:
        compile_mod.clear_memory_cache()


def __getattr__(name: str):
    if name in GROUPS or name in _LAZY_MODULES:
        value = importlib.import_module("." + name, __package__)
    elif name in _LAZY_ROOT:
        module, attr = _LAZY_ROOT[name]
        value = getattr(importlib.import_module(module, __package__), attr)
    else:
        raise AttributeError(f"module 'b12x' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
