"""moe.fused_moe expert GEMMs on warp mma.sync: FC1 with the activation fused, FC2 with fp32 rows.

Rows of A are sorted by expert (`expert_start` [E + 1], routing step 1): expert e owns rows
[start[e], start[e + 1]). For each of them

    FC1:  C[p, j]  = act(FC1_e(A[p]))[j]   bf16 [R_cap, I]   (gated: act(gate row j, up row I + j))
    FC2:  C2[p, n] = FC2_e(A2[p])[n]       fp32 [R_cap, H]   (unrounded: routes are summed later)

each times w_alpha[e] * a_alpha[e]. The weights are `ExpertWeights` (the gemm FP4 `Weight` layout
stacked per expert, FC1 gate rows first), read through gemm's decode kernel logic (`DecodeLogic`:
dequantization in registers, swap-AB m16n8k16 MMAs, split-K over warps, shared-memory reduction)
with this module's hooks: per-expert weight bases, the group's first A row, gate/up row pairing,
K tails, and MXFP8 activations against FP4 weights.

Work split: grid (N tiles, G); two compile-time variants (`grid`, part of the kernel key):
- "identity": G = E, CTA (x, y) works for expert e = y. The `active` argument is not read (the
  launcher signature stays the same for both variants).
- "list": CTA (x, y) works for expert e = active[y] (G = len(active); an entry >= E gives it nothing
  to do): the routing's list of the experts that got rows (`RoutingConfig.compact_grid`), G =
  min(E, T * k), so a decode call launches CTAs for at most T * k experts instead of E (T = 1, k = 8,
  E = 128: 384 + 512 CTAs instead of 6144 + 8192, most of which only read two ints and exit).
  The list read is one more dependent global load before start[e] in every CTA, which made the full
  grid 40% slower when every launch took it (H200: T = 1 w4a16 39.6 -> 55.6 us per layer), so the
  plan launches "identity" whenever the grid is every expert (compact off, or T * k >= E).
CTA (x, e) owns output columns [x * cols, (x + 1) * cols) of expert e,
cols = 16 * tiles (FC2, relu2) or 8 * tiles (gated FC1: its warps load `tiles / 2` 16-row tiles of
gate rows and as many of the matching up rows). It reads start[e], start[e + 1] and loops over its
rows in groups of up to 8 * ntiles (16) tokens; an expert without rows costs one 8-byte read. Per
group: the `warps` warps split the K chunks (128 values each), park partial sums in shared memory,
and after a barrier every thread finishes (tok, column) outputs: sum, scale, activation, store.
The scale (w_alpha[e] * a_alpha[e]) is loaded once per CTA next to start[e], before the first
group, not after the reduction where its two loads were one more round trip per CTA. With
`DecodeConfig.prefetch` = p > 0 the K loop is gemm decode's weight prefetch pipeline (p chunks of
weight words per warp loaded ahead of the math), so a few-warp CTA can keep every chunk of a short
K (FC2: I = 768 is 6 chunks) in flight at once. `DecodeConfig.fp4` places the FP4 weight codes as gemm's
decode kernel does (same bits). Other DecodeConfig options (chunk groups, clamp, probes) are gemm's only:
`why_not` rejects them (`IMPLEMENTED`).

Fewer, fatter CTAs (`span`, part of the kernel key, default 1): CTA x owns `span` consecutive
column tiles and runs them one after the other inside each group (grid N / (cols * span)), so an
expert's start[e] and scale loads, and every CTA of an expert without rows, are paid once per
`span` tiles: at T = 16 (E = 128, k = 8) ~45 of the 128 experts have no rows, i.e. ~5,000 of the
identity grid's 14,336 CTAs only read start[e] and exit, each holding a CTA slot for an L2 round
trip. A tile past N (N not a multiple of cols * span) loads and stores nothing.

Warp-owned tiles and warp groups along N (`DecodeConfig.wn`, gemm's option; default 1 = the kernel
above): the CTA's warps form wn groups, group i owns columns [n0 + i cols_w, n0 + (i + 1) cols_w)
(cols_w = 16 tiles, or 8 tiles gated: a warp's gate tiles and their up tiles) and splits K among
its warps / wn warps (`warp_work`). With wn = warps (`direct`, the sweep's "own" tilings) each warp
runs the whole K of its rows through the weight prefetch pipeline and its m16n8 accumulators ARE
the outputs (a gated FC1's gate and up values of one output sit in the same lane): scale,
activation and store from registers (`store_direct`), no shared memory, no barrier, and a CTA of
8 warps covers 128 output columns. `DecodeConfig.wcache` / `acache` put gemm's cache hints on the
16-byte value loads (weights "na": L1::no_allocate, read once; activations "el": L1::evict_last,
re-read by every CTA of the SM). Why: a split-K CTA's life is serial (start[e] -> weight loads ->
MMAs -> reduction -> stores) and at FC2's K = 768 gives each of 8 warps one chunk; a warp-owned
tile streams its whole K with the next chunks' loads in flight (gemm's decode stream config at M =
1: 3.0 TB/s). What it costs: 1/kstep as many warps per expert, so at T = 1 on small experts
(E = 128: FC1 384 warps) too few warps to fill 132 SMs (docs/moe.md, session 8 budget).

Tilings per live T: a plan compiles one (FC1, FC2) pair of configs per `api.ExpertBucket`
(`default_buckets`: 8-token groups up to ~5 rows an expert, T >= 64, 16-token groups above) and a binding picks its
bucket by T, like the grid variant; nothing is sized by live T at compile time.

Bytes: per hit expert and group, 16 * tiles weight rows of K / 2 bytes plus their scales per CTA,
i.e. each hit expert's FC1 (N1 x H / 2) and FC2 (H x I / 2) bytes once when it has <= 16 rows (the
decode case: T <= 64, k <= 8, E >= 64); later groups re-read them from L2. Activation bytes: each
group's rows once per CTA (from L2). FLOPs: 2 * rows * N * K useful; the MMA issues 16 tokens per
group (8 with ntiles = 1), so large T runs at decode-kernel speed (correct, not fast: the dynamic
path for large T should use a tiled kernel). Example, E = 128, H = 2048, I = 768, NVFP4, T = 1, k = 8:
8 hit experts stream 12.6 MB (FC1) + 6.3 MB (FC2) of FP4 plus 1/16 of that in scales, ~5 us at the
H200's ~4 TB/s; grids of 48 x 128 and 64 x 128 CTAs of which 384 and 512 have rows.

Archs: the same mma.sync kernels on sm_90a and sm_120a (every dequantized FP4/FP8 operand value is
exact in bf16, products exact, sums fp32, on both); SM120's block-scaled MMA is not used yet.

Constraints: K (H for FC1, I for FC2) a multiple of 32; the last K chunk may be partial (its spans
past K are predicated off); N masked; rows >= start[E] are never read or written.
"""

