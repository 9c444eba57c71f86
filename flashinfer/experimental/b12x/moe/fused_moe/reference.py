"""moe.fused_moe reference: a per-route loop in fp32 that takes each recipe's quantization steps.

    out[t] = sum_r w[t, r] * FC2_e(act(FC1_e(a[t])))          e = topk_ids[t, r], fp32 accumulation

Routes whose expert id is negative or >= num_experts are IGNORED: they add nothing (expert
parallelism marks remote experts with -1). Routes are summed in order r = 0..k-1, then rounded once
to a's dtype.

Per route, with x = a[t] in fp32 (times w[t, r] first when apply_router_weight_on_input, and then
w is not applied again after FC2):
- nvfp4:      x -> NVFP4 with gs_a = a1_gscale[e] -> dequantized; h = x @ W1_e^T; g = act(h);
              g -> a's dtype (bf16) -> NVFP4 with a2_gscale[e] -> dequantized; y = g @ W2_e^T.
- w4a16:      no activation quantization; g is rounded to a's dtype (FC2's 16-bit operand).
- w4a8_mx, w4a8_nvfp4: x and g -> MXFP8 (UE8M0 per 32) -> dequantized (g rounded to a's dtype first).
The intermediate g is materialised in a's dtype in every recipe (our choice where FORMATS.md is
silent: it is what an unfused pipeline stores between FC1 and FC2, and what the device pipeline's FC1
writes; quantizing the fp32 g instead moves whole NVFP4 block scales and costs ~5e-4 of cosine).
W_e is the fp32 dequantization of the packed weights (`ExpertWeights`, gate rows first for gated
activations), including alpha = 1 / gs_w. Quantizers are the `_lib.quant` oracles.

Activations (g = gate, u = up; FORMATS.md): silu `silu(g) * u`; relu2 `relu(h)^2`; swiglu_oai
`g' = min(g, limit)`, `u' = clamp(u, -limit, limit)`, `g' * sigmoid(alpha * g') * (u' + beta)`.
"""

from __future__ import annotations

import torch

from ..._lib import quant as Q


def activation(h: torch.Tensor, name: str, gated_rows: int, limit=7.0, alpha=1.702, beta=1.0) -> torch.Tensor:
    """act of FC1 output h [..., N1] in fp32; gated: h = [gate | up], gated_rows = I."""
    if name == "relu2":
        return torch.relu(h).square()
    g, u = h[..., :gated_rows], h[..., gated_rows:]
    if name == "silu":
        return torch.nn.functional.silu(g) * u
    g = g.clamp(max=limit)
    u = u.clamp(-limit, limit)
    return g * torch.sigmoid(alpha * g) * (u + beta)


def quantize_activation(x: torch.Tensor, mode: str, gscale) -> torch.Tensor:
    """fp32 x [..., K] after the recipe's activation quantization (quantize then dequantize)."""
    if mode == "nvfp4":
        q, sf = Q.quantize_nvfp4(x, gscale)
        return Q.dequantize_nvfp4(q, sf, gscale)
    if mode in ("w4a8_mx", "w4a8_nvfp4"):
        v, s = Q.quantize_mxfp8(x)
        return Q.dequantize_mxfp8(v, s)
    return x.float()


def expert_matrix(values: torch.Tensor, scales: torch.Tensor, alpha: torch.Tensor, fmt: str, rows: int, k: int):
    """fp32 [rows, k] of one packed expert matrix (swizzled scales), times alpha."""
    sf = 16 if fmt == "nvfp4" else 32
    grid = Q.unswizzle_scales(scales.reshape(-1), rows, k // sf)
    if fmt == "nvfp4":
        w = Q.dequantize_nvfp4(values, grid.view(torch.float8_e4m3fn), 1.0)
    else:
        w = Q.dequantize_mxfp4(values, grid.view(torch.uint8))
    return w * alpha.float().reshape(())


def fused_moe(
    a: torch.Tensor,
    experts,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    quant_mode: str,
    apply_router_weight_on_input: bool = False,
    swiglu_limit: float = 7.0,
    swiglu_alpha: float = 1.702,
    swiglu_beta: float = 1.0,
) -> torch.Tensor:
    """[T, H] in a's dtype (module docstring). experts: an `ExpertWeights`."""
    p = experts.plan
    fmt = p.weight_format
    t_count = a.shape[0]
    out = torch.zeros(t_count, p.hidden_size, dtype=torch.float32, device=a.device)
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    ids = topk_ids.long().cpu()
    for t in range(t_count):
        for r in range(ids.shape[1]):
            e = int(ids[t, r])
            if not 0 <= e < p.num_experts:
                continue
            if e not in cache:
                w1 = expert_matrix(
                    experts.w1_values[e], experts.w1_scales[e], experts.w1_alpha[e], fmt, p.fc1_rows, p.hidden_size
                )
                w2 = expert_matrix(
                    experts.w2_values[e],
                    experts.w2_scales[e],
                    experts.w2_alpha[e],
                    fmt,
                    p.hidden_size,
                    p.intermediate_size,
                )
                cache[e] = (w1, w2)
            w1, w2 = cache[e]
            w = topk_weights[t, r].float()
            x = a[t].float().unsqueeze(0)
            if apply_router_weight_on_input:
                x = x * w
            g1 = None if experts.a1_gscale is None else experts.a1_gscale[e]
            g2 = None if experts.a2_gscale is None else experts.a2_gscale[e]
            h = quantize_activation(x, quant_mode, g1) @ w1.t()
            g = activation(h, p.activation, p.intermediate_size, swiglu_limit, swiglu_alpha, swiglu_beta)
            g = g.to(a.dtype).float()  # the intermediate in a's dtype, every recipe (module docstring)
            y = (quantize_activation(g, quant_mode, g2) @ w2.t()).squeeze(0)
            out[t] += y if apply_router_weight_on_input else w * y
    return out.to(a.dtype)
