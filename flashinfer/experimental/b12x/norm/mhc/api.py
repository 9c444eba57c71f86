"""norm.mhc host API: Caps -> plan -> PreparationSession -> bind -> run_pre / run_post / run_post_pre.

This module holds the entry points; Caps, MhcPlan and plan() live in _plan.py, bind() and the
argument checks in _validate.py, the launches in _execute.py (all re-exported here).

Launches per call (CUDA), two-pass path (sm_90a's default at every T): run_pre 2 (pass 1 split-K
mixes, pass 2 finish + y), plus the fn split launch before pass 1 when its tile reads fn split once
(sm_90a above MhcConfig.mid_max_tokens; pre_mid between, in-loop split); run_post_pre 2 up to small_max_tokens (pass 1 writes the
new residual and its mixes, pass 2 as in pre) and, with MhcConfig.post_pre_split, post's kernel then
pre's launches above it. 1 for pre / bcast at T >= MhcConfig.fused_min_tokens with
MhcConfig.fused_pre (the one-launch kernel, _kernel_fused.py: sm_120a's default from 8192 tokens);
1 with MhcConfig.last at T <= last.max_tokens (_kernel_last.py: the last program to arrive finishes,
with or without a norm weight), MhcConfig.small at T <= small.max_tokens or MhcConfig.tiny at
T <= tiny.max_tokens without a norm weight (_kernel_tiny.py), all off by default; MhcConfig.wide makes pass 2 the wide kernel at
T <= 4 without a norm weight (_kernel_wide.py, on by default; on sm_90a post and comb in a program of
their own). On sm_90a pre's and post_pre's calls up to 32 / 64 tokens launch their kernels as programmatic
dependents, with a split target by token count (MhcConfig.small_launches). run_post is always 1. No call
allocates (caller-buffer form), compiles or syncs the host: capture them in CUDA graphs. CPU tensors
run `reference.py` (one warning per process, from PreparationSession).

Functional form: leave the `*_out` arguments None and the outputs are allocated and returned.
Caller-buffer form (the graph-capture form): pass every output, or bind them once per live size
(`bind(plan, num_tokens=T, y_out=..., ...)`, views of capacity-sized buffers) and pass `binding=`.
`plan=None` prepares a default plan per (device, hidden size, dtype) on first use (it obeys freeze).
"""

from __future__ import annotations

import torch

from ._config import (
    ApplyConfig,
    FusedConfig,
    LastConfig,
    MhcConfig,
    RowConfig,
    SmallConfig,
    StreamConfig,
    WideConfig,
    split_for,
)
from ._execute import execute_post, execute_post_pre, execute_pre  # noqa: F401 - _ops calls them through api
from ._plan import DEFAULT_SM_COUNT, FORMS, OP, Caps, MhcPlan, plan, synthetic_inputs  # noqa: F401
from ._validate import (
    MhcBinding,
    _check,
    _check_mix_params,
    _check_post_inputs,
    _check_scalars,
    _outputs,
    _require_form,
    _require_tensor,
    _resolve_plan,
    _tokens,
    bind,
    clear_caches,  # noqa: F401 - the package's clear_caches calls api.clear_caches
)
from .reference import MIXES, MULT

# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def run_pre(
    residual,
    fn,
    hc_scale,
    hc_base,
    *,
    rms_eps,
    hc_eps,
    sinkhorn_iters,
    plan=None,
    residual_out=None,
    y_out=None,
    post_out=None,
    comb_out=None,
    norm_weight=None,
    norm_eps=0.0,
    binding=None,
):
    """(residual, post, comb, y) of the pre half. residual [T, 4, H] (returned as is: residual_out
    must be None), or x [T, H] for the broadcast first layer (its 4-stream repeat is written to
    residual_out and returned; fn may then be [24, 4H] or folded [24, H])."""
    _require_tensor("residual", residual, (2, 3), "[T, 4, H] (or x [T, H], the broadcast form)")
    bcast = residual.dim() == 2
    hidden, dev, dtype = residual.shape[-1], residual.device, residual.dtype
    p = _resolve_plan(plan, binding, dev, hidden, dtype, residual.shape[0])
    _require_form(p, "bcast" if bcast else "pre")
    caps = p.caps
    t = _tokens("residual", residual, caps, ndim_tail=(caps.hidden_size,) if bcast else (MULT, caps.hidden_size))
    _check(
        "residual", residual, caps.dtype, (t, caps.hidden_size) if bcast else (t, MULT, caps.hidden_size), caps.device
    )
    fn_cols = (MULT * caps.hidden_size, caps.hidden_size) if bcast else (MULT * caps.hidden_size,)
    _check_mix_params(caps, fn, hc_scale, hc_base, norm_weight, fn_cols=fn_cols)
    _check_scalars(rms_eps, hc_eps, sinkhorn_iters, norm_eps)
    if not bcast and residual_out is not None:  # (a binding's residual_out is simply not used here)
        raise ValueError(
            "residual_out is written only by the broadcast form (x [T, H]); a [T, 4, H] residual is returned as is"
        )
    given = {"y_out": y_out, "post_out": post_out, "comb_out": comb_out}
    if bcast:
        given["residual_out"] = residual_out
    outs = _outputs(caps, t, given, binding)
    scal = dict(
        rms_eps=float(rms_eps), hc_eps=float(hc_eps), sinkhorn_iters=int(sinkhorn_iters), norm_eps=float(norm_eps)
    )
    if torch.compiler.is_compiling():
        _ops().pre(
            p.handle,
            residual,
            fn,
            hc_scale,
            hc_base,
            outs.get("residual_out"),
            outs["y_out"],
            outs["post_out"],
            outs["comb_out"],
            norm_weight,
            **scal,
        )
    else:
        execute_pre(p, residual, fn, hc_scale, hc_base, outs, norm_weight, binding, **scal)
    return outs.get("residual_out", residual), outs["post_out"], outs["comb_out"], outs["y_out"]


