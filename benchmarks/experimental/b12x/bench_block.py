"""The demo's decoder block through PreparationSession against the same block in plain torch.

    python -m benchmarks.experimental.b12x.bench_block [--quick] [--model llama-small] [--tokens 1 8 32]
        [--context 1024] [--prefill 2048] [--glue triton-pdl [triton ...]] [--variant fast [base ...]]
        [--per-op] [--ablate] [--startup] [--json PATH]

Block: `b12x demo`'s (flashinfer/experimental/b12x/_demo/block.py): RMSNorm -> QKV -> RoPE + KV append
-> attention -> O -> residual + RMSNorm -> gate/up -> SiLU * up -> down -> residual, NVFP4 weights.

Decode (T requests, one new token each, every request with --context cached tokens):
- ours: the demo's DecodeStep (gemm.blockscaled W4A16 decode GEMMs, attention.paged decode, the glue
  of each --glue choice: Triton kernels launched as programmatic dependents by default, or plain
  Triton / torch.compile / torch) captured in one CUDA graph; the timed call is one graph replay. One
  row per glue choice and --variant (VARIANTS; default "fast", the demo's default step: gate_up + SiLU
  * up and down + residual in one launch each, RoPE + KV append in qkv's epilogue, the GEMMs and
  attention as programmatic dependents; "base": the plain ten launches).
- peer: the same block in plain torch with the checkpoint's weights dequantized to bf16, KV in a
  contiguous [T, L, Hkv, D] cache, attention by SDPA (GQA), the step `torch.compile`d and captured in
  one CUDA graph; the timed call is one replay.
Both timed with CUDA events and L2 flushed before each replay (the block's NVFP4 weights, 25 MB, would
otherwise sit in the 60 MB L2 across replays, which a real model's 30+ layers never allow).
Bytes (% of the copy ceiling): our weight bytes (values + scales) + the KV bytes attention reads.
--ablate: every step of the run captured once more per op, without that op, and timed the same way.
--per-op: each op of the first glue choice's step (and the glue ops of the other choices) captured in
a graph of its own and timed the same way (a breakdown: each replay pays one graph launch, so the sum
exceeds the whole step's replay).

Prefill (--prefill N, one request of N new tokens, empty cache): ours runs the tiled GEMMs and
attention.paged in extend mode (skipped, with the reason, while that mode is not implemented); peer:
the same torch block compiled for T = N with causal SDPA. Eager calls (events, L2 flushed).

Startup (--startup): child processes time a cold start (empty kernel cache) with compile_workers = 1
and = 8 of the first --variant's step (default fast), then a warm start (every kernel on disk) in a fresh process: process wall time, import,
checkpoint load, the glue's compile (first --glue choice: Triton kernels compiled or loaded from
Triton's disk cache under the b12x cache dir, before the freeze; torch.compile compiles in the first
replay instead), PreparationSession.prepare, and the first CUDA-graph replay of the decode step
(built, captured, replayed once).
Without --json the report goes to $OUT/b12x_bench_block.json when $OUT is set.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.experimental.b12x.common import (
    Case,
    Table,
    Timing,
    capture_graph,
    ceilings,
    measure,
    report_path,
    require_cuda,
    standard_parser,
    time_cuda_events,
    timing_kwargs,
)
from flashinfer.experimental.b12x._demo import GLUE_CHOICES, STEPS

MODULE = "benchmarks.experimental.b12x.bench_block"
# --variant name -> run.prepare's keyword arguments for the decode step's plans: fused (the GEMMs'
# epilogues), pdl (GemmQuery.pdl), gemm_opts ({GEMM name: DecodeConfig changes}), norms (the
# RMSNorms in the GEMMs), attention_pdl (attention.paged's Caps.pdl), attention_opts (DecodeConfig /
# ScheduleConfig changes of the attention plan). "-p1": gate_up's K loop as the 1-chunk weight
# pipeline (64 registers a lane instead of 112 at T <= 8: twice the resident CTAs); "fused6": the
# RMSNorms inside qkv / gate_up and the first residual inside o too (six launches); "+attn": the
# decode attention a programmatic dependent too ("+attnp": with its first keys prefetched to L2 before
# the wait); "+mN": the attention schedule's min_chunk N keys (more, shorter items at small batch);
# "pp": its page-table lines prefetched to L2 when an item starts; "+l2": the step's weights
# prefetched to L2 from a side branch at its start (DecodeStep(l2_prefetch=...): "l2kv" also the KV
# cache, which in the bench's cache is exactly the live pages; "b": the bulk-prefetch kernel); "+rope":
# RoPE + KV append in the qkv GEMM's epilogue (seven launches; "fused6+pdl+rope" five).
P1 = "unroll=1,prefetch=1"


def _variant(fused=False, pdl="off", gemm_opts=None, norms=False, attention_pdl="off", attention_opts=None, l2=None,
             rope=False):  # fmt: skip
    return dict(fused=fused, pdl=pdl, gemm_opts=gemm_opts, norms=norms, attention_pdl=attention_pdl,
                attention_opts=attention_opts, l2=l2, rope=rope)  # fmt: skip


BULK = ("bulk", 64, 4096)  # _lib.l2_prefetch.PrefetchConfig(mode, threads, bulk_bytes)


FP = dict(fused=True, pdl="prefetch")
_FAST = STEPS["fast"]  # the demo's default step (`python -m b12x demo --step fast`)


def _fast(gemm_opts):
    """The demo's default step ("fast") with other GEMM options."""
    return _variant(
        fused=_FAST["fused"],
        pdl=_FAST["gemm_pdl"],
        rope=_FAST["rope"],
        attention_pdl=_FAST["attention_pdl"],
        attention_opts=dict(min_chunk=_FAST["attention_min_chunk"]),
        gemm_opts=gemm_opts,
    )  # fmt: skip


