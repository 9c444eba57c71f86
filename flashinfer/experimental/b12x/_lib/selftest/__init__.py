"""The spine's self-test: y = a * x + b * y through the real compile, cache and launch path.

`axpby(x, y, a, b)` updates y in place: CUDA tensors run the CuTe kernel (`_kernel_axpby`) on
`torch.cuda.current_stream()`, CPU tensors run `axpby_reference`. Used by the spine tests, the GPU
tests and `register_custom_ops` (the `b12x::selftest_axpby_` op). Importing this package loads
nothing heavy: torch and the CuTe DSL load on first call.
"""

# No `from __future__ import annotations`: torch.library reads the custom op's annotations, and
# they must evaluate to real types where `register_custom_ops` defines it.
_DTYPES = ("bfloat16", "float16", "float32")


def axpby_reference(x, y, a: float, b: float):
    """a * x + b * y computed in float32 and rounded once to y's dtype (a new tensor)."""
    import torch

    return (a * x.to(torch.float32) + b * y.to(torch.float32)).to(y.dtype)


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _check(x, y) -> None:
    import torch

    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if _dtype_name(t) not in _DTYPES or t.dim() not in (1, 2) or not t.is_contiguous():
            raise ValueError(
                f"{name} must be a contiguous {'/'.join(_DTYPES)} tensor [N] or [M, N], got "
                f"{_dtype_name(t)} {list(t.shape)}{'' if t.is_contiguous() else ' (non-contiguous)'}"
            )
    if x.dtype != y.dtype or x.shape != y.shape or x.device != y.device:
        raise ValueError(
            f"x and y must match in dtype, shape and device, got x {_dtype_name(x)} {list(x.shape)} on "
            f"{x.device} and y {_dtype_name(y)} {list(y.shape)} on {y.device}"
        )


def axpby(x, y, a: float, b: float):
    """y = a * x + b * y in place; returns y. CUDA: the CuTe kernel; CPU: the reference."""
    _check(x, y)
    if y.numel() == 0:
        return y
    if y.device.type != "cuda":
        y.copy_(axpby_reference(x, y, a, b))
        return y
    from ..arch import target_arch
    from ._kernel_axpby import compile_axpby

    for name, t in (("x", x), ("y", y)):
        if t.data_ptr() % 16:
            raise ValueError(f"{name} must start 16-byte aligned, got address {t.data_ptr():#x}")
    launch = compile_axpby(*launch_key(y, target_arch(y.device)))
    launch(x, y, float(a), float(b))
    return y


def launch_key(y, arch: str) -> tuple:
    """The compile key `axpby` uses for `y`: static facts only, so M (or N of 1-D) is not in it."""
    from ._kernel_axpby import default_config

    dtype = _dtype_name(y)
    n_cols = None if y.dim() == 1 else int(y.shape[1])
    return dtype, n_cols, default_config(dtype, n_cols), arch


def register_custom_ops():
    """Register `torch.ops.b12x.selftest_axpby_` (mutates y); returns the op. Idempotent."""
    import torch

    from ..custom_op import register_op

    def selftest_axpby_(x: torch.Tensor, y: torch.Tensor, a: float, b: float) -> None:
        axpby(x, y, a, b)

    selftest_axpby_.__qualname__ = "selftest_axpby_"  # one identity across calls (idempotence)
    return register_op("selftest_axpby_", selftest_axpby_, mutates_args=("y",))
