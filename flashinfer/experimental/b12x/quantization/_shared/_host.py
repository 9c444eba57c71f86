"""Host code both activation quantizers' api.py share: launcher lookup, timing and the
checks of caller tensors (no kernel code; generic checks live in `_lib.checks`)."""

from __future__ import annotations

import torch

from ..._lib.checks import check_aligned, describe
from ..._lib.scratch import dtype_name


def launcher(state, views=None):
    """The plan's resolved launcher (`as_launcher` of its one kernel), looked up once per prepared selection (a
    memory-cache hit).

    Keyed on the identity of `state.kernels`: a re-prepare (new selection) replaces that tuple, so
    a stale launcher is never reused."""
    cached = state.extra.get("launcher")
    if cached is not None and cached[0] is state.kernels:
        return cached[1]
    fn = as_launcher(*state.kernels[0], views)
    state.extra["launcher"] = (state.kernels, fn)
    return fn


def as_launcher(compile_fn, args, views=None):
    """`compile_fn(*args)`, called as the Triton launchers are. A CuTe kernel's tvm-ffi function takes fixed dtypes,
    so for one the positional arguments in `views` ({index: dtype}) are viewed as those dtypes when they differ
    (the caller may pass another one-byte dtype of the same storage)."""
    fn = compile_fn(*args)
    if not views or getattr(compile_fn, "backend", None) != "cute":
        return fn

    def launch(*call):
        call = list(call)
        for i, dtype in views.items():
            if call[i].dtype != dtype:
                call[i] = call[i].view(dtype)
        fn(*call)

    return launch


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
