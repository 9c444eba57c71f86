"""Benchmark b12x.moe.fused_moe (one MoE layer, FP4 experts) against torch grouped GEMM layers.

    python -m benchmarks.experimental.b12x.bench_moe [--quick] [--tokens 1 4 16 64 4096]
        [--shapes 128x8x2048x768 ...] [--recipes nvfp4 w4a16 ...] [--activation silu]
        [--timer events|graph] [--json PATH] [--no-peers] [--steps] [--compact-grid]
        [--expert-sweep [LABEL ...]] [--tiled [ENTRY ...]] [--tiled-dequant] [--decode-dequant]
        [--fp4-mul] [--fp4-mul-rule] [--tiled-rows R ...] [--pdl MODE ...] [--combine-tile BTxBH]

Problem (shape E x k x H x I, FORMATS.md "moe.fused_moe"): out[T, H] = sum over k routes of
w * FC2_e(act(FC1_e(a[t]))), gated activation (FC1 has N1 = 2I rows), router weights on the output.
Shapes: 128x8x2048x768 (Qwen3-30B-A3B-class), 256x8x4096x2048, 512x10x4096x1024. Routing: k
distinct experts per token drawn uniformly (seeded), so decode T hits ~k*T experts and T >= 64 nearly
all of them.
Bytes (TB/s, % of the copy ceiling): what the layer must move once: for every expert the tokens
actually hit, FC1 and FC2 FP4 values + their block scales (1 byte per 16 (NVFP4) or 32 (MXFP4)
values), plus a (bf16 in), out (bf16), topk ids and weights. FLOPs: 2 * (valid routes) * (N1 H + H I).
Ours: the planned op prepared for max_tokens = the largest T of the run, one binding per T.
Timers: --timer graph (the serving form; use it for decode T, where eager launches are host-bound)
captures the layer and cycles through routing sets drawn from disjoint expert groups, enough that a
cycle moves >= 3x L2 of expert bytes (`rotation_sets`; weights come from HBM as in serving);
--timer events flushes L2 before every call instead.
--steps adds, per case, the time of each prefix of the pipeline's launches (`api.steps`: route+gather,
fc1, requantize, fc2, combine), measured the same way: a step's cost is its row minus the row
before, launch gaps in a graph included (the decode breakdown: docs/moe.md). Ours is the heuristic's
plan (`RoutingConfig.compact_grid` on: expert GEMM grids of the T * k listed experts while T * k < E,
else every expert); --full-grid prepares it with compact_grid off (every T launches E rows of CTAs),
--compact-grid with it on (the heuristic's choice today, kept for old command lines).
--gather-encode pairs|search prepares ours with that NVFP4 gather encode (`RoutingConfig.nvfp4_encode`;
the same bits, "pairs" the heuristic's), for an A/B of the route + gather step.
--deq-encode divide|search does the same for the dequant buckets' bf16 operands (`nvfp4_deq_encode` of the
routing and combine configs; the same bits, "search" the heuristic's since session 19).
--combine-tile BTxBH prepares ours with the combine kernel's tile of BT tokens x BH hidden columns
(`CombineConfig.block_t` / `block_h`; the heuristic's 1x128 since session 21, 4x512 before), for an
A/B of the combine step between two runs (with --steps).
--tiled [ENTRY ...] / --decode-only add, per T and recipe, rows with the grouped large-T expert
kernels (`_kernel_grouped.py`: gemm's tiled GEMM per expert tile, or with a "w" suffix over windows
of the sorted rows; ENTRY = BMxBNxWMxWN; the w4a8 recipes' MXFP8 activations too since session 66) or with the decode
expert kernels at every T (the default
uses the grouped ones from T * k / E >= `api.TILED_ROWS`).
--tiled-dequant adds, per T, an nvfp4 row " deq": the heuristic's plan with its grouped bucket taking
the dequantized bf16 operands (`api.ExpertBucket.dequant`: the gather and requantize write e2m1 x e4m3
in bf16, the grouped kernels run their bf16-A path), and with --tiled a " deq" twin of each entry's
row; other recipes get no such rows.
--decode-dequant adds, per T, an nvfp4 row " ddeq": the heuristic's plan with its decode buckets taking
the dequantized bf16 operands (the decode expert kernels then run their W4A16 path with alpha = 1 / gs);
the same results bit for bit (test_fused_moe_dequant_gpu.py), for the A/B of `_buckets.DECODE_DEQUANT`.
--pdl MODE ... adds, after each row of ours, a twin " pdl-MODE" prepared with `api.with_pdl(config, MODE)`:
every launch but the grouped kernels' a programmatic dependent of the one before ("wait"), or none
("off"); the same bits (test_fused_moe_pdl_gpu.py), for the A/B of `api.PDL`.
--fp4-mul adds, per T and recipe, a row " mul": the heuristic's plan with its decode buckets placing the FP4 weight
codes by a multiply (gemm's `DecodeConfig.fp4 = "mul"`), the same bits; --fp4-mul-rule a row " mulr" with it only
in `_buckets.fp4_mul_range` (what `DECODE_FP4_MUL` switches on), for that switch's A/B.
--tiled-rows R ... adds, per T and recipe, a row " rows R": the heuristic's plan with the grouped
bucket from T * k / E >= R rows an expert instead of `api.TILED_ROWS` (the decode buckets below it),
so a sweep of T around the switch (e.g. --tokens 512 1024 2048 at E = 128) places it.
--expert-sweep adds, per T and recipe, one row per expert-GEMM tiling of `_kernel_experts.sweep_pairs`
("b12x w4a16 n1 w4p1": 8-token groups, FC1 / FC2 configs of that label, "-s2": two column tiles
per CTA; n2 = 16-token groups, swept
for T > 8 only, where 8-token groups may take two passes), each prepared as a one-bucket override
(`api.ExpertBucket`) of the heuristic's plan; LABELs restrict it to those labels. With --steps each
row also splits into FC1 and FC2 time, so the best FC1 and the best FC2 can come from different rows.
Peers, the same layer in plain torch (sort by expert on device, gather, two grouped GEMMs, activation,
weighted sum of each token's k rows), timed in the same run:
  grouped_mm bf16        torch._grouped_mm on bf16 expert weights (4x our weight bytes)
  scaled_grouped_mm fp8  torch._scaled_grouped_mm, e4m3 weights and activations, rowwise scales
                         (activations quantized inside the timed layer; 2x our weight bytes)
A peer that is missing or refuses the shape is skipped with a printed reason. Every case checks ours
against the fp32 reference first (worst row cosine and max error in the note). Targets (issue #7, H200):
decode T in {1, 4, 16, 64} >= 3x faster than grouped_mm bf16 and >= 60% of copy; T = 4096 no slower
than grouped_mm bf16. Without --json the report goes to $OUT/b12x_moe.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace

import torch

MODULE = "benchmarks.experimental.b12x.bench_moe"
SHAPES = ((128, 8, 2048, 768), (256, 8, 4096, 2048), (512, 10, 4096, 1024))
TOKENS = (1, 4, 16, 64, 4096)
DECODE_TOKENS = (1, 4, 16, 64)
QUICK_SHAPES, QUICK_TOKENS = ((128, 8, 2048, 768),), (1, 16, 4096)
RECIPES = ("nvfp4", "w4a16", "w4a16_mxfp4", "w4a8_mx", "w4a8_nvfp4")
QUICK_RECIPES = ("nvfp4", "w4a16")
ACTIVATIONS = ("silu", "relu2", "swiglu_oai")
SF_BLOCK = {"nvfp4": 16, "mxfp4": 32}


def recipe_source(recipe: str) -> tuple[str, str]:
    """(quant_mode, source_format) of a recipe name: w4a16 runs on NVFP4 weights, w4a16_mxfp4 on MXFP4."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if recipe == "w4a16_mxfp4":
        return "w4a16", "fp4_e8m0_k32"
    return recipe, "fp4_e8m0_k32" if recipe == "w4a8_mx" else "modelopt_nvfp4"


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """'E x k x H x I' -> (E, k, H, I), e.g. '128x8x2048x768'."""
    from benchmarks.experimental.b12x.common import int_dims

    dims = int_dims(text.lower(), 4)
    if dims is None or 0 in dims:
        raise ValueError(f"shape must be ExkxHxI with positive ints (e.g. 128x8x2048x768), got {text!r}")
    e, k, h, i = dims
    if k > e:
        raise ValueError(f"shape {text!r}: k = {k} routes per token exceed E = {e} experts")
    return e, k, h, i