def run_post(x, residual, prev_post, prev_comb, *, plan, out=None):
    """residual'[:, j] = prev_post[:, j] * x + sum_i prev_comb[:, i, j] * residual[:, i] ([T, 4, H]).

    `out` may be `residual` itself (in place); plan is required (use the one run_pre got).
    """
    if plan is None:
        raise ValueError(f"{OP} run_post: plan is required (the plan of the matching run_pre)")
    p = _resolve_plan(plan, None, None, None, None, None)
    _require_form(p, "post")
    caps = p.caps
    t = _tokens("residual", residual, caps, ndim_tail=(MULT, caps.hidden_size))
    _check_post_inputs(caps, t, x, residual, prev_post, prev_comb)
    outs = _outputs(caps, t, {"residual_out": out}, None)
    if torch.compiler.is_compiling():
        _ops().post(p.handle, x, residual, prev_post, prev_comb, outs["residual_out"])
    else:
        execute_post(p, x, residual, prev_post, prev_comb, outs["residual_out"])
    return outs["residual_out"]


def run_post_pre(
    x,
    residual,
    prev_post,
    prev_comb,
    fn,
    hc_scale,
    hc_base,
    *,
    rms_eps,
    hc_eps,
    sinkhorn_iters,
    plan=None,
    residual_out=None,
    y_out=None,
    post_out=None,
    comb_out=None,
    norm_weight=None,
    norm_eps=0.0,
    binding=None,
):
    """run_post then run_pre on its result, fused: (residual', post, comb, y).

    residual_out may be `residual` itself (in place: each element is read before it is written, by
    the same program)."""
    _require_tensor("residual", residual, (3,), "[T, 4, H]")
    p = _resolve_plan(plan, binding, residual.device, residual.shape[-1], residual.dtype, residual.shape[0])
    _require_form(p, "post_pre")
    caps = p.caps
    t = _tokens("residual", residual, caps, ndim_tail=(MULT, caps.hidden_size))
    _check_post_inputs(caps, t, x, residual, prev_post, prev_comb)
    _check_mix_params(caps, fn, hc_scale, hc_base, norm_weight, fn_cols=(MULT * caps.hidden_size,))
    _check_scalars(rms_eps, hc_eps, sinkhorn_iters, norm_eps)
    given = {"residual_out": residual_out, "y_out": y_out, "post_out": post_out, "comb_out": comb_out}
    outs = _outputs(caps, t, given, binding)
    scal = dict(
        rms_eps=float(rms_eps), hc_eps=float(hc_eps), sinkhorn_iters=int(sinkhorn_iters), norm_eps=float(norm_eps)
    )
    o = (outs["residual_out"], outs["y_out"], outs["post_out"], outs["comb_out"])
    if torch.compiler.is_compiling():
        _ops().post_pre(p.handle, x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, *o, norm_weight, **scal)
    else:
        execute_post_pre(
            p, x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, outs, norm_weight, binding, **scal
        )
    return outs["residual_out"], outs["post_out"], outs["comb_out"], outs["y_out"]


def _ops():
    return _OPS  # registered at import: registering inside a torch.compile trace is not allowed


__all__ = ["Caps", "MhcConfig", "MhcPlan", "MhcBinding", "plan", "bind", "run_pre", "run_post", "run_post_pre"]
__all__ += [
    "ApplyConfig",
    "FusedConfig",
    "LastConfig",
    "RowConfig",
    "SmallConfig",
    "StreamConfig",
    "WideConfig",
    "MULT",
    "MIXES",
    "FORMS",
    "split_for",
    "synthetic_inputs",
]

from . import _ops as _ops_module  # noqa: E402 - registers the custom ops (it imports this module)

_OPS = _ops_module.register()