VARIANTS = {
    "fast": _fast(_FAST["gemm_opts"]),
    # the fast step with session 24's gate_up loads (no cache hints; session 25 gave fused configs the
    # heuristic's hints, except after a whole-row prefetch, which the block's GEMMs take), and with every
    # GEMM's L2 prefetch cut to the first step's K range (launch.prefetch_span gives these small weights "rows")
    "fast-nohint": _fast({**(_FAST["gemm_opts"] or {}), "gate_up": "wcache=nc,acache=nc"}),
    "fast-step": _fast({"qkv": "span=step", "o": "span=step", "gate_up": "span=step", "down": "upfront=4,span=step"}),
    "base": _variant(),
    "fused": _variant(fused=True),
    "pdl": _variant(pdl="prefetch"),
    "pdl-wait": _variant(pdl="wait"),
    "fused+pdl": _variant(**FP),
    "fused+pdl-wait": _variant(fused=True, pdl="wait"),
    "fused-p1": _variant(fused=True, gemm_opts={"gate_up": P1}),
    "fused+pdl-p1": _variant(**FP, gemm_opts={"gate_up": P1}),
    "fused6": _variant(fused=True, norms=True),
    "fused6+pdl": _variant(**FP, norms=True),
    "fused+pdl+attn": _variant(**FP, attention_pdl="wait"),
    "fused+pdl+attnp": _variant(**FP, attention_pdl="prefetch"),
    "fused6+pdl+attnp": _variant(**FP, norms=True, attention_pdl="prefetch"),
    "fused+pdl+m128": _variant(**FP, attention_opts=dict(min_chunk=128)),
    "fused+pdl+m64": _variant(**FP, attention_opts=dict(min_chunk=64)),
    "fused+pdl+pp": _variant(**FP, attention_opts=dict(prefetch_pages=True)),
    "fused+pdl+m64pp": _variant(**FP, attention_opts=dict(min_chunk=64, prefetch_pages=True)),
    "fused+pdl+l2": _variant(**FP, l2=("weights", None)),
    "fused+pdl+l2b": _variant(**FP, l2=("weights", BULK)),
    "fused+pdl+l2kv": _variant(**FP, l2=("weights+kv", None)),
    "fused+pdl+l2kvb": _variant(**FP, l2=("weights+kv", BULK)),
    "fused+pdl+l2+m64": _variant(**FP, l2=("weights", None), attention_opts=dict(min_chunk=64)),
    "fused+pdl+l2kv+m64": _variant(**FP, l2=("weights+kv", None), attention_opts=dict(min_chunk=64)),
    "fused+pdl+rope": _variant(**FP, rope=True),
    "fused+pdl+rope+m128": _variant(**FP, rope=True, attention_opts=dict(min_chunk=128)),
    "fused+pdl+rope+m64": _variant(**FP, rope=True, attention_opts=dict(min_chunk=64)),
    "fused+pdl+rope+attnp": _variant(**FP, rope=True, attention_pdl="prefetch"),
    "fused+pdl+rope+attn+m128": _variant(**FP, rope=True, attention_pdl="wait", attention_opts=dict(min_chunk=128)),
    "fused6+pdl+rope+m128": _variant(**FP, norms=True, rope=True, attention_opts=dict(min_chunk=128)),
    "fused+pdl-p1+m128": _variant(**FP, gemm_opts={"gate_up": P1}, attention_opts=dict(min_chunk=128)),
    "fused+pdl-p1+rope+attn+m128": _variant(
        **FP, gemm_opts={"gate_up": P1}, rope=True, attention_pdl="wait", attention_opts=dict(min_chunk=128)
    ),  # fmt: skip
    "fused6+pdl+rope": _variant(**FP, norms=True, rope=True),
    "fused+pdl+rope+l2": _variant(**FP, rope=True, l2=("weights", None)),
    "fused+pdl+rope+l2kv": _variant(**FP, rope=True, l2=("weights+kv", None)),
}


