"""moe.fused_moe weight lifecycle: `plan_weights` (static, validated, hashable) -> `prepare_weights`
(checkpoint tensors -> `ExpertWeights`, the packed layout the kernels consume), once at load time.

Source formats (per expert e, FC1 rows N1 = 2I gated or I for relu2, FC2 rows H):

    source_format     w*_fp4                               w*_blockscale                 w*_global_scale / a*_gscale
    modelopt_nvfp4    uint8 [E, N, K/2] (or fp4x2)         float8_e4m3fn [E, N, K/16]    fp32 [E] (or scalar) multipliers
    fp4_e8m0_k32      uint8 [E, N, K/2] or [E, N, K/32, 16] UE8M0 uint8 [E, N, K/32]      None (MX has no global scale)

Global scales are MULTIPLIERS, as in FORMATS.md: `w*_global_scale` = gs_w (= 1 / ModelOpt
`weight_scale_2`), `a*_gscale` = gs_a (= 1 / ModelOpt `input_scale`, what the activation quantizer
takes). A scalar is broadcast to every expert.

Packed layout (`ExpertWeights`): the gemm FP4 `Weight` layout (gemm/_shared/weight.py, public as
`b12x.gemm.blockscaled.Weight`) stacked over experts, so expert e is a `Weight` by views
(`ExpertWeights.expert_weight`):

    w1_values  uint8 [E, N1, H/2]     element 2i in the low nibble (bytes unchanged from the checkpoint)
    w1_scales  [E, swizzled_size(N1, H/sf)]  128x4 swizzled per expert: float8_e4m3fn pad 0 (nvfp4),
                                             uint8 UE8M0 pad 127 (mxfp4)
    w1_alpha   fp32 [E]               the product's dequant multiplier: 1 / gs_w (nvfp4), 1 (mxfp4)
    w2_values, w2_scales, w2_alpha    the same for FC2 [E, H, I/2]
    a1_gscale, a2_gscale  fp32 [E] or None   per-expert activation global scales (nvfp4 recipe)

FC1 row order: gated activations are stored GATE rows first (`fc1_row_order == "gate_up"`: rows
[0, I) gate, [I, 2I) up) whatever the checkpoint layout ("w13": up first, "w31": gate first); relu2
has one block of rows ("single").
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_FORMATS = ("modelopt_nvfp4", "fp4_e8m0_k32")
LAYOUTS = ("w13", "w31")
ACTIVATIONS = ("silu", "relu2", "swiglu_oai")
GATED = ("silu", "swiglu_oai")
QUANT_MODES = ("nvfp4", "w4a16", "w4a8_mx", "w4a8_nvfp4")
PARAMS_DTYPES = ("bfloat16",)
# Which recipes a source format can run: NVFP4 activations need NVFP4 weights and activation global
# scales; w4a8_mx pairs MXFP8 activations with MXFP4 weights, w4a8_nvfp4 with NVFP4 weights.
MODES_FOR_SOURCE = {
    "modelopt_nvfp4": ("nvfp4", "w4a16", "w4a8_nvfp4"),
    "fp4_e8m0_k32": ("w4a16", "w4a8_mx"),
}
WEIGHT_FORMAT = {"modelopt_nvfp4": "nvfp4", "fp4_e8m0_k32": "mxfp4"}
SF_VEC = {"nvfp4": 16, "mxfp4": 32}
MXFP8_BLOCK = 32


@dataclass(frozen=True)
class WeightPlan:
    """Static facts of one MoE layer's expert weights (built by `plan_weights`, which validates)."""

    quant_modes: tuple[str, ...]
    source_format: str
    activation: str
    params_dtype: str
    num_experts: int
    hidden_size: int
    intermediate_size: int
    w13_layout: str = "w13"

    @property
    def gated(self) -> bool:
        return self.activation in GATED

    @property
    def weight_format(self) -> str:
        """The packed weights' gemm recipe: "nvfp4" or "mxfp4"."""
        return WEIGHT_FORMAT[self.source_format]

    @property
    def fc1_rows(self) -> int:
        return 2 * self.intermediate_size if self.gated else self.intermediate_size

    @property
    def fc1_row_order(self) -> str:
        """Row order of the packed FC1 (module docstring): "gate_up" (gated) or "single" (relu2)."""
        return "gate_up" if self.gated else "single"


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def plan_weights(
    *,
    quant_modes,
    source_format: str,
    activation: str,
    params_dtype="bfloat16",
    num_experts: int,
    hidden_size: int,
    intermediate_size: int,
    w13_layout: str = "w13",
) -> WeightPlan:
    """A validated `WeightPlan`. quant_modes: the recipes the layer will run (a name or a sequence of
    them, each allowed for source_format: `MODES_FOR_SOURCE`). intermediate_size: this rank's shard
    under tensor parallelism. hidden_size and intermediate_size must be multiples of the weight's
    scale block (16 nvfp4, 32 mxfp4) and of 32 when a w4a8 recipe quantizes activations to MXFP8."""
    if source_format not in SOURCE_FORMATS:
        raise ValueError(f"source_format must be one of {SOURCE_FORMATS}, got {source_format!r}")
    modes = (quant_modes,) if isinstance(quant_modes, str) else quant_modes
    if not isinstance(modes, (tuple, list)) or not modes:
        raise ValueError(
            f"quant_modes must be a recipe name or a non-empty sequence of {QUANT_MODES}, got {quant_modes!r}"
        )
    for mode in modes:
        if mode not in QUANT_MODES:
            raise ValueError(f"quant_modes entries must be in {QUANT_MODES}, got {mode!r}")
        if mode not in MODES_FOR_SOURCE[source_format]:
            raise ValueError(
                f"quant mode {mode!r} does not run on {source_format} weights "
                f"(allowed: {MODES_FOR_SOURCE[source_format]})"
            )
    modes = tuple(dict.fromkeys(modes))
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    dtype = str(params_dtype).removeprefix("torch.")
    if dtype not in PARAMS_DTYPES:
        raise ValueError(f"params_dtype must be one of {PARAMS_DTYPES}, got {params_dtype!r}")
    if w13_layout not in LAYOUTS:
        raise ValueError(f"w13_layout must be one of {LAYOUTS}, got {w13_layout!r}")
    _positive_int("num_experts", num_experts)
    _positive_int("hidden_size", hidden_size)
    _positive_int("intermediate_size", intermediate_size)
    block = SF_VEC[WEIGHT_FORMAT[source_format]]
    if any(m.startswith("w4a8") for m in modes):
        block = max(block, MXFP8_BLOCK)
    for name, value in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size)):
        if value % block:
            raise ValueError(f"{name} must be a multiple of {block} for {source_format} with {modes}, got {value}")
    return WeightPlan(modes, source_format, activation, dtype, num_experts, hidden_size, intermediate_size, w13_layout)


