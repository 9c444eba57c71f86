"""Frozen kernel resolution: once serving starts, nothing compiles.

After `freeze_kernel_resolution(reason)`, resolving a kernel that is not already in memory raises
`KernelResolutionFrozenError` instead of compiling, even when the disk cache holds it (a disk load
still costs milliseconds and module loads on the hot path). Resolving a kernel while a CUDA graph is
being captured raises the same error, frozen or not.

Stdlib only at import time (the root `b12x` re-exports these names and must not import torch).
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_frozen_reason: str | None = None


class KernelResolutionFrozenError(RuntimeError):
    """A kernel had to be compiled or loaded while resolution was frozen or a graph was captured."""

    def __init__(self, op: str, key: str, reason: str) -> None:
        self.op, self.key, self.reason = op, key, reason
        super().__init__(
            f"{op}: kernel {key} is not resolved and kernel resolution is frozen ({reason}). "
            "Warm it before freezing: prepare the op's plan in a PreparationSession (or call its "
            "prewarm/first run for one-shot ops) with the same static shapes and dtypes, then freeze."
        )


def freeze_kernel_resolution(reason: str = "frozen") -> None:
    """Forbid compiling or loading kernels from now on; `reason` appears in every error."""
    global _frozen_reason
    if not isinstance(reason, str) or not reason:
        raise ValueError(f"reason must be a non-empty str, got {reason!r}")
    with _lock:
        _frozen_reason = reason


def unfreeze_kernel_resolution() -> None:
    global _frozen_reason
    with _lock:
        _frozen_reason = None


def kernel_resolution_frozen() -> bool:
    return _frozen_reason is not None


def frozen_reason() -> str | None:
    return _frozen_reason


def _capturing() -> bool:
    torch = sys.modules.get("torch")  # a process that never imported torch captures nothing
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def check_may_resolve(op: str, key: str) -> None:
    """Raise KernelResolutionFrozenError if a kernel may not be compiled or loaded now."""
    reason = _frozen_reason
    if reason is not None:
        raise KernelResolutionFrozenError(op, key, reason)
    if _capturing():
        raise KernelResolutionFrozenError(op, key, "a CUDA graph is being captured")