def _fast_gemm(**opts) -> dict:
    """The fast step with these GEMMs' DecodeConfig changes over its own (`STEPS["fast"]["gemm_opts"]`)."""
    return dict(VARIANTS["fast"], gemm_opts={**_FAST["gemm_opts"], **opts})


# "fast+up2" / "fast+up4": the fast step with gate_up's weight loads of its first 2 / 4 chunks issued
# before their math (DecodeConfig.upfront, session 9; B12X_GEMM_DECODE_OPTS=upfront=2 gives every GEMM
# of the step the same)
VARIANTS["fast+up2"] = _fast_gemm(gate_up="upfront=2")
VARIANTS["fast+up4"] = _fast_gemm(gate_up="upfront=4")
# "fast+ke": attention.paged's lean ticket (one fence on the merging CTA's chain) and early page-table
# prefetch (DecodeConfig.lean_ticket / early_pages, session 10, opt-in)
# "fast+gu16" / "fast+gu8u1" / "fast+gu4": the fast step's gate_up with 16 warps of one chunk each (92
# registers), 8 warps without the unrolled chunk pair (100) or 4 warps (96) instead of 8 x 2 unrolled (112)
VARIANTS["fast+gu16"] = _fast_gemm(gate_up="warps=16,unroll=1")
VARIANTS["fast+gu8u1"] = _fast_gemm(gate_up="unroll=1")
VARIANTS["fast+gu4"] = _fast_gemm(gate_up="warps=4")
# "fast+gu3" / "fast+gu3u1" (session 28): the fast step's gate_up compiled for 3 CTAs an SM (DecodeConfig.minctas:
# 80 registers, a few words spilled) so its 352 CTAs run in one H200 wave instead of 1.33, unroll 2 / 1
VARIANTS["fast+gu3"] = _fast_gemm(gate_up="minctas=3")
VARIANTS["fast+gu3u1"] = _fast_gemm(gate_up="minctas=3,unroll=1")
# "fast+dnu1" / "fast+dn8" / "fast+dnup2": the fast step's down (16 warps x 2.75 chunks of K 5632 at
# T = 1, 64 registers) without the unrolled pair, with 8 warps, or holding 2 chunks' loads up front
VARIANTS["fast+dnu1"] = _fast_gemm(down="unroll=1")
VARIANTS["fast+dn8"] = _fast_gemm(down="warps=8")
VARIANTS["fast+dnup2"] = _fast_gemm(down="upfront=2")
# "fast+o16" / "fast+qkv16" / "fast+w16": o, qkv, or qkv + o + gate_up with 16 warps of one K chunk
# each (a CTA's chain half as long at T = 1: K 2048 is 16 chunks of 128)
W16 = "warps=16,unroll=1"
VARIANTS["fast+o16"] = _fast_gemm(o=W16)
VARIANTS["fast+qkv16"] = _fast_gemm(qkv=W16)
VARIANTS["fast+w16"] = _fast_gemm(qkv=W16, o=W16, gate_up=W16)
# "fast+c8" / "fast+c16": attention's split requests as thread-block clusters of 8 / 16 CTAs merging
# through distributed shared memory (DecodeConfig.cluster, session 10, opt-in)
VARIANTS["fast+c8"] = dict(VARIANTS["fast"], attention_opts=dict(VARIANTS["fast"]["attention_opts"], cluster=8))
VARIANTS["fast+c16"] = dict(VARIANTS["fast"], attention_opts=dict(VARIANTS["fast"]["attention_opts"], cluster=16))
# "fast+c8p": the 8-CTA clusters merging by st.async pushes into each rank's shared memory instead of
# remote loads behind a release barrier (DecodeConfig.cluster_push, session 11, opt-in)
VARIANTS["fast+c8p"] = dict(
    VARIANTS["fast"], attention_opts=dict(VARIANTS["fast"]["attention_opts"], cluster=8, cluster_push=True)
)
# "fast+l2mlp": o_proj's, gate_up's and down's weights prefetched to L2 from a side branch forked at
# attention's start (DecodeStep(l2_prefetch="mlp"), session 10)
VARIANTS["fast+l2mlp"] = dict(VARIANTS["fast"], l2=("mlp", None))
VARIANTS["fast+l2mlpb"] = dict(VARIANTS["fast"], l2=("mlp", BULK))
VARIANTS["fast+ke"] = dict(
    VARIANTS["fast"], attention_opts=dict(VARIANTS["fast"]["attention_opts"], lean_ticket=True, early_pages=True)
)
# "fast-s11": the fast step as session 11 ended (down without upfront loads, attention's cluster merged
# by DSMEM pulls), the same-job baseline of session 12's two default changes
VARIANTS["fast-s11"] = dict(
    VARIANTS["fast"], gemm_opts=None, attention_opts=dict(VARIANTS["fast"]["attention_opts"], cluster_push=False)
)
# "fast+n6": the fast step with the RMSNorms inside qkv / gate_up and the first residual inside o (six
# launches; fused6+pdl+rope+m128 was 0.15 µs faster than its chain in session 9, before the attention
# and down changes)
VARIANTS["fast+n6"] = dict(VARIANTS["fast"], norms=True)
GEMM_NAMES = ("qkv", "o", "gate_up", "down")  # the dense block's GEMMs (gemm_opts keys)


