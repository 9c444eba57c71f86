"""The torch custom ops of gemm.block_fp8_linear (`torch.ops.b12x.block_fp8_linear_run_` and, for `quantize_input`
called on its own, `torch.ops.b12x.block_fp8_linear_quantize_input_`), for torch.compile.

Under torch.compile `bind` checks shapes and dtypes as usual (traced) and allocates the output (a new tensor in
either output mode); `run` then records this op, one opaque node that writes that output. At run time the op binds
again (every eager check, the plan's own scratch for the quantized activation) and runs the eager path into it. The
plan passes as its integer handle, the packed Weight as its tensors (the E4M3 values as their bytes) and is rebuilt
from the plan's caps. The plan's scratch stays out of the graph, and so does a caller's `workspace` (refused under
torch.compile): AOTAutograd cannot take writes into views of one arena whose views have several dtypes. Private
names: the Python API is the supported surface. (No `from __future__ import annotations`: torch infers the op's
schema from these annotations.)
"""

from dataclasses import replace
from typing import Optional

import torch

from ..._lib.custom_op import eager_binding_refused, register_op
from ..._lib.scratch import check_buffer
from ...preparation.plan import plan_from_handle
from .._shared.weight import Weight


def block_fp8_linear_run_(
    handle: int,
    source: torch.Tensor,
    weight_values: torch.Tensor,
    weight_scales: torch.Tensor,
    weight_alpha: torch.Tensor,
    weight_input_scale: Optional[torch.Tensor],  # noqa: UP045 - torch's schema inference knows Optional
    bias: Optional[torch.Tensor],  # noqa: UP045
    out: torch.Tensor,
) -> None:
    """weight_values: the packed Weight's E4M3 values as uint8 bytes [N, K]; out: [T, N] in the output dtype."""
    from . import api

    plan = plan_from_handle(handle)
    c = plan.caps
    weight = Weight("fp8_block", weight_values.view(torch.float8_e4m3fn), weight_scales, weight_alpha,
                    c.out_features, c.in_features, weight_input_scale)  # fmt: skip
    b = api.bind(plan, source=source, packed_weight=weight, bias=bias)
    check_buffer("out", out, shape=(b.tokens, c.out_features), dtype=c.out_dtype, device=plan.state.device)
    api.run(binding=replace(b, output=out))


def block_fp8_linear_quantize_input_(
    handle: int, source: torch.Tensor, values: torch.Tensor, scales: torch.Tensor
) -> None:
    """`quantize_input` of a prepared plan into (values, scales), the eager call's checks included."""
    from . import api

    api.quantize_input(source, plan=plan_from_handle(handle), out=(values, scales))


def call(b, stream) -> torch.Tensor:
    """A traced binding's run as one call of the op (`api.Binding` b, made by bind under torch.compile: no scratch
    views, its own output); returns that output."""
    if b.values is not None:  # made eagerly: it holds the plan's (or the caller's) scratch views
        raise eager_binding_refused()
    if stream is not None:
        raise ValueError("stream= is not supported under torch.compile: the op runs on the current stream")
    w = b.weight
    OP(b.plan.state.handle, b.source, w.values.view(torch.uint8), w.scales, w.alpha, w.input_scale, b.bias, b.output)
    return b.output


def traced_binding(plan, source, packed_weight, bias, workspace, tokens: int):
    """bind's result under torch.compile: the call's own tensors for the op (`call`) and a new output, in either
    output mode (the plan's scratch is left out of the graph; a caller's workspace is refused)."""
    from .api import TORCH_OUT, Binding

    if workspace is not None:
        raise ValueError(
            "workspace must be None under torch.compile (the op runs in the plan's scratch and the output is a new "
            "tensor): AOTAutograd cannot take writes into views of one arena"
        )
    c = plan.caps
    out = torch.empty((tokens, c.out_features), dtype=TORCH_OUT[c.out_dtype], device=source.device)
    return Binding(plan, source, packed_weight, bias, None, None, out, tokens)


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op("block_fp8_linear_run_", block_fp8_linear_run_, mutates_args=("out",))
QUANT_OP = register_op(
    "block_fp8_linear_quantize_input_", block_fp8_linear_quantize_input_, mutates_args=("values", "scales")
)
