"""The decode GEMM's configuration (`DecodeConfig`), its limits and its validity rules (`why_not`), apart from the
kernel in `_kernel_decode` (which re-exports every name here; the kernel's compile fingerprint covers this module
through `_kernel_decode._SOURCES`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .._shared.formats import FORMAT, pair_reason

CHUNK = 128  # K values per chunk: 4 lanes x one 32-value span
NTILES = (1, 2, 4, 8)  # 8-token MMA tiles: M <= 8, 16, 32, 64
RED_SMEM_LIMIT = 64 * 1024  # bytes of the reduction buffer (see why_not)
SMEM_LIMIT = 96 * 1024  # reduction + ashare buffers (sm_120 gives a block 99 KB)
ACC_LIMIT = 64  # fp32 accumulator registers per lane
PREFETCH = (0, 1, 2, 4)  # DecodeConfig.prefetch values
WCACHE = ("nc", "na", "na256", "ef")  # DecodeConfig.wcache: weight-load cache hints (ptx.LDG_HINTS)
ACACHE = ("nc", "el")  # DecodeConfig.acache: activation-load cache hints
KGROUP = (1, 2, 4)  # DecodeConfig.kgroup: adjacent chunks per warp step
FP4 = ("shift", "left", "mul")  # DecodeConfig.fp4: FP4 placement (dequant.span_group)
PROBES = ("", "loads", "nomma", "wloads", "l1act")  # DecodeConfig.probe: timing probes (garbage output)
LOAD_PROBES = ("loads", "wloads", "l1act")  # the probes that XOR raw words (no dequant)
PROBE_ENV = "B12X_GEMM_DECODE_PROBE"  # =1 lets a probe config pass why_not (benchmarks only)
WN = (1, 2, 4, 8)  # DecodeConfig.wn: warp groups along N
UPFRONT = (0, 2, 4)  # DecodeConfig.upfront: chunks whose weight loads all issue before their math
KSPLIT = (1, 2, 4)  # DecodeConfig.ksplit: CTAs of a cluster splitting K (portable cluster sizes)


class WarpShape:
    """What follows from a config's warps, wn (warp groups along N) and ntiles (8-token tiles): shared by
    DecodeConfig and the stream kernel's StreamConfig."""

    @property
    def kwarps(self) -> int:
        """Warps that split K over the same rows (all of them when wn = 1)."""
        return self.warps // self.wn

    @property
    def max_m(self) -> int:
        return 8 * self.ntiles