def variant_kwargs(spelling: str) -> dict:
    """prepare()'s keyword arguments (plus DecodeStep's "l2") of a --variant spelling: a VARIANTS name,
    then optionally "@NAME=OPTS" items that set gemm_opts[NAME] (NAME one of GEMM_NAMES, OPTS
    comma-separated DecodeConfig changes as B12X_GEMM_DECODE_OPTS takes them), e.g.
    "fast@gate_up=warps=4,upfront=4@down=upfront=4": any config of the step's fused GEMMs without a
    new VARIANTS entry."""
    base, *items = spelling.split("@")
    if base not in VARIANTS:
        raise ValueError(f"variant must start with one of VARIANTS ({', '.join(VARIANTS)}), got {base!r}")
    kw = dict(VARIANTS[base])
    opts = dict(kw["gemm_opts"] or {})
    for item in items:
        name, sep, value = item.partition("=")
        if name not in GEMM_NAMES or not sep or not value:
            raise ValueError(f"variant item {item!r} of {spelling!r} must be NAME=OPTS with NAME one of {GEMM_NAMES}")
        opts[name] = value
    kw["gemm_opts"] = opts or None
    if items and not kw["fused"] and kw["pdl"] == "off":
        raise ValueError(f"variant {spelling!r}: gemm options need a fused or pdl base (the fused decode kernel)")
    return kw


def _variant_arg(spelling: str) -> str:
    """argparse type of --variant: the spelling, checked by variant_kwargs."""
    import argparse

    try:
        variant_kwargs(spelling)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return spelling


TOKENS, QUICK_TOKENS = (1, 8, 32), (1, 8)
CHILD_FLAG = "--startup-child"


