"""norm.mhc host API: Caps -> plan -> PreparationSession -> bind -> run_pre / run_post / run_post_pre.

Launches per call (CUDA): 1 for pre / post_pre / bcast at T >= MhcConfig.fused_min_tokens with
MhcConfig.fused_pre / fused_post_pre (the one-launch kernel, _kernel_fused.py: split-K programs, the
last of each token block finishes it). Otherwise (two-pass path): run_pre 2 (pass 1 split-K mixes,
pass 2 finish + y), run_post_pre 2 up to MhcConfig.small_max_tokens (pass 1 writes the new residual
and its mixes, pass 2 as in pre) and 3 above it with MhcConfig.post_pre_split (post's kernel, pre's
pass 1 on the stored residual, pass 2); 1 with MhcConfig.small at T <= small.max_tokens (off by
default: slower on the H200); with MhcConfig.tiny, 1 at T <= tiny.max_tokens without a norm
weight (_kernel_tiny.py), and MhcConfig.wide makes pass 2 there the wide kernel (_kernel_wide.py);
both off by default until measured. run_post is always 1. No call allocates
(caller-buffer form), compiles or syncs the host: capture them in CUDA graphs. CPU tensors run
`reference.py` (one warning per process, from PreparationSession).

Functional form: leave the `*_out` arguments None and the outputs are allocated and returned.
Caller-buffer form (the graph-capture form): pass every output, or bind them once per live size
(`bind(plan, num_tokens=T, y_out=..., ...)`, views of capacity-sized buffers) and pass `binding=`.
`plan=None` prepares a default plan per (device, hidden size, dtype) on first use (it obeys freeze).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..._lib.arch import resolve_device
from ..._lib.checks import describe as _describe
from ...preparation.plan import Plan
from . import reference
from ._config import (
    ApplyConfig,
    FusedConfig,
    MhcConfig,
    RowConfig,
    SmallConfig,
    StreamConfig,
    WideConfig,
    default_config,
    split_for,
    workspace_rows,
)
from .reference import MIXES, MULT

OP = "norm.mhc"
FORMS = ("pre", "post", "post_pre", "bcast")  # bcast: run_pre on x [T, H] (the first layer)
_DTYPES = (torch.bfloat16, torch.float16)
HIDDEN_MULTIPLE, MIN_HIDDEN, MAX_HIDDEN = 128, 256, 16384
DEFAULT_SM_COUNT = 132  # an H200; used only to size workspace without a CUDA device at hand


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Static geometry and capacity of one mHC instance (every layer of a model can share it).

    split_k: splits of the 4H reduction in pass 1 for every T; None picks them per live T to fill
    the GPU (more splits at small T). The workspace is sized for the largest case either way.
    """

    device: torch.device | str
    max_tokens: int
    hidden_size: int
    dtype: torch.dtype = torch.bfloat16
    split_k: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", resolve_device(self.device))
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not _hidden_ok(self.hidden_size):
            raise ValueError(
                f"hidden_size {self.hidden_size!r} is not supported by {OP}: it must be a multiple of "
                f"{HIDDEN_MULTIPLE} in [{MIN_HIDDEN}, {MAX_HIDDEN}] (e.g. 2048, 4096, 5120, 7168)"
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {self.dtype}")
        if self.split_k is not None and (not _is_int(self.split_k) or self.split_k < 1):
            raise ValueError(f"split_k must be None or an int >= 1, got {self.split_k!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _hidden_ok(h) -> bool:
    return _is_int(h) and h % HIDDEN_MULTIPLE == 0 and MIN_HIDDEN <= h <= MAX_HIDDEN


def _sm_count(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(dev).multi_processor_count
    return DEFAULT_SM_COUNT


@dataclass(frozen=True)
class MhcPlan(Plan):
    """Plan of norm.mhc; `invocation` is the tuple of forms to prepare (default: all of FORMS)."""

    def forms(self) -> tuple[str, ...]:
        return FORMS if self.invocation is None else self.invocation

    def heuristic(self, arch):
        """The default tiles (an override stands in, so memory_requirements sizes what runs)."""
        return self.override if self.override is not None else default_config(arch)

    def kernels(self, config, arch):
        from ._kernel import compile_apply, compile_split_fn, compile_stream
        from ._kernel_fused import compile_fused
        from ._kernel_row import compile_row
        from ._kernel_small import compile_small
        from ._kernel_tiny import compile_tiny
        from ._kernel_wide import compile_wide

        caps, dt = self.caps, _dname(self.caps.dtype)
        dev = caps.device.index or 0
        jobs = []
        for form in config.forms_needed(self.forms()):
            for cfg in config.streams(form):
                jobs.append((compile_stream, (form, dt, caps.hidden_size, cfg, dev, arch)))
            if form not in self.forms():
                continue  # a pass 1 that post_pre_split borrows: no pass 2 / small jobs of its own
            if form != "post" and config.small is not None:
                for wdt in dict.fromkeys((dt, "float32")):
                    jobs.append((compile_small, (form, dt, caps.hidden_size, wdt, config.small, dev, arch)))
            if form != "post" and config.tiny is not None:
                tile = config.stream(form, 1)
                jobs.append((compile_tiny, (form, dt, caps.hidden_size, tile, config.tiny, dev, arch)))
            if form != "post" and config.wide is not None:
                jobs.append((compile_wide, (dt, caps.hidden_size, config.wide, dev, arch)))
            if form != "post":  # pass 2 serves pre, post_pre and bcast alike
                for tile in config.pass2_tiles():
                    k = compile_row if isinstance(tile, RowConfig) else compile_apply
                    for wdt in dict.fromkeys((dt, "float32")):
                        jobs.append((k, (dt, caps.hidden_size, wdt, tile, dev, arch)))
        if config.fn_split_needed(self.forms(), caps.max_tokens):
            jobs.append((compile_split_fn, (dt, caps.hidden_size, dev, arch)))
        for form in config.fused_forms(self.forms(), caps.max_tokens):
            for wdt in dict.fromkeys((dt, "float32")):
                jobs.append((compile_fused, (form, dt, caps.hidden_size, wdt, config.fused_tile(form), dev, arch)))
        return tuple(dict.fromkeys(jobs))

    def workspace_rows(self, config, device) -> int:
        caps, target = self.caps, config.ctas_per_sm * _sm_count(device)
        return workspace_rows(config, self.forms(), caps.hidden_size, caps.max_tokens, target, caps.split_k)

    def scratch_specs(self, config=None, device="cuda"):
        from ..._lib.scratch import ScratchBufferSpec

        if torch.device(device).type != "cuda":
            return ()  # the reference backend needs no workspace
        config = config or self.heuristic(None)
        rows = self.workspace_rows(config, device)
        specs = (
            ScratchBufferSpec("partials", (max(rows, 1), 32), torch.float32, device),
            # the one-launch paths' ticket counters, one per token block (0 between calls; prime
            # zeroes them, and each call's finishers reset theirs)
            ScratchBufferSpec("counter", (config.counters(self.forms(), self.caps.max_tokens),), torch.int32, device),
        )
        if config.fn_split_needed(self.forms(), self.caps.max_tokens):  # fn as hi, lo (fn_split="pre"/"hi")
            shape = (2, MIXES, MULT * self.caps.hidden_size)
            specs += (ScratchBufferSpec("fn_split", shape, self.caps.dtype, device),)
        return specs

    def prime(self, state) -> None:
        """Run every prepared form once at a small and (when it fits) a large T on random inputs."""
        caps = self.caps
        if "counter" in state.scratch:
            state.scratch["counter"].zero_()
        gen = torch.Generator(device=caps.device).manual_seed(0)
        sel = state.selection
        sizes = sorted({1, min(caps.max_tokens, sel.fused_min_tokens), min(caps.max_tokens, sel.small_max_tokens + 1)})
        for t in sizes:
            ins = synthetic_inputs(t, caps.hidden_size, dtype=caps.dtype, device=caps.device, generator=gen)
            kw = dict(rms_eps=1e-6, hc_eps=1e-6, sinkhorn_iters=2, plan=self)
            for w in (ins["w_act"], ins["w_f32"]):
                if "pre" in self.forms():
                    run_pre(ins["residual"], ins["fn"], ins["hc_scale"], ins["hc_base"], norm_weight=w, **kw)
                if "bcast" in self.forms():
                    run_pre(ins["x"], ins["fn"], ins["hc_scale"], ins["hc_base"], norm_weight=w, **kw)
                if "post_pre" in self.forms():
                    args = (ins["x"], ins["residual"], ins["post"], ins["comb"], ins["fn"], ins["hc_scale"])
                    run_post_pre(*args, ins["hc_base"], norm_weight=w, **kw)
            if "post" in self.forms():
                run_post(ins["x"], ins["residual"], ins["post"], ins["comb"], plan=self)


def synthetic_inputs(tokens: int, hidden: int, *, dtype=torch.bfloat16, device="cpu", generator=None) -> dict:
    """Random inputs of one call (priming, tests, benchmarks), never zeros: residual, x, fn,
    hc_scale, hc_base, post, comb (a softmax), and norm weights w_act (dtype) and w_f32."""
    dt, h = dtype, hidden
    g = dict(device=device, generator=generator)
    comb = torch.softmax(torch.randn(tokens, MULT, MULT, **g), -1)
    return dict(
        residual=torch.randn(tokens, MULT, h, **g).to(dt),
        x=torch.randn(tokens, h, **g).to(dt),
        fn=torch.randn(MIXES, MULT * h, **g) / math.sqrt(MULT * h),
        hc_scale=torch.rand(3, **g) + 0.5,
        hc_base=torch.randn(MIXES, **g) * 0.5,
        post=2 * torch.rand(tokens, MULT, **g),
        comb=comb,
        w_act=(1 + 0.1 * torch.randn(h, **g)).to(dt),
        w_f32=1 + 0.1 * torch.randn(h, **g),
    )


def plan(caps: Caps, *, invocation=None, override=None) -> MhcPlan:
    """A pure, hashable plan (allocates and compiles nothing).

    invocation: None (prepare every form) or a tuple of forms from FORMS ("pre", "post",
    "post_pre", "bcast") to prepare only those. override: an MhcConfig to use instead of the
    heuristic (and of any cached autotune selection).
    """
    if not isinstance(caps, Caps):
        raise TypeError(f"caps must be a norm.mhc Caps, got {type(caps).__name__}")
    if invocation is not None:
        invocation = tuple(invocation) if not isinstance(invocation, str) else (invocation,)
        bad = [f for f in invocation if f not in FORMS]
        if bad or not invocation:
            raise ValueError(f"invocation must be None or a non-empty tuple of {FORMS}, got {invocation!r}")
        invocation = tuple(f for f in FORMS if f in invocation)
    if override is not None:
        if not isinstance(override, MhcConfig):
            raise TypeError(f"override must be an MhcConfig, got {type(override).__name__}")
        for form in FORMS:
            for cfg in override.streams(form) + (override.fused_tile(form),) * (form != "post"):
                if cfg is None:
                    continue
                if caps.hidden_size % cfg.block_h:
                    raise ValueError(
                        f"override: {form} tile block_h={cfg.block_h} must divide hidden_size={caps.hidden_size}"
                    )
    return MhcPlan(op=OP, caps=caps, invocation=invocation, override=override)


def _dname(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------------
# Binding and validation
# ---------------------------------------------------------------------------------------------


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


def _check_post_inputs(caps, t, x, residual, prev_post, prev_comb) -> None:
    h, dev = caps.hidden_size, caps.device
    _check("residual", residual, caps.dtype, (t, MULT, h), dev)
    _check("x", x, caps.dtype, (t, h), dev)
    _check("prev_post", prev_post, torch.float32, (t, MULT), dev)
    _check("prev_comb", prev_comb, torch.float32, (t, MULT, MULT), dev)


def _require_tensor(name, t, ndims, want) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() not in ndims:
        raise ValueError(f"{name} must be a tensor {want}, got {_describe(t)}")


def _ops():
    return _OPS  # registered at import: registering inside a torch.compile trace is not allowed


# ---------------------------------------------------------------------------------------------
# Execution (validated inputs; the custom ops call these too)
# ---------------------------------------------------------------------------------------------


def _workspace(p: MhcPlan, binding):
    scratch = binding.scratch if binding is not None else p.state.scratch
    return scratch["partials"]


def _launchers(p: MhcPlan) -> dict:
    """The plan's resolved launchers, looked up once: run never compiles (it raises instead)."""
    st = p.state
    table = st.extra.get("launchers")
    if table is None:
        table = {}
        for k, args in st.kernels:
            if not k.resolved(*args):
                raise RuntimeError(
                    f"{OP}: kernel {k.key_summary(*args)} is no longer resolved in memory "
                    "(clear_all_caches after preparation?); prepare the plan again in a PreparationSession"
                )
            table[(k.__name__, args[:-2])] = k(*args)
        st.extra["launchers"] = table
        st.extra["target_ctas"] = st.selection.ctas_per_sm * _sm_count(st.device)
    return table


def _require_form(p: MhcPlan, form: str) -> None:
    """The entry point's own form must be one the plan was prepared for (its invocation), checked
    before any kernel lookup: post_pre above 64 tokens runs post's kernel first, and an error about
    that inner step would not name what the caller called."""
    if form not in p.forms():
        raise ValueError(f"{OP}: this plan was prepared for forms {p.forms()}; {form} is not one of them")


def _launcher(p: MhcPlan, kind: str, key: tuple):
    try:
        return _launchers(p)[(kind, key)]
    except KeyError:
        raise ValueError(f"{OP}: this plan was prepared for forms {p.forms()}; {key[0]} is not one of them") from None


def _target(p: MhcPlan) -> int:
    """Pass 1's target program count (split_for)."""
    return p.state.extra["target_ctas"]


def _split_fn(p: MhcPlan, fn, binding):
    """fn split once into hi, lo in the activation dtype (one launch) for a pre tile with
    fn_split "pre" / "hi"; returns the scratch it wrote, viewed [48, 4H] like a fn."""
    scratch = binding.scratch if binding is not None else p.state.scratch
    out = scratch["fn_split"]
    _launcher(p, "compile_split_fn", (_dname(p.caps.dtype), p.caps.hidden_size))(fn, out)
    return out.view(2 * MIXES, -1)


def _stream(p: MhcPlan, form: str, t: int, res, x, post, comb, out, fn, binding) -> int:
    """Pass 1 of `form` at t tokens; returns the number of splits it wrote."""
    caps, cfg = p.caps, p.state.selection.stream(form, t)
    if form == "pre" and cfg.fn_split != "kernel":
        fn = _split_fn(p, fn, binding)
    n_chunks = caps.hidden_size // cfg.block_h
    if form == "post":
        splits, cps = n_chunks, 1
    else:
        splits, cps = split_for(t, cfg.block_t, n_chunks, _target(p), caps.split_k)
    launch = _launcher(p, "compile_stream", (form, _dname(caps.dtype), caps.hidden_size, cfg))
    launch(res, x, post, comb, out, fn, _workspace(p, binding), T=t, splits=splits, cps=cps)
    return splits


def _apply(p: MhcPlan, t, splits, src, hc_scale, hc_base, w, outs, binding, **scal) -> None:
    caps, dt = p.caps, _dname(p.caps.dtype)
    wdt = "float32" if w is None else _dname(w.dtype)
    sel = p.state.selection
    y, post, comb = outs["y_out"], outs["post_out"], outs["comb_out"]
    if sel.wide is not None and t <= sel.wide.max_tokens and w is None:
        launch = _launcher(p, "compile_wide", (dt, caps.hidden_size, sel.wide))
        launch(src, _workspace(p, binding), hc_scale, hc_base, y, post, comb, T=t, splits=splits, **scal)
        return
    tile = sel.apply(t)
    kind = "compile_row" if isinstance(tile, RowConfig) else "compile_apply"
    launch = _launcher(p, kind, (dt, caps.hidden_size, wdt, tile))
    launch(src, _workspace(p, binding), hc_scale, hc_base, w, y, post, comb, T=t, splits=splits, **scal)


def _one_launch(
    p: MhcPlan, form, t, res, x, post_in, comb_in, out, fn, hc_scale, hc_base, w, outs, binding, small=True, **scal
):
    """A one-launch path when the selection has one for `form` at t tokens: the small-T kernel
    (MhcConfig.small, unless small=False), else the fused kernel (MhcConfig.fused_*); True if one ran."""
    sel, caps = p.state.selection, p.caps
    dt, wdt = _dname(caps.dtype), "float32" if w is None else _dname(w.dtype)
    tile = sel.fused(form, t)
    if small and sel.tiny is not None and t <= sel.tiny.max_tokens and w is None:
        stream = sel.stream(form, 1)  # the small tile (tiny.max_tokens <= small_max_tokens)
        splits, cps = split_for(t, stream.block_t, caps.hidden_size // stream.block_h, _target(p), caps.split_k)
        kernel = _launcher(p, "compile_tiny", (form, dt, caps.hidden_size, stream, sel.tiny))
        scratch = binding.scratch if binding is not None else p.state.scratch
        kernel(res, x, post_in, comb_in, out, fn, scratch["partials"], scratch["counter"], hc_scale, hc_base,
               outs["y_out"], outs["post_out"], outs["comb_out"], T=t, splits=splits, cps=cps, **scal)  # fmt: skip
        return True
    if small and sel.small is not None and t <= sel.small.max_tokens:
        launch = _launcher(p, "compile_small", (form, dt, caps.hidden_size, wdt, sel.small))
    elif tile is not None:
        if form == "pre" and tile.fn_split != "kernel":
            fn = _split_fn(p, fn, binding)
        splits, cps = tile.split(caps.hidden_size, caps.split_k)
        kernel = _launcher(p, "compile_fused", (form, dt, caps.hidden_size, wdt, tile))
        launch = functools.partial(kernel, splits=splits, cps=cps)
    else:
        return False
    scratch = binding.scratch if binding is not None else p.state.scratch
    y, post, comb = outs["y_out"], outs["post_out"], outs["comb_out"]
    launch(
        res,
        x,
        post_in,
        comb_in,
        out,
        fn,
        scratch["partials"],
        scratch["counter"],
        hc_scale,
        hc_base,
        w,
        y,
        post,
        comb,
        T=t,
        **scal,
    )
    return True


def execute_pre(p, residual, fn, hc_scale, hc_base, outs, norm_weight, binding=None, **scal) -> None:
    t = residual.shape[0]
    if p.state.arch is None:
        r, post, comb, y = reference.mhc_pre(residual, fn, hc_scale, hc_base, norm_weight=norm_weight, **scal)
        return _copy_outs(outs, residual_out=r, post_out=post, comb_out=comb, y_out=y)
    if t == 0:
        return None
    bcast = residual.dim() == 2
    _launchers(p)
    form = "bcast" if bcast else "pre"
    if _one_launch(
        p,
        form,
        t,
        residual,
        None,
        None,
        None,
        outs.get("residual_out"),
        fn,
        hc_scale,
        hc_base,
        norm_weight,
        outs,
        binding,
        **scal,
    ):
        return None
    splits = _stream(p, form, t, residual, None, None, None, outs.get("residual_out"), fn, binding)
    _apply(p, t, splits, residual, hc_scale, hc_base, norm_weight, outs, binding, **scal)
    return None


def execute_post(p, x, residual, prev_post, prev_comb, out) -> None:
    t = residual.shape[0]
    if p.state.arch is None:
        out.copy_(reference.mhc_post(x, residual, prev_post, prev_comb))
        return
    if t:
        _launchers(p)
        ws = _workspace(p, None)  # stands in for fn (post reads no fn; no allocation)
        _stream(p, "post", t, residual, x, prev_post, prev_comb, out, ws, None)


def execute_post_pre(
    p, x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, outs, norm_weight, binding=None, **scal
):
    t = residual.shape[0]
    if p.state.arch is None:
        res = reference.mhc_post_pre(
            x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, norm_weight=norm_weight, **scal
        )
        return _copy_outs(outs, residual_out=res[0], post_out=res[1], comb_out=res[2], y_out=res[3])
    if t == 0:
        return None
    _launchers(p)
    args = (x, prev_post, prev_comb, outs["residual_out"], fn, hc_scale, hc_base, norm_weight, outs, binding)
    if _one_launch(p, "post_pre", t, residual, *args, **scal):
        return None
    sel = p.state.selection
    if sel.post_pre_split and t > sel.small_max_tokens:  # post's kernel, then pre on what it stored
        new = outs["residual_out"]
        _stream(p, "post", t, residual, x, prev_post, prev_comb, new, _workspace(p, None), None)
        args = (new, None, None, None, None, fn, hc_scale, hc_base, norm_weight, outs, binding)
        if _one_launch(p, "pre", t, *args, small=False, **scal):
            return None
        splits = _stream(p, "pre", t, new, None, None, None, None, fn, binding)
        _apply(p, t, splits, new, hc_scale, hc_base, norm_weight, outs, binding, **scal)
        return None
    splits = _stream(p, "post_pre", t, residual, x, prev_post, prev_comb, outs["residual_out"], fn, binding)
    _apply(p, t, splits, outs["residual_out"], hc_scale, hc_base, norm_weight, outs, binding, **scal)
    return None


def _copy_outs(outs: dict, **values) -> None:
    for name, buf in outs.items():
        if values[name] is not buf:
            buf.copy_(values[name])


__all__ = ["Caps", "MhcConfig", "MhcPlan", "MhcBinding", "plan", "bind", "run_pre", "run_post", "run_post_pre"]
__all__ += [
    "ApplyConfig",
    "FusedConfig",
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
