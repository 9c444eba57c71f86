"""The demo's lifecycle: checkpoint -> load -> pack -> prepare (one session) -> freeze -> capture ->
replay -> time -> compare with the fp32 reference -> report.

On CUDA the b12x kernels run (gemm.blockscaled W4A16 decode GEMMs, attention.paged decode) and one
decode step is captured in a CUDA graph; the glue (RMSNorm, RoPE + KV append, SiLU * up, residuals)
runs in the same graph as one Triton launch per op (`glue.py`; "torch.compile" and plain "torch"
are the alternatives). On CPU the same lifecycle runs the ops' reference backends and the torch glue,
and nothing is captured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
import time

import torch

from . import block as B
from . import glue as GL

COSINE_MIN = 0.999
L2_PREFETCH_CHOICES = ("weights", "weights+kv", "mlp")  # DecodeStep(l2_prefetch=...)
# attention alone, tighter: a correct run gives 1 - cos ~ 5e-6 (bf16 q/K/V/output); missing the new
# token's K/V gives 1 - cos ~ 6e-4 at --tokens 64 (up to 2147 keys), which 0.999 would let through
ATTN_COSINE_MIN = 0.9999
# the torch glue under the names benchmarks/experimental/b12x/_block_prefill.py imports
_rmsnorm_into, _rope_append_into, _silu_mul_into = GL.rmsnorm_into, GL.rope_append_into, GL.silu_mul_into


class DecodeStep:
    """One decode step over static buffers: every op is a named closure, so the same list runs
    eagerly (per-op timing) and under CUDA graph capture.

    glue: "triton" (default on CUDA: one launch per glue op, compiled or loaded here, so build the
    step, or a `glue.TritonGlue` of the same block, before freezing), "torch.compile" (each glue op
    one Inductor kernel or a few, compiled at the first call, which must come before capture) or
    "torch" (default on CPU: the plain torch functions the other two are checked against).

    The GEMM plans decide the FFN's launches: with `prepare(..., fused=True)` gate_up's plan has the
    silu_mul epilogue and down's the residual one, so gate_up + SiLU * up and down + the final residual
    are one launch each (ten launches -> eight; dense blocks); `pdl` is in the plans too.

    l2_prefetch (dense blocks on CUDA): None, "weights" or "weights+kv": at the start of every step a
    side branch (a second stream forked from the step's and joined at its end) launches one
    `_lib.l2_prefetch` kernel that asks L2 for every line of the linears' weights (values and scales,
    in the step's order; "weights+kv" also the KV cache tensors after qkv's, which in the demo's cache
    are exactly the live pages), so DRAM streams them while the chain runs; "mlp": the branch forks
    just before attention instead and asks only for o_proj's, gate_up's and down's weights (attention
    at small batch is a chain of round trips that leaves DRAM idle); l2_config: its
    PrefetchConfig (None: the default). The kernel is compiled here (build the step before freezing,
    or warm it with `warm_l2_prefetch`)."""

    def __init__(
        self, spec, weights, norms, cache, plans, device, tokens, glue=None, moe=None, l2_prefetch=None, l2_config=None
    ):
        from ..attention import paged
        from ..gemm import blockscaled as G

        self.spec, self.w, self.norms, self.cache, self.plans = spec, weights, norms, cache, plans
        self.G = G
        hq, hkv, d, t = spec.q_heads, spec.kv_heads, spec.head_dim, tokens
        new = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device=device)  # noqa: E731
        self.x = new(t, spec.hidden)
        self.buf = {
            "h": new(t, spec.hidden),
            "qkv": new(t, (hq + 2 * hkv) * d),
            "q": new(t, hq, d),
            "attn": new(t, hq, d),
            "o": new(t, spec.hidden),
            "x1": new(t, spec.hidden),
            "h2": new(t, spec.hidden),
            "gu": new(t, 2 * spec.intermediate),
            "act": new(t, spec.intermediate),
            "down": new(t, spec.hidden),
            "out": new(t, spec.hidden),
        }
        self.cos, self.sin = B.rope_tables(spec, cache["positions"])
        self.binding = paged.bind(
            plans["attention"], q=self.buf["q"], k_cache=cache["k_cache"], v_cache=cache["v_cache"],
            page_table=cache["page_table"], cache_seqlens=cache["seqlens"], output=self.buf["attn"],
        )  # fmt: skip
        self.paged = paged
        glue = GL.default_choice(device) if glue is None else glue
        self.glue = glue
        self._glue = GL.make_glue(glue, spec, device)
        self.ops = [
            ("rmsnorm", glue, self._norm1),
            ("qkv_proj", "gemm.blockscaled w4a16", lambda: self._mm("qkv", self.buf["h"], "qkv")),
            ("rope + kv append", glue, self._rope_append),
            ("attention", "attention.paged decode", lambda: paged.run(binding=self.binding)),
            ("o_proj", "gemm.blockscaled w4a16", lambda: self._mm("o", self.buf["attn"].view(t, hq * d), "o")),
            ("residual + rmsnorm", glue, self._norm2),
        ]
        self.rope = None  # qkv's "rope_append" epilogue tensors (prepare(rope=True)), else the glue's launch
        if plans["qkv"].caps.epilogue == "rope_append":
            from ..gemm.blockscaled.api import RopeAppend

            c = cache
            self.rope = RopeAppend(self.cos, self.sin, c["k_cache"], c["v_cache"], c["slot_page"], c["slot_off"])
            self.ops[1] = ("qkv_proj + rope + kv append", "gemm.blockscaled w4a16 rope_append", self._qkv_rope)
            del self.ops[2]
        self.fused = spec.moe is None and plans["gate_up"].caps.epilogue == "silu_mul"
        if self.fused and plans["qkv"].caps.norm:  # six launches: the norms in the GEMMs too
            self.ops = self._six_ops(paged, t, hq * d)
        elif self.fused:
            self.ops += self._fused_ffn()
        else:
            self.ops += self._dense_ffn(glue) if spec.moe is None else self._moe_ffn(moe, device, tokens)
            self.ops.append(
                ("residual", glue, lambda: self._glue["add"](self.buf["x1"], self.buf["down"], self.buf["out"]))
            )
        # after the op list is final: the "mlp" branch forks before the attention op's closure
        self.prefetch, self.side, self.fork_at = self._l2_prefetch(l2_prefetch, l2_config, device)

    def _l2_prefetch(self, what, config, device):
        """(L2Prefetch or None, its two candidate side streams, the op closure the branch forks before or
        None for the first op) for `l2_prefetch` (class docstring)."""
        if what is None:
            return None, None, None
        if what not in L2_PREFETCH_CHOICES or self.spec.moe is not None:
            raise ValueError(f"l2_prefetch must be one of {L2_PREFETCH_CHOICES} (dense blocks), got {what!r}")
        if device.type != "cuda":
            return None, None, None
        from .._lib.l2_prefetch import L2Prefetch

        tensors = []
        for name in ("o", "gate_up", "down") if what == "mlp" else ("qkv", "o", "gate_up", "down"):
            tensors += [self.w[name].values, self.w[name].scales]
            if name == "qkv" and what == "weights+kv":
                tensors += [self.cache["k_cache"], self.cache["v_cache"]]
        # where the branch forks: the first op, or ("mlp") the attention op's closure
        fork_at = next(fn for name, _, fn in self.ops if name == "attention") if what == "mlp" else None
        # two side streams: torch's streams come from a pool, so one may be the stream the step runs on
        # (a capture's or a caller's); `run` takes the first that is not
        sides = (torch.cuda.Stream(device), torch.cuda.Stream(device))
        return L2Prefetch.from_tensors(tensors, device, config=config), sides, fork_at

    def _dense_ffn(self, glue):
        return [
            ("gate_up_proj", "gemm.blockscaled w4a16", lambda: self._mm("gate_up", self.buf["h2"], "gu")),
            ("silu * up", glue, self._act),
            ("down_proj", "gemm.blockscaled w4a16", lambda: self._mm("down", self.buf["act"], "down")),
        ]

    def _six_ops(self, paged, t, q_width):
        """prepare(norms=True): qkv normalizes x itself, o adds the residual (-> x1), gate_up
        normalizes x1 and applies SiLU * up, down adds x1: qkv, rope, attention, o, gate_up, down."""
        mm, s, b, n = "gemm.blockscaled w4a16", self.spec, self.buf, self.norms

        def qkv():
            plan = self.plans["qkv"]
            if self.rope is not None:  # rotated q straight into buf["q"], k / v into the cache
                self.G.mm(self.x, self.w["qkv"], b["q"], plan=plan, norm_weight=n["input_layernorm"], norm_eps=s.eps,
                          epilogue="rope_append", rope=self.rope)  # fmt: skip
                return
            self.G.mm(self.x, self.w["qkv"], b["qkv"], plan=plan, norm_weight=n["input_layernorm"], norm_eps=s.eps)

        def o():
            self.G.mm(b["attn"].view(t, q_width), self.w["o"], b["x1"], plan=self.plans["o"], epilogue="residual",
                      residual=self.x)  # fmt: skip

        def gate_up():
            self.G.mm(b["x1"], self.w["gate_up"], b["act"], plan=self.plans["gate_up"], epilogue="silu_mul",
                      norm_weight=n["post_attention_layernorm"], norm_eps=s.eps)  # fmt: skip

        rope = [] if self.rope is not None else [("rope + kv append", self.glue, self._rope_append)]
        return [
            ("rmsnorm + qkv_proj", f"{mm} norm", qkv),
            *rope,
            ("attention", "attention.paged decode", lambda: paged.run(binding=self.binding)),
            ("o_proj + residual", f"{mm} residual", o),
            ("rmsnorm + gate_up_proj + silu * up", f"{mm} norm silu_mul", gate_up),
            ("down_proj + residual", f"{mm} residual", lambda: self._mm("down", b["act"], "out", "x1")),
        ]

    def _fused_ffn(self):
        """gate_up with SiLU * up in its epilogue (-> act), down with the residual x1 (-> out)."""
        mm = "gemm.blockscaled w4a16"
        return [
            ("gate_up_proj + silu * up", f"{mm} silu_mul", lambda: self._mm("gate_up", self.buf["h2"], "act")),
            ("down_proj + residual", f"{mm} residual", lambda: self._mm("down", self.buf["act"], "out", "x1")),
        ]

    def _moe_ffn(self, moe, device, tokens):
        """Router (bf16 torch mm) -> route_topk -> moe.fused_moe into buf["down"]; moe = (experts, router)."""
        from ..moe import fused_moe as FM

        experts, router = moe
        m, p = self.spec.moe, self.plans["moe"]
        self.logits = torch.empty(tokens, m.experts, dtype=torch.bfloat16, device=device)
        self.topk_logits = torch.empty(tokens, m.topk, dtype=torch.float32, device=device)
        self.topk_ids = torch.empty(tokens, m.topk, dtype=torch.int32, device=device)
        self.topk_weights = torch.empty(tokens, m.topk, dtype=torch.float32, device=device)
        binding = FM.bind(p, a=self.buf["h2"], experts=experts, topk_weights=self.topk_weights,
                          topk_ids=self.topk_ids, output=self.buf["down"])  # fmt: skip
        route = lambda: FM.route_topk(p, self.logits, self.topk_logits, self.topk_ids, self.topk_weights)  # noqa: E731
        return [
            ("router", "torch bf16 mm", lambda: torch.mm(self.buf["h2"], router.t(), out=self.logits)),
            ("route_topk", "torch (route_topk)", route),
            ("experts", f"moe.fused_moe {m.recipe}", lambda: FM.run(binding=binding)),
        ]

    def _qkv_rope(self):
        plan = self.plans["qkv"]
        self.G.mm(self.buf["h"], self.w["qkv"], self.buf["q"], plan=plan, epilogue="rope_append", rope=self.rope)

    def _mm(self, name, lhs, dst, residual=None):
        plan = self.plans[name]
        res = None if residual is None else self.buf[residual]
        self.G.mm(lhs, self.w[name], self.buf[dst], plan=plan, epilogue=plan.caps.epilogue, residual=res)

    def _norm1(self):
        self._glue["rmsnorm"](self.x, self.norms["input_layernorm"], self.spec.eps, self.buf["h"])

    def _rope_append(self):
        s, c = self.spec, self.cache
        self._glue["rope_append"](
            self.buf["qkv"], self.cos, self.sin, self.buf["q"], c["k_cache"], c["v_cache"], c["slot_page"],
            c["slot_off"], s.q_heads, s.kv_heads, s.head_dim,
        )  # fmt: skip

    def _norm2(self):
        n = self.norms["post_attention_layernorm"]
        self._glue["rmsnorm"](self.x, n, self.spec.eps, self.buf["h2"], self.buf["o"], self.buf["x1"])

    def _act(self):
        self._glue["silu_mul"](self.buf["gu"], self.buf["act"])

    def poison(self):
        """NaN into every buffer and into the new tokens' KV slots: the checked run must write them
        (stale K/V from an earlier run would otherwise hide a KV append that did nothing)."""
        for t in self.buf.values():
            t.fill_(float("nan"))
        if self.spec.moe is not None:
            self.topk_ids.fill_(-7)  # ids the run must overwrite (a stale negative id would be an ignored route)
        c = self.cache
        for name in ("k_cache", "v_cache"):
            c[name][c["slot_page"], c["slot_off"]] = float("nan")

    def __call__(self):
        self.run(fn for _, _, fn in self.ops)

    def run(self, fns):
        """Call `fns` (some of the step's op closures, in order) inside the step's L2 prefetch branch
        (forked before the first of them, or before attention for l2_prefetch="mlp"; a subset without
        attention then runs without the branch)."""
        if self.prefetch is None:
            for fn in fns:
                fn()
            return
        side = self.side[0] if self.side[0] != torch.cuda.current_stream(self.prefetch.device) else self.side[1]
        with contextlib.ExitStack() as branch:
            forked = False
            for fn in fns:
                if not forked and self.fork_at in (None, fn):  # fork once, before this op
                    branch.enter_context(self.prefetch.side_branch(side))
                    forked = True
                fn()


def warm_l2_prefetch(device, config=None) -> None:
    """Compile or load, now (before freezing), the kernel a step with l2_prefetch resolves."""
    from .._lib.arch import target_arch
    from .._lib.l2_prefetch import PrefetchConfig, compile_l2_prefetch

    compile_l2_prefetch(config or PrefetchConfig(), arch=target_arch(device))


def _time_ops_eager(step, device, iters):
    """Seconds per op (mean over iters): CUDA events around each op, perf_counter on CPU."""
    totals = [0.0] * len(step.ops)
    for _ in range(iters):
        if device.type == "cuda":
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(step.ops) + 1)]
            ev[0].record()
            for i, (_, _, fn) in enumerate(step.ops):
                fn()
                ev[i + 1].record()
            torch.cuda.synchronize(device)
            for i in range(len(step.ops)):
                totals[i] += ev[i].elapsed_time(ev[i + 1]) / 1e3
        else:
            for i, (_, _, fn) in enumerate(step.ops):
                t0 = time.perf_counter()
                fn()
                totals[i] += time.perf_counter() - t0
    return [s / iters for s in totals]


def _capture_and_time(step, device, replays):
    """Capture one step in a CUDA graph; returns (graph, seconds per replay)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()  # torch's lazy init of the glue ops happens outside the capture
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return graph, start.elapsed_time(end) / 1e3 / replays


def _agreement(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    got, want = got.float().cpu().reshape(-1), want.float().reshape(-1)
    if not bool(torch.isfinite(got).all()):
        return math.inf, float("nan")
    err = (got - want).abs().max().item()
    cos = torch.nn.functional.cosine_similarity(got.double(), want.double(), dim=0).item()
    return err, cos


FUSED_EPILOGUES = {"gate_up": "silu_mul", "down": "residual"}  # prepare(fused=True): the dense FFN's


def prepare(
    spec,
    weights,
    cache,
    device,
    tokens,
    *,
    moe_plan=None,
    compile_workers=None,
    freeze=True,
    fused=False,
    pdl="off",
    norms=False,
    attention_pdl="off",
    attention_opts=None,
    rope=False,
    gemm_opts=None,
):
    """Every planned op of the block in ONE PreparationSession, then (freeze=True) freeze.
    fused: the dense FFN's GEMMs with their epilogues (FUSED_EPILOGUES); pdl: every GEMM launched as a
    programmatic dependent ("off", "wait" or "prefetch": gemm.blockscaled's GemmQuery.pdl);
    gemm_opts: {GEMM name ("qkv", "o", "gate_up", "down"): DecodeConfig changes, and "span=rows|step"
    for the L2 prefetch} for the step's fused-kernel GEMMs (those with an epilogue or pdl;
    launch.fused_config's opts, e.g. "warps=4,upfront=4", a plan override: bench_block's variants sweep
    them); norms (with fused): the
    RMSNorms inside qkv and
    gate_up and the first residual inside o (six launches, `DecodeStep._six_ops`); attention_pdl: the
    decode attention's programmatic dependent launch (attention.paged's Caps.pdl: "off", "wait",
    "prefetch"); attention_opts: DecodeConfig and ScheduleConfig field changes of the attention plan's
    heuristic selection (a plan override: bench_block's variants sweep them); rope (dense blocks): qkv's
    epilogue "rope_append" (gemm.blockscaled: q/k rotated in fp32, k/v appended to the cache), so the
    rope + KV append launch goes away (`DecodeStep`).
    Returns ({name: plan}, PreparationResult)."""
    from ..attention import paged
    from ..gemm import blockscaled as G
    from ..preparation.session import PreparationSession

    # the work list must hold what the schedule makes: it aims at this device's SM count (plan heuristic)
    sm = {"sm_count": torch.cuda.get_device_properties(device).multi_processor_count} if device.type == "cuda" else {}
    items = paged.default_max_work_items(tokens, spec.kv_heads, **sm)
    caps = paged.Caps(
        device=str(device), mode="decode", dtype="bfloat16", kv_dtype="bfloat16",
        num_q_heads=spec.q_heads, num_kv_heads=spec.kv_heads, head_dim_qk=spec.head_dim,
        head_dim_vo=spec.head_dim, page_size=spec.page_size, max_total_q=tokens, max_batch=tokens,
        max_page_table_width=cache["page_table"].shape[1],
        max_work_items=items, max_partial_rows=paged.default_max_partial_rows(items, spec.q_heads),
        num_cache_pages=cache["k_cache"].shape[0], use_cuda_graph=True, pdl=attention_pdl,
    )  # fmt: skip
    plans = {"attention": _attention_plan(paged, caps, device, attention_opts)}
    if moe_plan is not None:
        from ..moe import fused_moe as FM

        m = spec.moe
        plans["moe"] = FM.plan(FM.Caps(max_tokens=tokens, num_topk=m.topk, device=str(device), weight_plan=moe_plan,
                                       quant_mode=m.recipe))  # fmt: skip
    for name, w in weights.items():  # bf16 activations x NVFP4 weight (W4A16), M = the decode batch
        dense_fused = fused and spec.moe is None
        epilogue = FUSED_EPILOGUES.get(name, "none") if dense_fused else "none"
        six = dense_fused and norms
        if six and name == "o":
            epilogue = "residual"
        norm = six and name in ("qkv", "gate_up")
        layout = None
        if rope and name == "qkv" and spec.moe is None:
            epilogue = "rope_append"
            from ..gemm.blockscaled.api import RopeLayout

            layout = RopeLayout(spec.q_heads, spec.kv_heads, spec.head_dim, spec.page_size)
        q = G.GemmQuery("bfloat16", w.recipe, w.n, w.k, max_m=tokens, m_values=(tokens,), epilogue=epilogue, pdl=pdl,
                        norm=norm, rope=layout)  # fmt: skip
        override = None
        opts = (gemm_opts or {}).get(name)
        if opts:
            from ..gemm._shared import launch as L

            if epilogue == "none" and pdl == "off":
                raise ValueError(
                    f"gemm_opts[{name!r}]: {name} runs the plain decode kernel here (no epilogue, pdl off)"
                )
            bucket = L.bucket_for(tokens)
            cfg = L.fused_config(bucket, w.n, w.k, w.recipe, "bfloat16", epilogue, pdl, opts, norm=norm, rope=layout,
                                 arch=_plan_arch(device))  # fmt: skip
            override = {bucket: cfg}
        plans[name] = G.plan(q, override=override)
    with PreparationSession(device, compile_workers=compile_workers) as session:
        result = session.prepare([p.request(name=f"layer0.{n}") for n, p in plans.items()])
        if freeze:
            session.freeze("b12x demo: serving")
    return plans, result


def _plan_arch(device):
    """The arch the plans on `device` select for, as an override's heuristic must see it (None on the CPU: a
    shape-only query)."""
    from .._lib.arch import target_arch

    return target_arch(device) if device.type == "cuda" else None


def _attention_plan(paged, caps, device, opts):
    """paged.plan(caps), or with `opts` applied to its heuristic's DecodeConfig / ScheduleConfig."""
    plan = paged.plan(caps)
    if not opts:
        return plan
    from ..attention.paged.api import Selection

    sel = plan.heuristic(_plan_arch(device))
    fields = {f.name for f in dataclasses.fields(sel.decode)}
    decode = dataclasses.replace(sel.decode, **{k: v for k, v in opts.items() if k in fields})
    schedule = dataclasses.replace(sel.schedule, **{k: v for k, v in opts.items() if k not in fields})
    return paged.plan(caps, override=Selection(decode, schedule))


def build(spec, tokens: int, device: torch.device, seed: int, tmp: str, display=None, lens=None):
    """Checkpoint -> load -> pack -> KV cache. Returns a dict: ref (fp32 reference tensors), weights
    ({fused: packed Weight}), norms, cache, stats (LoadStats), seconds ({"write", "load", "pack"}),
    moe (None, or (WeightPlan, ExpertWeights, router bf16 [E, H]) for MoE blocks)."""
    from ..gemm import blockscaled as G

    t0 = time.perf_counter()
    ref = B.write_checkpoint(spec, tmp, seed)
    t1 = time.perf_counter()
    loaded, norms, stats, experts = B.load_checkpoint(spec, tmp, device, display)
    t2 = time.perf_counter()
    weights = {
        name: G.pack_weight(v, s, global_scale=ws2, global_scale_kind="dequant", input_scale=in_s)
        for name, (v, s, ws2, in_s) in loaded.items()
    }
    moe = None if experts is None else (*experts.expert_weights(), experts.router)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t3 = time.perf_counter()
    cache = B.make_cache(spec, tokens, device, torch.Generator().manual_seed(seed + 1), lens=lens)
    seconds = {"write": t1 - t0, "load": t2 - t1, "pack": t3 - t2}
    return {"ref": ref, "weights": weights, "norms": norms, "cache": cache, "stats": stats, "seconds": seconds,
            "moe": moe}  # fmt: skip


def run_demo(
    model: str,
    tokens: int,
    device: torch.device,
    seed: int = 0,
    replays: int = 50,
    glue=None,
    fused=False,
    pdl="off",
    fused_norms=False,
    attention_pdl="off",
    l2_prefetch=None,
    fused_rope=False,
    attention_min_chunk=None,
    gemm_opts=None,
) -> int:
    from .._lib import freeze as F
    from ..loader import CheckpointDisplay

    spec = B.MODELS[model]
    cuda = device.type == "cuda"
    print(f"b12x demo: {spec.name} block (hidden {spec.hidden}, {spec.q_heads} q / {spec.kv_heads} kv heads x "
          f"{spec.head_dim}, intermediate {spec.intermediate}), decode batch {tokens}, device {device}")  # fmt: skip
    parts = [f"GEMMs {'with fused epilogues' if fused else 'plain'}", f"RoPE + KV append {'in qkv' if fused_rope else 'glue'}",
             f"gemm pdl {pdl}", f"attention pdl {attention_pdl}"]  # fmt: skip
    if attention_min_chunk is not None:
        parts.append(f"attention min chunk {attention_min_chunk}")
    if gemm_opts:
        parts.append("gemm options " + " ".join(f"{name}:{opts}" for name, opts in gemm_opts.items()))
    print("decode step: " + ", ".join(parts))
    if not cuda:
        print("CPU: reference backends, no kernels ran (plain-torch oracles of every op; no CUDA graph)")
    with tempfile.TemporaryDirectory(prefix="b12x-demo-") as tmp:
        built = build(spec, tokens, device, seed, tmp, CheckpointDisplay())
        print(f"[1] random weights -> ModelOpt NVFP4 checkpoint {tmp}/{B.CHECKPOINT_FILE} "
              f"({built['seconds']['write']:.1f} s)")  # fmt: skip
    ref, weights, norms, cache, stats = (built[k] for k in ("ref", "weights", "norms", "cache", "stats"))
    print(f"[2] DirectWeightSession: {stats.tensors} tensors, {stats.bytes / 1e6:.1f} MB, read mode "
          f"{'/'.join(sorted({f['mode'] for f in stats.files.values()})) or stats.read_mode} "
          f"({built['seconds']['load']:.2f} s)")  # fmt: skip
    print("[3] pack_weight: " + ", ".join(f"{n} {w.recipe} [{w.n}, {w.k}]" for n, w in weights.items()))
    if built["moe"] is not None:
        print(f"    moe.fused_moe.prepare_weights: {built['moe'][1]!r}")
    gen = torch.Generator().manual_seed(seed + 2)
    glue = GL.default_choice(device) if glue is None else glue
    was_frozen = F.kernel_resolution_frozen()
    try:
        t2 = time.perf_counter()
        n = GL.warm(glue, spec, device)  # before the freeze: the step resolves them from memory
        if l2_prefetch is not None and cuda:
            warm_l2_prefetch(device)  # before the freeze: the step resolves it from memory
        how = {"torch.compile": "compiled at the first call, before capture", "torch": "plain torch"}.get(glue)
        print(f"    glue {glue}: {how or f'{n} Triton kernels compiled or loaded'} ({time.perf_counter() - t2:.2f} s)")
        t2 = time.perf_counter()
        moe = built["moe"]
        plans, result = prepare(
            spec, weights, cache, device, tokens, moe_plan=None if moe is None else moe[0], fused=fused, pdl=pdl,
            norms=fused_norms, attention_pdl=attention_pdl, rope=fused_rope,
            attention_opts=None if attention_min_chunk is None else dict(min_chunk=attention_min_chunk),
            gemm_opts=gemm_opts,
        )  # fmt: skip
        print(f"[4] PreparationSession: {len(plans)} plans prepared, {result.compiled} kernels compiled or loaded "
              f"({time.perf_counter() - t2:.1f} s; sources {sorted(set(result.sources.values()))})")  # fmt: skip
        print(f"[5] kernel resolution frozen: {F.kernel_resolution_frozen()}")
        step = DecodeStep(
            spec, weights, norms, cache, plans, device, tokens, glue=glue, moe=None if moe is None else moe[1:],
            l2_prefetch=l2_prefetch,
        )  # fmt: skip
        step.x.copy_(torch.randn(tokens, spec.hidden, generator=gen).to(torch.bfloat16))
        step()  # warm (CUDA: the glue's lazy init; CPU: first touch)
        per_op = _time_ops_eager(step, device, iters=20 if cuda else 1)
        step.poison()
        graph_s = None
        if cuda:
            graph, graph_s = _capture_and_time(step, device, replays)
            step.poison()
            graph.replay()
            torch.cuda.synchronize(device)
            print(f"[6] CUDA graph: one decode step captured, replayed {replays + 2} times")
        else:
            step()
            print("[6] CPU: no CUDA graph; one eager step through the reference backends")
        trace = {}
        routing = None if spec.moe is None else (step.topk_ids, step.topk_weights)
        want = B.reference_step(
            spec, ref, step.x, cache["prefix_k"], cache["prefix_v"], cache["positions"], trace, routing
        )
        if routing is not None:  # the run's routes drive the reference's experts; report how the fp32 router agrees
            from . import moe as M

            ids32 = M.reference_routing(ref, trace["h2"], spec.moe.topk)
            same = sum(len(set(a) & set(b)) for a, b in zip(ids32.tolist(), step.topk_ids.cpu().tolist()))
            print(f"[7] routing: {same}/{ids32.numel()} routes match the fp32 router's top-{spec.moe.topk}")
        err, cos = _agreement(step.buf["out"], want)
        err_u, cos_u = _agreement(step.buf["out"].float() - step.x.float(), want - step.x.float().cpu())
        # attention's share of the block update is small (averaged random V): check it on its own,
        # or an attention bug (e.g. the new token's K/V missed) would pass the block-level check
        err_a, cos_a = _agreement(step.buf["attn"], trace["attn"])
    finally:
        if not was_frozen:
            F.unfreeze_kernel_resolution()
    _report(step, per_op, graph_s, cuda)
    ok = cos >= COSINE_MIN and cos_u >= COSINE_MIN and cos_a >= ATTN_COSINE_MIN
    print(f"agreement with the fp32 torch reference (dequantized weights): output max abs err {err:.3e}, "
          f"cosine {cos:.6f}; block update (out - x) max abs err {err_u:.3e}, cosine {cos_u:.6f}; "
          f"attention output max abs err {err_a:.3e}, cosine {cos_a:.6f} (>= {ATTN_COSINE_MIN}) "
          f"-> {'OK' if ok else 'FAIL'} (cosine >= {COSINE_MIN})")  # fmt: skip
    return 0 if ok else 1


def _report(step, per_op, graph_s, cuda):
    unit = "us"
    rows = [(name, backend if cuda else f"{backend} (reference)" if "." in backend else backend, s * 1e6)
            for (name, backend, _), s in zip(step.ops, per_op)]  # fmt: skip
    w = max(len(r[0]) for r in rows)
    wb = max(len(r[1]) for r in rows)
    print(f"\n{'op':<{w}}  {'backend':<{wb}}  eager {unit}")
    for name, backend, us in rows:
        print(f"{name:<{w}}  {backend:<{wb}}  {us:>10.1f}")
    print(f"{'total (eager, sum of ops)':<{w + wb + 2}}  {sum(r[2] for r in rows):>10.1f}")
    if graph_s is not None:
        print(f"{'total (CUDA graph replay)':<{w + wb + 2}}  {graph_s * 1e6:>10.1f}")
    print()