from __future__ import annotations

import dataclasses

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.cutlass_dsl import T, dsl_user_op

from ..._lib.compile import cute_compile, kernel
from ..._lib.ptx import DeviceOps

# The gemm group's FP4 operand machinery, reused on purpose (issue 7: "do not fork it"); if a third
# group needs it, it moves to _lib.
from ...gemm._shared import addressing as AD
from ...gemm._shared.formats import FORMAT
from ...gemm.blockscaled import _kernel_decode as KD
from ...gemm.blockscaled._kernel_decode import CHUNK, DecodeConfig
from ...gemm.blockscaled._kernel_decode_fused import FusedOps
from ._expert_pdl import PDL_MODES

ACTIVATIONS = ("silu", "relu2", "swiglu_oai")
GATED = ("silu", "swiglu_oai")
# (A format, weight format) pairs: W4A16, NVFP4 x NVFP4, and MXFP8 activations (w4a8_*) x FP4.
PAIRS = (
    ("bfloat16", "nvfp4"),
    ("bfloat16", "mxfp4"),
    ("nvfp4", "nvfp4"),
    ("mxfp8", "mxfp4"),
    ("mxfp8", "nvfp4"),
)
K_ALIGN = 32  # one span
# the DecodeConfig fields honoured (wn, wcache, acache: "Warp-owned tiles" in the module docstring; fp4: the weights'
# FP4 placement, gemm's `dequant.span_group` through DecodeLogic's chunk, the same bits whichever); every other
# field keeps its default. ksplit must stay 1: these K loops step by kstep while DecodeLogic's prefetch helpers
# step by kstride (kstep x ksplit), equal only then
IMPLEMENTED = (
    *("warps", "tiles", "ntiles", "unroll", "prefetch", "wn", "wcache", "acache", "fp4"),
    *("early", "pdl"),  # ExpertConfig's own
)
GRIDS = ("identity", "list")  # CTA row y -> expert y, or -> active[y] (module docstring)
SPANS = (1, 2, 4)  # column tiles per CTA (module docstring, "Fewer, fatter CTAs")
_LOG2E = 1.4426950408889634
_SOURCES = (
    *(f"flashinfer.experimental.b12x.gemm._shared.{m}" for m in ("addressing", "dequant", "formats")),
    "flashinfer.experimental.b12x._lib.ptx",
    *(f"flashinfer.experimental.b12x.gemm.blockscaled.{m}" for m in ("_kernel_decode", "_kernel_decode_fused")),
    f"{__package__}._expert_pdl",
)


def default_config(max_rows: int) -> DecodeConfig:
    """max_rows: the most rows one expert can get in a call. One 8-token MMA tile when every expert
    fits in it (and two chunks' loads in flight per warp, as gemm's decode heuristic), else groups
    of 16: the 8-warp tiling (the sweep's "base"). The heuristic no longer picks it (`default_buckets`
    runs the sweep's w4p1 tilings at every T since session 17, the hinted one in 8-token groups since
    session 20); the compile tests use it as a plain tiling."""
    ntiles = 1 if max_rows <= 8 else 2
    return DecodeConfig(warps=8, tiles=2, ntiles=ntiles, unroll=2 if ntiles == 1 else 1)


@dataclasses.dataclass(frozen=True)
class ExpertConfig(DecodeConfig):
    """gemm's DecodeConfig plus the expert kernel's own option. early: the first group's weight
    prefetch stages issue as soon as the CTA's expert id is known, before start[e] and the scale
    come back (the weight address needs only e; list grid: predicated on active[y] < E, no extra
    load; identity grid: on the expert having rows, so after start[e]), and each group's K loop
    ends by issuing the next group's first stages (none after the last). prefetch > 0, span 1.
    pdl: one of PDL_MODES (`_expert_pdl.py`)."""

    early: bool = False
    pdl: str = "off"


