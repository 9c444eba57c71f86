"""Checkpoint tensors for moe.fused_moe tests, and an independent dense computation of the layer.

`checkpoint(...)` quantizes random fp32 expert weights with the `_lib.quant` oracles into a source
format's checkpoint tensors (row-major scales, FC1 rows in the given layout). `dense_moe` never looks
at the packed layout: it dequantizes every expert from those checkpoint tensors, splits gate/up by
the checkpoint layout and loops over tokens and routes with plain matmuls.
"""

from __future__ import annotations

import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.moe.fused_moe import weights as W

A1_GS, A2_GS = 60.0, 25.0  # activation global scales: a ~ N(0, 1) keeps 448 * 6 / gs above amax


def weight_plan(source, activation, modes=None, *, e=4, h=64, i=32, layout="w13"):
    modes = modes or W.MODES_FOR_SOURCE[source]
    return W.plan_weights(
        quant_modes=modes,
        source_format=source,
        activation=activation,
        params_dtype=torch.bfloat16,
        num_experts=e,
        hidden_size=h,
        intermediate_size=i,
        w13_layout=layout,
    )


def fp32_weights(wplan, seed=0):
    """fp32 (w1 [E, N1, H] in "w13" order when gated, w2 [E, H, I])."""
    g = torch.Generator().manual_seed(seed)
    p = wplan
    w1 = torch.randn(p.num_experts, p.fc1_rows, p.hidden_size, generator=g) * 0.2
    w2 = torch.randn(p.num_experts, p.hidden_size, p.intermediate_size, generator=g) * 0.2
    return w1, w2


def to_layout(w1, wplan):
    """fp32 FC1 in w13 order -> the plan's checkpoint layout."""
    if not wplan.gated or wplan.w13_layout == "w13":
        return w1
    i = wplan.intermediate_size
    return torch.cat([w1[:, i:], w1[:, :i]], dim=1)


def checkpoint(wplan, seed=0):
    """prepare_weights kwargs (without plan) for wplan, from `fp32_weights(wplan, seed)`."""
    w1, w2 = fp32_weights(wplan, seed)
    w1 = to_layout(w1, wplan)
    e = wplan.num_experts
    if wplan.source_format == "fp4_e8m0_k32":
        v1, s1 = Q.quantize_mxfp4(w1)
        v2, s2 = Q.quantize_mxfp4(w2)
        return dict(w1_fp4=v1, w1_blockscale=s1, w2_fp4=v2, w2_blockscale=s2)
    gs1 = torch.stack([Q.nvfp4_global_scale(w) for w in w1])
    gs2 = torch.stack([Q.nvfp4_global_scale(w) for w in w2])
    q1 = [Q.quantize_nvfp4(w1[x], gs1[x]) for x in range(e)]
    q2 = [Q.quantize_nvfp4(w2[x], gs2[x]) for x in range(e)]
    return dict(
        w1_fp4=torch.stack([q[0] for q in q1]),
        w1_blockscale=torch.stack([q[1] for q in q1]),
        w1_global_scale=gs1,
        a1_gscale=torch.full((e,), A1_GS) * (1 + torch.arange(e) / 8),
        w2_fp4=torch.stack([q[0] for q in q2]),
        w2_blockscale=torch.stack([q[1] for q in q2]),
        w2_global_scale=gs2,
        a2_gscale=torch.full((e,), A2_GS) * (1 + torch.arange(e) / 8),
    )


def dense_weights(wplan, ckpt):
    """fp32 (w1 [E, N1, H] in the checkpoint layout, w2 [E, H, I]) dequantized from checkpoint tensors."""
    if wplan.source_format == "fp4_e8m0_k32":
        return Q.dequantize_mxfp4(ckpt["w1_fp4"], ckpt["w1_blockscale"]), Q.dequantize_mxfp4(
            ckpt["w2_fp4"], ckpt["w2_blockscale"]
        )
    e = wplan.num_experts
    w1 = torch.stack(
        [Q.dequantize_nvfp4(ckpt["w1_fp4"][x], ckpt["w1_blockscale"][x], ckpt["w1_global_scale"][x]) for x in range(e)]
    )
    w2 = torch.stack(
        [Q.dequantize_nvfp4(ckpt["w2_fp4"][x], ckpt["w2_blockscale"][x], ckpt["w2_global_scale"][x]) for x in range(e)]
    )
    return w1, w2


def _act_quant(x, mode, gs):
    if mode == "nvfp4":
        return Q.dequantize_nvfp4(*Q.quantize_nvfp4(x, gs), gs)
    if mode.startswith("w4a8"):
        return Q.dequantize_mxfp8(*Q.quantize_mxfp8(x))
    return x


def dense_moe(
    a, wplan, ckpt, topk_weights, topk_ids, mode, *, on_input=False, limit=7.0, alpha=1.702, beta=1.0
) -> torch.Tensor:
    """fp32 [T, H]: sum over valid routes of w * FC2(act(FC1(a))) (w on the input when on_input)."""
    w1, w2 = dense_weights(wplan, ckpt)
    i = wplan.intermediate_size
    out = torch.zeros(a.shape[0], wplan.hidden_size)
    for t in range(a.shape[0]):
        for r in range(topk_ids.shape[1]):
            e = int(topk_ids[t, r])
            if e < 0 or e >= wplan.num_experts:
                continue
            w = float(topk_weights[t, r])
            x = a[t].float() * (w if on_input else 1.0)
            h = _act_quant(x, mode, ckpt.get("a1_gscale", [None] * (e + 1))[e]) @ w1[e].t()
            if wplan.activation == "relu2":
                g = torch.clamp(h, min=0) ** 2
            else:
                up, gate = (h[:i], h[i:]) if wplan.w13_layout == "w13" else (h[i:], h[:i])
                if wplan.activation == "silu":
                    g = gate / (1 + torch.exp(-gate)) * up
                else:
                    gate = torch.clamp(gate, max=limit)
                    up = torch.clamp(up, -limit, limit)
                    g = gate / (1 + torch.exp(-alpha * gate)) * (up + beta)
            g = g.bfloat16().float()  # the intermediate in a's dtype, every recipe (reference.py)
            y = _act_quant(g, mode, ckpt.get("a2_gscale", [None] * (e + 1))[e]) @ w2[e].t()
            out[t] += y if on_input else w * y
    return out


def routing(t, k, e, seed=1):
    """Random distinct expert ids int32 [T, k] and positive fp32 weights [T, k]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]).to(torch.int32)
    w = torch.rand(t, k, generator=g) + 0.25
    return ids, (w / w.sum(-1, keepdim=True)).float()


def activations(t, h, seed=2):
    return torch.randn(t, h, generator=torch.Generator().manual_seed(seed)).bfloat16()


# The (activation format, weight format) pairs the expert kernels must implement (issue: w4a16 on NVFP4
# and MXFP4 weights, nvfp4, w4a8_mx, w4a8_nvfp4); the kernel's own PAIRS must equal this list.
EXPERT_PAIRS = (
    ("bfloat16", "nvfp4"),
    ("bfloat16", "mxfp4"),
    ("nvfp4", "nvfp4"),
    ("mxfp8", "mxfp4"),
    ("mxfp8", "nvfp4"),
)