# ---- plain-torch peer -----------------------------------------------------------------------------
class TorchBlock:
    """The block in bf16 plain torch: weights dequantized from the checkpoint, contiguous KV cache."""

    def __init__(self, spec, ref, tokens: int, context: int, device, cache=None):
        bf = lambda t: t.to(device=device, dtype=torch.bfloat16)  # noqa: E731
        self.spec, self.t, self.ctx = spec, tokens, context
        self.w = {k: bf(ref[k]) for k in ("qkv", "o", "gate_up", "down")}
        self.g1, self.g2 = bf(ref["input_layernorm"]), bf(ref["post_attention_layernorm"])
        hkv, d = spec.kv_heads, spec.head_dim
        self.k = torch.zeros(tokens, context + 1, hkv, d, dtype=torch.bfloat16, device=device)
        self.v = torch.zeros_like(self.k)
        if cache is not None:  # the same cached keys/values as ours (fp32 copies of bf16 values)
            for b in range(tokens):
                n = cache["prefix_k"][b].shape[0]
                self.k[b, :n] = bf(cache["prefix_k"][b])
                self.v[b, :n] = bf(cache["prefix_v"][b])
        pos = torch.full((tokens,), context, dtype=torch.int64, device=device)
        from flashinfer.experimental.b12x._demo import block as B

        cos, sin = B.rope_tables(spec, pos)
        self.cos, self.sin, self.rows = cos, sin, torch.arange(tokens, device=device)

    def _norm(self, x, g):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.spec.eps) * g.float()).to(torch.bfloat16)

    def _rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        x = x.float()
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(torch.bfloat16)

    def decode(self, x):
        s = self.spec
        hq, hkv, d = s.q_heads, s.kv_heads, s.head_dim
        h = self._norm(x, self.g1)
        q, k, v = (h @ self.w["qkv"].t()).split([hq * d, hkv * d, hkv * d], dim=-1)
        q = self._rope(q.reshape(self.t, hq, d), self.cos, self.sin)
        self.k[self.rows, self.ctx] = self._rope(k.reshape(self.t, hkv, d), self.cos, self.sin)
        self.v[self.rows, self.ctx] = v.reshape(self.t, hkv, d)
        attn = torch.nn.functional.scaled_dot_product_attention(
            q.unsqueeze(2), self.k.transpose(1, 2), self.v.transpose(1, 2), enable_gqa=True
        )
        return self._mlp(x, attn.reshape(self.t, hq * d))

    def prefill(self, x, cos, sin):
        s = self.spec
        n, hq, hkv, d = x.shape[0], s.q_heads, s.kv_heads, s.head_dim
        h = self._norm(x, self.g1)
        q, k, v = (h @ self.w["qkv"].t()).split([hq * d, hkv * d, hkv * d], dim=-1)
        q = self._rope(q.reshape(n, hq, d), cos, sin).transpose(0, 1)[None]
        k = self._rope(k.reshape(n, hkv, d), cos, sin).transpose(0, 1)[None]
        v = v.reshape(n, hkv, d).transpose(0, 1)[None]
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self._mlp(x, attn[0].transpose(0, 1).reshape(n, hq * d))

    def _mlp(self, x, attn):
        x1 = x + attn @ self.w["o"].t()
        gate, up = (self._norm(x1, self.g2) @ self.w["gate_up"].t()).chunk(2, dim=-1)
        act = (torch.nn.functional.silu(gate.float()) * up.float()).to(torch.bfloat16)
        return x1 + act @ self.w["down"].t()


def weight_bytes(weights) -> int:
    return sum(
        w.values.numel() * w.values.element_size() + w.scales.numel() * w.scales.element_size()
        for w in weights.values()
    )


def kv_bytes(spec, tokens: int, context: int) -> int:
    return 2 * tokens * (context + 1) * spec.kv_heads * spec.head_dim * 2


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.double().reshape(-1), b.double().reshape(-1), dim=0).item()


