"""The self-test kernel as a planned op: prepare -> bind -> run, like every real planned op.

Used by the spine's GPU tests (graph capture and replay through a prepared plan) and by
benchmarks/experimental/b12x/bench_spine.py (host time per `run`, warm/cold session start).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...preparation.plan import Plan
from ..scratch import ScratchBufferSpec, check_buffer


@dataclass(frozen=True)
class Caps:
    """max_rows: capacity of the live leading extent; n_cols: static row length (a compile key)."""

    max_rows: int
    n_cols: int
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if not isinstance(self.max_rows, int) or self.max_rows < 1:
            raise ValueError(f"max_rows must be an int >= 1, got {self.max_rows!r}")
        if not isinstance(self.n_cols, int) or self.n_cols < 1:
            raise ValueError(f"n_cols must be an int >= 1, got {self.n_cols!r}")


class AxpbyPlan(Plan):
    def heuristic(self, arch):
        from ._kernel_axpby import default_config

        return default_config(self.caps.dtype, self.caps.n_cols)

    def kernels(self, config, arch):
        from ._kernel_axpby import compile_axpby

        return ((compile_axpby, (self.caps.dtype, self.caps.n_cols, config, arch)),)

    def scratch_specs(self, config=None, device="cuda"):
        shape = (self.caps.max_rows, self.caps.n_cols)
        return (
            ScratchBufferSpec("x", shape, self.caps.dtype, device),
            ScratchBufferSpec("y", shape, self.caps.dtype, device),
        )

    def prime(self, state):
        x, y = state.scratch["x"], state.scratch["y"]
        x.fill_(1.0)
        y.fill_(2.0)
        if state.arch is not None:
            ((k, args),) = state.kernels
            state.extra["launch"] = k(*args)  # resolved during compile: a memory hit
        run(bind(self, x=x, y=y, a=1.0, b=1.0))


def plan(caps: Caps, *, invocation=None, override=None) -> AxpbyPlan:
    return AxpbyPlan(op="selftest.axpby", caps=caps, invocation=invocation, override=override)


@dataclass(frozen=True)
class Binding:
    plan: AxpbyPlan
    x: object
    y: object
    a: float
    b: float


def bind(plan: AxpbyPlan, *, x, y, a: float, b: float) -> Binding:
    """Checks and views only: live rows <= max_rows, row length and dtype from the caps."""
    state = plan.state
    rows = x.shape[0] if hasattr(x, "shape") and x.dim() == 2 else -1
    if not 0 <= rows <= plan.caps.max_rows:
        raise ValueError(f"x must be [rows <= max_rows={plan.caps.max_rows}, {plan.caps.n_cols}], got {list(x.shape)}")
    for name, t in (("x", x), ("y", y)):
        check_buffer(name, t, shape=(rows, plan.caps.n_cols), dtype=plan.caps.dtype, device=state.device)
    return Binding(plan, x, y, float(a), float(b))


def run(binding: Binding):
    """y = a * x + b * y on the current stream; never compiles, allocates or syncs."""
    state = binding.plan.state
    if state.arch is None:
        from . import axpby_reference

        binding.y.copy_(axpby_reference(binding.x, binding.y, binding.a, binding.b))
    elif binding.y.shape[0]:
        state.extra["launch"](binding.x, binding.y, binding.a, binding.b)
    return binding.y