def with_pdl(config: DecodeConfig, pdl: str) -> DecodeConfig:
    """`config` launched with `pdl` (PDL_MODES): an ExpertConfig, or with "off" and no other expert
    option (`early`) gemm's plain DecodeConfig again (the same kernel key as before PDL existed)."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    if pdl == "off" and not fields.get("early", False):
        return DecodeConfig(**{f.name: fields[f.name] for f in dataclasses.fields(DecodeConfig)})
    return ExpertConfig(**dict(fields, pdl=pdl))


MID_T = 64  # default_buckets: the 8-token-group prefetch tiling at least up to this T
# ... and up to this many rows an expert (T * k / E), when that is a larger T (default_buckets)
N1_ROWS = 5


def default_buckets(max_tokens: int, num_experts: int | None = None, num_topk: int | None = None) -> tuple:
    """The heuristic's live-T buckets (`api.ExpertBucket`): 8-token MMA groups (the sweep's "w4p1h":
    4 warps, weight prefetch 1, streaming cache hints) for T <= max(MID_T, N1_ROWS * E / k) (E, k:
    None = MID_T alone), then 16-token groups of the 4-warp prefetch tiling without the hints ("w4p1")
    up to max_tokens (the heuristic moves large T
    to the grouped kernels: `_buckets.with_tiled_bucket`). A token routes to k DISTINCT experts
    (route_topk), so no expert gets more than T rows, and ~T * k / E on average: at a few rows an
    expert one or two passes of 8-token groups beat half-empty 16-token ones."""
    from .api import ExpertBucket

    # FC2 unroll 1 (8-token groups): with the CTA's scale loaded before the K loop, unroll 2 took
    # nvfp4 FC2 from 126 to 150 registers (ptxas 13.0, sm_90a: one 256-thread CTA per SM instead of
    # two); at K = I = 768 each of 8 warps gets at most one chunk, so there is nothing to unroll.
    # H200, graph timer, µs per layer (docs/performance.md):
    # - 2026-11-30 21:16 (w4a16), w4p1 vs 8 warps x 2 tiles: E = 128 T = 1 22.9 vs 25.1, T = 4 43.9 vs
    #   50.6; E = 512 T = 1 47.7 vs 53.8, T = 4 127.7 vs 145.4;
    # - 2026-11-30 11:14 (w4a16, E = 128), w4p1 vs 16-token groups (8 warps): T = 16 106.9 vs 151.6;
    # - 2026-12-02 01:24 (w4a16 / nvfp4), T = 64: E = 128 167.3 / 211.3 vs 228.8 / 243.2, E = 256 1202 /
    #   1251 vs 1724 / 1606, E = 512 1053 / 1082 vs 1364 / 1477 (hence MID_T = 64);
    # - 2026-12-02 04:04 (session 17), w4a16 / nvfp4, 8-token w4p1 / 16-token w4p1 / 16-token 8 warps:
    #   T = 128 (2.5-8 rows an expert) E = 128 232 / 234 / 254 and 249 / 241 / 268, E = 256 1470 /
    #   1715 / 1697 and 1527 / 1766 / 1843, E = 512 1337 / 1593 / 1612 and 1401 / 1651 / 1795; T = 256
    #   (5-16 rows) E = 128 334 / 286 / 323 and 364 / 307 / 343, E = 256 2059 / 1834 / 1876 and 2005 /
    #   1853 / 1931, E = 512 1598 / 1821 / 1869 and 1648 / 1862 / 1987: 8-token groups win up to 5
    #   rows an expert (N1_ROWS), 16-token groups of w4p1 above; 8 warps nowhere.
    # - 2026-12-02 13:47 (session 20, `bench_moe --expert-sweep --steps`, T = 1 / 4, nine tilings): the
    #   hinted w4p1 ("w4p1h": weight loads L1::no_allocate, activations L1::evict_last) is the fastest
    #   8-token tiling everywhere: E = 128 w4a16 20.5 -> 19.9 / 42.5 -> 40.6 µs, nvfp4 23.3 -> 22.7 /
    #   49.4 -> 46.2, E = 512 w4a16 40.0 -> 38.2 / 108.8 -> 105.3; at T = 64 (session 17) 163.3 vs 165.2.
    #   The 16-token bucket keeps plain w4p1 (its hinted twin is not timed above T = 64).
    w4p1h, w4p1_n2 = sweep_tiling(1, "w4p1h"), sweep_tiling(2, "w4p1")
    top = MID_T
    if num_experts is not None and num_topk is not None:
        top = max(MID_T, N1_ROWS * num_experts // num_topk)
    small = ExpertBucket(min(top, max_tokens), *w4p1h)
    if max_tokens <= top:
        return (small,)
    return (small, ExpertBucket(max_tokens, *w4p1_n2))


def _hinted(warps, tiles, ntiles, unroll, prefetch, wn=1, wcache="na") -> DecodeConfig:
    """A tiling with gemm's streaming cache hints: weights L1::no_allocate (read once; "na256" adds an L2 256-byte
    prefetch, as W4A16's decode GEMM loads them), activations L1::evict_last (every CTA of the SM re-reads them)."""
    return DecodeConfig(warps, tiles, ntiles, unroll, prefetch, wcache=wcache, acache="el", wn=wn)


def _owned(warps, tiles, ntiles, prefetch, early=False) -> DecodeConfig:
    """Warp-owned tiles (module docstring): `warps` warp groups of one warp, each the whole K of its
    16 * tiles rows with `prefetch` chunks of weight loads ahead, the hints of `_hinted`; early: an
    `ExpertConfig` whose first weight stages issue before start[e] is back."""
    cfg = _hinted(warps, tiles, ntiles, 1, prefetch, wn=warps)
    if not early:
        return cfg
    return ExpertConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(DecodeConfig)}, early=True)


