"""norm.mhc binding and validation: bind() / MhcBinding (views for calls at a live size), the
checks of every entry point's arguments (errors name the argument, the expectation and what came),
the output buffers, and the plan a call runs on (its own, a binding's, or the functional form's
per-device default plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..._lib.checks import describe as _describe
from ._plan import OP, Caps, MhcPlan, _dname, _hidden_ok, _is_int, plan
from .reference import MIXES, MULT


@dataclass(frozen=True)
class MhcBinding:
    """Views for calls at `num_tokens` live tokens: the workspace and optional output buffers."""

    plan: MhcPlan
    num_tokens: int
    scratch: dict
    residual_out: torch.Tensor | None = None
    y_out: torch.Tensor | None = None
    post_out: torch.Tensor | None = None
    comb_out: torch.Tensor | None = None


_OUT_SHAPES = {"residual_out": (MULT, None), "y_out": (None,), "post_out": (MULT,), "comb_out": (MULT, MULT)}


def bind(plan: MhcPlan, **kwargs) -> MhcBinding:
    """Views for calls at `num_tokens` tokens (checks only: never allocates, never writes).

    Keywords: num_tokens (required, 0..max_tokens); scratch (a dict of workspace views named like
    the plan's scratch specs; default the plan's own); residual_out, y_out, post_out, comb_out:
    buffers whose leading dimension is at least num_tokens (sliced to it).
    """
    allowed = {"num_tokens", "scratch", *_OUT_SHAPES}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"bind() got unexpected keyword(s) {unknown}; allowed: {sorted(allowed)}")
    if not isinstance(plan, MhcPlan):
        raise TypeError(f"plan must be a norm.mhc plan (mhc.plan(caps)), got {type(plan).__name__}")
    state = plan.state  # raises PlanNotPreparedError naming PreparationSession
    caps, t = plan.caps, kwargs.get("num_tokens")
    if not _is_int(t) or not 0 <= t <= caps.max_tokens:
        raise ValueError(f"num_tokens must be an int in [0, max_tokens={caps.max_tokens}], got {t!r}")
    scratch = kwargs.get("scratch")
    if scratch is None:
        scratch = state.scratch
    else:
        from ..._lib.scratch import check_buffer

        for spec in plan.scratch_specs(state.selection, state.device):
            if spec.name not in scratch:
                names = ", ".join(x.name for x in plan.scratch_specs(state.selection, state.device))
                raise ValueError(f"scratch lacks {spec.name!r} (the plan's scratch specs: {names})")
            check_buffer(
                f"scratch[{spec.name!r}]", scratch[spec.name], shape=spec.shape, dtype=spec.dtype, device=spec.device
            )
    views = {}
    for name, tail in _OUT_SHAPES.items():
        buf = kwargs.get(name)
        if buf is None:
            continue
        dtype = torch.float32 if name in ("post_out", "comb_out") else caps.dtype
        shape = tuple(caps.hidden_size if d is None else d for d in tail)
        if not isinstance(buf, torch.Tensor) or buf.dim() != 1 + len(shape) or buf.shape[0] < t:
            got = _describe(buf)
            raise ValueError(f"{name} must be {_dname(dtype)} [>= {t}, {', '.join(map(str, shape))}], got {got}")
        views[name] = buf[:t]
        _check(name, views[name], dtype, (t, *shape), caps.device)
    return MhcBinding(plan, t, scratch, **views)


def _check(name: str, t, dtype, shape, device) -> None:
    """ValueError naming `name`, the expectation and what came, unless `t` matches exactly."""
    ok = (
        isinstance(t, torch.Tensor)
        and t.dtype == dtype
        and tuple(t.shape) == tuple(shape)
        and t.device == device
        and t.is_contiguous()
    )
    if not ok:
        want = f"{_dname(dtype)} [{', '.join(map(str, shape))}] contiguous on {device}"
        raise ValueError(f"{name} must be {want}, got {_describe(t)}")
    if device.type == "cuda" and not torch.compiler.is_compiling() and t.numel() and t.data_ptr() % 16:
        raise ValueError(f"{name} must start 16-byte aligned, got address {t.data_ptr():#x}")


def _tokens(name: str, t, caps: Caps, *, ndim_tail) -> int:
    """Live T of the leading input (its other dims are checked by _check)."""
    if not isinstance(t, torch.Tensor) or t.dim() != 1 + len(ndim_tail):
        want = ", ".join(["T", *map(str, ndim_tail)])
        raise ValueError(f"{name} must be {_dname(caps.dtype)} [{want}] on {caps.device}, got {_describe(t)}")
    n = int(t.shape[0])
    if n > caps.max_tokens:
        raise ValueError(f"{name} has {n} tokens, above the plan's max_tokens={caps.max_tokens} (Caps.max_tokens)")
    return n


def _check_scalars(rms_eps, hc_eps, sinkhorn_iters, norm_eps) -> None:
    for name, v in (("rms_eps", rms_eps), ("hc_eps", hc_eps), ("norm_eps", norm_eps)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")
    if not _is_int(sinkhorn_iters) or sinkhorn_iters < 0:
        raise ValueError(f"sinkhorn_iters must be an int >= 0, got {sinkhorn_iters!r}")


def _check_mix_params(caps, fn, hc_scale, hc_base, norm_weight, *, fn_cols) -> None:
    h, dev = caps.hidden_size, caps.device
    if isinstance(fn, torch.Tensor) and fn.dim() == 2 and fn.shape[1] in fn_cols:
        _check("fn", fn, torch.float32, (MIXES, fn.shape[1]), dev)
    else:
        cols = " or ".join(map(str, fn_cols))
        raise ValueError(f"fn must be float32 [{MIXES}, {cols}] contiguous on {dev}, got {_describe(fn)}")
    _check("hc_scale", hc_scale, torch.float32, (3,), dev)
    _check("hc_base", hc_base, torch.float32, (MIXES,), dev)
    if norm_weight is not None:
        wdt = norm_weight.dtype if isinstance(norm_weight, torch.Tensor) else None
        if wdt not in (caps.dtype, torch.float32):
            raise ValueError(
                f"norm_weight must be {_dname(caps.dtype)} or float32 [{h}] on {dev}, got {_describe(norm_weight)}"
            )
        _check("norm_weight", norm_weight, wdt, (h,), dev)


def _outputs(caps, t, given: dict, binding: MhcBinding | None) -> dict:
    """The output buffers: given > binding > freshly allocated (functional form)."""
    h, dev, out = caps.hidden_size, caps.device, {}
    specs = {
        "residual_out": (caps.dtype, (t, MULT, h)),
        "y_out": (caps.dtype, (t, h)),
        "post_out": (torch.float32, (t, MULT)),
        "comb_out": (torch.float32, (t, MULT, MULT)),
    }
    for name, (dtype, shape) in specs.items():
        if name not in given:
            continue
        buf = given[name]
        if buf is None and binding is not None:
            buf = getattr(binding, name)
        if buf is None:
            buf = torch.empty(shape, dtype=dtype, device=dev)
        else:
            _check(name, buf, dtype, shape, dev)
        out[name] = buf
    return out


def _resolve_plan(plan, binding, device, hidden, dtype, tokens) -> MhcPlan:
    if binding is not None:
        if not isinstance(binding, MhcBinding):
            raise TypeError(f"binding must come from norm.mhc bind(), got {type(binding).__name__}")
        if plan is not None and plan is not binding.plan:
            raise ValueError("plan and binding.plan differ; pass one of them")
        if tokens != binding.num_tokens:
            raise ValueError(
                f"the inputs have {tokens} tokens but the binding was made for num_tokens={binding.num_tokens}"
            )
        return binding.plan
    if plan is None:
        if torch.compiler.is_compiling():
            raise ValueError(f"{OP}: under torch.compile pass plan= (a plan prepared outside the compiled region)")
        return _default_plan(device, hidden, dtype, tokens)
    if not isinstance(plan, MhcPlan):
        raise TypeError(f"plan must be a norm.mhc plan (mhc.plan(caps)), got {type(plan).__name__}")
    plan.state  # noqa: B018 - raises PlanNotPreparedError naming PreparationSession
    return plan


_default_plans: dict = {}


def _default_plan(device, hidden, dtype, tokens) -> MhcPlan:
    """A per-(device, hidden, dtype) plan, regrown (next power of two) when T outgrows it."""
    from ...preparation.session import ensure_prepared

    if not _hidden_ok(hidden):
        Caps(device=device, max_tokens=1, hidden_size=hidden, dtype=dtype)  # raises naming hidden_size
    key = (str(torch.device(device)), hidden, dtype)
    current = _default_plans.get(key)
    if current is None or tokens > current.caps.max_tokens:
        cap = max(256, 1 << max(0, tokens - 1).bit_length())
        current = plan(Caps(device=device, max_tokens=cap, hidden_size=hidden, dtype=dtype))
        ensure_prepared(current, current.caps.device)
        _default_plans[key] = current
    return current


def clear_caches() -> None:
    """Forget the default plans of the functional form (`b12x.clear_all_caches` calls this)."""
    _default_plans.clear()


def _check_post_inputs(caps, t, x, residual, prev_post, prev_comb) -> None:
    h, dev = caps.hidden_size, caps.device
    _check("residual", residual, caps.dtype, (t, MULT, h), dev)
    _check("x", x, caps.dtype, (t, h), dev)
    _check("prev_post", prev_post, torch.float32, (t, MULT), dev)
    _check("prev_comb", prev_comb, torch.float32, (t, MULT, MULT), dev)


def _require_tensor(name, t, ndims, want) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() not in ndims:
        raise ValueError(f"{name} must be a tensor {want}, got {_describe(t)}")


def _require_form(p: MhcPlan, form: str) -> None:
    """The entry point's own form must be one the plan was prepared for (its invocation), checked
    before any kernel lookup: post_pre above 64 tokens runs post's kernel first, and an error about
    that inner step would not name what the caller called."""
    if form not in p.forms():
        raise ValueError(f"{OP}: this plan was prepared for forms {p.forms()}; {form} is not one of them")
