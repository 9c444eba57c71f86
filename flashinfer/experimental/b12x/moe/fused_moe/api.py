"""moe.fused_moe planned lifecycle: Caps -> plan -> PreparationSession.prepare -> bind -> run, and
route_topk. No kernel code here: CPU tensors run `reference.py`; CUDA tensors run the device pipeline

    route + gather/quantize (_routing.py) -> FC1 + activation (_kernel_experts.py) -> requantize
    (_combine.py; not for w4a16) -> FC2 (_kernel_experts.py) -> combine (_combine.py)

(the expert GEMMs in one of two compiled grid variants, `expert_grid`: every expert, or with the
compact grid and T * k < E the routing's list of hit experts; and in the tiling of the live-T
bucket that holds T, `expert_bucket`) on torch's current stream, with
every intermediate in the plan's workspace (sized by max_tokens):
no allocation (pass `output=`), no compile, no host sync, so a call can be captured in a CUDA graph
and replayed for its T. Live T picks the routing path at run time (micro: one launch routes and
gathers when T * k <= micro_max_routes; dynamic: a counting sort in four launches); no T compiles.
A bucket with `dequant` (nvfp4 recipe, grouped or decode kernels; `_buckets.py`) has its own routing and
requantize kernels write the NVFP4-quantized operands dequantized to bf16 (a1_deq, a2_deq) and its
GEMMs read them as bf16: the binding's `dequant` picks those launchers.
With `with_pdl` (the heuristic's mode: `PDL` = "wait") every launch but the grouped kernels' is a
programmatic dependent of the one before (sm_90+): its CTAs get resident while the launch before
still runs, and waits for it before its first read (`_expert_pdl.py`).

    wplan = plan_weights(quant_modes="nvfp4", source_format="modelopt_nvfp4", activation="silu",
                         num_experts=E, hidden_size=H, intermediate_size=I)
    experts = prepare_weights(plan=wplan, w1_fp4=..., ...)            # once, at load time
    p = plan(Caps(max_tokens=8192, num_topk=k, device="cuda", weight_plan=wplan, quant_mode="nvfp4"))
    with b12x.PreparationSession("cuda") as s:
        s.prepare([p])
    route_topk(p, router_logits, topk_logits, topk_ids, topk_weights)
    out = run(binding=bind(p, a=a, experts=experts, topk_weights=topk_weights, topk_ids=topk_ids))

Routing: `topk_ids` entries < 0 or >= num_experts are ignored routes (they contribute nothing; a
negative id is how expert parallelism marks a remote expert).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..._lib.checks import describe
from ...preparation.plan import Plan
from . import _buckets, reference
from ._buckets import (  # noqa: F401  (re-exported: tests and benchmarks import them from api)
    NVFP4_DEQ,
    OPERANDS,
    TILED_ROWS,
    ExpertBucket,
    _experts_module,
    _grouped_module,
    check_buckets,
    expert_bucket,
    expert_grid,
    expert_grids,
    expert_variants,
    gather_formats,
    gemm_formats,
    has_dequant,
    heuristic_buckets,
    tiled_from,
    with_tiled_bucket,
)
from ._expert_pdl import PDL_MODES
from .weights import ExpertWeights, WeightPlan

OP = "moe.fused_moe"
SWIGLU_DEFAULTS = {"swiglu_limit": 7.0, "swiglu_alpha": 1.702, "swiglu_beta": 1.0}
_INT = (torch.int32, torch.int64)

__all__ = ["Caps", "FusedMoeBinding", "FusedMoePlan", "bind", "plan", "route_topk", "run"]


def _device_str(device) -> str:
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch.device or a device string, got {device!r}") from None


@dataclass(frozen=True, kw_only=True)
class Caps:
    """Static facts of one fused MoE layer instance. swiglu_* are swiglu_oai's (None: FORMATS.md
    defaults limit 7.0, alpha 1.702, beta 1.0) and must stay None for other activations."""

    max_tokens: int
    num_topk: int
    device: object
    weight_plan: WeightPlan
    quant_mode: str
    apply_router_weight_on_input: bool = False
    swiglu_limit: float | None = None
    swiglu_alpha: float | None = None
    swiglu_beta: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not isinstance(self.weight_plan, WeightPlan):
            raise ValueError(
                f"weight_plan must be a WeightPlan from plan_weights(...), got {type(self.weight_plan).__name__}"
            )
        e = self.weight_plan.num_experts
        if isinstance(self.num_topk, bool) or not isinstance(self.num_topk, int) or not 1 <= self.num_topk <= e:
            raise ValueError(f"num_topk must be an int in [1, num_experts={e}], got {self.num_topk!r}")
        object.__setattr__(self, "device", _device_str(self.device))
        if self.quant_mode not in self.weight_plan.quant_modes:
            raise ValueError(
                f"quant_mode must be one of the weight plan's quant_modes {self.weight_plan.quant_modes}, got {self.quant_mode!r}"
            )
        if not isinstance(self.apply_router_weight_on_input, bool):
            raise ValueError(f"apply_router_weight_on_input must be a bool, got {self.apply_router_weight_on_input!r}")
        swiglu = self.weight_plan.activation == "swiglu_oai"
        for name, default in SWIGLU_DEFAULTS.items():
            value = getattr(self, name)
            if value is None:
                if swiglu:
                    object.__setattr__(self, name, default)
                continue
            if not swiglu:
                raise ValueError(
                    f"{name} applies to activation 'swiglu_oai' only, got {name}={value!r} with {self.weight_plan.activation!r}"
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or value != value
                or abs(value) == float("inf")
            ):
                raise ValueError(f"{name} must be a finite float, got {value!r}")
            object.__setattr__(self, name, float(value))
        if swiglu and self.swiglu_limit <= 0:
            raise ValueError(f"swiglu_limit must be > 0, got {self.swiglu_limit}")


SF_BLOCK = {"nvfp4": 16, "mxfp8": 32}
SCALE_PAD = {"nvfp4": 0, "mxfp8": 127}
IDS_DTYPES = ("int32", "int64")  # both are prepared: topk_ids may come in either


@dataclass(frozen=True)
class MoeConfig:
    """The prepared variant: routing/gather tiles, requantize/combine tiles, and the expert GEMMs'
    tilings per live-T bucket (a tuple of `ExpertBucket`, `_kernel_experts.default_buckets`)."""

    routing: object
    combine: object
    experts: tuple


# The heuristic's programmatic dependent launch mode (`with_pdl`). H200 2026-12-02 07:08 (session 18,
# `bench_moe --pdl wait`, E = 128, graph timer, µs per layer plain / "wait"): w4a16 T = 1 22.79 /
# 22.20, T = 4 42.81 / 40.95, T = 16 109.2 / 106.7, T = 64 169.9 / 166.7; nvfp4 T = 1 25.71 / 23.02,
# T = 4 48.47 / 45.33, T = 16 114.8 / 112.3, T = 64 173.4 / 170.5.
PDL = "wait"


def with_pdl(config: MoeConfig, pdl: str) -> MoeConfig:
    """`config` with the plan's launches programmatic dependents (pdl "wait") or plain ("off"): the
    routing/gather, requantize and combine kernels compiled with `launch_pdl`, and the decode expert
    GEMMs with `_kernel_experts.ExpertConfig.pdl` = pdl. The grouped (tiled) buckets keep plain
    launches. The same kernels' math, so the same bits."""
    if pdl not in PDL_MODES:
        raise ValueError(f"{OP}: pdl must be one of {PDL_MODES}, got {pdl!r}")
    ex, on = _experts_module(), pdl != "off"
    experts = tuple(
        b if b.tiled else replace(b, fc1=ex.with_pdl(b.fc1, pdl), fc2=ex.with_pdl(b.fc2, pdl)) for b in config.experts
    )
    return MoeConfig(replace(config.routing, pdl=on), replace(config.combine, pdl=on), experts)


