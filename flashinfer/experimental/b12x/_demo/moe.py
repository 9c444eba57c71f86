"""The demo's MoE feed-forward: a Qwen3-MoE-style expert layer as a ModelOpt NVFP4 checkpoint.

Checkpoint (per layer, ModelOpt's names): `mlp.gate.weight` bf16 [E, H] (the router), and per expert e
`mlp.experts.{e}.{gate,up,down}_proj.{weight, weight_scale, weight_scale_2, input_scale}` (NVFP4 as in
block.py; gate and up of one expert share `weight_scale_2`). Expert weights are random E2M1 codes with
random E4M3 block scales (sized so each output has unit-order variance): quantizing 100M+ random
floats with the CPU oracle would take minutes, and random codes are random NVFP4 weights all the same.

Loading stacks the experts into the layout `moe.fused_moe.prepare_weights` takes: w1 [E, 2I, H/2] with
gate rows first (w13_layout "w31"), w2 [E, H, I/2], block scales [E, rows, K/16], global scales [E].
The reference keeps the checkpoint's own CPU tensors and dequantizes each hit expert with the format
oracle (`_lib.quant.dequantize_nvfp4`), independently of loading, packing and the kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._lib import quant as Q

PROJ = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class MoeSpec:
    experts: int
    topk: int
    intermediate: int
    recipe: str = "w4a16"  # moe.fused_moe quant_mode


def expert_name(prefix: str, e: int, proj: str) -> str:
    return f"{prefix}mlp.experts.{e}.{proj}"


def write_experts(hidden: int, moe: MoeSpec, prefix: str, tensors: dict, ref: dict, gen: torch.Generator) -> None:
    """Adds the router and the experts to `tensors` (the checkpoint) and their CPU copies to `ref`."""
    e_count, i = moe.experts, moe.intermediate
    router = (torch.randn(e_count, hidden, generator=gen) / math.sqrt(hidden)).to(torch.bfloat16)
    tensors[prefix + "mlp.gate.weight"] = router
    ref["router"] = router.float()
    rms_code = math.sqrt(sum(v * v for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)) / 8)  # E2M1 codes drawn uniformly
    experts = []
    for e in range(e_count):
        mats = {}
        for proj, (rows, k) in zip(PROJ, ((i, hidden), (i, hidden), (hidden, i))):
            if proj != "up_proj":  # gate and up share one weight_scale_2 (a fused FC1 in ModelOpt's export)
                ws2 = (0.8 + 0.4 * torch.rand((), generator=gen)) / (rms_code * 256.0 * math.sqrt(k))
            packed = torch.randint(0, 256, (rows, k // 2), generator=gen, dtype=torch.uint8)
            sf = (128.0 + 256.0 * torch.rand(rows, k // 16, generator=gen)).to(torch.float8_e4m3fn)
            name = expert_name(prefix, e, proj)
            tensors[name + ".weight"] = packed
            tensors[name + ".weight_scale"] = sf
            tensors[name + ".weight_scale_2"] = ws2.float().reshape(()).clone()
            tensors[name + ".input_scale"] = torch.tensor(8.0 / (Q.E4M3_MAX * Q.E2M1_MAX))
            mats[proj] = (packed, sf, float(ws2))
        experts.append(mats)
    ref["experts"] = experts


def expert_dense(ref: dict, e: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (W1 [2I, H] gate rows first, W2 [H, I]) of expert e from the checkpoint tensors."""
    deq = {p: Q.dequantize_nvfp4(v, sf, 1.0 / ws2) for p, (v, sf, ws2) in ref["experts"][e].items()}
    return torch.cat([deq["gate_proj"], deq["up_proj"]]), deq["down_proj"]