# (label, FC1, FC2) per MMA token tiles: what `bench_moe --expert-sweep` times. FC1 (K = H, e.g. 16
# chunks) and FC2 (K = I, e.g. 6 chunks: 8 warps leave 2 idle and give the rest one chunk each) get
# their own shapes; the layer's --steps split shows each GEMM's time, so one row tests two ideas.
# Registers (ptxas 13.0, sm_90a, bf16 / nvfp4 A): 8 warps x 2 tiles ~116-128 (2 CTAs = 16 warps per
# SM); 4 warps x 2 tiles x prefetch 1 ~70-96 at ntiles 1 (up to 5-7 CTAs = 20-28 warps per SM, every
# chunk's weight loads of FC2 in flight at once); 4 tiles ~190 (one 8-warp CTA per SM). "-s2", "-s4":
# w4p1 with 2 or 4 column tiles per CTA (1/2, 1/4 of the CTAs, idle ones included); 8-warp tilings
# with span 2 spill on some pair (ptxas 13.0 keeps 256-thread CTAs at <= 128 registers here).
_SWEEP = {
    1: (
        ("base", DecodeConfig(8, 2, 1, 2), DecodeConfig(8, 2, 1, 2), 1),
        ("u1", DecodeConfig(8, 2, 1, 2), DecodeConfig(8, 2, 1, 1), 1),
        ("w4p1", DecodeConfig(4, 2, 1, 2, 1), DecodeConfig(4, 2, 1, 1, 1), 1),  # FC1 unroll 1 spills on sm_120a
        ("w4p2/w2p2", DecodeConfig(4, 2, 1, 1, 2), DecodeConfig(2, 2, 1, 2, 2), 1),  # FC2 unroll 1 spills, sm_120a
        ("w8p1/w4t4", DecodeConfig(8, 2, 1, 1, 1), DecodeConfig(4, 4, 1, 1), 1),
        ("w16/w2p1", DecodeConfig(16, 2, 1, 1), DecodeConfig(2, 2, 1, 1, 1), 1),
        ("w4p1-s2", DecodeConfig(4, 2, 1, 2, 1), DecodeConfig(4, 2, 1, 1, 1), 2),
        ("w4p1-s4", DecodeConfig(4, 2, 1, 2, 1), DecodeConfig(4, 2, 1, 1, 1), 4),
        ("w4p1h", _hinted(4, 2, 1, 2, 1), _hinted(4, 2, 1, 1, 1), 1),
        # the default's weights with the L2 256-byte prefetch too (session 52; _buckets.W4A16_L2_PREFETCH: on)
        ("w4p1h256", _hinted(4, 2, 1, 2, 1, wcache="na256"), _hinted(4, 2, 1, 1, 1, wcache="na256"), 1),
        ("own8", _owned(8, 2, 1, 1), _owned(8, 1, 1, 1), 1),
        ("own8p2", _owned(8, 2, 1, 2), _owned(8, 1, 1, 4), 1),
        ("own8p2e", _owned(8, 2, 1, 2, early=True), _owned(8, 1, 1, 4, early=True), 1),
        ("own4p2", _owned(4, 2, 1, 2), _owned(4, 1, 1, 4), 1),
        ("own2p4", _owned(2, 2, 1, 4), _owned(2, 1, 1, 4), 1),
        ("w8n2p1", _hinted(8, 2, 1, 1, 1, wn=2), _hinted(8, 1, 1, 1, 1, wn=2), 1),
    ),
    2: (
        ("base", DecodeConfig(8, 2, 2, 1), DecodeConfig(8, 2, 2, 1), 1),
        ("w4p1", DecodeConfig(4, 2, 2, 1, 1), DecodeConfig(4, 2, 2, 2, 1), 1),  # FC2 unroll 1 spills on sm_120a
        ("w4p2/w2p2", DecodeConfig(4, 2, 2, 1, 2), DecodeConfig(2, 2, 2, 1, 2), 1),
        ("w8p1/w4t4", DecodeConfig(8, 2, 2, 1, 1), DecodeConfig(4, 4, 2, 1), 1),
        ("w4p1-s2", DecodeConfig(4, 2, 2, 1, 1), DecodeConfig(4, 2, 2, 2, 1), 2),
        ("w4p1-s4", DecodeConfig(4, 2, 2, 1, 1), DecodeConfig(4, 2, 2, 2, 1), 4),
        ("w4p1h", _hinted(4, 2, 2, 1, 1), _hinted(4, 2, 2, 2, 1), 1),
        # FC2 with 8 warps: 4- and 2-warp FC2 at 16 tokens spill 4 bytes on some pair (ptxas 13.0),
        # as 8-warp FC1 does on sm_120a (bf16 x mxfp4) and with prefetch 1 on sm_90a
        ("own4p2/own8p2", _owned(4, 2, 2, 2), _owned(8, 1, 2, 2), 1),
        ("own2p4/own8p2", _owned(2, 2, 2, 4), _owned(8, 1, 2, 2), 1),
        ("w8n2p1", _hinted(8, 2, 2, 1, 1, wn=2), _hinted(8, 1, 2, 1, 1, wn=2), 1),
    ),
}


def sweep_tiling(ntiles: int, label: str) -> tuple:
    """(FC1 config, FC2 config) of the sweep's entry `label` for 8 * ntiles-token groups."""
    return next((fc1, fc2) for found, fc1, fc2, _ in _SWEEP[ntiles] if found == label)


def sweep_pairs(ntiles: int) -> tuple:
    """[(label, FC1 config, FC2 config, span)] of the sweep for MMA groups of 8 * ntiles tokens (1
    or 2); span (column tiles per CTA, both GEMMs) > 1 on the "-s<span>" labels."""
    if ntiles not in _SWEEP:
        raise ValueError(f"ntiles must be one of {tuple(_SWEEP)}, got {ntiles!r}")
    return _SWEEP[ntiles]


def candidate_configs(max_rows: int) -> tuple[DecodeConfig, ...]:
    """What a benchmark or autotune sweeps. Only tilings ptxas (CUDA 13.0) builds without spills for
    every pair on sm_90a and sm_120a: tiles = 4 with 16-token groups or 8 warps (sm_120a, bf16 x
    mxfp4), 16 warps with unroll 2, and 16 warps with 16-token groups for MXFP8 activations (128
    registers at 512 threads) spill (test_experts_compile checks)."""
    if max_rows <= 8:
        shapes = ((8, 2, 2), (8, 2, 1), (4, 2, 2), (16, 2, 1), (4, 4, 1))
        return tuple(DecodeConfig(w, t, 1, u) for w, t, u in shapes)
    shapes = ((8, 2, 1), (8, 2, 2), (4, 2, 1), (4, 2, 2))
    return tuple(DecodeConfig(w, t, 2, u) for w, t, u in shapes)