# ---- decode -----------------------------------------------------------------------------------------
def bench_decode(table, args, spec, dev, tokens: int) -> None:
    from flashinfer.experimental.b12x._demo import run as R

    with tempfile.TemporaryDirectory(prefix="b12x-bench-block-") as tmp:
        built = R.build(spec, tokens, dev, seed=tokens, tmp=tmp, lens=[args.context] * tokens)
    cache, weights, moe = built["cache"], built["weights"], built["moe"]
    x = torch.randn(tokens, spec.hidden, generator=torch.Generator().manual_seed(7 + tokens)).to(torch.bfloat16)
    graphs, outs, steps = {}, {}, {}
    for variant in args.variant:
        kw = variant_kwargs(variant)
        l2, l2_config = kw.pop("l2") or (None, None)
        if l2_config is not None:
            from flashinfer.experimental.b12x._lib.l2_prefetch import PrefetchConfig

            l2_config = PrefetchConfig(*l2_config)
        plans, _ = R.prepare(spec, weights, cache, dev, tokens, moe_plan=None if moe is None else moe[0],
                             freeze=False, **kw)  # fmt: skip
        for glue in args.glue:  # every choice's step over the same weights, cache and input
            label = f"{glue} glue, {variant}"
            step = R.DecodeStep(spec, weights, built["norms"], cache, plans, dev, tokens, glue=glue,
                                moe=None if moe is None else moe[1:], l2_prefetch=l2, l2_config=l2_config)  # fmt: skip
            step.x.copy_(x)
            graphs[label] = capture_graph(step, dev)
            outs[label] = step.buf["out"].float().clone()
            steps[label] = step
    first = next(iter(graphs))
    case = Case(
        "decode",
        {"T": tokens, "L": args.context},
        bytes=weight_bytes(weights) + kv_bytes(spec, tokens, args.context),  # (MoE: experts not counted)
        ceiling="copy",
    )
    ours_out = outs[first]
    note = ""
    if spec.moe is not None and not args.no_peers:
        print(f"decode T={tokens}: no plain-torch peer for MoE blocks yet (bench_moe times the expert layer's peers)")
    elif not args.no_peers:
        peer = TorchBlock(spec, built["ref"], tokens, args.context, dev, cache)
        x = x.to(dev)
        out = torch.empty_like(x)
        compiled = torch.compile(peer.decode, dynamic=False)

        def peer_step():
            out.copy_(compiled(x))

        pgraph = capture_graph(peer_step, dev)
        note = f"cosine(ours, torch peer) = {cosine(ours_out, out.float()):.6f}"
        table.add(case, "torch.compile bf16 + SDPA (peer)", measure_replay(pgraph, args), peer=True)
    for label, graph in graphs.items():
        agree = f"cosine(ours, {first}) = {cosine(outs[label], ours_out):.6f}" if label != first else note
        name = f"b12x block (graph, {label})"
        table.add(case, name, measure_replay(graph, args), note=agree)
    if args.ablate:  # each step replayed without one of its ops: its marginal cost is the difference
        for label, step in steps.items():
            for i, (name, _, _) in enumerate(step.ops):
                rest = [fn for j, (_, _, fn) in enumerate(step.ops) if j != i]
                graph = capture_graph(lambda rest=rest, step=step: step.run(rest), dev)
                op = name.replace(" + ", "+").replace(" ", "_")
                table.add(
                    Case("decode minus op", {"T": tokens, "op": op}),
                    f"b12x block ({label})",
                    measure_replay(graph, args),
                )
    if args.per_op:  # every op of the first step, then the other steps' ops of a new (name, backend)
        seen = set()
        for step in steps.values():
            for name, backend, fn in step.ops:
                if (name, backend) in seen:
                    continue
                seen.add((name, backend))
                op_case = Case("decode op", {"T": tokens, "op": name.replace(" + ", "+").replace(" ", "_")})
                table.add(op_case, backend, measure_replay(capture_graph(fn, dev), args))


def measure_replay(graph: torch.cuda.CUDAGraph, args) -> Timing:
    """A captured graph is timed with CUDA events whatever --timer says: the graph timer captures its
    callable into a graph of its own, and a graph replay cannot be captured (CUDA refuses it)."""
    return time_cuda_events(graph.replay, **timing_kwargs(args), device=args.device)


# ---- prefill ----------------------------------------------------------------------------------------
def extend_available() -> str | None:
    """None when attention.paged implements mode 'extend', else why not."""
    from flashinfer.experimental.b12x.attention.paged import api

    modes = getattr(api, "IMPLEMENTED_MODES", ())
    return None if "extend" in modes else f"attention.paged implements {modes}, not 'extend'"


def bench_prefill(table, args, spec, dev, n: int) -> None:
    from flashinfer.experimental.b12x._demo import block as B

    case = Case("prefill", {"T": n}, flops=2 * n * sum(r * c for r, c in _dense(spec).values()) + _attn_flops(spec, n))
    reason = extend_available() if spec.moe is None else "prefill is built for dense blocks only"
    if reason is None:
        from benchmarks.experimental.b12x._block_prefill import PrefillStep

        step = PrefillStep(spec, n, dev, seed=n)
        table.add(case, "b12x block (eager)", measure(step, args), note=step.check())
    else:
        print(f"prefill T={n}: ours skipped: {reason}")
    if not args.no_peers and spec.moe is None:
        ref = {k: torch.randn(r, c) / math.sqrt(c) for k, (r, c) in _dense(spec).items()}
        ref |= {g: torch.ones(spec.hidden) for g in ("input_layernorm", "post_attention_layernorm")}
        peer = TorchBlock(spec, ref, 1, 0, dev)
        x = torch.randn(n, spec.hidden, device=dev).to(torch.bfloat16)
        cos, sin = B.rope_tables(spec, torch.arange(n, device=dev))
        compiled = torch.compile(peer.prefill, dynamic=False)
        table.add(
            case, "torch.compile bf16 + SDPA causal (peer)", measure(lambda: compiled(x, cos, sin), args), peer=True
        )


