"""moe.fused_moe planned lifecycle: Caps -> plan -> PreparationSession.prepare -> bind -> run, and
route_topk. No kernel code: CPU tensors run `reference.py`; on CUDA `run` raises NotImplementedError
until the fused kernel exists (it will consume `ExpertWeights`' packed layout, weights.py).

    wplan = plan_weights(quant_modes="nvfp4", source_format="modelopt_nvfp4", activation="silu",
                         num_experts=E, hidden_size=H, intermediate_size=I)
    experts = prepare_weights(plan=wplan, w1_fp4=..., ...)            # once, at load time
    p = plan(Caps(max_tokens=8192, num_topk=k, device="cpu", weight_plan=wplan, quant_mode="nvfp4"))
    with b12x.PreparationSession("cpu") as s:
        s.prepare([p])
    route_topk(p, router_logits, topk_logits, topk_ids, topk_weights)
    out = run(binding=bind(p, a=a, experts=experts, topk_weights=topk_weights, topk_ids=topk_ids))

Routing: `topk_ids` entries < 0 or >= num_experts are ignored routes (they contribute nothing; a
negative id is how expert parallelism marks a remote expert).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._lib.checks import describe
from ...preparation.plan import Plan
from . import reference
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


class FusedMoePlan(Plan):
    """caps = Caps; a single (reference) variant until the kernels exist: nothing to select, compile
    or allocate."""


def plan(caps: Caps, *, invocation=None, override=None) -> FusedMoePlan:
    """A pure, hashable plan. invocation: None or the expected live token count in [1, max_tokens].
    override: must be None (there is no kernel variant to choose yet)."""
    if not isinstance(caps, Caps):
        raise ValueError(f"caps must be a moe.fused_moe Caps, got {type(caps).__name__}")
    if invocation is not None and (
        isinstance(invocation, bool) or not isinstance(invocation, int) or not 1 <= invocation <= caps.max_tokens
    ):
        raise ValueError(
            f"invocation must be None or the expected token count in [1, {caps.max_tokens}], got {invocation!r}"
        )
    if override is not None:
        raise ValueError(f"override must be None: moe.fused_moe has no kernel variants yet, got {override!r}")
    return FusedMoePlan(op=OP, caps=caps, invocation=invocation)


@dataclass(frozen=True)
class FusedMoeBinding:
    plan: FusedMoePlan
    a: torch.Tensor
    experts: ExpertWeights
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    output: torch.Tensor | None


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


def bind(plan: FusedMoePlan, *, scratch=None, a, experts, topk_weights, topk_ids, output=None) -> FusedMoeBinding:
    """Checks and views only (never allocates, never writes). a: bf16 [T, H] with T <= max_tokens;
    experts: `ExpertWeights` prepared for this plan's weight plan; topk_ids int32 (int64 accepted)
    [T, k]; topk_weights fp32 [T, k]; output: None or a's dtype [T, H]. scratch: None (the op has no
    workspace yet)."""
    if not isinstance(plan, FusedMoePlan):
        raise ValueError(f"plan must come from moe.fused_moe.plan(caps), got {type(plan).__name__}")
    _ = plan.state  # raises PlanNotPreparedError naming PreparationSession
    caps = plan.caps
    wp = caps.weight_plan
    if scratch is not None and (not isinstance(scratch, dict) or scratch):
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
    return FusedMoeBinding(plan, a, experts, topk_weights, topk_ids, output)


def run(*, binding: FusedMoeBinding) -> torch.Tensor:
    """out [T, H] in a's dtype (into binding.output when given). CPU tensors run the reference."""
    if not isinstance(binding, FusedMoeBinding):
        raise ValueError(f"binding must come from moe.fused_moe.bind(...), got {type(binding).__name__}")
    b = binding
    caps = b.plan.caps
    if b.a.device.type != "cpu":
        raise NotImplementedError(
            f"{OP}: the fused MoE GPU kernel is not implemented yet (it will consume ExpertWeights' packed layout); "
            "CPU tensors run the reference"
        )
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
