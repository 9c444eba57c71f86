"""The demo's decoder block: shapes, a random ModelOpt-style NVFP4 checkpoint, loading, and the fp32 reference.

One dense (Llama-style) block: RMSNorm -> fused QKV -> RoPE (NeoX rotate-half) -> paged decode attention
(GQA) -> O proj -> residual -> RMSNorm -> fused gate/up -> SiLU * up -> down -> residual.

The checkpoint is what ModelOpt exports for NVFP4: per linear `weight` uint8 [N, K/2] (E2M1, two per
byte), `weight_scale` float8_e4m3fn [N, K/16], `weight_scale_2` fp32 scalar (= 1/gs_w) and
`input_scale` fp32 scalar (= 1/gs_a; the weight-only decode path does not use it). q/k/v and gate/up
share one `weight_scale_2`, as ModelOpt's export does for layers a runtime fuses. The reference is
built from the checkpoint tensors dequantized with the format oracle (`_lib.quant.dequantize_nvfp4`),
independently of the loader, the packing and the kernels it checks.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import torch

from .._lib import quant as Q
from . import moe as M

CHECKPOINT_FILE = "model.safetensors"


@dataclass(frozen=True)
class BlockSpec:
    name: str
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    page_size: int
    prefill: int  # KV tokens already cached for request 0 (request b: prefill + 29 * b)
    rope_theta: float = 10000.0
    eps: float = 1e-5
    moe: M.MoeSpec | None = None  # None: the dense MLP (gate_up / down); else a routed expert layer

    def fused(self) -> dict[str, tuple[int, tuple[tuple[str, int], ...]]]:
        """Fused linear -> (K, ((checkpoint module, rows), ...)) in row order."""
        q, kv = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        i = self.intermediate
        out = {
            "qkv": (self.hidden, (("self_attn.q_proj", q), ("self_attn.k_proj", kv), ("self_attn.v_proj", kv))),
            "o": (q, (("self_attn.o_proj", self.hidden),)),
        }
        if self.moe is None:
            out["gate_up"] = (self.hidden, (("mlp.gate_proj", i), ("mlp.up_proj", i)))
            out["down"] = (i, (("mlp.down_proj", self.hidden),))
        return out


# gemm.blockscaled needs K % 128 == 0 and N % 16 == 0: 2048, 3072, 11264 and 5632 all qualify.
# qwen3-moe-small: one layer of Qwen3-30B-A3B's shape (hidden 2048, 32 q / 4 kv heads x 128, 128 experts,
# top-8, expert intermediate 768); its FFN is moe.fused_moe (W4A16) behind a bf16 router.
MODELS = {
    "llama-small": BlockSpec("llama-small", 2048, 16, 4, 128, 5632, 16, 320),
    "qwen3-moe-small": BlockSpec("qwen3-moe-small", 2048, 32, 4, 128, 768, 16, 320, moe=M.MoeSpec(128, 8, 768)),
}
PREFIX = "model.layers.0."
NORMS = ("input_layernorm", "post_attention_layernorm")


def write_checkpoint(spec: BlockSpec, directory: str, seed: int) -> dict:
    """Random weights -> NVFP4 tensors -> `directory`/model.safetensors (+ hf_quant_config.json).

    Returns the reference's fp32 tensors: {fused name: dequantized [N, K]} and {norm: fp32 [H]}.
    """
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    tensors, ref = {}, {}
    for fused, (k, parts) in spec.fused().items():
        w = [torch.randn(rows, k, generator=gen) / math.sqrt(k) for _, rows in parts]
        gs = Q.nvfp4_global_scale(torch.cat(w))  # one global scale per fused group
        deq = []
        for (module, _), wi in zip(parts, w):
            packed, sf = Q.quantize_nvfp4(wi, gs)
            name = PREFIX + module
            tensors[name + ".weight"] = packed
            tensors[name + ".weight_scale"] = sf
            tensors[name + ".weight_scale_2"] = (1.0 / gs).reshape(())
            tensors[name + ".input_scale"] = torch.tensor(8.0 / (Q.E4M3_MAX * Q.E2M1_MAX))  # amax ~8 assumed
            deq.append(Q.dequantize_nvfp4(packed, sf, gs))
        ref[fused] = torch.cat(deq)
    if spec.moe is not None:
        M.write_experts(spec.hidden, spec.moe, PREFIX, tensors, ref, gen)
    for norm in NORMS:
        g = (1.0 + 0.1 * torch.randn(spec.hidden, generator=gen)).to(torch.bfloat16)
        tensors[PREFIX + norm + ".weight"] = g
        ref[norm] = g.float()
    save_file(tensors, os.path.join(directory, CHECKPOINT_FILE), metadata={"format": "pt"})
    with open(os.path.join(directory, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "b12x demo"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}, f)
    return ref


def load_checkpoint(spec: BlockSpec, directory: str, device: torch.device, display=None):
    """DirectWeightSession reads every tensor into preallocated fused buffers (q/k/v rows into one
    [N, K/2] tensor, ..., experts stacked by `moe.ExpertLoader`). Returns ({fused: (values, scales,
    weight_scale_2, input_scale)}, {norm: w}, LoadStats, ExpertLoader or None)."""
    from ..loader import DirectWeightSession

    dest, where = {}, {}
    for fused, (k, parts) in spec.fused().items():
        n = sum(rows for _, rows in parts)
        values = torch.empty(n, k // 2, dtype=torch.uint8, device=device)
        scales = torch.empty(n, k // 16, dtype=torch.float8_e4m3fn, device=device)
        dest[fused] = {"values": values, "scales": scales, "ws2": [], "in_s": []}
        row = 0
        for module, rows in parts:
            where[PREFIX + module] = (fused, row, row + rows)
            row += rows
    norms = {norm: torch.empty(spec.hidden, dtype=torch.bfloat16, device=device) for norm in NORMS}
    experts = None if spec.moe is None else M.ExpertLoader(spec.hidden, spec.moe, PREFIX, device)
    scalar = lambda name: name.endswith((".weight_scale_2", ".input_scale"))  # noqa: E731
    with DirectWeightSession(device, display=display) as session:
        for name, t in session.weights(directory, needs_values=scalar):
            module, _, field = name.rpartition(".")
            if module.startswith(PREFIX) and module[len(PREFIX) :] in NORMS:
                session.session(norms[module[len(PREFIX) :]], t)
                continue
            if experts is not None and experts.owns(module):
                experts.route(session, module, field, t)
                continue
            fused, r0, r1 = where[module]
            d = dest[fused]
            if field == "weight":
                session.session(d["values"][r0:r1], t)
            elif field == "weight_scale":
                session.session(d["scales"][r0:r1], t)
            elif field == "weight_scale_2":
                d["ws2"].append(t.float().reshape(1))
            else:
                d["in_s"].append(t.float().reshape(1))
    stats = session.stats()
    out = {}
    for fused, d in dest.items():
        ws2 = torch.cat(d["ws2"])
        if not bool((ws2 == ws2[0]).all()):
            raise ValueError(f"{fused}: the fused parts must share weight_scale_2, got {ws2.tolist()}")
        out[fused] = (d["values"], d["scales"], ws2[:1], torch.cat(d["in_s"]).amax().reshape(1))
    return out, norms, stats, experts


# ---- the math both paths share (fp32) ------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def rope_tables(spec: BlockSpec, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin fp32 [T, D/2] for integer positions [T] (NeoX rotate-half convention)."""
    d = spec.head_dim
    inv = spec.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=positions.device) / d)
    ang = positions.double()[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D] -> fp32 rotated; cos/sin [T, D/2]."""
    x = x.float()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference_step(
    spec: BlockSpec, ref: dict, x: torch.Tensor, prefix_k: list, prefix_v: list, positions, trace=None, routing=None
):
    """The whole block in fp32 from the dequantized checkpoint, dense attention over the cached
    prefix (fp32 copies of the cache's bf16 values) plus the new token. x [T, H] -> fp32 [T, H].
    trace: a dict that receives the intermediates ("attn" [T, Hq, D], "h2" [T, H]) for per-stage
    checks. routing: (topk_ids, topk_weights) of the run being checked (MoE blocks only)."""
    hq, hkv, d = spec.q_heads, spec.kv_heads, spec.head_dim
    x = x.float().cpu()
    h = rms_norm(x, ref["input_layernorm"], spec.eps)
    qkv = h @ ref["qkv"].t()
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    cos, sin = rope_tables(spec, positions.cpu())
    q = apply_rope(q.reshape(-1, hq, d), cos, sin)
    k = apply_rope(k.reshape(-1, hkv, d), cos, sin)
    v = v.reshape(-1, hkv, d)
    attn = torch.empty(x.shape[0], hq, d)
    for b in range(x.shape[0]):
        keys = torch.cat([prefix_k[b], k[b : b + 1]]).repeat_interleave(hq // hkv, dim=1)  # [L, Hq, D]
        vals = torch.cat([prefix_v[b], v[b : b + 1]]).repeat_interleave(hq // hkv, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[b], keys) / math.sqrt(d)
        attn[b] = torch.einsum("hl,lhd->hd", scores.softmax(-1), vals)
    if trace is not None:
        trace["attn"] = attn
    x1 = x + attn.reshape(x.shape[0], hq * d) @ ref["o"].t()
    h2 = rms_norm(x1, ref["post_attention_layernorm"], spec.eps)
    if trace is not None:
        trace["h2"] = h2
    if spec.moe is not None:
        ids, weights = (t.cpu() for t in routing)
        return x1 + M.reference_ffn(ref, h2, ids, weights.float(), spec.moe.intermediate)
    gate, up = (h2 @ ref["gate_up"].t()).chunk(2, dim=-1)
    return x1 + (torch.nn.functional.silu(gate) * up) @ ref["down"].t()


def make_cache(spec: BlockSpec, tokens: int, device: torch.device, gen: torch.Generator, lens=None):
    """A paged bf16 KV cache prefilled with random keys/values for `tokens` requests (pages shuffled).
    lens: cached tokens per request (default: ragged, prefill + 29 * b).

    Returns a dict: k_cache, v_cache [pages, page, Hkv, D]; page_table int32 [B, width];
    seqlens int32 [B] (prefix + the decode token); positions int64 [B]; slot_page / slot_off int64
    [B] (where the decode token's K/V go); prefix_k / prefix_v: lists of fp32 [L_b, Hkv, D] (CPU).
    """
    ps, hkv, d = spec.page_size, spec.kv_heads, spec.head_dim
    lens = [spec.prefill + 29 * b for b in range(tokens)] if lens is None else [int(n) for n in lens]
    if len(lens) != tokens or min(lens) < 0:
        raise ValueError(f"lens must be {tokens} non-negative cached lengths, got {lens}")
    pages_per = [-(-(n + 1) // ps) for n in lens]
    width, total = max(pages_per), sum(pages_per)
    perm = torch.randperm(total, generator=gen)
    k_cache = torch.zeros(total, ps, hkv, d, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    page_table = torch.zeros(tokens, width, dtype=torch.int32)
    prefix_k, prefix_v, slot_page, slot_off = [], [], [], []
    start = 0
    for b, (n, np_) in enumerate(zip(lens, pages_per)):
        pages = perm[start : start + np_]
        start += np_
        page_table[b, :np_] = pages.int()
        kb = torch.randn(n, hkv, d, generator=gen).to(torch.bfloat16)
        vb = torch.randn(n, hkv, d, generator=gen).to(torch.bfloat16)
        j = torch.arange(n)
        k_cache[pages[j // ps], j % ps] = kb
        v_cache[pages[j // ps], j % ps] = vb
        prefix_k.append(kb.float())
        prefix_v.append(vb.float())
        slot_page.append(int(pages[n // ps]))
        slot_off.append(n % ps)
    as_dev = lambda t: t.to(device)  # noqa: E731
    return {
        "k_cache": as_dev(k_cache),
        "v_cache": as_dev(v_cache),
        "page_table": as_dev(page_table),
        "seqlens": as_dev(torch.tensor([n + 1 for n in lens], dtype=torch.int32)),
        "positions": as_dev(torch.tensor(lens, dtype=torch.int64)),
        "slot_page": as_dev(torch.tensor(slot_page, dtype=torch.int64)),
        "slot_off": as_dev(torch.tensor(slot_off, dtype=torch.int64)),
        "prefix_k": prefix_k,
        "prefix_v": prefix_v,
        "lens": lens,
    }