def why_not(
    fc: int, a_fmt: str, b_fmt: str, activation: str | None, config: DecodeConfig, grid: str = "list", span: int = 1
) -> str | None:
    """None when the expert kernel implements this variant, else the reason (the validity predicate)."""
    if span not in SPANS or isinstance(span, bool):
        return f"span must be one of {SPANS} (column tiles per CTA), got {span!r}"
    if fc not in (1, 2):
        return f"fc must be 1 or 2, got {fc!r}"
    if (a_fmt, b_fmt) not in PAIRS:
        return f"A format {a_fmt} x weight format {b_fmt} is not one of {PAIRS}"
    if fc == 1 and activation not in ACTIVATIONS:
        return f"activation must be one of {ACTIVATIONS}, got {activation!r}"
    if grid not in GRIDS:
        return f"grid must be one of {GRIDS}, got {grid!r}"
    if not isinstance(config, DecodeConfig):
        return f"config must be a DecodeConfig, got {type(config).__name__}"
    if fc == 1 and activation in GATED and config.tiles < 2:
        return f"a gated FC1 needs tiles >= 2 (gate and up tiles), got {config}"
    if getattr(config, "pdl", "off") not in PDL_MODES:
        return f"pdl must be one of {PDL_MODES}, got {config.pdl!r}"
    if getattr(config, "early", False) and (config.prefetch == 0 or span != 1):
        return f"early weight stages need prefetch > 0 and span 1, got prefetch {config.prefetch}, span {span}"
    # gemm decode options beyond these the expert kernel does not implement (its own loads and K
    # loop): they must keep DecodeConfig's defaults
    for f in dataclasses.fields(config):
        if f.name not in IMPLEMENTED and getattr(config, f.name) != f.default:
            return (
                f"config.{f.name} = {getattr(config, f.name)!r} is not implemented by the expert kernels "
                f"(only the default {f.default!r})"
            )
    return KD.why_not("bfloat16", b_fmt, "float32", config)  # the tiling limits of the shared logic


def can_implement(
    fc: int, a_fmt: str, b_fmt: str, activation: str | None, config: DecodeConfig, grid: str = "list", span: int = 1
) -> bool:
    return why_not(fc, a_fmt, b_fmt, activation, config, grid, span) is None


def check_dims(hidden_size: int, intermediate_size: int) -> None:
    """ValueError unless both GEMMs' K (H for FC1, I for FC2) are multiples of K_ALIGN."""
    for name, k in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size)):
        if k <= 0 or k % K_ALIGN:
            raise ValueError(f"moe.fused_moe expert kernels: {name} must be a positive multiple of {K_ALIGN}, got {k}")


# ---- ops: gemm's PTX backend plus the activation's exp2 ------------------------------------------
@dsl_user_op
def _ex2(x, *, loc=None, ip=None):
    res = llvm.inline_asm(
        T.f32(),
        [Float32(x).ir_value(loc=loc, ip=ip)],
        "ex2.approx.f32 $0, $1;",
        "=f,f",
        has_side_effects=False,
        is_align_stack=False,
        loc=loc,
        ip=ip,
    )
    return Float32(res)


class ExpertOps(DeviceOps):
    """`ptx.DEVICE` plus `ex2` (2^x, max relative error 2^-22; the emulator computes it exactly) and
    gemm's PDL ops (`gdc_wait`, `gdc_launch_dependents`)."""

    ex2 = staticmethod(_ex2)
    gdc_wait = staticmethod(FusedOps.gdc_wait)
    gdc_launch_dependents = staticmethod(FusedOps.gdc_launch_dependents)


DEVICE = ExpertOps()


# ---- per-thread logic (backend-agnostic: runs on the device and in the CPU emulator) -------------
@dataclasses.dataclass
class ExpertRuntime(KD.Runtime):
    """KD.Runtime of one (CTA, group): a_base/sfa_base/c_base are the whole tensors' (row 0),
    b_base/sfb_base expert e's weights, s0/s1 = &w_alpha[e], &a_alpha[e], s2 = act_params; m = the
    group's rows, n = output columns (I or H), k = K; row0 = the group's first sorted row."""

    row0: object = 0


def fp8_words_in_fp4_order(ops, words):
    """Regroup each 8-value group's two E4M3 words (v0..v3, v4..v7) as (v0 v1 v4 v5, v2 v3 v6 v7):
    the fp8 dequantizer's pairs (bytes i, i + 2) then come out in the fp4 K order (v_i, v_i+4)."""
    out = []
    for j in range(0, len(words), 2):
        q0, q1 = words[j], words[j + 1]
        out += [ops.prmt(q0, q1, 0x5410), ops.prmt(q0, q1, 0x7632)]
    return out


class Activation:
    """FC1's activation on fp32 outputs (`self.activation`; swiglu_oai's parameters at rt.s2_base),
    shared by the decode expert kernel and the grouped one (`_kernel_grouped.py`)."""

    def _sigmoid(self, ops, x):
        return ops.div_rn(ops.f32(1.0), ops.f32(1.0) + ops.ex2(x * ops.f32(-_LOG2E)))

    def act(self, ops, rt, x, u):
        """The activation of FC1 output x (gate or single) and u (up), fp32."""
        if self.activation == "relu2":
            r = ops.fmax(x, ops.f32(0.0))
            return r * r
        if self.activation == "silu":
            return x * self._sigmoid(ops, x) * u
        true = ops.boolean(True)
        limit = ops.ldg_f32(rt.s2_base, true)
        alpha = ops.ldg_f32(rt.s2_base + 4, true)
        beta = ops.ldg_f32(rt.s2_base + 8, true)
        neg = ops.f32(0.0) - limit
        g = ops.f32(0.0) - ops.fmax(ops.f32(0.0) - x, neg)  # min(x, limit)
        u = ops.f32(0.0) - ops.fmax(ops.f32(0.0) - ops.fmax(u, neg), neg)  # clamp(u, -limit, limit)
        return g * self._sigmoid(ops, alpha * g) * (u + beta)


