"""moe.fused_moe's live-T buckets and the expert GEMM variants a plan compiles (pure Python: no
kernel module is imported until a CUDA plan asks for one).

A plan's `MoeConfig.experts` is a tuple of `ExpertBucket`, ascending in max_tokens; a binding of T
launches the first bucket that holds T (`expert_bucket`) in the grid variant `expert_grid` picks.
The heuristic (`FusedMoePlan.heuristic`, `heuristic_buckets`) starts from
`_kernel_experts.default_buckets`, moves T >= `tiled_from(caps)` to one grouped-kernel bucket
(`with_tiled_bucket`) and, for the nvfp4 recipe, gives buckets the dequantized operands where the
flags say (`TILED_DEQUANT`, `DECODE_DEQUANT_FROM`); for the w4a16 recipe, the weights' L2 prefetch where
`W4A16_L2_PREFETCH` says; for NVFP4 weights, the FP4 placement by a multiply where `DECODE_FP4_MUL` says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Operand formats of each recipe: (FC1 A, FC2 A; None = FC1's bf16 output as is).
OPERANDS = {
    "w4a16": ("bfloat16", None),
    "nvfp4": ("nvfp4", "nvfp4"),
    "w4a8_mx": ("mxfp8", "mxfp8"),
    "w4a8_nvfp4": ("mxfp8", "mxfp8"),
}
# The nvfp4 recipe's operands in a `dequant` bucket: NVFP4-quantized exactly as above, stored as
# bf16 deq values (e2m1 x e4m3 block scale, exact in bf16; 1 / gs stays in the epilogue's alpha).
# The routing/requantize kernels write this format; the GEMMs read it as plain bfloat16.
NVFP4_DEQ = "nvfp4_deq"
# Whether the heuristic's grouped bucket of an nvfp4 plan takes the dequantized bf16 operands
# (`ExpertBucket.dequant`). Off until timed on the H200 (bench_moe --tiled-dequant).
TILED_DEQUANT = False
# The live T from which the heuristic's decode buckets of an nvfp4 plan take them too (None: never):
# the decode expert kernels then run their W4A16 (bf16 x FP4) path; the gather and requantize still
# quantize per route. H200 2026-12-02 03:59 (session 17, bench_moe --decode-dequant, graph timer, µs
# per layer, packed -> dequantized): T = 16 117.8 -> 111.3 / 588.2 -> 560.5 / 416.2 -> 395.4 (E = 128 /
# 256 / 512), T = 64 181.4 -> 169.7 / 1257 -> 1211 / 1070 -> 1014; T = 4 51.41 -> 51.76 / 189.1 ->
# 180.7 / 135.2 -> 134.3; but T = 1 25.74 -> 33.56 / 64.81 -> 72.01 / 55.72 -> 54.15. Session 17: from
# T = 9: one 8-token group then no longer holds every expert's rows. Up to DECODE_DEQUANT_ROWS rows an
# expert (T * k / E) only: the dequant gather's encode (`_routing._nvfp4_deq_tile`, two divisions a
# value) costs more per row than the packed one, and at T = 256 E = 128 (16 rows an expert) the layer
# took 343.3 µs against the packed 306.9 (04:20, a99d880); at 8 rows (T = 128 E = 128 / T = 256
# E = 256) 240.8 / 1771 against 241.3 / 1853, at 2.5-5 rows 1314 / 1557 against 1401 / 1648.
# Session 20 (H200 2026-12-02 13:40, `bench_moe --decode-dequant --tokens 2 3 4 8`, graph timer, packed
# -> dequantized, µs): E = 128 T = 2 31.27 -> 31.16, T = 3 40.36 -> 41.72, T = 4 46.95 -> 47.25, T = 8
# 66.70 -> 65.89; E = 256 106.2 -> 103.4, 149.4 -> 142.7, 186.6 -> 176.1, 329.8 -> 317.6; E = 512 74.91 ->
# 73.06, 103.1 -> 100.3, 128.6 -> 127.3, 229.2 -> 219.4 (and session 19's "search" encode at T = 1: 13% /
# 5% slower at E = 128 / 256, 2.7% faster at E = 512). Hence from T = 2: 1-6% faster at E >= 256, E = 128
# within -1.2 / +3.4%.
DECODE_DEQUANT_FROM = 2
DECODE_DEQUANT_ROWS = 8
# Whether the nvfp4 recipe's T = 1 bucket takes the dequantized operands too where the bf16-A expert kernels' higher
# occupancy saves waves (`t1_dequant`; sm_90a, or a shape-only query). At T = 1 the k routes' FC1 and FC2 grids are
# k * I / cols1 and k * H / cols2 CTAs of 4 warps; ptxas 13.0 (sm_90a) gives the 8-token tiling ("w4p1h") 120 / 112
# registers a lane with packed NVFP4 A (4 / 4 CTAs an SM) and 80 / 96 with bf16 A (6 / 5): T1_CTAS_PER_SM. E = 512
# (k = 10, H 4096, I 1024): FC1 640 CTAs, 2 waves packed / 1 bf16, FC2 1280, 3 / 2; E = 256 (1024 / 1024 CTAs) and
# E = 128 (384 / 512) take as many waves either way, so there the dequant gather's extra ~1.7 µs is pure cost.
# Measured first, then this rule (H100 2026-12-07, session 64, `bench_moe --decode-dequant --tokens 1`, graph timer,
# packed -> dequantized, µs a layer, two runs): E = 512 49.43 -> 44.29 / 49.51 -> 43.67 (FC1 step 25.5 -> 20.6, FC2
# 16.0 -> 14.5, route + gather 3.9 -> 5.6), E = 256 59.74 -> 65.08 / 58.48 -> 64.88, E = 128 21.30 -> 23.37.
T1_DEQUANT = True
T1_CTAS_PER_SM = {"packed": (4, 4), "bf16": (6, 5)}  # (FC1, FC2) four-warp CTAs an SM, sm_90a, ptxas 13.0
# Whether the w4a16 recipe's 8-token decode buckets load expert weights with an L2 256-byte prefetch too (the sweep's
# "w4p1h256" for "w4p1h": gemm's W4A16 decode loads). On since session 54. H100 2026-12-06 11:22 / 11:35 (session 53,
# `scripts/jobs/s52_a.sh moe` twice, graph timer, µs a layer, w4p1h -> w4p1h256): E = 128 T = 1 18.62 -> 18.65 /
# 18.62 -> 18.70, T = 4 39.07 -> 37.91 / 38.97 -> 37.91, T = 16 107.47 -> 106.32 / 107.36 -> 106.03; E = 256 T = 1
# 56.90 -> 57.08 / 56.82 -> 57.00, T = 4 180.99 -> 174.62 / 181.11 -> 175.59, T = 16 563.5 -> 548.9 / 565.7 -> 549.3;
# E = 512 T = 1 38.60 -> 36.72 / 38.51 -> 36.66, T = 4 124.5 -> 119.3 / 124.3 -> 119.4, T = 16 403.1 -> 393.7 / 412.5
# -> 398.8: 7 of 9 cells -1.1 to -4.9% in both runs, E = 128 / 256 T = 1 even (+0.1 to +0.4%). The nvfp4 recipe
# was mixed (T = 4 +0.7 / +0.9%) and keeps "w4p1h". On with the moe gpu tier run on it (docs/validation.md, session 54).
W4A16_L2_PREFETCH = True
# Whether the heuristic's decode buckets place the FP4 weight codes by a multiply (`DecodeConfig.fp4 = "mul"`, gemm's
# decode rules at M <= 16: 13 instructions per 8 values against 16, the same bits) for NVFP4 weights under the w4a16
# and nvfp4 recipes (FP4_MUL_MODES), from live T = FP4_MUL_FROM at hidden sizes >= FP4_MUL_MIN_HIDDEN (`fp4_mul_range`).
# Why: from T = 16 the expert kernels take about the same time on an H100 as on the H200 (session 63): bound by issue,
# not DRAM. Not for MXFP4 weights: their FC2 spills 36 bytes on sm_120a with it (ptxas 13.0). Session 64 (H100, two
# runs, docs/performance.md): the multiply in every decode bucket gained 2.6-4.3% at E = 256 / 512 (H 4096) T = 16 /
# 64 in every cell of both recipes, and lost up to 3.5% at E = 128 (H 2048) T = 16 / 64 and at some T <= 4 cells (FC1
# bf16 x nvfp4 takes 96 registers with it against 80): that rule failed; this range is its second rule, which passed
# (T >= 16 -3.9 / -4.0%, every cell -3.2 to -5.1%; docs/predictions/moe.md, session 64). On since session 65, with the
# moe gpu tier run on it (H100, 306 passed; docs/validation.md).
DECODE_FP4_MUL = True
FP4_MUL_MODES = ("w4a16", "nvfp4")
FP4_MUL_FROM = 16
FP4_MUL_MIN_HIDDEN = 4096


@dataclass(frozen=True)
class ExpertBucket:
    """The expert GEMMs' tilings (gemm's `DecodeConfig`, one per GEMM) for live T <= max_tokens.
    A plan holds one or more, ascending in max_tokens; a binding of T takes the first that holds
    T (`expert_bucket`), so e.g. T <= 8 runs 8-token MMA groups and larger T 16-token ones without
    a compile per T (every bucket's kernels are compiled at prepare time)."""

    max_tokens: int
    fc1: object
    fc2: object
    fc1_span: int = 1  # column tiles per CTA (`_kernel_experts` "Fewer, fatter CTAs"); 1: one each
    fc2_span: int = 1
    # nvfp4 recipe only: the gather and the requantize write deq(quant(x)) as bf16 (`NVFP4_DEQ`; the
    # per-route NVFP4 quantization unchanged) and the bucket's expert kernels (grouped or decode) run
    # their bf16-A (w4a16) path with alpha = w_alpha * (1 / gs): the same products, so the same result
    # up to fp32 accumulation order (none: both paths feed the MMA the same values times a power of 2).
    dequant: bool = False

    @property
    def tiled(self) -> bool:
        """Whether both GEMMs are `_kernel_grouped.GroupedConfig`s: the grouped large-T kernels
        (gemm's tiled GEMM per expert tile, grid "tiled") instead of the decode expert kernels."""
        return _is_tiled(self.fc1) and _is_tiled(self.fc2)


def gather_formats(quant_mode: str, bucket) -> tuple[str, str | None]:
    """(FC1 operand, FC2 operand) as the routing gather and the requantize write them for a binding
    in `bucket` (None: FC1's bf16 output as is): the recipe's, or NVFP4_DEQ twice in a dequant bucket."""
    return (NVFP4_DEQ, NVFP4_DEQ) if bucket is not None and bucket.dequant else OPERANDS[quant_mode]


def gemm_formats(quant_mode: str, bucket) -> tuple[str, str]:
    """(FC1 A, FC2 A) formats the expert GEMMs of `bucket` read (a dequant bucket's: bfloat16)."""
    a1, a2 = gather_formats(quant_mode, bucket)
    return tuple("bfloat16" if f in (None, NVFP4_DEQ) else f for f in (a1, a2))


def has_dequant(buckets) -> bool:
    """Whether some bucket takes the dequantized operands (the plan then compiles their routing and
    requantize kernels and holds their workspace)."""
    return any(b.dequant for b in buckets or ())


def dequant_tokens(caps, config) -> int:
    """The largest live T a bucket with the dequantized operands serves (0: none), which sizes their
    workspace (a1_deq / a2_deq rows: this T times k): of a prepared config's buckets, or for config
    None (an unprepared plan's memory requirements) of the buckets the heuristic would give."""
    if config is None and caps.quant_mode != "nvfp4":
        return 0  # no dequant bucket, and no kernel module imported to find out
    buckets = (config.experts or ()) if config is not None else heuristic_buckets(caps)
    found, lo = 0, 1
    for i, b in enumerate(buckets):
        hi = caps.max_tokens if i == len(buckets) - 1 else min(b.max_tokens, caps.max_tokens)
        if b.dequant and lo <= hi:
            found = hi
        lo = max(lo, hi + 1)
    return found


def decode_dequant_last(caps) -> int:
    """The largest live T whose decode bucket the heuristic gives the dequantized operands: the T of
    DECODE_DEQUANT_ROWS rows an expert (at least DECODE_DEQUANT_FROM)."""
    wp = caps.weight_plan
    return max(DECODE_DEQUANT_FROM or 1, DECODE_DEQUANT_ROWS * wp.num_experts // caps.num_topk)


def t1_dequant(caps, bucket, arch: str | None = None) -> bool:
    """Whether the heuristic gives the nvfp4 recipe's T = 1 bucket (`bucket`, a decode one) the dequantized operands
    (`T1_DEQUANT`): its FC1 and FC2 grids at T = 1 take fewer waves of WAVE_SMS SMs at the bf16-A kernels' occupancy
    than at the packed ones'. sm_90a's registers (and gemm's wave count, `decode_rules.WAVE_SMS`): arch sm_90a or None
    (a shape-only query) only."""
    from ...gemm._shared.decode_rules import ONE_WAVE_ARCHS, WAVE_SMS

    if not T1_DEQUANT or caps.quant_mode != "nvfp4" or arch not in ONE_WAVE_ARCHS or bucket.tiled:
        return False
    wp, k = caps.weight_plan, caps.num_topk
    cols1 = (8 if wp.gated else 16) * bucket.fc1.tiles * bucket.fc1_span  # a gated FC1: gate and up tiles
    ctas = (k * -(-wp.intermediate_size // cols1), k * -(-wp.hidden_size // (16 * bucket.fc2.tiles * bucket.fc2_span)))

    def waves(per_sm):
        return sum(-(-n // (c * WAVE_SMS)) for n, c in zip(ctas, per_sm))

    return waves(T1_CTAS_PER_SM["packed"]) > waves(T1_CTAS_PER_SM["bf16"])


def heuristic_buckets(caps, decode: tuple | None = None, rows: int | None = None, arch: str | None = None) -> tuple:
    """The heuristic's buckets from the decode ones (None: `_kernel_experts.default_buckets` for the
    caps' max_tokens, E and k): the grouped
    bucket moved in (`with_tiled_bucket` from `rows` rows an expert, None: TILED_ROWS; it applies
    TILED_DEQUANT), then for the nvfp4 recipe the decode buckets' T >= DECODE_DEQUANT_FROM (from T = 1 where
    `t1_dequant` says, for `arch`) with the dequantized operands up to `decode_dequant_last(caps)`."""
    if decode is None:
        decode = _experts_module().default_buckets(caps.max_tokens, caps.weight_plan.num_experts, caps.num_topk)
    found = with_tiled_bucket(caps, decode, rows)
    if DECODE_DEQUANT_FROM is not None and caps.quant_mode == "nvfp4":
        first = 1 if t1_dequant(caps, found[0], arch) else DECODE_DEQUANT_FROM
        found = with_decode_dequant(found, first, decode_dequant_last(caps))
    if W4A16_L2_PREFETCH and caps.quant_mode == "w4a16":
        found = with_l2_prefetch(found)
    if DECODE_FP4_MUL and fp4_mul_applies(caps):
        found = with_fp4_mul(found, fp4_mul_range(caps))
    return found


def fp4_mul_applies(caps) -> bool:
    """Whether `DECODE_FP4_MUL` concerns a plan of these caps (NVFP4 weights, a recipe of FP4_MUL_MODES)."""
    return caps.weight_plan.weight_format == "nvfp4" and caps.quant_mode in FP4_MUL_MODES


def fp4_mul_range(caps) -> tuple[int, int | None]:
    """The live T range whose decode buckets `DECODE_FP4_MUL` moves: from FP4_MUL_FROM at hidden sizes of at least
    FP4_MUL_MIN_HIDDEN (no end), else none (an empty range)."""
    if caps.weight_plan.hidden_size >= FP4_MUL_MIN_HIDDEN:
        return FP4_MUL_FROM, None
    return 1, 0


def with_fp4_mul(buckets: tuple, t_range: tuple[int, int | None] = (1, None)) -> tuple:
    """buckets with the decode (not grouped) ones' FC1 and FC2 placing FP4 codes by a multiply for live T in t_range
    (`DECODE_FP4_MUL`; bench_moe --fp4-mul: every T): the same tilings and bits."""

    def mul(b):
        return replace(b, fc1=replace(b.fc1, fp4="mul"), fc2=replace(b.fc2, fp4="mul"))

    return _with_range(buckets, *t_range, mul)


def with_l2_prefetch(buckets: tuple) -> tuple:
    """buckets with every decode bucket on the sweep's "w4p1h" tilings moved to "w4p1h256": the same tilings, the
    weights loaded with an L2 256-byte prefetch too (`W4A16_L2_PREFETCH`)."""
    ex = _experts_module()
    old, new = ex.sweep_tiling(1, "w4p1h"), ex.sweep_tiling(1, "w4p1h256")
    return tuple(replace(b, fc1=new[0], fc2=new[1]) if not b.tiled and (b.fc1, b.fc2) == old else b for b in buckets)


def with_decode_dequant(buckets: tuple, first: int = 1, last: int | None = None) -> tuple:
    """buckets with the decode (not grouped) ones taking the dequantized operands for live T in
    [first, last] (None: no end): a bucket that holds T on both sides of a bound is cut there (the
    same tilings, packed outside)."""
    return _with_range(buckets, first, last, lambda b: replace(b, dequant=True))


def _with_range(buckets: tuple, first: int, last: int | None, change) -> tuple:
    """buckets with `change` applied to the decode (not grouped) ones for live T in [first, last] (None: no end): a
    bucket that holds T on both sides of a bound is cut there (unchanged outside)."""
    found, lo = [], 1
    for b in buckets:
        hi = b.max_tokens
        if b.tiled or hi < first or (last is not None and lo > last):
            found.append(b)
        else:
            if lo < first:
                found.append(replace(b, max_tokens=first - 1))
            if last is not None and hi > last:
                found.append(replace(change(b), max_tokens=last))
                found.append(b)
            else:
                found.append(change(b))
        lo = hi + 1
    return tuple(found)


def _is_tiled(config) -> bool:
    return type(config).__name__ == "GroupedConfig"


# GROUPED_W4A8 (session 66): the w4a8 recipes (MXFP8 activations x FP4 weights) take the grouped kernels at large T
# too (`_kernel_grouped.GroupedLogic.mixed`: A's E4M3 words regrouped into the FP4 K order, as the decode expert
# kernels do; the CPU emulator matches the oracle, test_grouped_emulated.py). Off until the moe gpu tier runs with
# it on (test_fused_moe_gpu.py::test_w4a8_grouped_bucket) and a T = 4096 row shows it faster than the decode kernels.
GROUPED_W4A8 = False
W4A8_MODES = ("w4a8_mx", "w4a8_nvfp4")
# GROUPED_W4A8_FP8 (session 66): with GROUPED_W4A8, w4a8_mx's grouped bucket on e4m3 MMA (the issue's "w4a8_mx: FP8
# MMA"; `_kernel_grouped.fp8_config`: A raw E4M3, the MXFP4 weights stored as E4M3, the UE8M0 factors on each
# k-step's partial sums; emulator cases in test_grouped_emulated.py). Off until its gpu test and the A/B
# (scripts/jobs/s66_b.txt m66_w4a8_fp8) say so.
GROUPED_W4A8_FP8 = False


# mean rows an expert (T * k / E) from which the heuristic runs the grouped kernels. 32 since the
# H200 runs of 2026-11-30 19:15 / 20:16 (docs/performance.md "Sweeps of session 8"): the grouped
# kernels ran 1.47x (E 128, T 512), 1.34x (E 256, T 1024) and 1.59x (E 512, T 2048: 40 rows) faster
# than the decode kernels from 32 rows, tied at 16 (E 128, T 256) and lost at 8-16 (E 256).
TILED_ROWS = 32


def tiled_from(caps, rows: int | None = None) -> int | None:
    """The smallest live T the heuristic gives the grouped (tiled) expert kernels, or None when they
    do not implement this plan (pair, activation, K not a multiple of 128; the w4a8 recipes while GROUPED_W4A8 is
    off) or no T <= max_tokens reaches `rows` (None: TILED_ROWS) rows an expert."""
    wp = caps.weight_plan
    if caps.quant_mode in W4A8_MODES and not GROUPED_W4A8:
        return None
    a1, a2 = OPERANDS[caps.quant_mode]
    g = _grouped_module()
    cfg1, cfg2 = g.default_config(1), g.default_config(2)
    e = wp.num_experts
    if g.why_not(1, a1, wp.weight_format, wp.activation, cfg1, wp.hidden_size, e) or g.why_not(
        2, a2 or "bfloat16", wp.weight_format, None, cfg2, wp.intermediate_size, e
    ):
        return None
    rows = TILED_ROWS if rows is None else rows
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be an int >= 1 (mean rows an expert), got {rows!r}")
    t = -(-rows * wp.num_experts // caps.num_topk)
    return t if t <= caps.max_tokens else None


def with_tiled_bucket(caps, buckets: tuple, rows: int | None = None) -> tuple:
    """buckets, with live T >= tiled_from(caps, rows) moved to one grouped-kernel bucket (gemm's tiled
    kernel over windows of the sorted rows: `_kernel_grouped.py`) when the plan allows it (rows:
    None = TILED_ROWS; bench_moe --tiled-rows sweeps it)."""
    t = tiled_from(caps, rows)
    if t is None:
        return buckets
    g = _grouped_module()
    kept = []
    for b in buckets:
        if b.max_tokens < t:
            kept.append(b)
            continue
        if t > 1 and (not kept or kept[-1].max_tokens < t - 1):  # the bucket that held t ends at t - 1
            kept.append(replace(b, max_tokens=t - 1))
        break
    dequant = TILED_DEQUANT and caps.quant_mode == "nvfp4"
    if GROUPED_W4A8_FP8 and (OPERANDS[caps.quant_mode][0], caps.weight_plan.weight_format) == g.FP8_MMA_PAIR:
        return (*kept, ExpertBucket(caps.max_tokens, g.fp8_config(), g.fp8_config()))
    return (*kept, ExpertBucket(caps.max_tokens, g.default_config(1), g.default_config(2), dequant=dequant))


def expert_bucket(buckets, t_count: int) -> int:
    """The index of the bucket a binding of T = t_count launches: the first whose max_tokens >= T
    (the plan's last bucket covers its max_tokens; `check_buckets` checks that)."""
    for i, b in enumerate(buckets):
        if t_count <= b.max_tokens:
            return i
    return len(buckets) - 1


def expert_variants(compact: bool, num_experts: int, num_topk: int, max_tokens: int, buckets) -> tuple:
    """The (grid, bucket index) pairs some live T in [1, max_tokens] binds (`expert_grid`,
    `expert_bucket`): what a plan compiles and primes, grids in `expert_grids` order."""
    found = []
    for grid in expert_grids(compact, num_experts, num_topk, max_tokens):
        lo = 1
        for i, b in enumerate(buckets):
            hi = min(b.max_tokens, max_tokens) if i < len(buckets) - 1 else max_tokens
            if lo <= hi and any(expert_grid(compact, num_experts, num_topk, t) == grid for t in (lo, hi)):
                found.append(("tiled" if b.tiled else grid, i))
            lo = max(lo, hi + 1)
    return tuple(dict.fromkeys(found))  # a tiled bucket is one variant whatever the decode grid


def expert_grids(compact: bool, num_experts: int, num_topk: int, max_tokens: int) -> tuple[str, ...]:
    """The expert GEMM variants (`_kernel_experts.GRIDS`) a plan can launch, so it compiles no other:
    "identity" (grid = every expert, no list read) whenever some live T has T * k >= E or the compact
    grid is off; "list" when the compact grid is on and T = 1 gives k < E."""
    grids = []
    if not compact or max_tokens * num_topk >= num_experts:
        grids.append("identity")
    if compact and num_topk < num_experts:
        grids.append("list")
    return tuple(grids)


def expert_grid(compact: bool, num_experts: int, num_topk: int, t_count: int) -> str:
    """The variant a binding of T = t_count launches: the list only while it is shorter than E (the
    compact grid with T * k < E); otherwise every expert, without the dependent `active[y]` load."""
    return "list" if compact and t_count * num_topk < num_experts else "identity"


def _experts_module():
    """`_kernel_experts` (imports cutlass: only when a CUDA plan is prepared)."""
    from . import _kernel_experts

    return _kernel_experts


def _grouped_module():
    """`_kernel_grouped` (imports cutlass: only when a CUDA plan is prepared)."""
    from . import _kernel_grouped

    return _kernel_grouped


def check_buckets(caps, buckets) -> None:
    """override.experts: a non-empty tuple of ExpertBucket, max_tokens strictly ascending, the last
    >= caps.max_tokens, each GEMM's tiling one the expert kernels implement for this plan."""
    ex = _experts_module()
    wp = caps.weight_plan
    what = "override.experts"
    if not isinstance(buckets, tuple) or not buckets or not all(isinstance(b, ExpertBucket) for b in buckets):
        raise ValueError(f"{what} must be a non-empty tuple of moe.fused_moe ExpertBucket, got {buckets!r}")
    tops = [b.max_tokens for b in buckets]
    if any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in tops) or tops != sorted(set(tops)):
        raise ValueError(f"{what}: bucket max_tokens must be ints >= 1, strictly ascending, got {tops}")
    if tops[-1] < caps.max_tokens:
        raise ValueError(f"{what}: the last bucket must hold the caps' max_tokens = {caps.max_tokens}, got {tops}")
    for i, b in enumerate(buckets):
        if not isinstance(b.dequant, bool) or (b.dequant and caps.quant_mode != "nvfp4"):
            raise ValueError(
                f"{what}[{i}].dequant must be a bool, True for the nvfp4 recipe only, got "
                f"dequant={b.dequant!r} on a {'grouped' if b.tiled else 'decode'} bucket of {caps.quant_mode!r}"
            )
        a1, a2 = gemm_formats(caps.quant_mode, b)
        fcs = ((1, a1, b.fc1, wp.activation, b.fc1_span), (2, a2, b.fc2, None, b.fc2_span))
        for fc, a_fmt, cfg, act, span in fcs:
            if b.tiled:
                k = wp.hidden_size if fc == 1 else wp.intermediate_size
                reason = _grouped_module().why_not(fc, a_fmt, wp.weight_format, act, cfg, k, wp.num_experts)
            else:
                reason = ex.why_not(fc, a_fmt, wp.weight_format, act, cfg, "list", span)
            if reason is not None:
                raise ValueError(f"{what}[{i}].fc{fc}: {reason}")
