"""The torch custom op of moe.fused_moe (`torch.ops.b12x.moe_fused_moe_run_`), for torch.compile.

Under torch.compile `bind` checks shapes, dtypes and devices as usual (traced) and allocates the output where the
caller gave none; `run` then records this op, one opaque node that writes that output. At run time the op binds
again (every eager check: addresses, the plan's own workspace) and runs the eager path into it, the reference on
CPU tensors, the device pipeline on CUDA ones. The plan passes as its integer handle. The `ExpertWeights` pass as
their tensors (block scales as bytes) and are rebuilt around the plan's weight plan, which eager bind requires them
to carry (as gemm.blockscaled passes a packed `Weight`): no registry whose entries could outlive or miss their
weights, the graph records the op's reads of them, and layers whose weights share shapes share one compiled graph.
The plan's workspace stays out of the graph (a caller's `scratch` is refused under torch.compile): AOTAutograd
cannot take writes into views of one arena whose views have several dtypes. Private names: the Python API is the
supported surface. (No `from __future__ import annotations`: torch infers the op's schema from these annotations.)
"""

from typing import Optional

import torch

from ..._lib.checks import describe
from ..._lib.custom_op import eager_binding_refused, register_op
from ...preparation.plan import plan_from_handle
from .weights import ExpertWeights


def moe_fused_moe_run_(
    handle: int,
    a: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    output: torch.Tensor,
    w1_values: torch.Tensor,
    w1_scales: torch.Tensor,
    w1_alpha: torch.Tensor,
    w2_values: torch.Tensor,
    w2_scales: torch.Tensor,
    w2_alpha: torch.Tensor,
    a1_gscale: Optional[torch.Tensor],  # noqa: UP045 - torch's schema inference knows Optional
    a2_gscale: Optional[torch.Tensor],  # noqa: UP045
) -> None:
    """w*/a*_gscale: the `ExpertWeights` fields of that name, the block scales as their bytes (uint8; torch's
    schema checks cannot compare float8 tensors); output: a's dtype [T, H]."""
    from . import api

    plan = plan_from_handle(handle)
    wp = plan.caps.weight_plan
    if wp.weight_format == "nvfp4":  # E4M3 scales (MXFP4's UE8M0 stay uint8)
        w1_scales, w2_scales = w1_scales.view(torch.float8_e4m3fn), w2_scales.view(torch.float8_e4m3fn)
    experts = ExpertWeights(wp, w1_values, w1_scales, w1_alpha, w2_values, w2_scales, w2_alpha, a1_gscale, a2_gscale)
    binding = api.bind(plan, a=a, experts=experts, topk_weights=topk_weights, topk_ids=topk_ids, output=output)
    api.run(binding=binding)


def call(b) -> torch.Tensor:
    """A traced binding's run as one call of the op (`api.FusedMoeBinding` b, made by bind under torch.compile: the
    call's own tensors and an output); returns that output."""
    if not b.traced:  # made eagerly: on CUDA it holds the plan's workspace views, which the op cannot take
        raise eager_binding_refused()
    ex = b.experts
    u8 = torch.uint8
    OP(b.plan.state.handle, b.a, b.topk_weights, b.topk_ids, b.output, ex.w1_values, ex.w1_scales.view(u8),
       ex.w1_alpha, ex.w2_values, ex.w2_scales.view(u8), ex.w2_alpha, ex.a1_gscale, ex.a2_gscale)  # fmt: skip
    return b.output


def traced_binding(plan, scratch, a, experts, topk_weights, topk_ids, output):
    """bind's result under torch.compile (arguments checked as in eager bind, but for what needs an address): the
    call's own tensors for the op (`call`), output allocated (traced) where the caller gave none, no workspace."""
    from .api import FusedMoeBinding

    if a.device.type != "cpu":
        if scratch is not None:
            raise ValueError(
                "scratch must be None under torch.compile (the op runs in the plan's own workspace): AOTAutograd "
                "cannot take writes into views of one arena"
            )
        for name, t in (("a", a), ("output", output)):  # alignment: checked when the op binds again
            if t is not None and not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous on CUDA, got {describe(t)}")
    if output is None:
        output = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    return FusedMoeBinding(plan, a, experts, topk_weights, topk_ids, output, traced=True)


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op("moe_fused_moe_run_", moe_fused_moe_run_, mutates_args=("output",))