class ExpertLoader:
    """Destination buffers for the experts and the routing of checkpoint names into them."""

    def __init__(self, hidden: int, moe: MoeSpec, prefix: str, device: torch.device):
        e, i, h = moe.experts, moe.intermediate, hidden
        self.moe, self.prefix = moe, prefix
        u8, f8 = torch.uint8, torch.float8_e4m3fn
        self.w1 = torch.empty(e, 2 * i, h // 2, dtype=u8, device=device)
        self.s1 = torch.empty(e, 2 * i, h // 16, dtype=f8, device=device)
        self.w2 = torch.empty(e, h, i // 2, dtype=u8, device=device)
        self.s2 = torch.empty(e, h, i // 16, dtype=f8, device=device)
        self.router = torch.empty(e, h, dtype=torch.bfloat16, device=device)
        self.scalars: dict[tuple[int, str, str], torch.Tensor] = {}

    def owns(self, module: str) -> bool:
        return module.startswith(self.prefix + "mlp.experts.") or module == self.prefix + "mlp.gate"

    def route(self, session, module: str, field: str, t) -> None:
        if module == self.prefix + "mlp.gate":
            session.session(self.router, t)
            return
        e_str, proj = module[len(self.prefix + "mlp.experts.") :].split(".")
        e, i = int(e_str), self.moe.intermediate
        if field in ("weight_scale_2", "input_scale"):
            self.scalars[(e, proj, field)] = t.float().reshape(())
            return
        if proj == "down_proj":
            session.session((self.w2 if field == "weight" else self.s2)[e], t)
            return
        rows = slice(0, i) if proj == "gate_proj" else slice(i, 2 * i)
        session.session((self.w1 if field == "weight" else self.s1)[e, rows], t)

    def expert_weights(self, activation: str = "silu"):
        """(WeightPlan, ExpertWeights) via moe.fused_moe.plan_weights / prepare_weights."""
        from ..moe import fused_moe as M

        m, e = self.moe, self.moe.experts
        dev = self.w1.device
        stack = lambda proj, field: torch.stack([self.scalars[(x, proj, field)] for x in range(e)]).to(dev)  # noqa: E731
        if not bool((stack("gate_proj", "weight_scale_2") == stack("up_proj", "weight_scale_2")).all()):
            raise ValueError("gate_proj and up_proj of each expert must share weight_scale_2")
        wplan = M.plan_weights(
            quant_modes=m.recipe, source_format="modelopt_nvfp4", activation=activation, params_dtype="bfloat16",
            num_experts=e, hidden_size=self.w1.shape[2] * 2, intermediate_size=m.intermediate, w13_layout="w31",
        )  # fmt: skip
        in1 = torch.maximum(stack("gate_proj", "input_scale"), stack("up_proj", "input_scale"))
        experts = M.prepare_weights(
            plan=wplan, w1_fp4=self.w1, w1_blockscale=self.s1, w1_global_scale=1.0 / stack("gate_proj", "weight_scale_2"),
            a1_gscale=1.0 / in1, w2_fp4=self.w2, w2_blockscale=self.s2,
            w2_global_scale=1.0 / stack("down_proj", "weight_scale_2"), a2_gscale=1.0 / stack("down_proj", "input_scale"),
        )  # fmt: skip
        return wplan, experts


def reference_ffn(ref: dict, h2: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, intermediate: int):
    """fp32 [T, H]: sum over the given routes of w * down(silu(gate) * up) per expert (the W4A16
    recipe: the activation is rounded to bf16 before FC2). The routes are the run's own (the router's
    near-ties may pick differently in fp32; routing has its own tests in the op's suite)."""
    out = torch.zeros(h2.shape[0], h2.shape[1])
    dense = {}
    for t in range(h2.shape[0]):
        for e, w in zip(topk_ids[t].tolist(), topk_weights[t].tolist()):
            if e not in dense:
                dense[e] = expert_dense(ref, e)
            w1, w2 = dense[e]
            g = h2[t] @ w1.t()
            act = (torch.nn.functional.silu(g[:intermediate]) * g[intermediate:]).to(torch.bfloat16).float()
            out[t] += w * (act @ w2.t())
    return out


def reference_routing(ref: dict, h2: torch.Tensor, k: int) -> torch.Tensor:
    """The top-k expert ids of the fp32 router (ties to the higher id), for the agreement report."""
    logits = h2 @ ref["router"].t()
    e = logits.shape[1]
    return (e - 1) - torch.sort(logits.flip(-1), dim=-1, descending=True, stable=True).indices[:, :k]