@dataclass(frozen=True, eq=False)
class ExpertWeights:
    """Packed expert weights of one layer (module docstring has the layout)."""

    plan: WeightPlan
    w1_values: object
    w1_scales: object
    w1_alpha: object
    w2_values: object
    w2_scales: object
    w2_alpha: object
    a1_gscale: object = None
    a2_gscale: object = None

    @property
    def weight_format(self) -> str:
        return self.plan.weight_format

    @property
    def fc1_row_order(self) -> str:
        return self.plan.fc1_row_order

    @property
    def device(self):
        return self.w1_values.device

    def expert_weight(self, fc: int, e: int):
        """Expert e's FC1 (fc=1, [N1, H]) or FC2 (fc=2, [H, I]) as a gemm `Weight` made of views."""
        from ...gemm.blockscaled import Weight

        p = self.plan
        if fc not in (1, 2) or not 0 <= e < p.num_experts:
            raise ValueError(f"expert_weight takes fc 1 or 2 and e in [0, {p.num_experts}), got fc={fc}, e={e}")
        if fc == 1:
            vals, sc, alpha, n, k = self.w1_values, self.w1_scales, self.w1_alpha, p.fc1_rows, p.hidden_size
        else:
            vals, sc, alpha, n, k = self.w2_values, self.w2_scales, self.w2_alpha, p.hidden_size, p.intermediate_size
        gs = self.a1_gscale if fc == 1 else self.a2_gscale
        return Weight(self.weight_format, vals[e], sc[e], alpha[e : e + 1], n, k, None if gs is None else gs[e : e + 1])

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"ExpertWeights({p.weight_format}, E={p.num_experts}, H={p.hidden_size}, I={p.intermediate_size}, "
            f"{p.activation}, fc1 rows {p.fc1_row_order}, on {self.device})"
        )


