"""torch custom ops of norm.mhc (`torch.ops.b12x.norm_mhc_{pre,post,post_pre}_`), for torch.compile.

Under `torch.compile` the entry points of api.py validate and allocate as usual (traced), then call
these ops instead of launching: each is one opaque node that writes its output buffers (hence no
fake beyond a no-op). They take the plan's integer handle; the plan's workspace is internal state.
Private names: the Python API is the supported surface. (No `from __future__ import annotations`:
torch infers each op's schema from these annotations.)
"""

from types import SimpleNamespace

import torch

from ...preparation.plan import plan_from_handle
from . import api

_OPS = None


def norm_mhc_pre_(
    handle: int,
    residual: torch.Tensor,
    fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    residual_out: torch.Tensor | None,
    y_out: torch.Tensor,
    post_out: torch.Tensor,
    comb_out: torch.Tensor,
    norm_weight: torch.Tensor | None,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    norm_eps: float,
) -> None:
    outs = {"y_out": y_out, "post_out": post_out, "comb_out": comb_out}
    if residual_out is not None:
        outs["residual_out"] = residual_out
    scal = dict(rms_eps=rms_eps, hc_eps=hc_eps, sinkhorn_iters=sinkhorn_iters, norm_eps=norm_eps)
    api.execute_pre(plan_from_handle(handle), residual, fn, hc_scale, hc_base, outs, norm_weight, **scal)


def norm_mhc_post_(
    handle: int,
    x: torch.Tensor,
    residual: torch.Tensor,
    prev_post: torch.Tensor,
    prev_comb: torch.Tensor,
    out: torch.Tensor,
) -> None:
    api.execute_post(plan_from_handle(handle), x, residual, prev_post, prev_comb, out)


def norm_mhc_post_pre_(
    handle: int,
    x: torch.Tensor,
    residual: torch.Tensor,
    prev_post: torch.Tensor,
    prev_comb: torch.Tensor,
    fn: torch.Tensor,
    hc_scale: torch.Tensor,
    hc_base: torch.Tensor,
    residual_out: torch.Tensor,
    y_out: torch.Tensor,
    post_out: torch.Tensor,
    comb_out: torch.Tensor,
    norm_weight: torch.Tensor | None,
    rms_eps: float,
    hc_eps: float,
    sinkhorn_iters: int,
    norm_eps: float,
) -> None:
    outs = {"residual_out": residual_out, "y_out": y_out, "post_out": post_out, "comb_out": comb_out}
    scal = dict(rms_eps=rms_eps, hc_eps=hc_eps, sinkhorn_iters=sinkhorn_iters, norm_eps=norm_eps)
    p = plan_from_handle(handle)
    api.execute_post_pre(p, x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, outs, norm_weight, **scal)


def register() -> SimpleNamespace:
    """Register the three ops once per process; returns them as .pre, .post, .post_pre."""
    global _OPS
    if _OPS is None:
        from ..._lib.custom_op import register_op

        outs = ("residual_out", "y_out", "post_out", "comb_out")
        _OPS = SimpleNamespace(
            pre=register_op("norm_mhc_pre_", norm_mhc_pre_, mutates_args=outs),
            post=register_op("norm_mhc_post_", norm_mhc_post_, mutates_args=("out",)),
            post_pre=register_op("norm_mhc_post_pre_", norm_mhc_post_pre_, mutates_args=outs),
        )
    return _OPS