@dataclass(frozen=True)
class DecodeConfig(WarpShape):
    """warps: split K inside the CTA; tiles: 16-row weight tiles per warp (BN = 16 * tiles);
    ntiles: 8-token MMA tiles (M <= 8 * ntiles); unroll: chunks the K loop unrolls (loads of the
    next chunk issue before this one's math); prefetch: chunks of weight words each warp keeps loaded
    ahead of its math (software pipeline: a chunk's weight loads issue `prefetch` iterations before the
    MMAs that use them; 0 = none, the kernel as swept on 2026-11-30).

    The streaming options (issue #6; defaults = the kernel before them):
    wcache: the weight loads' cache hint: "nc" plain `ld.global.nc`; "na" L1::no_allocate (the weight
    is read once: it should not evict the activations every CTA of the SM re-reads); "na256" that plus
    the L2::256B prefetch-size hint (a warp reads 64 bytes of a row per chunk; the L2 fetches the
    256-byte block the CTA's other warps read next); "ef" no_allocate plus an L2 evict-first policy.
    acache: the activation loads' hint: "nc" or "el" (L1::evict_last: every CTA reads the same M x K
    activations, so they can stay in the SM's L1 instead of coming from L2 once per CTA).
    kgroup: adjacent 128-value chunks a warp takes per step (1: chunks w, w + warps, ...; 2 or 4:
    chunk groups, so a warp reads 128 or 256 contiguous bytes of each fp4 row per step; K whose
    chunk count is not a multiple of kgroup runs the rest one chunk at a time).
    wn: warp groups along N: the CTA's warps form wn groups of warps / wn; group i owns weight rows
    [16 tiles i, 16 tiles (i + 1)) of the CTA's BN = 16 tiles wn and splits K among its warps, so
    wn groups read the same activation spans at the same time (one L2 read per CTA, the others hit
    L1) while BN grows without more registers per lane (1: the kernel before this option).
    clamp: rows past N and tokens past M load row N - 1 / token M - 1 instead of predicated zeros
    (their sums land in outputs that are never stored), so the loads need no predicate and their
    registers no zeroing (24 of the 466 K-loop instructions at M <= 8).
    fp4: FP4 weight placement, "shift" (`dequant.fp4_pair`) or "left" (`dequant.fp4_pair_left`: the
    same bits with one byte permute per word and left shifts only, which issue on the FMA pipe: 9
    instead of 10 ALU-pipe instructions per 8 values) or "mul" (`dequant.fp4_pair_mul`, bf16 compute, else
    "left": the same bits, a mask, one multiply and a mask a pair: 13 instructions per 8 values against 16).
    probe: NOT a kernel variant but a timing probe that computes garbage: "loads" issues exactly the
    chunk's loads and XORs the words into one accumulator (no dequant, no MMA): the access
    pattern's streaming ceiling; "nomma" also dequantizes both operands and XORs the registers in
    place of the MMAs; "wloads" is "loads" without the activation loads (the weights' stream alone);
    "l1act" is "loads" with every chunk's activation loads at chunk 0's or 1's addresses (as many
    instructions, served from L1: the activations' L2 traffic gone, their issue kept). Rejected by why_not unless B12X_GEMM_DECODE_PROBE=1 (bench_gemm --sweep-subset
    probe sets it); FP4 weights with 16-bit activations only.
    ashare (wn > 1, 16-bit activations): the wn warps that take the same chunk (one per group) split
    its activation groups, each loads and permutes its share into shared memory (double-buffered),
    a named barrier per chunk, then every warp reads all groups back: one L2 read and one permute of
    each activation span per CTA, guaranteed (without it the groups' reads meet in L1 or not).
    upfront (0, 2 or 4; with prefetch 0, kgroup 1, no ashare): the weight loads of the warp's first
    `upfront` chunks are all issued before any of their math (`upfront_loads`, predicated off past
    the last chunk), then their math runs chunk by chunk, then any chunks left over one by one. With
    K <= 128 x warps x upfront each warp makes one DRAM round trip for its weights; the unrolled loop
    issues the second chunk's loads after the first chunk's MMAs (SASS of the T = 1 gate_up,
    docs/predictions/gemm_decode.md, session 9). Not timed on a GPU yet: a sweep option.
    minctas (0: none, or 2..4): a launch bound, ptxas budgets registers for that many CTAs an SM (`launch_bounds`;
    it spills what does not fit): a grid of 1-2 waves in one. Opt-in (the demo's gate_up: within noise).
    ksplit (1, 2 or 4): C CTAs a row block as one thread-block cluster splitting K
    (rank r's warps take chunks r kwarps + w % kwarps, stepping kwarps x C), reduced through distributed
    shared memory: each CTA reads 1 / C of the M x K activations, which cuts their L2 traffic only where C x
    BN rows share them (wn groups with ashare; without ashare each group still reads its own, session 39). The
    sums equal those of a plain kernel with kwarps x C warps along K, bit for bit. 1: the kernel as before.
    GPU-tested; slower at every case measured (docs/performance.md, session 39): opt-in. Those runs split 16-warp
    CTAs (one an SM): two waves for ksplit 2 on the base, 32 clusters of 4 where 30 fit for the grown ksplit 4
    (session 40); the sweep now also times 8-warp splits (two CTAs an SM).
    pdl_wait: launched as a programmatic dependent of the stream's previous kernel (its CTAs may become
    resident while that one runs); each waits for it (griddepcontrol.wait) before its first global read,
    then lets the next one launch: the fused kernel's pdl "wait" with every option of this kernel (wn,
    ashare, ksplit), some of which the fused kernel lacks (ksplit; ashare since session 53, opt-in). GPU-tested,
    0.26-0.43 µs a call faster in a chain (session 39); pdl "wait" queries with warp groups take it
    (`launch.PLAIN_PDL_GROUPS`; ExpertConfig.pdl is moe's own)."""

    warps: int = 8
    tiles: int = 2
    ntiles: int = 1
    unroll: int = 2
    prefetch: int = 0
    wcache: str = "nc"
    acache: str = "nc"
    kgroup: int = 1
    wn: int = 1
    clamp: bool = False
    fp4: str = "shift"
    probe: str = ""
    ashare: bool = False
    upfront: int = 0
    minctas: int = 0
    ksplit: int = 1
    pdl_wait: bool = False

    @property
    def rows(self) -> int:
        """Weight rows of one warp (of one warp group when wn > 1)."""
        return 16 * self.tiles

    def ctas(self, n: int) -> int:
        """CTAs of the grid over `n` weight rows (rows x wn a CTA), as the kernels launch it: what the wave rules
        count (`decode_rules`, `scripts/decode_waves.py`)."""
        return -(-n // (self.rows * self.wn))

    @property
    def red_bytes(self) -> int:
        """Shared memory of the end-of-CTA reduction: warps x tokens x rows fp32."""
        return 4 * self.warps * self.max_m * self.rows

    @property
    def share_bytes(self) -> int:
        """ashare's buffers: per warp set (kwarps of them) two buffers of 4 ntiles units x 32 lanes x 16 B."""
        return self.kwarps * 2 * 4 * self.ntiles * 32 * 16 if self.ashare else 0

    @property
    def acc_regs(self) -> int:
        return 4 * self.tiles * self.ntiles


def ntiles_for(max_m: int) -> int:
    """The fewest 8-token tiles that hold max_m tokens (max_m <= 64)."""
    for nt in NTILES:
        if max_m <= 8 * nt:
            return nt
    raise ValueError(f"the decode kernel serves M <= {8 * NTILES[-1]}, got {max_m}")


def default_config(max_m: int) -> DecodeConfig:
    """The shape-blind heuristic (callers that know N, K and the weight format use
    `decode_rules.decode_config_for`). M <= 16: 8 warps x 32 rows, one CTA per SM at N = 4096 with 8 chunks
    in flight per SM. M <= 32 / 64: the same 32 rows with 8 / 4 warps (the reduction buffer, warps x
    tokens x rows fp32, stays at 32 KB)."""
    ntiles = ntiles_for(max_m)
    warps = 4 if ntiles == 8 else 8
    return DecodeConfig(warps=warps, tiles=2, ntiles=ntiles, unroll=2 if ntiles == 1 else 1)


# (field, its allowed values, what they are) of the options `tiling_reason` checks by membership alone, in its order
_CHOICES = (
    ("prefetch", PREFETCH, " (chunks of weight loads in flight ahead)"),
    ("wcache", WCACHE, " (weight-load cache hints)"),
    ("acache", ACACHE, " (activation-load cache hints)"),
    ("kgroup", KGROUP, " (adjacent chunks per warp step)"),
    ("probe", PROBES, ""),
    ("fp4", FP4, " (FP4 weight placement)"),
)


def tiling_reason(config: DecodeConfig) -> str | None:
    if config.warps not in (1, 2, 4, 8, 16) or config.tiles not in (1, 2, 4) or config.ntiles not in NTILES:
        return f"config {config} out of range (warps 1..16 power of two, tiles 1/2/4, ntiles 1/2/4/8)"
    if config.unroll not in (1, 2, 4):
        return f"unroll must be 1, 2 or 4, got {config.unroll}"
    for name, allowed, meaning in _CHOICES:
        value = getattr(config, name)
        if value not in allowed:
            return f"{name} must be one of {allowed}{meaning}, got {value!r}"
    if config.wn not in WN or config.warps % config.wn:
        return f"wn must be one of {WN} and divide warps ({config.warps}), got {config.wn}"
    if config.clamp and config.prefetch:
        return "clamp and prefetch > 0 do not combine (the pipeline's loads past the last chunk rely on predicates)"
    if config.ashare and (config.wn == 1 or config.prefetch or config.kgroup > 1 or (4 * config.ntiles) % config.wn):
        return (
            "ashare needs wn > 1 dividing 4 x ntiles, prefetch 0 and kgroup 1 (one chunk per step, its "
            "activation groups split among the warp groups)"
        )
    if config.kgroup > 1 and config.prefetch:
        return "kgroup > 1 and prefetch > 0 do not combine (the prefetch pipeline steps one chunk at a time)"
    if config.upfront not in UPFRONT or (config.upfront and (config.prefetch or config.kgroup > 1 or config.ashare)):
        return f"upfront must be one of {UPFRONT}, and > 0 only with prefetch 0, kgroup 1 and no ashare, got {config}"
    if not isinstance(config.pdl_wait, bool):
        return f"pdl_wait must be a bool, got {config.pdl_wait!r}"
    if config.ksplit not in KSPLIT:
        return f"ksplit must be one of {KSPLIT} (CTAs of a cluster splitting K), got {config.ksplit!r}"
    if type(config.minctas) is not int or config.minctas not in (0, 2, 3, 4):
        return f"minctas must be 0 (no bound) or 2..4 CTAs an SM, got {config.minctas!r}"
    if config.acc_regs > ACC_LIMIT:
        return (
            f"tiles x ntiles = {config.tiles} x {config.ntiles} needs {config.acc_regs} fp32 accumulator registers "
            f"per lane, more than {ACC_LIMIT} (use fewer tiles for this many tokens)"
        )
    if config.red_bytes > RED_SMEM_LIMIT:
        return (
            f"the reduction buffer (warps x 8*ntiles tokens x 16*tiles rows fp32 = {config.warps} x "
            f"{config.max_m} x {config.rows} x 4 = {config.red_bytes} bytes) exceeds {RED_SMEM_LIMIT} bytes "
            f"(use fewer warps or tiles)"
        )
    if config.red_bytes + config.share_bytes > SMEM_LIMIT:
        return (
            f"the reduction and ashare buffers ({config.red_bytes} + {config.share_bytes} bytes) exceed "
            f"{SMEM_LIMIT} bytes (use fewer warps)"
        )
    if (8 * config.ntiles * config.rows) % 32:
        return "the reduction needs tokens x rows to be a multiple of 32"
    return None


def launch_bounds(config: DecodeConfig, threads: int) -> dict:
    """`DecodeConfig.minctas`'s launch attributes (none at 0); the carveout (10%: a few KB used) is given, or
    the DSL would query a device at compile time."""
    if not config.minctas:
        return {}
    return {"min_blocks_per_mp": config.minctas, "max_number_threads": [threads, 1, 1], "preferred_smem_carveout": 10}


def why_not(a_fmt: str, b_fmt: str, out_dtype: str, config: DecodeConfig) -> str | None:
    """None when the kernel implements this combination, else the reason.

    Limits: fp32 accumulators tiles x ntiles x 4 <= 64 per lane (the operand registers come on top);
    the reduction buffer <= 64 KB. The CuTe DSL launches with the kernel's inferred shared memory as
    dynamic memory and sets the kernel's opt-in maximum, so 48 KB is no hard limit here; 64 KB keeps
    every M <= 16 config the 2026-11-30 sweep ran (16 warps x 16 tokens x 64 rows) and fits sm_120's
    99 KB per block."""
    if not isinstance(config, DecodeConfig):
        return f"config must be a DecodeConfig, got {type(config).__name__}"
    if (reason := pair_reason(a_fmt, b_fmt, out_dtype)) is not None:
        return reason
    if config.ashare and (FORMAT[a_fmt].family != "raw16" or b_fmt == "fp8_block"):
        return f"ashare shares 16-bit activations (not folded with a block-FP8 scale), got {a_fmt} x {b_fmt}"
    if config.probe:
        if os.environ.get(PROBE_ENV) != "1":
            return f"probe {config.probe!r} computes garbage (a timing probe): set {PROBE_ENV}=1 to build it"
        if FORMAT[b_fmt].family != "fp4" or FORMAT[a_fmt].family != "raw16":
            return f"probes take FP4 weights and 16-bit activations, got {a_fmt} x {b_fmt}"
    return tiling_reason(config)


def can_implement(a_fmt: str, b_fmt: str, out_dtype: str, config: DecodeConfig) -> bool:
    return why_not(a_fmt, b_fmt, out_dtype, config) is None
