"""The torch custom op of quantization.nvfp4 (`torch.ops.b12x.quantization_nvfp4_quantize_`), for torch.compile:
under it `run` and `quantize` are one opaque node that writes the packed codes and the scales (`quantize` allocates
them first, traced); at run time the op runs the eager `run` (its checks included), or for `quantize` (plan handle
0) the one-shot plan's launch, prepared on the first call as eagerly. Private names: the Python API is the supported
surface. (No `from __future__ import annotations`: torch infers the op's schema from these annotations.)
"""

from typing import Optional

import torch

from ..._lib.custom_op import register_op
from ...preparation.plan import plan_from_handle


def quantization_nvfp4_quantize_(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    global_scale_tensor: Optional[torch.Tensor],  # noqa: UP045 - torch's schema inference knows Optional
    global_scale: float,
    plan_handle: int,
) -> None:
    from . import api

    gs = global_scale if global_scale_tensor is None else global_scale_tensor
    if plan_handle:
        api.run(plan=plan_from_handle(plan_handle), x=x, global_scale=gs, outputs=api.Outputs(packed, scales))
    else:
        api.quantize_into(x, gs, packed, scales)


def call(x, global_scale, packed, scales, plan) -> None:
    """`run`'s / `quantize`'s arguments as one call of the op (plan None: quantize's one-shot plan)."""
    handle = 0 if plan is None else plan.state.handle  # raises PlanNotPreparedError naming PreparationSession
    tensor = global_scale if isinstance(global_scale, torch.Tensor) else None
    OP(x, packed, scales, tensor, 1.0 if tensor is not None else float(global_scale), handle)


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op("quantization_nvfp4_quantize_", quantization_nvfp4_quantize_, mutates_args=("packed", "scales"))