class ExpertLogic(Activation, KD.DecodeLogic):
    """DecodeLogic with the expert hooks (module docstring); fc 1 stores act(.) in bf16, fc 2 fp32."""

    what = "moe.fused_moe expert kernel"
    OPS = DEVICE  # `k_loop`'s ops: ExpertOps

    @staticmethod
    def why_not(a_fmt, b_fmt, out_dtype, config):  # the pairing is checked by the module's why_not
        return KD.why_not("bfloat16", b_fmt, out_dtype, config)

    def __init__(
        self,
        fc: int,
        a_fmt: str,
        b_fmt: str,
        activation: str | None,
        config: DecodeConfig,
        grid: str = "list",
        span: int = 1,
    ) -> None:
        reason = why_not(fc, a_fmt, b_fmt, activation, config, grid, span)
        if reason is not None:
            raise ValueError(f"{self.what}: {reason}")
        super().__init__(a_fmt, b_fmt, "bfloat16" if fc == 1 else "float32", config)
        self.fc, self.activation = fc, activation if fc == 1 else None
        self.listed = grid == "list"  # a Python bool: the kernel's variant is fixed at trace time
        self.gated = self.activation in GATED
        self.cols = self.bn // 2 if self.gated else self.bn  # output columns of the CTA (per column tile)
        self.cols_w = self.cols // config.wn  # of one warp group
        # warp-owned tiles: every warp runs the whole K of its rows, its accumulators are outputs
        self.direct = config.kwarps == 1
        # gemm's cache hints on the 16-byte value loads (None: the plain ld.global.nc, no hint)
        self.early = getattr(config, "early", False)  # ExpertConfig.early
        self.whint = None if config.wcache == "nc" else config.wcache
        self.ahint = None if config.acache == "nc" else config.acache
        self.span = span  # column tiles per CTA: CTA x owns tiles x * span .. x * span + span - 1
        self.pdl = getattr(config, "pdl", "off")  # ExpertConfig.pdl
        self.kvec = FORMAT[b_fmt].sf_vec

    def grid_n(self, n):
        return (n + self.cols * self.span - 1) // (self.cols * self.span)

    def tile_n0(self, bidx, j):
        """The first output column of the CTA's j-th column tile."""
        return (bidx * self.span + j) * self.cols

    def grid_experts(self, num_e, num_listed):
        """The grid's CTA rows: every expert (identity) or one per entry of the list."""
        return num_listed if self.listed else num_e

    def expert_rows(self, ops, slot, num_e, active, start):
        """(e, first row, end row) of CTA row `slot`: e = slot (identity), or e = active[slot] with no
        rows when the entry is >= num_e (read as expert num_e - 1, so every address stays in range).
        active, start: indexable (the kernel's tensors, the emulator's lists); the identity variant
        never reads active."""
        if not self.listed:
            return slot, start[slot], start[slot + 1]
        listed = active[slot]  # an expert id, or num_e: nothing for this CTA
        e = ops.imin(listed, num_e - 1)
        lo = start[e]
        return e, lo, lo + ops.imin(num_e - listed, ops.i32(1)) * (start[e + 1] - lo)

    def k_chunks(self, k):
        return (k + CHUNK - 1) // CHUNK

    def early_chunks(self, ops, slot, num_e, active, start, end, chunks):
        """`early`: the chunk count the CTA's first prefetch stages load with, 0 when the CTA has
        nothing to do (list: active[slot] is the sentinel E, known with the expert id; identity:
        the expert has no rows, known after start[e])."""
        if self.listed:
            live = ops.imin(num_e - active[slot], ops.i32(1))
        else:
            live = ops.imin(end - start, ops.i32(1))
        return chunks * live

    def warp_work(self, warp):
        """(first chunk, column offset) of `warp`: it runs chunks first, first + kstep, ... of the
        columns [n0 + offset, n0 + offset + cols_w) of the CTA's tile n0 (wn = 1: (warp, 0))."""
        if self.cfg.wn == 1:
            return warp, 0
        return warp % self.kstep, (warp // self.kstep) * self.cols_w

    def _scale(self, ops, fmt, base, row, k0, k, ok):
        """Span (row, k0)'s scale data in the 128x4 swizzled layout whose column count is padded to
        4 (`load_span_scale` assumes K % 128 == 0; K here is a multiple of 32 only)."""
        spec = FORMAT[fmt]
        if not spec.swizzled:
            return None
        shift = spec.sf_vec.bit_length() - 1
        cols4 = (((k >> shift) + 3) >> 2) << 2
        addr = base + AD.swizzled_offset(ops, row, k0 >> shift, cols4)
        return ops.ldg_u16(addr, ok) if fmt == "nvfp4" else ops.ldg_u8(addr, ok)

    def load_b(self, ops, rt, n0, tt, h, g, k0):
        half = self.cfg.tiles // 2
        if self.gated and tt >= half:  # up rows I + j pair with gate rows j
            j = n0 + 16 * (tt - half) + 8 * h + g
            row = rt.n + j
        else:
            j = n0 + 16 * tt + 8 * h + g
            row = j
        ok = (j < rt.n) & (k0 < rt.k)
        ldb = ops.i64(AD.row_bytes(self.b_fmt, rt.k))
        words = AD.load_span(ops, self.b_fmt, rt.b_base, ldb, row, k0, ok, self.whint)
        return words, self._scale(ops, self.b_fmt, rt.sfb_base, row, k0, rt.k, ok)

    def load_a(self, ops, rt, tok, k0, ok):
        row = rt.row0 + tok
        ok = ok & (k0 < rt.k)
        lda = ops.i64(AD.row_bytes(self.a_fmt, rt.k))
        words = AD.load_span(ops, self.a_fmt, rt.a_base, lda, row, k0, ok, self.ahint)
        if FORMAT[self.a_fmt].family == "fp8" and self.family == "fp4":
            words = fp8_words_in_fp4_order(ops, words)
        return words, self._scale(ops, self.a_fmt, rt.sfa_base, row, k0, rt.k, ok)

    def epilogue_scale(self, ops, rt):
        return self.expert_scale(ops, rt.s0_base, rt.s1_base)

    def expert_scale(self, ops, w_alpha_addr, a_alpha_addr):
        """w_alpha[e] * a_alpha[e] * 2^(C_a + C_b): the CTA loads it before its first group, so the
        two loads overlap start[e]'s instead of adding a round trip after the reduction."""
        true = ops.boolean(True)
        scale = ops.ldg_f32(w_alpha_addr, true) * ops.ldg_f32(a_alpha_addr, true)
        return scale * ops.f32(float(2.0**self.exp))

    def finish(self, ops, rt, red_base, tid, n0, scale):
        """Sum the warps' partials of outputs (tok, n0 + c), times `scale` (`epilogue_scale`, loaded
        once per CTA before its K loops), activation, store row row0 + tok."""
        threads = self.cfg.warps * 32
        total = self.ntok * self.cols
        log_cols = self.cols.bit_length() - 1
        for r in range((total + threads - 1) // threads):
            o = ops.imin(tid + r * threads, total - 1)  # o >= total only when threads do not divide it
            live = (tid + r * threads) < total
            tok, c = o >> log_cols, o & (self.cols - 1)
            x, u = ops.f32_zero(), ops.f32_zero()
            if self.cfg.wn == 1:  # every warp's partials of column c
                cw, warps = c, list(range(self.cfg.warps))
            else:  # the kstep warps of c's warp group (warps group * kstep ...), at its local column
                group = c >> (self.cols_w.bit_length() - 1)
                cw, warps = c & (self.cols_w - 1), [group * self.kstep + i for i in range(self.kstep)]
            for w in warps:
                x = x + ops.lds_f32(self._red_addr(red_base, w, tok, cw))
                if self.gated:
                    u = u + ops.lds_f32(self._red_addr(red_base, w, tok, cw + self.cols_w))
            x = x * scale
            if self.fc == 1:
                x = self.act(ops, rt, x, u * scale)
            n = n0 + c
            self.store(ops, rt, rt.row0 + tok, n, x, live & (tok < rt.m) & (n < rt.n))

    def store_direct(self, ops, rt, lane, nw, acc, scale):
        """Warp-owned tiles (`direct`): the warp's accumulators are its outputs. Lane (g, t) holds
        rows g, g + 8 of each 16-row tile for tokens 2t, 2t + 1 of each token tile (the m16n8
        layout), and a gated FC1's up tile tt + tiles / 2 holds the same (row, token) positions as
        gate tile tt: scale, activation and store without shared memory or a barrier."""
        g, t = lane >> 2, lane & 3
        nt_count = self.cfg.ntiles
        half = self.cfg.tiles // 2
        for tt in range(half if self.gated else self.cfg.tiles):
            for nt in range(nt_count):
                for i in range(4):
                    x = acc[(tt * nt_count + nt) * 4 + i] * scale
                    if self.fc == 1:
                        u = acc[((tt + half) * nt_count + nt) * 4 + i] * scale if self.gated else ops.f32_zero()
                        x = self.act(ops, rt, x, u)
                    tok = 8 * nt + 2 * t + (i & 1)
                    n = nw + 16 * tt + 8 * (i >> 1) + g
                    self.store(ops, rt, rt.row0 + tok, n, x, (tok < rt.m) & (n < rt.n))


# ---- the CuTe kernel ----------------------------------------------------------------------------
class _ExpertGemm:
    def __init__(self, logic: ExpertLogic) -> None:
        self.logic = logic
        self.threads = logic.cfg.warps * 32

    @cute.jit
    def _launch(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mActive, stream):
        grid_n = self.logic.grid_n(mC.shape[1])
        grid_e = self.logic.grid_experts(mB.shape[0], mActive.shape[0])
        self.kernel(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mActive).launch(
            grid=[grid_n, grid_e, 1], block=[self.threads, 1, 1], stream=stream, use_pdl=self.logic.pdl != "off"
        )

    @cute.kernel
    def kernel(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mActive):
        # Inside the dynamic loops only DSL values, `self` and module globals: the DSL would try to
        # carry any other local Python object through the loop.
        tid, _, _ = cute.arch.thread_idx()
        bidx, slot, _ = cute.arch.block_idx()
        warp, lane = tid >> 5, tid & 31
        k = mB.shape[2] * 2  # FP4 weights: two values per byte
        if cutlass.const_expr(self.logic.pdl != "off"):  # nothing of the kernels before is read above
            DEVICE.gdc_wait()
            DEVICE.gdc_launch_dependents()
        e, start, end = self.logic.expert_rows(DEVICE, slot, mB.shape[0], mActive, mStart)
        b_base = mB.iterator.toint() + Int64(e) * Int64(mB.shape[1]) * Int64(mB.shape[2])
        sfb_base = mSFB.iterator.toint() + Int64(e) * Int64(mSFB.shape[1])
        wa_addr = mWAlpha.iterator.toint() + Int64(e) * 4
        aa_addr = mAAlpha.iterator.toint() + Int64(e) * 4
        scale = self.logic.expert_scale(DEVICE, wa_addr, aa_addr)
        red_base = Int64(0)  # warp-owned tiles (`direct`) reduce nothing
        if cutlass.const_expr(not self.logic.direct):
            smem = cutlass.memory.SmemAllocator()
            red = smem.allocate_tensor(Float32, cute.make_layout(self.logic.red_floats), 16)
            red_base = red.iterator.toint()
        chunks = self.logic.k_chunks(k)
        first, wcol = self.logic.warp_work(warp)  # (warp, 0) unless warp groups split N (wn > 1)
        groups = (end - start + self.logic.ntok - 1) // self.logic.ntok
        if cutlass.const_expr(self.logic.early):  # the first group's weight stages, before start[e] is back
            nw0 = self.logic.tile_n0(bidx, 0)
            if cutlass.const_expr(self.logic.cfg.wn > 1):
                nw0 = nw0 + wcol
            rt0 = ExpertRuntime(
                mA.iterator.toint(),
                mSFA.iterator.toint(),
                b_base,
                sfb_base,
                mC.iterator.toint(),
                wa_addr,
                aa_addr,
                mAct.iterator.toint(),
                Int32(0),
                mC.shape[1],
                k,
                Float32(1.0),
                start,
            )
            live = self.logic.early_chunks(DEVICE, slot, mB.shape[0], mActive, start, end, chunks)
            early_stages = self.logic.prefetch_prologue(DEVICE, rt0, lane, nw0, first, live)
        for grp in cutlass.range(groups):
            row0 = start + grp * self.logic.ntok
            rt = ExpertRuntime(
                mA.iterator.toint(),
                mSFA.iterator.toint(),
                b_base,
                sfb_base,
                mC.iterator.toint(),
                wa_addr,
                aa_addr,
                mAct.iterator.toint(),
                DEVICE.imin(end - row0, Int32(self.logic.ntok)),
                mC.shape[1],
                k,
                Float32(1.0),
                row0,
            )
            for j in cutlass.range(self.logic.span, unroll=1):  # the CTA's column tiles (past N: no stores)
                n0 = self.logic.tile_n0(bidx, j)
                nw = n0  # the first column of this warp's group
                if cutlass.const_expr(self.logic.cfg.wn > 1):
                    nw = n0 + wcol
                acc = self.logic.zero_acc(DEVICE)
                if cutlass.const_expr(self.logic.early):  # (prefetch > 0) this group's stages were issued ahead
                    stages = early_stages
                    for c in cutlass.range(first, chunks, self.logic.kstep, unroll=self.logic.cfg.unroll):
                        stages, acc = self.logic.pipelined_chunk(DEVICE, rt, lane, nw, c, chunks, stages, acc)
                    # the next group's first stages (none after the last)
                    more = DEVICE.imin(groups - 1 - grp, Int32(1))
                    early_stages = self.logic.prefetch_prologue(DEVICE, rt, lane, nw, first, chunks * more)
                else:  # gemm decode's K loop: plain chunks (prefetch 0) or the prefetch pipeline
                    acc = self.logic.k_loop(rt, lane, nw, first, self.logic.kstep, chunks, acc)
                if cutlass.const_expr(self.logic.direct):
                    self.logic.store_direct(DEVICE, rt, lane, nw, acc, scale)
                else:
                    self.logic.reduce_stage(DEVICE, red_base, warp, lane, acc)
                    DEVICE.barrier()
                    self.logic.finish(DEVICE, rt, red_base, tid, n0, scale)
                    DEVICE.barrier()  # the next tile's or group's partial sums reuse the reduction buffer


class Fc1Gemm(_ExpertGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mActive, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mActive, stream)


class Fc2Gemm(_ExpertGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mActive, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAAlpha, mActive, stream)  # no act params


def fake_args(a_fmt: str, out_dtype: str):
    """Fake tensors of the launch contract (sizes symbolic): A [R, KA] (bf16, or uint8 bytes), SFA
    uint8 [SA], B uint8 [E, N, K/2], SFB uint8 [E, SB], C [R, N'] (bf16 FC1, fp32 FC2), expert_start
    int32 [E + 1], w_alpha and a_alpha fp32 [E]; active int32 [G] goes last (after FC1's act_params)."""
    r, e = cute.sym_int(), cute.sym_int()
    a_dt = cutlass.BFloat16 if a_fmt == "bfloat16" else cutlass.Uint8
    a = make_fake_compact_tensor(a_dt, (r, cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    sfa = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int(),), assumed_align=2)
    b = make_fake_compact_tensor(
        cutlass.Uint8, (e, cute.sym_int(), cute.sym_int()), stride_order=(2, 1, 0), assumed_align=16
    )
    sfb = make_fake_compact_tensor(cutlass.Uint8, (e, cute.sym_int()), stride_order=(1, 0), assumed_align=2)
    c_dt = cutlass.BFloat16 if out_dtype == "bfloat16" else cutlass.Float32
    c = make_fake_compact_tensor(c_dt, (r, cute.sym_int()), stride_order=(1, 0), assumed_align=16)
    start = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=4)
    w_alpha = make_fake_compact_tensor(cutlass.Float32, (e,), assumed_align=4)
    a_alpha = make_fake_compact_tensor(cutlass.Float32, (e,), assumed_align=4)
    return a, sfa, b, sfb, c, start, w_alpha, a_alpha


def fake_active():
    return make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=4)


