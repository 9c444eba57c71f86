"""Host code both activation quantizers' api.py share: launcher lookup, timing and the
checks of caller tensors (no kernel code; generic checks live in `_lib.checks`)."""

from __future__ import annotations

import torch

from ..._lib.checks import check_aligned, describe
from ..._lib.scratch import dtype_name


def launcher(state):
    """The plan's resolved launcher, looked up once per prepared selection (a memory-cache hit).

    Keyed on the identity of `state.kernels`: a re-prepare (new selection) replaces that tuple, so
    a stale launcher is never reused."""
    cached = state.extra.get("launcher")
    if cached is not None and cached[0] is state.kernels:
        return cached[1]
    compile_fn, args = state.kernels[0]
    fn = compile_fn(*args)
    state.extra["launcher"] = (state.kernels, fn)
    return fn


def seconds_per_run(fn, warmup: int = 3, iters: int = 20) -> float:
    """Mean device seconds of `fn()` on the current stream (CUDA events; for Plan.measure)."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def check_kernel_aligned(name: str, t: torch.Tensor, state, align: int) -> None:
    """Alignment matters only to the compiled kernel; the CPU reference (arch None) takes any."""
    if state.arch is not None:
        check_aligned(name, t, align)


def check_tensor(name: str, t, dtypes, shape, state, align: int) -> None:
    """ValueError unless `t` is one of `dtypes`, exactly `shape`, contiguous on the plan's device
    and (for the kernel) `align`-byte aligned."""
    if (
        not isinstance(t, torch.Tensor)
        or t.dtype not in dtypes
        or tuple(t.shape) != shape
        or t.device != state.device
        or not t.is_contiguous()
    ):
        names = " or ".join(dtype_name(d) for d in dtypes)
        raise ValueError(f"{name} must be {names} {list(shape)} contiguous on {state.device}, got {describe(t)}")
    check_kernel_aligned(name, t, state, align)