def _dense(spec) -> dict[str, tuple[int, int]]:
    return {name: (sum(r for _, r in parts), k) for name, (k, parts) in spec.fused().items()}


def _attn_flops(spec, n: int) -> int:
    return 2 * 2 * spec.q_heads * spec.head_dim * n * (n + 1) // 2  # causal QK^T and PV


# ---- startup ----------------------------------------------------------------------------------------
def startup_child(model: str, workers: int, tokens: int, glue: str = "triton-pdl", variant: str = "fast") -> dict:
    """Runs in a fresh process (B12X_CACHE_DIR set by the parent): import, load, glue, prepare, replay."""
    t0 = time.perf_counter()
    import b12x  # noqa: F401
    from flashinfer.experimental.b12x._demo import block as B
    from flashinfer.experimental.b12x._demo import run as R

    dev = torch.device("cuda", torch.cuda.current_device())
    torch.empty(1, device=dev)
    t1 = time.perf_counter()
    spec = B.MODELS[model]
    with tempfile.TemporaryDirectory(prefix="b12x-startup-") as tmp:
        built = R.build(spec, tokens, dev, seed=0, tmp=tmp)
    t2 = time.perf_counter()
    from flashinfer.experimental.b12x._demo import glue as GL

    glue_kernels = GL.warm(glue, spec, dev)  # before prepare's freeze, as the demo does
    t_glue = time.perf_counter() - t2
    t2 = time.perf_counter()
    moe = built["moe"]
    kw = variant_kwargs(variant)
    kw.pop("l2")
    plans, result = R.prepare(spec, built["weights"], built["cache"], dev, tokens,
                              moe_plan=None if moe is None else moe[0], compile_workers=workers, **kw)  # fmt: skip
    t3 = time.perf_counter()
    # First replay: the decode step built (Triton glue: from memory; torch.compile: compiled here, its
    # Inductor cache warm in the warm children), captured and replayed once. Frozen: nothing of ours
    # may compile.
    step = R.DecodeStep(spec, built["weights"], built["norms"], built["cache"], plans, dev, tokens, glue=glue,
                        moe=None if moe is None else moe[1:])  # fmt: skip
    capture_graph(step, dev)
    t4 = time.perf_counter()
    return {
        "import_and_cuda_init_s": t1 - t0,
        "load_s": built["seconds"]["load"],
        "build_s": t2 - t1,
        "glue": glue,
        "variant": variant,
        "glue_kernels": glue_kernels,
        "glue_compile_s": t_glue,
        "prepare_s": t3 - t2,
        "first_replay_s": t4 - t3,
        "kernels": result.compiled,
        "sources": sorted(set(result.sources.values())),
    }