class FusedMoePlan(Plan):
    """caps = Caps; selection = MoeConfig (None on the reference backend). Workspace: module
    docstring; `scratch_specs` lists every buffer."""

    @property
    def operand_formats(self) -> tuple[str, str | None]:
        return OPERANDS[self.caps.quant_mode]

    def heuristic(self, arch):
        if arch is None:
            return None
        from . import _combine, _routing

        wp, caps = self.caps.weight_plan, self.caps
        config = MoeConfig(
            routing=_routing.default_config(wp.hidden_size),
            combine=_combine.default_config(wp.intermediate_size),
            experts=heuristic_buckets(caps, arch=arch),
        )
        return with_pdl(config, PDL) if PDL != "off" else config

    def expert_jobs(self, config, arch: str) -> dict:
        """{(grid, bucket index): ((compile_fc1, args), (compile_fc2, args))} of `expert_variants`."""
        ex = _experts_module()
        caps, wp = self.caps, self.caps.weight_plan
        e, k = wp.num_experts, caps.num_topk
        out = {}
        for grid, i in expert_variants(config.routing.compact_grid, e, k, caps.max_tokens, config.experts):
            b = config.experts[i]
            a1, a2 = gemm_formats(caps.quant_mode, b)  # a dequant bucket's GEMMs read bf16 A
            if grid == "tiled":
                g = _grouped_module()
                out[(grid, i)] = (
                    (g.compile_grouped_fc1, (a1, wp.weight_format, wp.activation, b.fc1, arch, e)),
                    (g.compile_grouped_fc2, (a2, wp.weight_format, b.fc2, arch, e)),
                )
                continue
            # span only when > 1: a span-1 job keeps the arguments (and launch) it always had
            span1, span2 = ((s,) if s != 1 else () for s in (b.fc1_span, b.fc2_span))
            out[(grid, i)] = (
                (ex.compile_fc1, (a1, wp.weight_format, wp.activation, b.fc1, arch, grid, *span1)),
                (ex.compile_fc2, (a2, wp.weight_format, b.fc2, arch, grid, *span2)),
            )
        return out

    def kernels(self, config, arch: str) -> tuple:
        from . import _combine, _routing

        ex = _experts_module()
        caps, wp = self.caps, self.caps.weight_plan
        ex.check_dims(wp.hidden_size, wp.intermediate_size)
        a1, a2 = self.operand_formats
        e, h, i, k, on_input = (
            wp.num_experts,
            wp.hidden_size,
            wp.intermediate_size,
            caps.num_topk,
            caps.apply_router_weight_on_input,
        )
        formats = [(a1, a2)]
        if has_dequant(config.experts):  # routing and requantize writing the dequantized operands too
            formats.append((NVFP4_DEQ, NVFP4_DEQ))
        jobs = []
        for f1, f2 in formats:
            jobs += [(_routing.compile_routing, (d, k, e, h, f1, on_input, config.routing, arch)) for d in IDS_DTYPES]
            jobs.append((_combine.compile_combine, (k, e, h, i, f2, on_input, config.combine, arch)))
        for pair in self.expert_jobs(config, arch).values():
            jobs += [job for job in pair if job not in jobs]  # buckets may share a GEMM's tiling
        return tuple(jobs)

    def scratch_specs(self, config=None, device="cuda") -> tuple:
        from ..._lib.quant import swizzled_size
        from ..._lib.scratch import ScratchBufferSpec as S

        if torch.device(device).type != "cuda":
            return ()  # the reference backend needs no workspace
        caps, wp = self.caps, self.caps.weight_plan
        e, h, i, k = wp.num_experts, wp.hidden_size, wp.intermediate_size, caps.num_topk
        r_cap = caps.max_tokens * k
        if config is None:  # memory_requirements of an unprepared plan: the default tiles
            from . import _routing

            routing = _routing.default_config(h)
        else:
            routing = config.routing
        hist_rows = 1 if r_cap <= routing.micro_max_routes else -(-r_cap // routing.dyn_block_r)
        a1, a2 = self.operand_formats
        specs = [
            S("expert_start", (e + 1,), "int32", device),
            S("expert_count", (e,), "int32", device),
            S("sorted_token", (r_cap,), "int32", device),
            S("sorted_expert", (r_cap,), "int32", device),
            S("route_row", (r_cap,), "int32", device),
            S("active", (e,), "int32", device),
            S("hist", (hist_rows, e), "int32", device),
            S("alpha1", (e,), "float32", device),
            S("alpha2", (e,), "float32", device),
            S("act_params", (3,), "float32", device),
            S("dummy", (16,), "uint8", device),
        ]
        for name, fmt, cols in (("a1", a1, h), ("a2", a2, i)):
            if fmt == "bfloat16":
                specs.append(S(name, (r_cap, cols), "bfloat16", device))
            elif fmt is not None:
                specs.append(S(name, (r_cap, cols // 2 if fmt == "nvfp4" else cols), "uint8", device))
                specs.append(S(f"{name}_scales", (swizzled_size(r_cap, cols // SF_BLOCK[fmt]),), "uint8", device))
        r_deq = _buckets.dequant_tokens(caps, config) * k  # the dequant buckets' bf16 FC1 and FC2 operands
        if r_deq:
            specs.append(S("a1_deq", (r_deq, h), "bfloat16", device))
            specs.append(S("a2_deq", (r_deq, i), "bfloat16", device))
        specs.append(S("c1", (r_cap, i), "bfloat16", device))
        specs.append(S("c2", (r_cap, h), "float32", device))
        return tuple(specs)

    def prime(self, state) -> None:
        """Resolve the launchers, fill the workspace's constants (activation parameters, scale
        padding), load every Triton module on the device and launch every compiled expert GEMM
        (each grid variant of FC1 and FC2) once on an empty one-expert problem, so nothing
        initialises lazily during capture."""
        if state.arch is None:
            return
        experts = self.expert_jobs(state.selection, state.arch)
        launchers = state.extra["launchers"] = resolve_launchers(state.kernels, experts)
        _fill_constants(self, state.scratch)
        index = state.device.index if state.device.index is not None else torch.cuda.current_device()
        for kern in (*launchers.routing.values(), launchers.combine):
            kern.load(index)
        if launchers.dequant is not None:
            for kern in (*launchers.dequant[0].values(), launchers.dequant[1]):
                kern.load(index)
        _prime_experts(self, state)
        torch.cuda.synchronize(state.device)  # a launch error surfaces at prepare time


@dataclass(frozen=True)
class Launchers:
    """A prepared plan's resolved launchers (state.extra["launchers"])."""

    routing: dict  # ids dtype name -> _routing.RoutingKernels
    combine: object  # _combine.CombineKernels
    # (expert grid ("identity", "list"), bucket index) -> (fc1, fc2): only the variants the plan compiled
    experts: dict
    # (routing per ids dtype, combine) writing the NVFP4_DEQ operands, for dequant buckets; None: none
    dequant: tuple | None = None

    def routing_for(self, ids_dtype: str, dequant: bool = False):
        """The routing/gather kernels a binding runs (its ids dtype name; dequant: its bucket's)."""
        return (self.dequant[0] if dequant else self.routing)[ids_dtype]

    def requantizer(self, dequant: bool = False):
        """The CombineKernels whose `requantize` a binding runs (its bucket's FC2 operand format)."""
        return self.dequant[1] if dequant else self.combine

    def expert_gemms(self, grid: str, bucket: int = 0) -> tuple:
        """(fc1, fc2) of one variant (a binding's `grid` and `bucket`)."""
        try:
            return self.experts[(grid, bucket)]
        except KeyError:
            raise ValueError(
                f"{OP}: the binding launches the {grid!r} expert grid of tile bucket {bucket}, which this plan "
                f"did not compile (it has {sorted(self.experts)}); bind it again after preparing"
            ) from None


def resolve_launchers(jobs, experts: dict) -> Launchers:
    """The Launchers of `FusedMoePlan.kernels`' (compile function, args) jobs: routing per ids
    dtype and the combine, per operand format (the recipe's; NVFP4_DEQ for dequant buckets);
    experts: `FusedMoePlan.expert_jobs` ((grid, bucket) -> the FC1 and FC2 jobs), each resolved
    (a compiled kernel resolves from memory)."""
    routing, combine = {False: {}, True: {}}, {}
    for fn, args in jobs:
        if fn.__name__ == "compile_routing":  # (ids dtype, k, E, H, a_fmt, ...)
            routing[args[4] == NVFP4_DEQ][args[0]] = fn(*args)
        elif fn.__name__ == "compile_combine":  # (k, E, H, I, a2_fmt, ...)
            combine[args[4] == NVFP4_DEQ] = fn(*args)
    gemms = {key: tuple(fn(*args) for fn, args in pair) for key, pair in experts.items()}
    dequant = (routing[True], combine[True]) if True in combine else None
    return Launchers(routing[False], combine[False], gemms, dequant)


def _fill_constants(p: FusedMoePlan, s: dict) -> None:
    caps = p.caps
    s["act_params"].copy_(
        torch.tensor([caps.swiglu_limit or 0.0, caps.swiglu_alpha or 0.0, caps.swiglu_beta or 0.0], dtype=torch.float32)
    )
    s["dummy"].zero_()
    a1, a2 = p.operand_formats
    for name, fmt in (("a1_scales", a1), ("a2_scales", a2)):
        if name in s:
            s[name].fill_(SCALE_PAD[fmt])  # padding columns are never written by the kernels
    s["route_row"].fill_(-1)
    # Read by the "list" grid only, after the routing rewrote it (compact_grid); never stale garbage.
    s["active"].copy_(torch.arange(s["active"].numel(), dtype=torch.int32))


def _prime_experts(p: FusedMoePlan, state) -> None:
    """One launch of each compiled expert GEMM on one expert without rows (every CTA exits at once)."""
    L, s = state.extra["launchers"], state.scratch
    wp = p.caps.weight_plan
    dev = state.device
    n1, h, i = wp.fc1_rows, wp.hidden_size, wp.intermediate_size
    # E + 1 zero starts: the grouped kernels scan all E experts' starts (`_kernel_grouped.locate`,
    # E compiled in); the decode kernels read start[0], start[1] of their one-expert grid
    start = torch.zeros(wp.num_experts + 1, dtype=torch.int32, device=dev)
    one = torch.ones(1, dtype=torch.float32, device=dev)
    b1 = torch.zeros(1, n1, h // 2, dtype=torch.uint8, device=dev)
    b2 = torch.zeros(1, h, i // 2, dtype=torch.uint8, device=dev)
    sf1 = torch.zeros(1, 16, dtype=torch.uint8, device=dev)
    active = torch.zeros(1, dtype=torch.int32, device=dev)
    found = getattr(state.selection, "experts", None) or ()  # the buckets (none in a hand-built state)
    for (_, bucket), (fc1, fc2) in L.experts.items():
        a1, a2 = _operands(p, s, found[bucket] if bucket < len(found) else None)
        c1, c2 = _results(s, a1[0])
        fc1(a1[0], a1[1], b1, sf1, c1, start, one, one, s["act_params"], active)
        fc2(a2[0], a2[1], b2, sf1, c2, start, one, one, active)


def _results(s: dict, a1: torch.Tensor):
    """(C1, C2) as the expert GEMMs take them: c1 and c2, or the views of their first rows when A1 has
    fewer (a dequant bucket's a1_deq holds only the rows of the T it serves, `dequant_tokens`; the
    kernels want A and C with the same rows, and never touch a row past T * k)."""
    rows = a1.shape[0]
    if rows == s["c1"].shape[0]:
        return s["c1"], s["c2"]
    return s["c1"][:rows], s["c2"][:rows]


def _operands(p: FusedMoePlan, s: dict, bucket=None):
    """((A1, SFA1), (A2, SFA2)) as the expert GEMMs of `bucket` take them (SFA: a uint8 view or the
    dummy; a dequant bucket's: the bf16 a1_deq and a2_deq)."""
    if bucket is not None and bucket.dequant:
        return (s["a1_deq"], s["dummy"]), (s["a2_deq"], s["dummy"])
    a1, a2 = p.operand_formats
    first = (s["a1"], s["a1_scales"] if a1 != "bfloat16" else s["dummy"])
    second = (s["c1"], s["dummy"]) if a2 is None else (s["a2"], s["a2_scales"])
    return first, second


def plan(caps: Caps, *, invocation=None, override=None) -> FusedMoePlan:
    """A pure, hashable plan. invocation: None or the expected live token count in [1, max_tokens].
    override: None (the heuristic picks every tile) or a whole `MoeConfig` to prepare instead, e.g.
    the heuristic's with `routing.compact_grid=True` (its routing and combine tiles are checked
    here, the expert GEMMs' config when preparing compiles them; CPU plans ignore it)."""
    if not isinstance(caps, Caps):
        raise ValueError(f"caps must be a moe.fused_moe Caps, got {type(caps).__name__}")
    if invocation is not None and (
        isinstance(invocation, bool) or not isinstance(invocation, int) or not 1 <= invocation <= caps.max_tokens
    ):
        raise ValueError(
            f"invocation must be None or the expected token count in [1, {caps.max_tokens}], got {invocation!r}"
        )
    if override is not None:
        _check_override(caps, override)
        check_buckets(caps, override.experts)
    return FusedMoePlan(op=OP, caps=caps, invocation=invocation, override=override)


def _check_override(caps: Caps, override) -> None:
    from . import _combine, _routing

    if not isinstance(override, MoeConfig):
        raise ValueError(f"override must be None or a moe.fused_moe MoeConfig, got {override!r}")
    wp = caps.weight_plan
    a1, a2 = OPERANDS[caps.quant_mode]
    routing, combine = override.routing, override.combine
    if not isinstance(routing, _routing.RoutingConfig) or not _routing.can_implement(wp.hidden_size, a1, routing):
        raise ValueError(f"override.routing cannot implement H={wp.hidden_size} with {a1}: {routing!r}")
    if not isinstance(combine, _combine.CombineConfig) or not _combine.can_implement(wp.intermediate_size, a2, combine):
        raise ValueError(f"override.combine cannot implement I={wp.intermediate_size} with {a2}: {combine!r}")


@dataclass(frozen=True)
class FusedMoeBinding:
    plan: FusedMoePlan
    a: torch.Tensor
    experts: ExpertWeights
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    output: torch.Tensor | None
    scratch: dict | None = None  # CUDA: the workspace views the launches use
    fc1_args: tuple | None = None  # CUDA: the expert GEMMs' arguments (views)
    fc2_args: tuple | None = None
    gscales: tuple | None = None  # CUDA: (a1_gscale, a2_gscale) or fp32 stand-ins
    grid: str | None = None  # CUDA: the expert GEMMs' variant (`expert_grid`)
    bucket: int = 0  # CUDA: the expert GEMMs' tiling bucket (`expert_bucket`)
    dequant: bool = False  # CUDA: that bucket takes the NVFP4_DEQ operands (`ExpertBucket.dequant`)
    traced: bool = False  # made by bind under torch.compile (`_ops.traced_binding`): run records the op


def _on_device(name: str, t: torch.Tensor, device: str) -> None:
    want = torch.device(device)
    if t.device.type != want.type or (want.index is not None and t.device.index != want.index):
        raise ValueError(f"{name} must be on {device} (the caps' device), got {describe(t)}")


def _check_routing(caps: Caps, t_count: int, topk_ids, topk_weights, ids_name="topk_ids", w_name="topk_weights"):
    k = caps.num_topk
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dtype not in _INT or list(topk_ids.shape) != [t_count, k]:
        raise ValueError(f"{ids_name} must be int32 (or int64) [{t_count}, {k}], got {describe(topk_ids)}")
    if (
        not isinstance(topk_weights, torch.Tensor)
        or topk_weights.dtype != torch.float32
        or list(topk_weights.shape) != [t_count, k]
    ):
        raise ValueError(f"{w_name} must be float32 [{t_count}, {k}], got {describe(topk_weights)}")
    for name, t in ((ids_name, topk_ids), (w_name, topk_weights)):
        _on_device(name, t, caps.device)


def _check_scratch(plan: FusedMoePlan, scratch):
    """The workspace views a CUDA binding uses: the plan's own (scratch=None) or the caller's dict
    with the same buffers (ScratchBufferSpec shapes and dtypes)."""
    from ..._lib.scratch import check_buffer

    st = plan.state
    if scratch is None:
        return st.scratch
    if not isinstance(scratch, dict):
        raise ValueError(
            f"scratch must be None or a dict of the plan's workspace buffers, got {type(scratch).__name__}"
        )
    specs = plan.scratch_specs(st.selection, "cuda")  # names, shapes, dtypes
    names = sorted(s.name for s in specs)
    if sorted(scratch) != names:
        raise ValueError(f"scratch must hold exactly the plan's buffers {names}, got {sorted(scratch)}")
    for spec in specs:
        check_buffer(
            f"scratch[{spec.name!r}]", scratch[spec.name], shape=spec.shape, dtype=spec.dtype, device=st.device
        )
    return scratch


def _check_kernel_layout(a, output) -> None:
    """The CUDA pipeline reads a and writes output as contiguous rows from 16-byte aligned starts."""
    from ..._lib.checks import check_aligned

    for name, t in (("a", a), ("output", output)):
        if t is None:
            continue
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous on CUDA, got {describe(t)}")
        check_aligned(name, t, 16)


def bind(plan: FusedMoePlan, *, scratch=None, a, experts, topk_weights, topk_ids, output=None) -> FusedMoeBinding:
    """Checks and views only (never allocates, never writes). a: bf16 [T, H] with T <= max_tokens;
    experts: `ExpertWeights` prepared for this plan's weight plan; topk_ids int32 (int64 accepted)
    [T, k]; topk_weights fp32 [T, k]; output: None or a's dtype [T, H]. scratch: None (the plan's
    own workspace) or a dict of buffers matching its scratch specs (CUDA plans only). Under torch.compile
    bind checks all but addresses while tracing, output defaults to a new tensor, scratch must be None, and
    `run` is one custom op that binds again (every check) and runs when the graph runs (`_ops.py`)."""
    if not isinstance(plan, FusedMoePlan):
        raise ValueError(f"plan must come from moe.fused_moe.plan(caps), got {type(plan).__name__}")
    st = plan.state  # raises PlanNotPreparedError naming PreparationSession
    caps = plan.caps
    wp = caps.weight_plan
    kernels = st.arch is not None
    if not kernels and scratch is not None and (not isinstance(scratch, dict) or scratch):
        raise ValueError(f"scratch must be None (moe.fused_moe has no workspace yet), got {type(scratch).__name__}")
    if not isinstance(a, torch.Tensor) or a.dtype != torch.bfloat16 or a.dim() != 2 or a.shape[1] != wp.hidden_size:
        raise ValueError(f"a must be bfloat16 [T, {wp.hidden_size}], got {describe(a)}")
    t_count = a.shape[0]
    if t_count > caps.max_tokens:
        raise ValueError(f"a has T = {t_count} tokens, above the caps' max_tokens = {caps.max_tokens}")
    _on_device("a", a, caps.device)
    if not isinstance(experts, ExpertWeights):
        raise ValueError(f"experts must be an ExpertWeights from prepare_weights(...), got {type(experts).__name__}")
    if experts.plan != wp:
        raise ValueError(f"experts were prepared for {experts.plan}, not for the caps' weight plan {wp}")
    if experts.device != a.device:
        raise ValueError(f"experts must be on {a.device} (a's device), got {experts.device}")
    _check_routing(caps, t_count, topk_ids, topk_weights)
    if output is not None:
        if (
            not isinstance(output, torch.Tensor)
            or output.dtype != a.dtype
            or list(output.shape) != [t_count, wp.hidden_size]
        ):
            raise ValueError(f"output must be bfloat16 [{t_count}, {wp.hidden_size}], got {describe(output)}")
        _on_device("output", output, caps.device)
    if not kernels and a.device.type != "cpu":
        raise ValueError(
            f"{OP}: tensors on {a.device} need a plan prepared on a CUDA device; this plan was prepared on "
            f"{st.device}, which runs the reference backend for CPU tensors only"
        )
    if torch.compiler.is_compiling():  # the op binds again when it runs; the workspace stays out of the graph
        return _ops.traced_binding(plan, scratch, a, experts, topk_weights, topk_ids, output)
    if a.device.type == "cpu":
        return FusedMoeBinding(plan, a, experts, topk_weights, topk_ids, output)
    _check_kernel_layout(a, output)
    s = _check_scratch(plan, scratch)
    sel = st.selection
    return device_binding(
        plan, s, a, experts, topk_weights, topk_ids, output, compact=sel.routing.compact_grid, buckets=sel.experts
    )


def device_binding(
    plan: FusedMoePlan, s: dict, a, experts, topk_weights, topk_ids, output, *, compact: bool = False, buckets=None
) -> FusedMoeBinding:
    """The binding of the device pipeline on workspace views `s` (arguments already checked);
    compact: the selection's routing.compact_grid; buckets: its expert buckets (None: bucket 0)."""
    e, k = plan.caps.weight_plan.num_experts, plan.caps.num_topk
    bucket = 0 if buckets is None else expert_bucket(buckets, a.shape[0])
    dequant = buckets is not None and buckets[bucket].dequant
    (A1, SFA1), (A2, SFA2) = _operands(plan, s, buckets[bucket] if buckets is not None else None)
    ex, u8 = experts, torch.uint8
    # The expert GEMMs' grid rows: every expert ("identity": the active argument is not read), or
    # (compact_grid with T * k < E) the first T * k entries of the routing's list of hit experts: no
    # more can have rows.
    grid = expert_grid(compact, e, k, a.shape[0])
    active = s["active"][: a.shape[0] * k] if grid == "list" else s["active"]
    if buckets is not None and buckets[bucket].tiled:  # the grouped kernels read the rows' experts
        grid, active = "tiled", s["sorted_expert"]
    C1, C2 = _results(s, A1)
    fc1 = (A1, SFA1, ex.w1_values, ex.w1_scales.view(u8), C1, s["expert_start"], ex.w1_alpha, s["alpha1"])
    fc1 += (s["act_params"], active)
    fc2 = (A2, SFA2, ex.w2_values, ex.w2_scales.view(u8), C2, s["expert_start"], ex.w2_alpha, s["alpha2"])
    fc2 += (active,)
    # a dequant bucket's A is e2m1 x sf without 1 / gs: s["alpha1"], s["alpha2"] (= 1 / gs) hold it
    nvfp4 = plan.operand_formats[0] == "nvfp4"
    gscales = (ex.a1_gscale, ex.a2_gscale) if nvfp4 else (s["alpha1"], s["alpha2"])
    return FusedMoeBinding(
        plan, a, experts, topk_weights, topk_ids, output, s, fc1, fc2, gscales, grid, bucket, dequant
    )


def run(*, binding: FusedMoeBinding) -> torch.Tensor:
    """out [T, H] in a's dtype (into binding.output when given; otherwise allocated, which a CUDA
    graph capture must avoid). CPU tensors run the reference. Under torch.compile the call is one custom op
    (`_ops.py`) that binds again and runs when the graph runs."""
    if not isinstance(binding, FusedMoeBinding):
        raise ValueError(f"binding must come from moe.fused_moe.bind(...), got {type(binding).__name__}")
    b = binding
    if torch.compiler.is_compiling():  # one opaque node (`_ops.py`): torch.compile cannot trace a launch
        return _ops.call(b)
    caps = b.plan.caps
    if b.a.device.type == "cpu":
        swiglu = {k: getattr(caps, k) for k in SWIGLU_DEFAULTS if getattr(caps, k) is not None}
        out = reference.fused_moe(
            b.a,
            b.experts,
            b.topk_weights,
            b.topk_ids,
            quant_mode=caps.quant_mode,
            apply_router_weight_on_input=caps.apply_router_weight_on_input,
            **swiglu,
        )
        if b.output is None:
            return out
        b.output.copy_(out)
        return b.output
    launchers = b.plan.state.extra.get("launchers")
    if launchers is None or b.scratch is None:
        raise ValueError(
            f"{OP}: this binding has no device launchers (its plan was prepared on {b.plan.state.device}, "
            f"the tensors are on {b.a.device}); bind a plan prepared in PreparationSession on that device"
        )
    out = b.output if b.output is not None else torch.empty_like(b.a)
    execute(launchers, b, out)
    return out


def execute(launchers: Launchers, b: FusedMoeBinding, out: torch.Tensor) -> None:
    """The five steps of the device pipeline (module docstring) for binding b into out."""
    t_count = b.a.shape[0]
    if t_count == 0:
        return
    s = b.scratch
    g1, g2 = b.gscales
    routing = launchers.routing_for(str(b.topk_ids.dtype).removeprefix("torch."), b.dequant)
    requant = launchers.requantizer(b.dequant)
    fc1, fc2 = launchers.expert_gemms(b.grid, b.bucket)
    routing(t_count, b.topk_ids, b.topk_weights, b.a, s, g1, g2)
    fc1(*b.fc1_args)
    if requant.requant is not None:
        requant.requantize(t_count, s, g2)
    fc2(*b.fc2_args)
    launchers.combine(t_count, s, b.topk_weights, out)


def steps(launchers: Launchers, b: FusedMoeBinding, out: torch.Tensor) -> list:
    """[(name, thunk)]: `execute`'s launches one by one, in its order (benchmarks time the prefixes
    of this list to split a layer's time by step; test_fused_moe_pipeline_bind checks that running
    them all issues exactly execute's launches)."""
    t_count = b.a.shape[0]
    if t_count == 0:
        return []
    s = b.scratch
    g1, g2 = b.gscales
    routing = launchers.routing_for(str(b.topk_ids.dtype).removeprefix("torch."), b.dequant)
    requant = launchers.requantizer(b.dequant)
    fc1, fc2 = launchers.expert_gemms(b.grid, b.bucket)
    found = [
        ("route+gather", lambda: routing(t_count, b.topk_ids, b.topk_weights, b.a, s, g1, g2)),
        ("fc1", lambda: fc1(*b.fc1_args)),
    ]
    if requant.requant is not None:
        found.append(("requantize", lambda: requant.requantize(t_count, s, g2)))
    found.append(("fc2", lambda: fc2(*b.fc2_args)))
    found.append(("combine", lambda: launchers.combine(t_count, s, b.topk_weights, out)))
    return found


def route_topk(plan: FusedMoePlan, router_logits, topk_logits, topk_ids, topk_weights, *, renormalize: bool = True):
    """Top-k routing into the caller's tensors, in fp32: p = softmax(router_logits); the k experts with
    the largest logits, ties broken toward the HIGHER expert id, in that order (largest first);
    topk_weights = p_sel / sum(p_sel) (renormalize=True, the default) or p_sel; topk_logits = the
    selected raw logits. router_logits: bf16/fp16/fp32 [T, E]; topk_logits fp32 [T, k]; topk_ids
    int32 (int64 accepted) [T, k]; topk_weights fp32 [T, k]. Returns (topk_ids, topk_weights)."""
    if not isinstance(plan, FusedMoePlan):
        raise ValueError(f"plan must come from moe.fused_moe.plan(caps), got {type(plan).__name__}")
    caps = plan.caps
    e = caps.weight_plan.num_experts
    floats = (torch.bfloat16, torch.float16, torch.float32)
    if (
        not isinstance(router_logits, torch.Tensor)
        or router_logits.dtype not in floats
        or router_logits.dim() != 2
        or router_logits.shape[1] != e
    ):
        raise ValueError(f"router_logits must be bfloat16/float16/float32 [T, {e}], got {describe(router_logits)}")
    t_count = router_logits.shape[0]
    if t_count > caps.max_tokens:
        raise ValueError(f"router_logits has T = {t_count} tokens, above the caps' max_tokens = {caps.max_tokens}")
    _on_device("router_logits", router_logits, caps.device)
    _check_routing(caps, t_count, topk_ids, topk_weights)
    k = caps.num_topk
    if (
        not isinstance(topk_logits, torch.Tensor)
        or topk_logits.dtype != torch.float32
        or list(topk_logits.shape) != [t_count, k]
    ):
        raise ValueError(f"topk_logits must be float32 [{t_count}, {k}], got {describe(topk_logits)}")
    _on_device("topk_logits", topk_logits, caps.device)
    logits = router_logits.float()
    # A stable descending sort of the expert axis reversed puts, among equal logits, the higher id first.
    order = torch.sort(logits.flip(-1), dim=-1, descending=True, stable=True).indices[:, :k]
    ids = (e - 1) - order
    probs = torch.softmax(logits, dim=-1)
    sel = probs.gather(1, ids)
    if renormalize:
        sel = sel / sel.sum(dim=-1, keepdim=True)
    topk_logits.copy_(logits.gather(1, ids))
    topk_ids.copy_(ids)
    topk_weights.copy_(sel)
    return topk_ids, topk_weights


from . import _ops  # noqa: E402 - registers torch.ops.b12x.moe_fused_moe_run_ (it imports this module lazily)