def _per_expert_scale(name: str, value, e: int, device):
    import torch

    from ..._lib.checks import describe

    if not isinstance(value, (torch.Tensor, float, int)) or isinstance(value, bool):
        raise ValueError(f"{name} must be a float32 tensor [{e}] or a scalar, got {describe(value)}")
    t = torch.as_tensor(value, dtype=torch.float32) if not isinstance(value, torch.Tensor) else value
    if not t.is_floating_point() or t.numel() not in (1, e) or (t.dim() > 1 and t.numel() != 1):
        raise ValueError(f"{name} must be a float32 tensor [{e}] or a scalar, got {describe(value)}")
    t = t.detach().to(device=device, dtype=torch.float32).reshape(-1).expand(e).contiguous()
    if t.device.type == "cpu" and not bool(torch.all(torch.isfinite(t) & (t > 0))):
        raise ValueError(f"{name} must be finite and > 0 for every expert, got {t.tolist()}")
    return t


def _fp4_values(name: str, t, e: int, rows: int, k: int, fmt: str):
    import torch

    from ..._lib.checks import describe

    fp4x2 = getattr(torch, "float4_e2m1fn_x2", None)
    want = f"uint8 [{e}, {rows}, {k // 2}]" + (f" (or [{e}, {rows}, {k // 32}, 16])" if fmt == "mxfp4" else "")
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.uint8, fp4x2):
        raise ValueError(f"{name} must be {want}, got {describe(t)}")
    v = t.view(torch.uint8)
    if fmt == "mxfp4" and v.dim() == 4 and list(v.shape) == [e, rows, k // 32, 16]:
        v = v.reshape(e, rows, k // 2)
    if list(v.shape) != [e, rows, k // 2]:
        raise ValueError(f"{name} must be {want}, got {describe(t)}")
    return v.contiguous()


def _block_scales(name: str, t, e: int, rows: int, k: int, fmt: str):
    import torch

    from ..._lib.checks import describe
    from ..._lib.quant.scales import as_bytes

    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    sf = SF_VEC[fmt]
    if fmt == "nvfp4":
        ok_dtype, want = (torch.float8_e4m3fn,), f"float8_e4m3fn [{e}, {rows}, {k // sf}]"
    else:
        ok_dtype, want = (torch.uint8, e8m0), f"UE8M0 uint8 [{e}, {rows}, {k // sf}]"
    if not isinstance(t, torch.Tensor) or t.dtype not in ok_dtype or list(t.shape) != [e, rows, k // sf]:
        raise ValueError(f"{name} must be {want}, got {describe(t)}")
    b = as_bytes(t)
    return b.view(torch.float8_e4m3fn) if fmt == "nvfp4" else b


def _to_gate_up(t, plan: WeightPlan):
    """FC1 rows in the packed order: w13 (up, gate) -> (gate, up); w31 is already gate first."""
    import torch

    if not plan.gated or plan.w13_layout == "w31":
        return t.contiguous()
    i = plan.intermediate_size
    return torch.cat([t[:, i:], t[:, :i]], dim=1).contiguous()


def prepare_weights(
    *,
    plan: WeightPlan,
    w1_fp4,
    w1_blockscale,
    w1_global_scale=None,
    a1_gscale=None,
    w2_fp4,
    w2_blockscale,
    w2_global_scale=None,
    a2_gscale=None,
) -> ExpertWeights:
    """Checkpoint tensors (module docstring table) -> `ExpertWeights`. FP4 bytes and block scales pass
    through bit-exact; FC1 rows are reordered to gate-first and scales swizzled per expert. a1_gscale
    and a2_gscale are required when plan.quant_modes holds "nvfp4" (optional otherwise: kept for
    later use); every global scale must be None for fp4_e8m0_k32."""
    import torch

    from ..._lib.quant import UE8M0_ONE_BYTE, swizzle_scales

    if not isinstance(plan, WeightPlan):
        raise ValueError(f"plan must be a WeightPlan from plan_weights(...), got {type(plan).__name__}")
    p = plan
    fmt = p.weight_format
    e, h, i, n1 = p.num_experts, p.hidden_size, p.intermediate_size, p.fc1_rows
    w1 = _fp4_values("w1_fp4", w1_fp4, e, n1, h, fmt)
    s1 = _block_scales("w1_blockscale", w1_blockscale, e, n1, h, fmt)
    w2 = _fp4_values("w2_fp4", w2_fp4, e, h, i, fmt)
    s2 = _block_scales("w2_blockscale", w2_blockscale, e, h, i, fmt)
    device = w1.device
    for name, t in (("w1_blockscale", s1), ("w2_fp4", w2), ("w2_blockscale", s2)):
        if t.device != device:
            raise ValueError(f"{name} must be on {device} (w1_fp4's device), got {t.device}")
    scalars = {
        "w1_global_scale": w1_global_scale,
        "a1_gscale": a1_gscale,
        "w2_global_scale": w2_global_scale,
        "a2_gscale": a2_gscale,
    }
    if fmt == "mxfp4":
        for name, value in scalars.items():
            if value is not None:
                raise ValueError(f"{name} must be None for fp4_e8m0_k32 weights (MX has no global scale)")
        one = torch.ones(e, dtype=torch.float32, device=device)
        w1_alpha, w2_alpha, g1, g2 = one, one.clone(), None, None
    else:
        for name in ("w1_global_scale", "w2_global_scale"):
            if scalars[name] is None:
                raise ValueError(f"{name} is required for modelopt_nvfp4 weights (gs_w, a multiplier)")
        if "nvfp4" in p.quant_modes:
            for name in ("a1_gscale", "a2_gscale"):
                if scalars[name] is None:
                    raise ValueError(f"{name} is required for quant mode 'nvfp4' (per-expert gs_a, a multiplier)")
        gw1 = _per_expert_scale("w1_global_scale", w1_global_scale, e, device)
        gw2 = _per_expert_scale("w2_global_scale", w2_global_scale, e, device)
        w1_alpha, w2_alpha = torch.ones_like(gw1) / gw1, torch.ones_like(gw2) / gw2
        g1 = None if a1_gscale is None else _per_expert_scale("a1_gscale", a1_gscale, e, device)
        g2 = None if a2_gscale is None else _per_expert_scale("a2_gscale", a2_gscale, e, device)
    pad = 0 if fmt == "nvfp4" else UE8M0_ONE_BYTE
    return ExpertWeights(
        plan=p,
        w1_values=_to_gate_up(w1, p),
        w1_scales=swizzle_scales(_to_gate_up(s1, p), pad).contiguous(),
        w1_alpha=w1_alpha,
        w2_values=w2,
        w2_scales=swizzle_scales(s2, pad).contiguous(),
        w2_alpha=w2_alpha,
        a1_gscale=g1,
        a2_gscale=g2,
    )