def run_child(
    model: str, workers: int, tokens: int, cache_dir: str, glue: str = "triton-pdl", variant: str = "fast"
) -> dict:
    env = dict(os.environ, B12X_CACHE_DIR=cache_dir)
    cmd = [
        sys.executable,
        "-m",
        MODULE,
        CHILD_FLAG,
        "--model",
        model,
        "--workers",
        str(workers),
        "--tokens",
        str(tokens),
        "--glue",
        glue,
        "--variant",
        variant,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"startup child failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1]) | {"process_wall_s": wall, "workers": workers}


def bench_startup(model: str, tokens: int, glue: str = "triton-pdl", variant: str = "fast") -> list[dict]:
    out = []
    with (
        tempfile.TemporaryDirectory(prefix="b12x-cold1-") as c1,
        tempfile.TemporaryDirectory(prefix="b12x-cold8-") as c8,
    ):
        for label, workers, cache in (("cold", 1, c1), ("cold", 8, c8), ("warm", 8, c8), ("warm", 1, c1)):
            r = run_child(model, workers, tokens, cache, glue, variant) | {"start": label}
            # b12x's part of a start (issue #10's "warm start under 3 s"): checkpoint load, glue, prepare,
            # capture and first replay; not the interpreter's / torch's imports nor the demo's writing of
            # its random checkpoint (the rest of build_s)
            r["start_s"] = r["load_s"] + r["glue_compile_s"] + r["prepare_s"] + r["first_replay_s"]
            print(f"startup {label:4s} compile_workers={workers}: process {r['process_wall_s']:.2f} s = import+init "
                  f"{r['import_and_cuda_init_s']:.2f} + build {r['build_s']:.2f} (load {r['load_s']:.2f}) + glue "
                  f"{glue} compile {r['glue_compile_s']:.2f} ({r['glue_kernels']} kernels) + prepare "
                  f"{r['prepare_s']:.2f} ({r['kernels']} kernels, {r['sources']}) + build, capture and first replay "
                  f"{r['first_replay_s']:.2f}; b12x's start (load + glue + prepare + first replay) {r['start_s']:.2f} s")  # fmt: skip
            out.append(r)
    return out


# ---- main -------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if CHILD_FLAG in argv:
        import argparse

        p = argparse.ArgumentParser()
        p.add_argument(CHILD_FLAG, action="store_true")
        p.add_argument("--model", default="llama-small")
        p.add_argument("--workers", type=int, default=1)
        p.add_argument("--tokens", type=int, default=1)
        p.add_argument("--glue", default="triton-pdl")
        p.add_argument("--variant", default="fast", type=_variant_arg)
        a = p.parse_args(argv)
        print(json.dumps(startup_child(a.model, a.workers, a.tokens, a.glue, a.variant)))
        return 0
    parser = standard_parser(__doc__.splitlines()[0])
    for action in parser._actions:  # the decode rows are graph replays: say what --timer changes here
        if action.dest == "timer":
            action.help += "; decode steps (graph replays) are always timed with events"
    parser.add_argument(
        "--model", default="llama-small", help="demo block (flashinfer/experimental/b12x/_demo/block.py)"
    )
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help=f"decode batches (default {TOKENS})")
    parser.add_argument("--context", type=int, default=1024, help="cached tokens per request (decode)")
    parser.add_argument("--prefill", type=int, nargs="*", default=[2048], help="prefill lengths (none: skip)")
    parser.add_argument(
        "--glue", nargs="+", choices=GLUE_CHOICES, default=["triton-pdl"],
        help="glue of our decode step, one row each (default triton-pdl); --startup times the first",
    )  # fmt: skip
    parser.add_argument(
        "--variant", nargs="+", type=_variant_arg, default=["fast"],
        help="variants of our decode step, one row each with every --glue (default fast, the demo's default "
        "step; base: the plain ten launches): fused epilogues, programmatic dependent launch, ... (VARIANTS); "
        "a name may be followed by @NAME=OPTS items, NAME one of qkv/o/gate_up/down and OPTS DecodeConfig "
        "changes, e.g. fast@gate_up=warps=4,upfront=4",
    )  # fmt: skip
    parser.add_argument("--per-op", action="store_true", help="also time each decode op in a graph of its own")
    parser.add_argument(
        "--ablate",
        action="store_true",
        help="also replay each decode step without one of its ops, one row per op (the op's marginal cost in "
        "the chain is the whole step's time minus that row's)",
    )
    parser.add_argument("--startup", action="store_true", help="also time cold/warm starts in child processes")
    args = parser.parse_args(argv)
    if args.context < 1:
        parser.error(f"--context must be >= 1, got {args.context}")
    dev = require_cuda("bench_block", args.device)
    torch.cuda.set_device(dev)
    from flashinfer.experimental.b12x._demo import block as B

    if args.model not in B.MODELS:
        parser.error(f"--model must be one of {sorted(B.MODELS)}, got {args.model!r}")
    spec = B.MODELS[args.model]
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    ceil = ceilings(dev)
    table = Table(f"b12x {spec.name} block on {ceil.device_name} (timer: {args.timer})", ceil)
    for t in args.tokens or (QUICK_TOKENS if args.quick else TOKENS):
        bench_decode(table, args, spec, dev, t)
    failed = []
    for n in args.prefill or ():
        try:  # the decode rows above are already measured: a prefill failure must not lose them
            bench_prefill(table, args, spec, dev, n)
        except Exception as exc:  # noqa: BLE001 - reported below and in the exit status
            failed.append(f"prefill T={n}: {type(exc).__name__}: {exc}")
    table.print()
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    extra = {"startup": bench_startup(args.model, 1, args.glue[0], args.variant[0])} if args.startup else {}
    path = report_path(args, "b12x_bench_block.json")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.write_json(path, argv=[sys.executable, "-m", MODULE, *argv], device=dev, extra=extra)
        print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
