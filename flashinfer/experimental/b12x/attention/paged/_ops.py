"""The torch custom op of attention.paged (`torch.ops.b12x.attention_paged_run_`), for torch.compile.

Under torch.compile `bind` checks shapes and dtypes as usual (traced) and leaves the checks that read addresses or
live values to run time; `run` then records this op, one opaque node that writes the binding's output and LSE. At
run time the op binds again (the plan's own scratch, the caller's `check_values`) and runs, so every eager check
holds there. The plan passes as its integer handle. Private names: the Python API is the supported surface. (No
`from __future__ import annotations`: torch infers the op's schema from these annotations.)
"""

from typing import Optional

import torch

from ..._lib.custom_op import register_op
from ...preparation.plan import plan_from_handle


def attention_paged_run_(
    handle: int,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: Optional[torch.Tensor],  # noqa: UP045 - torch's schema inference knows Optional
    out: torch.Tensor,
    lse: torch.Tensor,
    k_descale: Optional[torch.Tensor],  # noqa: UP045
    v_descale: Optional[torch.Tensor],  # noqa: UP045
    sinks: Optional[torch.Tensor],  # noqa: UP045
    window_left: int,
    sm_scale: float,
    check_values: bool,
) -> None:
    from . import api

    binding = api.bind(
        plan_from_handle(handle), q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table,
        cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q, output=out, lse=lse, k_descale=k_descale,
        v_descale=v_descale, sinks=sinks, window_left=window_left, sm_scale=sm_scale, check_values=check_values,
    )  # fmt: skip
    api.run(binding=binding)


def call(b) -> None:
    """A traced binding's run as one call of the op (`api.Binding` b, made by bind under torch.compile: the call's
    own tensors, descales and sinks None where the caller gave none)."""
    OP(b.plan.state.handle, b.q, b.k_cache, b.v_cache, b.page_table, b.cache_seqlens, b.cu_seqlens_q, b.out, b.lse,
       b.k_descale, b.v_descale, b.sink, b.window_left, b.sm_scale, b.check_values)  # fmt: skip


def traced_binding(plan, q, k_cache, v_cache, page_table, cache_seqlens, cu, output, lse, descales, sink, window_left,
                    scale, check_values):  # fmt: skip
    """bind's result under torch.compile: the call's own tensors for the op (`call`), output and lse allocated
    (traced) where the caller gave none. The plan's scratch is left out: AOTAutograd cannot take writes into views
    of its one arena, whose views have several dtypes."""
    from .api import Binding

    c = plan.caps
    if output is None:
        output = torch.empty((q.shape[0], c.num_q_heads, c.head_dim_vo), dtype=q.dtype, device=q.device)
    if lse is None:
        lse = torch.empty((q.shape[0], c.num_q_heads), dtype=torch.float32, device=q.device)
    return Binding(
        plan=plan, q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, cache_seqlens=cache_seqlens,
        out=output, lse=lse, k_descale=descales[0], v_descale=descales[1], sink=sink, has_sink=int(sink is not None),
        window_left=window_left, sm_scale=scale, work=None, scratch={}, cu_seqlens_q=cu, check_values=check_values,
    )  # fmt: skip


# Registered when api imports this module (registering inside a trace is not allowed).
OP = register_op("attention_paged_run_", attention_paged_run_, mutates_args=("out", "lse"))