@kernel("moe.fused_moe.fc1", sources=_SOURCES)
def compile_fc1(
    a_fmt: str, b_fmt: str, activation: str, config: DecodeConfig, arch: str, grid: str = "list", span: int = 1
):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params, active)`
    on torch's current stream; act_params fp32 [3] = (swiglu_limit, swiglu_alpha, swiglu_beta);
    active int32 [G]: the grid's experts (grid "list"; "identity" launches E rows and never reads
    it; module docstring); span: column tiles per CTA (module docstring)."""
    logic = ExpertLogic(1, a_fmt, b_fmt, activation, config, grid, span)
    act = make_fake_compact_tensor(cutlass.Float32, (3,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(Fc1Gemm(logic), *fake_args(a_fmt, "bfloat16"), act, fake_active(), stream, arch=arch)


@kernel("moe.fused_moe.fc2", sources=_SOURCES)
def compile_fc2(a_fmt: str, b_fmt: str, config: DecodeConfig, arch: str, grid: str = "list", span: int = 1):
    """tvm-ffi launcher `fn(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, active)` on
    torch's current stream; C2 fp32 [R_cap, H]; active, grid and span as compile_fc1's."""
    logic = ExpertLogic(2, a_fmt, b_fmt, None, config, grid, span)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(Fc2Gemm(logic), *fake_args(a_fmt, "float32"), fake_active(), stream, arch=arch)
