"""The torch custom op of quantization.mxfp8 (`torch.ops.b12x.quantization_mxfp8_quantize_rows_`), for
torch.compile: under it `quantize_rows` is one opaque node that writes the caller's three output tensors; at run
time the op runs the eager `quantize_rows` (its checks included; plan=None prepares its one-shot plan on the first
call, as eagerly). A plan travels as its integer handle (0: None). Private names: the Python API is the supported
surface. (No `from __future__ import annotations`: torch infers the op's schema from these annotations.)
"""

import torch

from ..._lib.custom_op import register_op
from ...preparation.plan import plan_from_handle


def quantization_mxfp8_quantize_rows_(
    source: torch.Tensor, values: torch.Tensor, scale_rows: torch.Tensor, scale_mma: torch.Tensor, plan_handle: int
) -> None:
    from . import api

    api.quantize_rows(
        source, values, scale_rows, scale_mma, plan=plan_from_handle(plan_handle) if plan_handle else None
    )


def call(source, values, scale_rows, scale_mma, plan) -> None:
    """`quantize_rows`'s arguments as one call of the op (a given plan must be prepared)."""
    handle = 0
    if plan is not None:
        handle = plan.state.handle  # raises PlanNotPreparedError naming PreparationSession
    OP(source, values, scale_rows, scale_mma, handle)


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op(
    "quantization_mxfp8_quantize_rows_",
    quantization_mxfp8_quantize_rows_,
    mutates_args=("values", "scale_rows", "scale_mma"),
)