def fc1_rows(i: int, activation: str) -> int:
    return i if activation == "relu2" else 2 * i


def expert_bytes(weight_format: str, h: int, i: int, activation: str) -> int:
    """FP4 values + block scales of one expert's FC1 [N1, H] and FC2 [H, I]."""
    sf = SF_BLOCK[weight_format]
    n1 = fc1_rows(i, activation)
    return n1 * h // 2 + n1 * h // sf + h * i // 2 + h * i // sf


def layer_bytes(weight_format: str, t: int, k: int, h: int, i: int, activation: str, experts_hit: int) -> int:
    """The bytes one layer call must move (module docstring): hit experts' weights, a, out, routing."""
    return experts_hit * expert_bytes(weight_format, h, i, activation) + 2 * t * h * 2 + t * k * 8


def layer_flops(valid_routes: int, h: int, i: int, activation: str) -> int:
    return 2 * valid_routes * (fc1_rows(i, activation) * h + h * i)


def routing(t: int, k: int, e: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """k distinct experts per token (int32 [T, k]) and positive weights summing to 1 (fp32 [T, k])."""
    scores = torch.rand(t, e, generator=generator, device=device)
    ids = scores.topk(k, dim=-1).indices.to(torch.int32)
    w = torch.rand(t, k, generator=generator, device=device) + 0.25
    return ids, w / w.sum(-1, keepdim=True)


def routing_sets(t, k, e, n_sets, generator, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n_sets routings whose experts come from disjoint groups of a random partition of the E experts
    (each group holds >= k), so replaying them in turn reads no expert twice from L2."""
    n_sets = max(1, min(n_sets, e // k))
    groups = torch.randperm(e, generator=generator, device=device).chunk(n_sets)
    out = []
    for g in groups:
        ids, w = routing(t, k, g.numel(), generator, device)
        out.append((g[ids.long()].to(torch.int32), w))
    return out


def rotation_sets(weight_format, t, k, e, h, i, activation, l2_bytes=60 * 2**20, factor=3.0) -> int:
    """How many disjoint routing sets graph replays cycle through so one cycle moves >= factor x L2
    of expert bytes (1 when a single call already does; at most E // k)."""
    per_expert = expert_bytes(weight_format, h, i, activation)
    for n in range(1, e // k + 1):
        g = e // n
        hit = g * (1 - (1 - k / g) ** t)  # expected distinct experts of T tokens drawing k of g
        if n * hit * per_expert >= factor * l2_bytes:
            return n
    return max(1, e // k)


def experts_hit(ids: torch.Tensor, e: int) -> int:
    """Distinct valid experts in ids (host sync: setup only)."""
    flat = ids.reshape(-1).long()
    return int(torch.unique(flat[(flat >= 0) & (flat < e)]).numel())


def synthetic_checkpoint(wplan, device, generator: torch.Generator) -> dict:
    """prepare_weights kwargs of random FP4 experts whose layer output is O(1) for a ~ N(0, 1):
    uniform FP4 codes (mean |value| ~2.6), block scales ~U[1, 2) (E4M3) or one power of two (UE8M0)
    and global scales chosen so each weight is ~1 / sqrt(K); activation global scales 2688 / 6 and
    2688 / 20 (amax ~6 of a, ~20 of act(FC1)), varied per expert. Built on the device directly: the
    largest shape's fp32 weights would not fit in host memory."""
    e, h, i, n1 = wplan.num_experts, wplan.hidden_size, wplan.intermediate_size, wplan.fc1_rows
    fmt = wplan.weight_format
    kw = dict(device=device, generator=generator)

    def values(rows, k):
        return torch.randint(0, 256, (e, rows, k // 2), dtype=torch.uint8, **kw)

    if fmt == "mxfp4":

        def scales(rows, k):
            byte = 127 - round(math.log2(2.6 * math.sqrt(k)))
            return (byte + torch.randint(0, 2, (e, rows, k // 32), **kw)).to(torch.uint8)

        return dict(w1_fp4=values(n1, h), w1_blockscale=scales(n1, h), w2_fp4=values(h, i), w2_blockscale=scales(h, i))

    def scales(rows, k):
        return (1 + torch.rand(e, rows, k // 16, **kw)).to(torch.float8_e4m3fn)

    spread = 1 + torch.arange(e, device=device, dtype=torch.float32) / (4 * e)
    return dict(
        w1_fp4=values(n1, h),
        w1_blockscale=scales(n1, h),
        w1_global_scale=4.0 * math.sqrt(h) * spread,
        a1_gscale=(2688.0 / 6) * spread,
        w2_fp4=values(h, i),
        w2_blockscale=scales(h, i),
        w2_global_scale=4.0 * math.sqrt(i) * spread,
        a2_gscale=(2688.0 / 20) * spread,
    )


# ---- ours ----------------------------------------------------------------------------------------
@dataclass
class Ours:
    plan: object
    experts: object
    wplan: object


def setup_ours(
    recipe,
    activation,
    shape,
    max_tokens,
    device,
    generator,
    compact_grid=None,
    buckets=None,
    gather_encode=None,
    deq_encode=None,
    pdl=None,
    combine_tile=None,
) -> Ours:
    """compact_grid: None (the heuristic's routing.compact_grid) or the value to prepare with;
    gather_encode: None (the heuristic's routing.nvfp4_encode) or "pairs" / "search";
    deq_encode: None (the heuristic's nvfp4_deq_encode) or "divide" / "search" (routing and combine);
    pdl: None (the heuristic's launches) or an `api.PDL_MODES` entry (`api.with_pdl`);
    combine_tile: None (the heuristic's) or (block_t, block_h) of the combine kernel;
    buckets: None (the heuristic's expert buckets), a tuple of `api.ExpertBucket` or a callable of the
    heuristic's tuple (`with_override`; CUDA only)."""
    import b12x
    from b12x.moe import fused_moe as fm

    e, k, h, i = shape
    mode, source = recipe_source(recipe)
    wplan = fm.plan_weights(
        quant_modes=mode,
        source_format=source,
        activation=activation,
        num_experts=e,
        hidden_size=h,
        intermediate_size=i,
    )
    experts = fm.prepare_weights(plan=wplan, **synthetic_checkpoint(wplan, device, generator))
    p = fm.plan(fm.Caps(max_tokens=max_tokens, num_topk=k, device=device, weight_plan=wplan, quant_mode=mode))
    if torch.device(device).type == "cuda":
        from flashinfer.experimental.b12x._lib.arch import target_arch

        p = with_override(p, target_arch(device), compact_grid, buckets, gather_encode, deq_encode, pdl, combine_tile)
    with b12x.PreparationSession(device) as session:
        session.prepare([p])
    return Ours(p, experts, wplan)


def with_override(
    p, arch: str, compact_grid=None, buckets=None, gather_encode=None, deq_encode=None, pdl=None, combine_tile=None
):
    """p, or p re-planned with the heuristic's config for `arch` changed where asked: the routing's
    compact_grid, the NVFP4 encodes, the combine tile ((block_t, block_h)), the expert GEMM buckets (a
    tuple of `api.ExpertBucket`, or a callable (the heuristic's tuple, caps) -> the override's) and/or
    the launches' PDL mode (applied last, to the buckets too)."""
    from b12x.moe import fused_moe as fm
    from flashinfer.experimental.b12x.moe.fused_moe import api

    asked = (compact_grid, buckets, gather_encode, deq_encode, pdl, combine_tile)
    if all(v is None for v in asked):
        return p
    cfg = p.heuristic(arch)
    if compact_grid is not None:
        cfg = replace(cfg, routing=replace(cfg.routing, compact_grid=compact_grid))
    if gather_encode is not None:
        cfg = replace(cfg, routing=replace(cfg.routing, nvfp4_encode=gather_encode))
    if deq_encode is not None:
        routing = replace(cfg.routing, nvfp4_deq_encode=deq_encode)
        cfg = replace(cfg, routing=routing, combine=replace(cfg.combine, nvfp4_deq_encode=deq_encode))
    if combine_tile is not None:
        cfg = replace(cfg, combine=replace(cfg.combine, block_t=combine_tile[0], block_h=combine_tile[1]))
    if callable(buckets):
        buckets = buckets(cfg.experts, p.caps)
    if buckets is not None:
        cfg = replace(cfg, experts=buckets)
    # the heuristic's launches (api.PDL) for replaced buckets too, unless asked otherwise
    cfg = api.with_pdl(cfg, api.PDL if pdl is None else pdl)
    return fm.plan(p.caps, override=cfg)


def check_ours(ours: Ours, recipe, a, ids, w, out) -> str:
    """Run once into a NaN-poisoned out and compare with the fp32 reference (vectorized per expert)."""
    from b12x.moe import fused_moe as fm
    from flashinfer.experimental.b12x.moe.fused_moe import reference as R

    mode, _ = recipe_source(recipe)
    out.fill_(float("nan"))
    fm.run(binding=fm.bind(ours.plan, a=a, experts=ours.experts, topk_weights=w, topk_ids=ids, output=out))
    if a.is_cuda:
        torch.cuda.synchronize()
    if a.shape[0] > 64:  # the per-route reference loop is too slow past decode sizes
        return ""
    ref = R.fused_moe(a, ours.experts, w, ids, quant_mode=mode).float()
    got = out.float()
    cos = torch.nn.functional.cosine_similarity(got.double(), ref.double(), dim=-1).min().item()
    err = (got - ref).abs().max().item()
    return f"min row cos {cos:.6f}, max |ours - ref| {err:.2e} (|ref| max {ref.abs().max().item():.2e})"


# ---- peers ---------------------------------------------------------------------------------------
class TorchLayer:
    """The layer in torch ops around a grouped GEMM (module docstring); buffers made once."""

    def __init__(self, kind, wplan, ids, w, a, generator):
        e, h, i = wplan.num_experts, wplan.hidden_size, wplan.intermediate_size
        self.kind, self.activation, self.e, self.i = kind, wplan.activation, e, i
        dev = a.device
        n1 = wplan.fc1_rows
        w1 = torch.randn(e, n1, h, device=dev, generator=generator, dtype=torch.bfloat16) / math.sqrt(h)
        w2 = torch.randn(e, h, i, device=dev, generator=generator, dtype=torch.bfloat16) / math.sqrt(i)
        if kind == "fp8":
            self.s1 = w1.float().abs().amax(-1).clamp_min(1e-12) / 448  # [E, N1] rowwise weight scales
            self.s2 = w2.float().abs().amax(-1).clamp_min(1e-12) / 448
            w1 = (w1.float() / self.s1[..., None]).to(torch.float8_e4m3fn)
            w2 = (w2.float() / self.s2[..., None]).to(torch.float8_e4m3fn)
        self.w1t, self.w2t = w1.transpose(-2, -1), w2.transpose(-2, -1)  # [E, K, N]: column-major B
        self.ids, self.w, self.a = ids, w, a
        self.weight_bytes = w1.numel() * w1.element_size() + w2.numel() * w2.element_size()

    def _gemm(self, x, wt, scales, offs):
        if self.kind == "bf16":
            return torch._grouped_mm(x, wt, offs=offs)  # bf16 in, bf16 out
        sa = x.float().abs().amax(-1).clamp_min(1e-12) / 448
        x8 = (x.float() / sa[:, None]).to(torch.float8_e4m3fn)
        return torch._scaled_grouped_mm(x8, wt, sa, scales, offs=offs, out_dtype=torch.bfloat16)

    def __call__(self) -> torch.Tensor:
        t, k = self.ids.shape
        flat = self.ids.reshape(-1).long()
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(self.e, dtype=torch.int32, device=flat.device).index_add_(
            0, flat, torch.ones_like(flat, dtype=torch.int32)
        )
        offs = counts.cumsum(0, dtype=torch.int32)
        x = self.a[order // k]
        h = self._gemm(x, self.w1t, getattr(self, "s1", None), offs)
        if self.activation == "relu2":
            g = torch.relu(h).square()
        else:
            g = torch.nn.functional.silu(h[:, : self.i]) * h[:, self.i :]
        y = self._gemm(g.to(torch.bfloat16), self.w2t, getattr(self, "s2", None), offs)
        rows = torch.empty_like(order)
        rows[order] = torch.arange(order.numel(), device=order.device)
        y = y.float()[rows].view(t, k, -1) * self.w[..., None]
        return y.sum(1).to(torch.bfloat16)


def peers(wplan, sets, a, generator, args, graph_kw) -> list:
    """[(name, Timing, note)] of the torch layers on this case's routing sets; skipped ones print why."""
    from benchmarks.experimental.b12x.common import measure, rotate

    found = []
    for name, kind, op in (
        ("grouped_mm bf16", "bf16", "_grouped_mm"),
        ("scaled_grouped_mm fp8", "fp8", "_scaled_grouped_mm"),
    ):
        if not hasattr(torch, op):
            print(f"peer {name} skipped: torch {torch.__version__} has no torch.{op}", file=sys.stderr)
            continue
        try:
            layer = TorchLayer(kind, wplan, *sets[0], a, generator)
            routes = [(ids, w) for ids, w in sets]
            nxt = rotate(routes)

            def call(layer=layer, nxt=nxt):
                layer.ids, layer.w = nxt()
                return layer()

            call()
            timing = measure(call, args, **graph_kw)
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"peer {name} skipped at T={a.shape[0]}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
            continue
        found.append((name, timing, f"all experts' weights {layer.weight_bytes / 1e6:.0f} MB"))
        del layer
    return found


# ---- the run -------------------------------------------------------------------------------------
def run_shape(table, args, shape, tokens, recipes, device, generator) -> None:
    """Every T x recipe of one shape. Under --timer graph each case cycles through routing sets on
    disjoint experts (rotation_sets) captured in one graph, so weights stream from HBM as under
    --timer events' L2 flush; peers replay the same sets."""
    from b12x.moe import fused_moe as fm
    from benchmarks.experimental.b12x.common import Case, measure, rotate

    e, k, h, i = shape
    max_t = max(tokens)
    for t in tokens:
        a = torch.randn(t, h, device=device, generator=generator).to(torch.bfloat16)
        out = torch.empty(t, h, device=device, dtype=torch.bfloat16)
        n_sets = rotation_sets("nvfp4", t, k, e, h, i, args.activation) if args.timer == "graph" else 1
        sets = routing_sets(t, k, e, n_sets, generator, device) if n_sets > 1 else [routing(t, k, e, generator, device)]
        hit = sum(experts_hit(ids, e) for ids, _ in sets) / len(sets)
        graph_kw = {"calls_per_graph": len(sets)} if args.timer == "graph" else {}
        peer_rows = None
        for recipe in recipes:
            for label, buckets, pdl in pdl_variants(args, expert_variants(args, t, max_t, recipe)):
                compact = grid_choice(args)
                ours = setup_ours(
                    recipe,
                    args.activation,
                    shape,
                    max_t,
                    device,
                    generator,
                    compact,
                    buckets,
                    getattr(args, "gather_encode", None),
                    getattr(args, "deq_encode", None),
                    pdl,
                    getattr(args, "combine_tile", None),
                )
                fmt = ours.wplan.weight_format
                case = Case(
                    f"moe {args.activation}",
                    {"E": e, "k": k, "H": h, "I": i, "T": t, "hit": round(hit, 1), "sets": len(sets)},
                    bytes=round(layer_bytes(fmt, t, k, h, i, args.activation, hit)),
                    flops=layer_flops(t * k, h, i, args.activation),
                )
                note = check_ours(ours, recipe, a, *sets[0], out)
                bindings = [
                    fm.bind(ours.plan, a=a, experts=ours.experts, topk_weights=w, topk_ids=ids, output=out)
                    for ids, w in sets
                ]
                nxt = rotate(bindings)
                name = f"b12x {recipe}{label}"
                table.add(case, name, measure(lambda nxt=nxt: fm.run(binding=nxt()), args, **graph_kw), note=note)
                if getattr(args, "steps", False):  # a Namespace built by hand may lack it
                    add_step_prefixes(table, case, name, ours.plan, bindings, out, args, graph_kw)
                if peer_rows is None:
                    peer_rows = [] if args.no_peers else peers(ours.wplan, sets, a, generator, args, graph_kw)
                if buckets is None and pdl is None:  # once per recipe's case (the sweep's rows share it)
                    for pname, timing, pnote in peer_rows:
                        table.add(case, pname, timing, peer=True, note=pnote)
                del ours, bindings
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()


SWEEP_SMALL_T = 8  # T above which the sweep also times 16-token groups (n2)


def parse_combine_tile(text: str) -> tuple[int, int]:
    """'BTxBH' -> (block_t, block_h) of a tile `_combine.can_implement` accepts (argparse type)."""
    from benchmarks.experimental.b12x.common import int_dims
    from flashinfer.experimental.b12x.moe.fused_moe import _combine

    dims = int_dims(text.lower(), 2)
    if dims is None:
        raise argparse.ArgumentTypeError(f"--combine-tile must look like 4x512 (tokens x columns), got {text!r}")
    bt, bh = dims
    if not _combine.can_implement(1, None, replace(_combine.CombineConfig(), block_t=bt, block_h=bh)):
        raise argparse.ArgumentTypeError(f"--combine-tile values must be powers of two, got {text!r}")
    return bt, bh


def with_dequant(buckets: tuple, caps=None) -> tuple:
    """buckets with every grouped (tiled) one taking the dequantized operands (--tiled-dequant)."""
    return tuple(replace(b, dequant=True) if b.tiled else b for b in buckets)


def with_decode_dequant(buckets: tuple, caps=None) -> tuple:
    """buckets with every decode (not grouped) one taking the dequantized operands (--decode-dequant)."""
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets

    return _buckets.with_decode_dequant(buckets)


def with_fp4_mul(buckets: tuple, caps=None) -> tuple:
    """buckets with every decode one placing FP4 codes by a multiply (--fp4-mul)."""
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets

    return _buckets.with_fp4_mul(buckets)


def with_fp4_mul_rule(buckets: tuple, caps) -> tuple:
    """buckets as `_buckets.DECODE_FP4_MUL` moves them (--fp4-mul-rule): the multiply in its T range only."""
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets

    return _buckets.with_fp4_mul(buckets, _buckets.fp4_mul_range(caps))


def with_tiled_rows(rows: int):
    """(buckets, caps) -> the heuristic's buckets rebuilt with the grouped bucket from `rows` rows an
    expert (--tiled-rows), the heuristic's dequant choices (`_buckets` flags) applied as it does."""

    def rebuild(buckets: tuple, caps) -> tuple:
        from flashinfer.experimental.b12x.moe.fused_moe import api

        return api.heuristic_buckets(caps, rows=rows)

    rebuild.rows = rows
    return rebuild


def pdl_variants(args, variants: list) -> list:
    """[(label, experts override, pdl)]: each of `expert_variants`' rows as the heuristic launches it
    (pdl None), then with --pdl MODE ... a twin per mode (" pdl-MODE": `api.with_pdl`)."""
    found = []
    for label, buckets in variants:
        found.append((label, buckets, None))
        found += [(f"{label} pdl-{mode}", buckets, mode) for mode in getattr(args, "pdl", None) or ()]
    return found


def expert_variants(args, t: int, max_t: int, recipe: str | None = None) -> list:
    """[(row label suffix, experts override or None)] for one T: the heuristic's plan (""), then
    with --expert-sweep one single-bucket override per `sweep_pairs` entry (" n1 w4p1"), for
    16-token groups too when T > SWEEP_SMALL_T; --expert-sweep LABEL ... keeps those labels.
    An override may be a callable (the heuristic's buckets -> the override's: `with_dequant`).
    recipe: the row's (--tiled-dequant rows for "nvfp4" only; None: as for nvfp4)."""
    found = [("", None)]
    dequant = getattr(args, "tiled_dequant", False) and recipe in (None, "nvfp4")
    if dequant:
        found.append((" deq", with_dequant))
    if getattr(args, "decode_dequant", False) and recipe in (None, "nvfp4"):
        found.append((" ddeq", with_decode_dequant))
    if getattr(args, "fp4_mul", False) and recipe in (None, "w4a16", "nvfp4"):  # NVFP4 weights (FP4_MUL_MODES)
        found.append((" mul", with_fp4_mul))
    if getattr(args, "fp4_mul_rule", False) and recipe in (None, "w4a16", "nvfp4"):
        found.append((" mulr", with_fp4_mul_rule))
    for rows in getattr(args, "tiled_rows", None) or ():
        found.append((f" rows {rows}", with_tiled_rows(rows)))
    if getattr(args, "decode_only", False) or tiled_entries(args):
        from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X
        from flashinfer.experimental.b12x.moe.fused_moe.api import ExpertBucket

        if getattr(args, "decode_only", False):  # decode buckets (to MID_T, then 16-token) at every T
            found.append((" decode", X.default_buckets(max_t)))
        for text in tiled_entries(args):  # the grouped kernels at every T
            cfg = parse_grouped(text)
            found.append((f" tiled {text}", (ExpertBucket(max_t, cfg, cfg),)))
            if dequant:
                found.append((f" tiled {text} deq", (ExpertBucket(max_t, cfg, cfg, dequant=True),)))
    labels = getattr(args, "expert_sweep", None)  # None: no sweep; []: every label
    if labels is None:
        return found
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X
    from flashinfer.experimental.b12x.moe.fused_moe.api import ExpertBucket

    for ntiles in (1, 2) if t > SWEEP_SMALL_T else (1,):
        for label, fc1, fc2, span in X.sweep_pairs(ntiles):
            if not labels or label in labels:
                found.append((f" n{ntiles} {label}", (ExpertBucket(max_t, fc1, fc2, span, span),)))
    return found


TILED_DEFAULT_ENTRIES = ("64x256x1x4", "64x256x1x4w", "128x128x2x4")


def tiled_entries(args) -> tuple:
    """--tiled's entries: None (absent) -> (), [] -> TILED_DEFAULT_ENTRIES, else the given ones."""
    given = getattr(args, "tiled", None)
    if given is None:
        return ()
    return tuple(given) or TILED_DEFAULT_ENTRIES


def parse_grouped(text: str):
    """`BMxBNxWMxWN` (gemm TiledConfig bm, bn, warps_m, warps_n), suffix "f" for e4m3 MMA (fp8_mma: w4a8_mx only),
    then "w" for the window mapping -> `_kernel_grouped.GroupedConfig`; ValueError naming the entry otherwise."""
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled import TiledConfig
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    body, window = (text[:-1], True) if text.endswith("w") else (text, False)
    body, fp8 = (body[:-1], True) if body.endswith("f") else (body, False)
    body, _, mix = body.partition("m")
    parts = body.split("x")
    if len(parts) != 4 or not all(p.isdigit() for p in parts) or not (mix == "" or mix.isdigit()):
        raise ValueError(
            f"--tiled entry must be BMxBNxWMxWN[mS][f][w] (e.g. 128x128x2x4, 64x256x1x4m2, 64x128x2x4f), got {text!r}"
        )
    tile = TiledConfig(*(int(p) for p in parts), fp8_mma=fp8, mix=int(mix or 0))
    return G.GroupedConfig(tile, per_expert=not window)


def sweep_labels() -> list:
    """Every label `sweep_pairs` knows (either token-tile count), for --expert-sweep's check."""
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    return sorted({entry[0] for n in (1, 2) for entry in X.sweep_pairs(n)})


def grid_choice(args) -> bool | None:
    """--full-grid: False, --compact-grid: True, neither: None (the heuristic's)."""
    if getattr(args, "full_grid", False):  # a Namespace built by hand may lack either
        return False
    return True if getattr(args, "compact_grid", False) else None


def step_prefixes(plan, bindings, out) -> list[tuple[str, list]]:
    """[(name of the last step, [callable per binding running steps 0..n])] for n = 1..steps."""
    from flashinfer.experimental.b12x.moe.fused_moe import api

    launchers = plan.state.extra["launchers"]
    per_binding = [api.steps(launchers, b, out) for b in bindings]
    names = [name for name, _ in per_binding[0]]
    return [
        (names[n - 1], [lambda fns=[f for _, f in steps[:n]]: [f() for f in fns] for steps in per_binding])
        for n in range(1, len(names) + 1)
    ]


def add_step_prefixes(table, case, name, plan, bindings, out, args, graph_kw) -> None:
    """name: the layer row's ("b12x w4a16"); each prefix row is `name ..step`."""
    from benchmarks.experimental.b12x.common import measure, rotate

    for last, calls in step_prefixes(plan, bindings, out):
        nxt = rotate(calls)
        table.add(case, f"{name} ..{last}", measure(lambda nxt=nxt: nxt()(), args, **graph_kw), note="prefix")


def main(argv: list[str] | None = None) -> int:
    from benchmarks.experimental.b12x.common import Table, ceilings, require_cuda, standard_parser, write_report
    from flashinfer.experimental.b12x.moe.fused_moe.api import PDL_MODES

    parser = standard_parser(__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help=f"live token counts T (default {TOKENS})")
    parser.add_argument("--shapes", nargs="+", default=None, help="E x k x H x I shapes (default: the issue's three)")
    parser.add_argument("--recipes", nargs="+", choices=RECIPES, default=None, help="our recipes to time")
    parser.add_argument("--activation", choices=ACTIVATIONS, default="silu", help="the experts' activation")
    parser.add_argument("--steps", action="store_true", help="also time each prefix of the pipeline's launches")
    parser.add_argument(
        "--gather-encode",
        choices=("pairs", "search"),
        default=None,
        help="prepare ours with this NVFP4 gather encode (RoutingConfig.nvfp4_encode; default: the heuristic's)",
    )
    parser.add_argument(
        "--deq-encode",
        choices=("divide", "search"),
        default=None,
        help="prepare ours with this encode of the dequantized NVFP4 operands (RoutingConfig / CombineConfig "
        ".nvfp4_deq_encode, the dequant buckets'; default: the heuristic's)",
    )
    parser.add_argument(
        "--combine-tile",
        type=parse_combine_tile,
        default=None,
        metavar="BTxBH",
        help="prepare ours with this combine tile, tokens x hidden columns (powers of two; default: the heuristic's)",
    )
    grids = parser.add_mutually_exclusive_group()
    grids.add_argument("--compact-grid", action="store_true", help="prepare ours with routing.compact_grid on")
    grids.add_argument(
        "--full-grid", action="store_true", help="prepare ours with routing.compact_grid off (E rows of CTAs)"
    )
    parser.add_argument(
        "--expert-sweep",
        nargs="*",
        default=None,
        metavar="LABEL",
        help="also time each expert-GEMM tiling of _kernel_experts.sweep_pairs (or only these labels)",
    )
    parser.add_argument(
        "--tiled",
        nargs="*",
        default=None,
        metavar="BMxBNxWMxWN[mS][f][w]",
        help="also time ours with the grouped (tiled) expert kernels at every T, one row per tile "
        f"(mS: gemm's mix, the next K-tile's stores over the last S k-steps; f: e4m3 MMA, w4a8_mx only; w: windows of the sorted rows "
        f"instead of per-expert tiles; default {' '.join(TILED_DEFAULT_ENTRIES)})",
    )
    parser.add_argument(
        "--decode-only", action="store_true", help="also time ours with the decode expert kernels at every T"
    )
    parser.add_argument(
        "--tiled-dequant",
        action="store_true",
        help="also time nvfp4 with its grouped bucket on dequantized bf16 operands (row ' deq'; with --tiled a "
        "' deq' twin of each entry)",
    )
    parser.add_argument(
        "--decode-dequant",
        action="store_true",
        help="also time nvfp4 with its decode buckets on dequantized bf16 operands (row ' ddeq')",
    )
    parser.add_argument(
        "--fp4-mul",
        action="store_true",
        help="also time each recipe with its decode buckets placing FP4 codes by a multiply (row ' mul')",
    )
    parser.add_argument(
        "--fp4-mul-rule",
        action="store_true",
        help="also time each recipe with the multiply where _buckets.DECODE_FP4_MUL would place it (row ' mulr')",
    )
    parser.add_argument(
        "--pdl",
        nargs="+",
        choices=PDL_MODES,
        default=None,
        help="also time each row of ours with its launches' programmatic dependent launch mode set to MODE "
        "(row ' pdl-MODE'; api.with_pdl)",
    )
    parser.add_argument(
        "--tiled-rows",
        type=int,
        nargs="+",
        default=None,
        metavar="R",
        help="also time ours with the grouped bucket from R rows an expert (T * k / E) instead of api.TILED_ROWS",
    )
    args = parser.parse_args(argv)
    if args.tokens is not None and any(t < 1 for t in args.tokens):
        parser.error(f"--tokens must be >= 1, got {args.tokens}")
    if args.tiled_rows is not None and any(r < 1 for r in args.tiled_rows):
        parser.error(f"--tiled-rows must be >= 1, got {args.tiled_rows}")
    for text in args.tiled or ():
        try:
            parse_grouped(text)
        except ValueError as e:
            parser.error(str(e))
    if args.expert_sweep:
        unknown = sorted(set(args.expert_sweep) - set(sweep_labels()))
        if unknown:
            parser.error(f"--expert-sweep labels must be among {sweep_labels()}, got unknown {unknown}")
    try:
        shapes = [parse_shape(s) for s in args.shapes] if args.shapes else None
    except ValueError as e:
        parser.error(str(e))
    shapes = shapes or (QUICK_SHAPES if args.quick else SHAPES)
    tokens = tuple(args.tokens or (QUICK_TOKENS if args.quick else TOKENS))
    recipes = args.recipes or (QUICK_RECIPES if args.quick else RECIPES)
    device = require_cuda("bench_moe", args.device)
    ceil = ceilings(device)
    table = Table(f"b12x moe.fused_moe on {ceil.device_name} (us per layer; bytes = hit experts once)", ceil)
    generator = torch.Generator(device=device).manual_seed(0)
    for shape in shapes:
        run_shape(table, args, shape, tokens, recipes, device, generator)
    table.print()
    extra = {"bytes": "hit experts' FP4 values + scales, a, out, ids and weights, once", "decode": DECODE_TOKENS}
    write_report(table, args, "b12x_moe.json", MODULE, argv, device, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
