"""Register b12x kernels as torch custom ops in the private `b12x::` namespace.

torch.compile cannot trace into a tvm-ffi or Triton launch; a custom op with a fake (meta)
implementation is opaque to it instead: dynamo records one node, inductor/AOTAutograd call the real
implementation at run time, and the fake describes output shapes without running anything. The
Python API stays the supported surface; `torch.ops.b12x.*` names are private and may change.

    @register_op("norm_rmsnorm_", mutates_args=("out",))
    def rmsnorm_(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, eps: float) -> None:
        ...launch...

An op that returns None needs no fake (it gets a no-op one); an op that returns tensors must pass
`fake=` (shapes and dtypes from the inputs, allocating with `torch.empty` on their device).
"""

from __future__ import annotations

import inspect
import threading

import torch

NAMESPACE = "b12x"
_lock = threading.Lock()
_registered: dict[str, tuple[str, object]] = {}  # qualified name -> (impl qualname, op)


def _impl_id(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _returns_none(fn) -> bool:
    ret = inspect.signature(fn).return_annotation
    return ret is None or ret == "None"


def register_op(name: str, fn=None, *, mutates_args, fake=None, device_types=None):
    """Register `fn` as `torch.ops.b12x.<name>`; usable as a decorator. Returns the op object.

    mutates_args: names of the tensor arguments the op writes (an empty tuple for pure ops); torch
    uses it to order the op against other reads and writes. Registering the same name again with
    the same implementation (a re-import) returns the first op; another implementation raises.
    """
    if not name.isidentifier():
        raise ValueError(f"op name must be an identifier (it becomes torch.ops.{NAMESPACE}.<name>), got {name!r}")
    if isinstance(mutates_args, str):
        raise TypeError(f"mutates_args must be a tuple of argument names, got the string {mutates_args!r}")
    qualified = f"{NAMESPACE}::{name}"

    def register(impl):
        with _lock:
            known = _registered.get(qualified)
            if known is not None:
                if known[0] == _impl_id(impl):
                    return known[1]
                raise ValueError(f"{qualified} is already registered by {known[0]}, not {_impl_id(impl)}")
            op = torch.library.custom_op(qualified, mutates_args=tuple(mutates_args), device_types=device_types)(impl)
            if fake is not None:
                op.register_fake(fake)
            elif _returns_none(impl):
                op.register_fake(_noop_fake)
            else:
                raise TypeError(f"{qualified} returns tensors: pass fake= (a function computing its output metadata)")
            _registered[qualified] = (_impl_id(impl), op)
            return op

    return register if fn is None else register(fn)


def eager_binding_refused() -> ValueError:
    """The error of a planned op's `run` under torch.compile given a binding that bind made eagerly: such a binding
    holds the plan's scratch views, which the op cannot take (attention.paged, moe.fused_moe, block_fp8_linear)."""
    return ValueError(
        "a binding made outside torch.compile cannot run inside it: call bind in the compiled region too "
        "(traced, it checks shapes; the op binds again when it runs)"
    )


def _noop_fake(*args, **kwargs) -> None:
    return None


def registered_ops() -> dict[str, object]:
    """Every op registered through this helper in this process, by qualified name."""
    with _lock:
        return {name: op for name, (_, op) in _registered.items()}
