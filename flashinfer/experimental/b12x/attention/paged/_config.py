"""Configurations, validity predicates and host-side mirrors of the paged-attention kernels.

Stdlib only: `api.plan` validates caps and the tests check the schedule without importing the CuTe
DSL. The split-KV schedule's config and its Python mirror live in `_config_schedule` (re-exported here). The
kernels (`_kernel_decode`, `_kernel_split`) import these and list this module in their
compile fingerprints, so an edit here recompiles them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ._config_schedule import (  # noqa: F401 (re-exported: the schedule's config and mirror, `_config_schedule`)
    NO_SPLIT_CHUNK,
    PAIR_GROUPS,
    ScheduleConfig,
    _ceil_div,
    _request_split,
    chunk_size,
    early_page_entry,
    early_page_lines,
    launch_rows,
    paired,
    persistent_grid_rows,
    persistent_items,
    schedule_reference,
    why_not_schedule,
)

DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
LOG2E = 1.4426950408889634
M_TILE = 16  # query rows per MMA tile: the G heads of one KV head, zero-padded
N8_HEADS = 8  # DecodeConfig.heads_n8: the G heads on the MMA's n8 columns
SMEM_LIMIT = {"sm_90a": 227 * 1024, "sm_120a": 99 * 1024, "sm_121a": 99 * 1024}
THREADS_PER_SM = {"sm_90a": 2048, "sm_120a": 1536, "sm_121a": 1536}
DECODE_STAGES = (2, 3, 4, 5, 6)
MIN_CTAS = (0, 2, 3, 4, 5, 6, 8)
PDL_MODES = ("off", "wait", "prefetch")  # DecodeConfig.pdl
CLUSTER_SIZES = (0, 2, 4, 8, 16)  # DecodeConfig.cluster: 0 off, else CTAs a cluster (16: non-portable, sm_90a)
PDL_PREFETCH_KEYS = 256  # keys a CTA prefetches into L2 before its wait (pdl="prefetch"): 128 KB at D 128 bf16


# ---- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeConfig:
    """warps: per CTA; keys_per_warp: keys of one pipeline stage of one warp (<= page_size, multiple
    of 16); stages: cp.async buffers per warp; fused_merge: the CTA of a split request that finishes
    last (an atomic ticket per (request, KV head)) merges the request's partial rows itself, instead
    of a third launch (`_kernel_split.Merge`) doing it; fused_schedule: every warp of every decode CTA
    recomputes the split from cache_seqlens (`_kernel_split.Schedule.locate`, O(batch / 32) steps,
    so batches up to FUSED_SCHEDULE_MAX_BATCH) instead of a first launch (`Schedule`) writing it.
    Both set: one launch.

    fp8 streaming knobs (docs/predictions/attention.md, "FP8 decode"): fast_prologue: fp8 KV only
    (a no-op for bf16/fp16 KV): the k/v descales are loaded with the first sub-tiles instead of after
    the Q barrier, and Q is staged to fp16 by 16-element vectors (`stage_q_fp16_vec`: one shared-memory
    pass, no per-element loop); min_ctas: 0, or a launch bound (nvvm.minctasm) asking ptxas for
    registers that let min_ctas CTAs share an SM (3 at 4 warps: 168 registers, a few spilled loop
    invariants). stages may reach 6: more sub-tiles in flight per warp (fp8 sub-tiles carry half the
    bytes of bf16 ones). preload_lengths (with fused_schedule, any KV dtype; a no-op without): each
    warp loads the batch's lengths at once, then locates its work row on registers
    (`Schedule.locate(preload=True)`: one memory latency instead of two per 32 requests).
    direct_items (with fused_schedule; a no-op without): when the batch alone shows that nothing is
    split (min(target_items, work rows) <= batch: B=128 at the one-wave targets), item b is request b
    and its CTA skips the scan (`Schedule.locate(direct=True)`).
    merge_unroll: items each warp of the fused merge folds per unrolled step (`PartialMerge`; their
    partial-row loads are in flight together): 2, 4 or 8; 32 items at B=1 L=32k are 8 a warp.

    persistent (with fused_schedule; a no-op without): the grid holds one wave of CTAs (schedule.target_items rows a
    KV head, `persistent_grid_rows`) and CTA row y runs items y, y + rows, y + 2 rows, ...
    (`persistent_items`); while an item streams, the CTA already locates its next item and loads
    that item's descales and first page-table entries, and it issues the next item's Q and first
    sub-tiles (one per warp) before its epilogue, so the next item's prologue chain overlaps this
    item's epilogue and merge (docs/predictions/attention.md, session 7). Only a batch with more
    items than one wave (B=128: 128 items a head for 33 rows) runs several items a CTA. The
    epilogue's buffers then live in stages >= 1 of the K/V ring (stage 0 holds the next item's first
    sub-tiles), which needs (stages - 1) x keys_per_warp x D x kv_itemsize >= 64 x Dv bytes
    (`persistent_fits`).

    prefetch_pages: each item's page-table entries (one int32 per page of [kv_start, kv_end)) are
    prefetched into L2 when the item starts (one prefetch.global.L2 per 128-byte line, the CTA's threads
    in turn): the main loop reads a sub-tile's page one iteration ahead, and after the bench's L2 flush
    (or in a cold serving step) every 128 bytes of page table (32 pages: 4 iterations of a 4 x 32-key
    CTA) was a DRAM miss that one fp8 iteration does not hide.

    pdl (programmatic dependent launch, sm_90+; issue #10's decode step): "off" a plain launch;
    "wait": launched with the programmatic-stream-serialization attribute, so the CTAs become resident
    while the kernel before still runs; each CTA waits (griddepcontrol.wait: that kernel complete, its
    writes visible) before its first global access, then lets the next kernel of the stream launch
    (griddepcontrol.launch_dependents: a GEMM launched with pdl="prefetch" streams its weights into L2
    while attention runs). Always correct. "prefetch" (with fused_schedule, not persistent): "wait"
    plus, before the wait, each CTA locates its work row from cache_seqlens (read only) and prefetches
    the K and V lines of its first PDL_PREFETCH_KEYS keys into L2 (`prefetch.global.L2`), so their
    DRAM reads overlap the kernel before. It requires that the kernel launched just before does not
    write cache_seqlens or the page table (the step's KV append, which writes only the new token's
    slot, may run there: a prefetch of a line it writes only brings the line into L2, the coherence
    point), hence not with copy_runtime_metadata (its copies are that kernel).

    B = 1 latency knobs (docs/predictions/attention.md, "Session 10: the B = 1 chain"):
    lean_ticket (with fused_merge; a no-op without): the ticket as cooperative groups' grid barrier
    takes it: a CTA barrier after the partial-row stores, then one thread's atom.acq_rel.gpu (its
    release covers the whole CTA's stores through the barrier, its acquire the merging CTA's loads
    after the next barrier), without the per-thread fence.acq_rel before the barrier and the merging
    CTA's second one after it: two MEMBAR.ALL.GPU + CCTL.IVALL fewer on the last CTA's chain, one
    fewer on every split CTA. early_pages: every CTA first prefetches into L2 its share of the live
    page table's 128-byte lines (`early_page_entry`: line tidx + threads x (CTA row x Hkv + KV head)
    of the table's B x (ceil(W / 32) + 1) lines, one prefetch.global.L2 a thread), so the table's
    DRAM misses overlap the lengths (or work-row) load instead of following it: the first sub-tiles'
    page-table reads become L2 hits.

    cluster (0 = off, or C in 2, 4, 8, or 16 on sm_90a (a non-portable cluster size: the DSL's launcher
    allows it; 16 SMs of one GPC must be free); needs fused_merge and fused_schedule, not persistent,
    pdl not "prefetch"; `_cluster_merge`): every request is split into exactly C items of
    round_up(ceil(visible / C), tile_keys) keys (`cluster_ranges`), the grid has Hkv x B x C CTAs, and
    the C CTAs of one (request, KV head) form a thread-block cluster along the row axis. Each CTA keeps
    its partial row (O normalised by its own sum, LSE) in its shared memory; behind a cluster barrier
    (arrive.release / wait.acquire) CTA rank r combines head-dim columns [r Dv / C, (r + 1) Dv / C) of
    all C partials, read through distributed shared memory (mapa + ld.shared::cluster), writes the
    output and, after a second cluster barrier, exits: no partial rows, ticket or fence in global
    memory (docs/predictions/attention.md, "Session 10b").
    cluster_push (with cluster): each CTA st.async-pushes every rank its slice of the partial row into
    that rank's shared memory, counted by the rank's mbarrier, and combines locally: no release barrier
    or remote load, no exit barrier (`_cluster_merge`; docs/predictions/attention.md, "Session 11").
    cluster_pairs (session 36, cluster 2, bench `:c2s` / `:c2sp` pushed; the default for plans of 5-16 requests since
    session 37, CLUSTER_PAIRS_MAX): clusters take two items of one request from the live fused schedule
    (`ScheduleConfig.pairs`), merge them through DSMEM, then a request's pair rows through the ticket; unpaired
    batches (2 B > min(target_items, cap - B)) run the ticket merge. With cluster 4 or 8 (session 37, opt-in, not yet
    run on a GPU; `:c8sp`) clusters take groups of C items (`ScheduleConfig.group`): one request at 1k keys on the
    8x16x2 tile is one group of eight 128-key items, the fixed 8-CTA cluster's split, without its grid.

    full_grid (session 37, opt-out; bench flag w): the fused schedule's launch keeps a CTA row a KV head per work row
    the binding holds (min(capacity, B + target_items), `api.bind`), as before session 37, instead of the rows the
    live batch can fill (`launch_rows`: max(B, target) unpaired, fewer at no split). A row past the live items
    locates itself (the lengths load and the scan) and exits; where the live CTAs fill the GPU (fp8 B = 16, one
    8-warp CTA an SM) those rows queued behind them (s37_a: 11.63 -> 10.76 µs at B = 16 L = 1k).

    pair_budget (session 37, opt-in, not yet run on a GPU; bench flag b; with cluster_pairs): the pairs' split counts
    the rounding to whole clusters (`ScheduleConfig.budget`), so a paired batch launches at most min(target, cap -
    (C - 1) B) rows instead of that plus (C - 1) B: at B = 8 on the 8-warp tiles 18 rows for 16 live instead of 26
    (80 dead CTAs, 76 queued behind a full GPU), at the cost of fewer items where the rounding had room (B = 4 L = 4k:
    8 items instead of 16). The experiment for the pairs' 1.3-1.6 µs to the fixed 2-CTA split.

    q_reload (session 14, opt-in, not yet run on a GPU): each sub-tile reloads Q's MMA fragments from
    shared memory (ldmatrix, where Q stays staged) instead of holding them across the main loop, so
    they are dead through P V: ptxas sm_90a, D 128, one-launch flags: fp8 4x32x2 194 -> 168 registers
    (three 4-warp CTAs an SM instead of two), fp8 8x32x2 186 -> 153, bf16 4x16x3 194 -> 168, no spills;
    the same values in the same MMAs, so the outputs are bit-equal to the config without it.

    heads_n8 (session 34, opt-in; bench flag n; GQA groups up to 8): the register-light tile
    (`_decode_n8`). The G query heads go on the n8 side of the MMA instead of the m16 rows: S^T = K Q^T
    (16 keys as m, Q the B operand), O^T += V^T P^T (V^T through ldmatrix.trans as the A operand, P^T
    from S^T's accumulators by movmatrix). O is Dv / 16 m16n8 tiles (32 registers at D 128, not 64), Q
    D / 16 x 2 registers (16, not 32), and half the MMAs (n8 with G of 8 columns live, not m16 with G of
    16 rows)."""

    warps: int = 4
    keys_per_warp: int = 16
    stages: int = 2
    fused_merge: bool = False
    fused_schedule: bool = False
    fast_prologue: bool = False
    min_ctas: int = 0
    preload_lengths: bool = False
    merge_unroll: int = 2
    direct_items: bool = False
    persistent: bool = False
    prefetch_pages: bool = False
    pdl: str = "off"
    lean_ticket: bool = False
    early_pages: bool = False
    cluster: int = 0
    cluster_push: bool = False
    cluster_pairs: bool = False
    q_reload: bool = False
    heads_n8: bool = False
    full_grid: bool = False
    pair_budget: bool = False

    def __repr__(self) -> str:  # the extra fields only when set: the three-field form stays as it was
        extra = ", fused_merge=True" if self.fused_merge else ""
        extra += ", fused_schedule=True" if self.fused_schedule else ""
        extra += ", fast_prologue=True" if self.fast_prologue else ""
        extra += f", min_ctas={self.min_ctas}" if self.min_ctas else ""
        extra += ", preload_lengths=True" if self.preload_lengths else ""
        extra += f", merge_unroll={self.merge_unroll}" if self.merge_unroll != 2 else ""
        extra += ", direct_items=True" if self.direct_items else ""
        extra += ", persistent=True" if self.persistent else ""
        extra += ", prefetch_pages=True" if self.prefetch_pages else ""
        extra += f", pdl={self.pdl!r}" if self.pdl != "off" else ""
        extra += ", lean_ticket=True" if self.lean_ticket else ""
        extra += ", early_pages=True" if self.early_pages else ""
        extra += f", cluster={self.cluster}" if self.cluster else ""
        extra += ", cluster_push=True" if self.cluster_push else ""
        extra += ", cluster_pairs=True" if self.cluster_pairs else ""
        extra += ", q_reload=True" if self.q_reload else ""
        extra += ", heads_n8=True" if self.heads_n8 else ""
        extra += ", full_grid=True" if self.full_grid else ""
        extra += ", pair_budget=True" if self.pair_budget else ""
        return f"DecodeConfig(warps={self.warps}, keys_per_warp={self.keys_per_warp}, stages={self.stages}{extra})"

    @property
    def runs_persistent(self) -> bool:
        """persistent takes effect (it needs the fused schedule: the grid is sized from its target)."""
        return self.persistent and self.fused_schedule

    @property
    def tile_keys(self) -> int:
        """Keys one CTA covers per round of its warps (the split granularity)."""
        return self.warps * self.keys_per_warp

    @property
    def keys_in_flight(self) -> int:
        """Keys one CTA has requested from memory at once: stages - 1 sub-tiles per warp."""
        return self.warps * (self.stages - 1) * self.keys_per_warp


def kv_itemsize(kv_dtype: str) -> int:
    return 1 if kv_dtype == "float8_e4m3fn" else 2


def smem_bytes(kv_dtype: str, head_dim: int, head_dim_v: int, config: DecodeConfig) -> int:
    """Shared memory of one CTA: Q tile(s) + max(KV stages, epilogue buffers)."""
    q = M_TILE * head_dim * 2 * (2 if kv_dtype == "float8_e4m3fn" else 1)
    kv = config.warps * config.stages * config.keys_per_warp * (head_dim + head_dim_v) * kv_itemsize(kv_dtype)
    epilogue = config.warps * M_TILE * head_dim_v * 4 + config.warps * M_TILE * 3 * 4 + M_TILE * 4
    ticket = 16 if config.fused_merge else 0  # the "this CTA merges" flag
    cluster = (M_TILE * head_dim_v + M_TILE) * 4 + 16 if config.cluster else 0  # the partial row DSMEM peers read
    if config.cluster_push:  # the mbarrier, then the receive buffer (G <= M_TILE rows) and its LSEs
        cluster = (4 + M_TILE * head_dim_v + M_TILE * config.cluster) * 4 + 16
    return q + max(kv, epilogue) + ticket + cluster + 1024


def persistent_fits(kv_dtype: str, head_dim: int, head_dim_v: int, config: DecodeConfig) -> bool:
    """The persistent kernel's epilogue (the warps' fp32 O rows, 64 x Dv bytes a warp) fits the K
    ring's stages 1 .. stages - 1 (its stats go to the V ring's), so stage 0 stays free for the next
    item's first sub-tiles."""
    c = config
    return (c.stages - 1) * c.keys_per_warp * head_dim * kv_itemsize(kv_dtype) >= 64 * head_dim_v


def ring_stage_bytes(kv_dtype: str, head_dim: int, head_dim_v: int, config: DecodeConfig) -> tuple[int, int]:
    """Bytes of one stage (every warp's sub-tile) of the K ring and of the V ring; the V ring starts
    after the config.stages stages of K."""
    per_key = config.warps * config.keys_per_warp * kv_itemsize(kv_dtype)
    return per_key * head_dim, per_key * head_dim_v


def epilogue_offsets(kv_dtype: str, head_dim: int, head_dim_v: int, config: DecodeConfig) -> tuple[int, int]:
    """Byte offsets, in the decode kernel's shared K/V ring, of the epilogue's fp32 O rows (warps x 16
    x Dv; the fused merge reuses them) and of its stats (max, sum, weight: warps x 16 each, then 16
    LSE): the ring's start, or (persistent) K stage 1 and V stage 1, so that stage 0 of both rings
    (ring slots are stage-major there) can take the next item's first sub-tiles."""
    if not config.runs_persistent:
        return 0, 4 * config.warps * M_TILE * head_dim_v
    k_stage, v_stage = ring_stage_bytes(kv_dtype, head_dim, head_dim_v, config)
    return k_stage, config.stages * k_stage + v_stage


def tile_head_dim(head_dim_qk: int, head_dim_vo: int) -> int:
    """The head dim the plan's default tiles are chosen for: the larger of Dqk and Dv, whose shared memory bounds
    both (every measured default has Dqk = Dv)."""
    return max(head_dim_qk, head_dim_vo)


def why_not(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, config, arch) -> str | None:
    """None when the decode kernel implements this problem with `config` on `arch`, else why not."""
    if q_dtype not in DTYPES:
        return f"q dtype must be one of {tuple(DTYPES)}, got {q_dtype}"
    if kv_dtype not in (q_dtype, "float8_e4m3fn"):
        return f"kv dtype must be {q_dtype} (the q dtype) or float8_e4m3fn, got {kv_dtype}"
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        return f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
    if num_q_heads // num_kv_heads > M_TILE:
        return f"GQA group size Hq/Hkv = {num_q_heads // num_kv_heads} > {M_TILE} is not implemented"
    if head_dim not in (64, 128, 256) or head_dim_v not in (64, 128, 256):
        return f"head_dim_qk and head_dim_vo in (64, 128, 256) are implemented, got {head_dim}/{head_dim_v}"
    if page_size not in (16, 32, 64, 128):
        return f"page_size must be 16, 32, 64 or 128, got {page_size}"
    c = config
    if c.warps not in (2, 4, 8) or c.keys_per_warp not in (16, 32) or c.stages not in DECODE_STAGES:
        return f"config out of range: {c}"
    for name in ("fused_merge", "fused_schedule", "fast_prologue", "preload_lengths", "direct_items", "persistent",
                 "prefetch_pages", "lean_ticket", "early_pages", "cluster_push", "cluster_pairs", "q_reload",
                 "heads_n8", "full_grid", "pair_budget"):  # fmt: skip
        if not isinstance(getattr(c, name), bool):
            return f"{name} must be a bool, got {getattr(c, name)!r}"
    if isinstance(c.min_ctas, bool) or c.min_ctas not in MIN_CTAS:
        return f"min_ctas must be one of {MIN_CTAS}, got {c.min_ctas!r}"
    if isinstance(c.merge_unroll, bool) or c.merge_unroll not in (2, 4, 8):
        return f"merge_unroll must be 2, 4 or 8, got {c.merge_unroll!r}"
    if c.min_ctas and 65536 // (c.min_ctas * 32 * c.warps) < 128:
        return f"min_ctas {c.min_ctas} x {32 * c.warps} threads leaves under 128 registers a thread"
    if c.heads_n8 and num_q_heads // num_kv_heads > N8_HEADS:
        return f"heads_n8 holds a GQA group of at most {N8_HEADS} heads, got Hq/Hkv = {num_q_heads // num_kv_heads}"
    if c.pdl not in PDL_MODES:
        return f"pdl must be one of {PDL_MODES}, got {c.pdl!r}"
    if c.pdl == "prefetch" and (not c.fused_schedule or c.runs_persistent):
        return f"pdl='prefetch' needs fused_schedule=True and persistent=False (it locates the item itself), got {c}"
    reason = why_not_cluster(c)
    if reason is not None:
        return reason
    if c.cluster > 8 and arch != "sm_90a":
        return f"cluster={c.cluster} (non-portable, above 8) is for sm_90a only, got {arch}"
    if c.keys_per_warp > 2 * page_size:
        return f"keys_per_warp {c.keys_per_warp} > 2 x page_size {page_size}: a warp's sub-tile spans at most two pages"
    if c.persistent and not persistent_fits(kv_dtype, head_dim, head_dim_v, c):
        return (
            f"persistent needs (stages - 1) x keys_per_warp x head_dim x kv_itemsize >= 64 x head_dim_v bytes (the "
            f"epilogue in the K/V ring's stages >= 1), got {c} at D {head_dim}"
        )
    need = smem_bytes(kv_dtype, head_dim, head_dim_v, c)
    if need > SMEM_LIMIT.get(arch, 99 * 1024):
        return f"{c} needs {need} bytes of shared memory, {arch} has {SMEM_LIMIT.get(arch)}"
    return None


def why_not_cluster(c: DecodeConfig) -> str | None:
    """None when `DecodeConfig.cluster` fits the config's other fields, else why not."""
    if isinstance(c.cluster, bool) or c.cluster not in CLUSTER_SIZES:
        return f"cluster must be one of {CLUSTER_SIZES}, got {c.cluster!r}"
    if c.cluster and not (c.fused_merge and c.fused_schedule) or c.cluster and (c.persistent or c.pdl == "prefetch"):
        return (
            f"cluster={c.cluster} needs fused_merge=True and fused_schedule=True (one launch, its own split), "
            f"persistent=False and pdl != 'prefetch', got {c}"
        )
    if c.cluster_push and not c.cluster:
        return f"cluster_push=True needs cluster > 0 (it is a way to merge the cluster), got {c}"
    if c.cluster_pairs and c.cluster not in PAIR_GROUPS:
        return f"cluster_pairs=True needs cluster in {PAIR_GROUPS} (the items a cluster takes), got {c}"
    if c.pair_budget and not c.cluster_pairs:
        return f"pair_budget=True needs cluster_pairs=True (it is a rule of the pairs' split), got {c}"
    return None


def cluster_ranges(length: int, window_left: int, cluster: int, tile_keys: int) -> list[tuple[int, int]]:
    """`DecodeConfig.cluster`'s split of one request of `length` keys, the cluster kernel's arithmetic
    (`_cluster_merge.ClusterMerge.item`): [start, end) of CTA rank 0 .. cluster - 1, chunks of
    round_up(ceil(visible / cluster), tile_keys) keys from the window's start; trailing ranks may be
    empty (start == end == length)."""
    visible = length if window_left < 0 else min(length, window_left + 1)
    lo = length - visible
    chunk = _ceil_div(_ceil_div(visible, cluster), tile_keys) * tile_keys
    out = []
    for rank in range(cluster):
        start = min(lo + rank * chunk, length)
        out.append((start, min(start + chunk, length)))
    return out


def why_not_pdl(pdl, mode: str, copy_runtime_metadata: bool, config) -> str | None:
    """None when attention.paged's `Caps.pdl` fits the other caps (`DecodeConfig.pdl` says what each
    mode does), else why not."""
    if pdl not in PDL_MODES:
        return f"pdl must be one of {PDL_MODES}, got {pdl!r}"
    if pdl == "off":
        return None
    if mode != "decode":
        return f"pdl={pdl!r} is a decode launch mode; mode {mode!r} needs pdl='off'"
    if pdl == "prefetch" and copy_runtime_metadata:
        return (
            "pdl='prefetch' reads cache_seqlens and the page table before its wait, but copy_runtime_metadata=True "
            "copies them just before the launch: use pdl='wait'"
        )
    own = getattr(config, "pdl", "off")
    if own not in ("off", pdl):
        return f"pdl={pdl!r} disagrees with config.pdl={own!r}"
    return None


def with_pdl(pdl: str, decode: DecodeConfig) -> DecodeConfig:
    """`Caps.pdl` on a decode config (the heuristic's or the caps'); "prefetch" needs the fused
    schedule and no persistent loop, so a config without them gets "wait"."""
    if pdl == "off":
        return decode
    if pdl == "prefetch" and (not decode.fused_schedule or decode.runs_persistent):
        pdl = "wait"
    return replace(decode, pdl=pdl)


# Switches for the lead after the H200 sweep of the fp8 streaming knobs (docs/predictions/attention.md,
# "FP8 KV decode streaming"); both on since the 14:03 sweep (docs/performance.md, session 6: fp8 B=128 L=1k
# 99.4 -> 86.1 µs, bf16 148 -> 141.6, the other decode cases within +-2%). DECODE_LATENCY_FLAGS: every
# default config gets fast_prologue (fp8 only), preload_lengths and direct_items (with the fused
# schedule); not the batched fused merge (merge_unroll 8: 14:37, 200 samples, bf16 B=1 L=1k 13.3 -> 14.4
# µs, B=8 L=1k 23.0 -> 23.9, fp8 B=8 L=8k 50.9 -> 55.6; it helps only B=1 L=32k, by 2%). FP8_TWO_PAGE_TILES: fp8 KV at D 128 on sm_90a runs 4 warps x
# 32 keys x 3 stages (64 KB in flight per CTA, as bf16's default); needs api._fit_page to allow
# keys_per_warp = 2 x page_size.
DECODE_LATENCY_FLAGS = True
FP8_TWO_PAGE_TILES = True
# FP8_TILE_STAGES (session 12, H200 graph timer, one job): the two-page fp8 tile with 2 stages (32 KB in
# flight per CTA, more CTAs an SM) instead of 3: B = 32 L = 1k / 8k / 32k 23.58 / 132.9 / 513.1 -> 22.69 /
# 130.4 / 497.4 µs, B = 128 L = 8k / 32k 512.2 / 1999 -> 502.8 / 1984, B = 128 L = 1k a tie (77.31 / 77.53);
# B = 8 / 16 L = 1k / 8k / 32k 13.52 / 41.45 / 135.1 and 16.89 / 73.9 / 265.6 -> 12.05 / 40.51 / 132.2 and
# 16.51 / 71.69 / 255.3. PERSISTENT_DECODE (off) needs 3 (`persistent_fits`); so does
# MIN_CHUNK_16_KEY_FILLS (off) to change anything.
FP8_TILE_STAGES = 2
# FP8_WIDE_BATCH (session 12, H200 graph timer, one job each; on since session 14, after its gpu tests passed on
# the H200: test_paged_wide_batch_gpu.py, 5 passed): plans of this many requests (capacity) up to
# FUSED_SCHEDULE_MAX_BATCH (the one-launch path it was measured and tested on) take fp8's two-page tile on 2 warps (2x32x2: 42 KB of shared memory, 5 CTAs an SM instead of 3, so 1024 one-item
# CTAs at B = 128 make 1.6 waves instead of 2.6): B = 48 / 64 / 128 L = 1k 35.40 / 41.05 / 77.30 -> 32.36 /
# 39.90 / 71.95 µs, L = 2k 60.8 / 71.58 / 137.5 -> 56.41 / 70.00 / 133.1, L = 8k 215.0 / 255.1 / 505.0 ->
# 202.6 / 254.8 / 500.6; it loses at B = 32 (L = 1k 22.91 -> 24.95), so 48 is the bound. Keyed on capacity
# like SMALL_BATCH_MAX: a plan for 128 serving 32 live requests pays the B = 32 loss.
FP8_WIDE_BATCH = 48
# FP8_EIGHT_WARP_MAX (session 14, H200 graph timer, one job: scripts/jobs/s14_fp8_8warp.txt): plans of more
# than SMALL_BATCH_MAX and at most this many requests (capacity) take the two-page tile on 8 warps (8x32x2:
# 140 KB of shared memory, one CTA an SM with 64 KB of fp8 in flight) instead of 4. At B = 16 L = 1k the
# 4-warp tile runs 128 unsplit items, one 4-warp CTA an SM: 16.39 -> 12.22 µs; L = 8k / 32k 70.03 / 248.1 ->
# 67.85 / 245.7; B = 8 L = 1k / 8k / 32k 11.94 / 39.94 / 129.0 -> 11.25 / 39.54 / 129.0. It loses at B = 32
# (L = 1k 22.74 -> 26.55: 256 items make two waves), and against the small-batch shape at B = 2 / 4 L = 1k
# (8.95 / 9.79 -> 10.04 / 10.36; it wins there at 32k, 42.68 / 75.94 -> 39.80 / 70.10), so the small-batch
# plans keep theirs. B = 17-31 untimed: the bound is the last batch measured.
FP8_EIGHT_WARP_MAX = 16
# PERSISTENT_DECODE (off; session 7, for the lead after the 'r' rows of the sweep): every fp8-KV default
# config whose epilogue fits its ring's stages >= 1 (`persistent_fits`: 4x32x3 at D 128; not D 256, whose
# one-item kernel already needs 255 registers) gets persistent (measured 16:50: fp8 B=128 L=1k 85.57 ->
# 83.26 us; bf16 gained nothing and lost 0.8 us at B=1 L=1k before b2a3839, so bf16 stays as it is), which takes effect with the fused schedule (B <= 128 plans): only batches of more
# items than one wave (B=128) run several items a CTA (docs/predictions/attention.md, session 7).
PERSISTENT_DECODE = False


# SMALL_BATCH_DECODE (session 10, H200 graph timer, Hq 32 / Hkv 8, D 128, 24 shapes in
# docs/performance.md): plans of at most SMALL_BATCH_MAX requests on sm_90a at D 128 run 8 warps x 16
# keys x 2 stages (one 128-key sub-tile round a CTA, one CTA an SM) with 128-key chunks
# (`small_batch_chunk`): B = 1 bf16 L = 1k / 8k / 32k 10.68 / 16.10 / 42.72 -> 9.60 / 13.92 / 40.34 µs,
# fp8 11.09 / 14.77 / 28.24 -> 8.70 / 11.62 / 26.83, B = 8 L = 1k 15.25 -> 14.93 (fp8 13.72 -> 11.96); it
# loses from B = 8 L = 8k for fp8 (41.2 -> 43.0) and from B = 32 for both (B = 128 L = 1k +14% / +23%),
# so the bound sits below 8 (B = 2 and 4 were not timed).
# B = 2 / 4 (03:34, same timer): bf16 L = 1k / 8k / 32k 10.77 / 24.94 / 69.53 and 11.96 / 39.83 / 128.7 µs
# against the general default's 10.80 / 26.90 / 70.76 and 13.04 / 40.82 / 129.5; fp8 9.58 / 14.54 and
# 10.50 / 26.73 against 11.58 / 17.24 and 11.87 / 27.18 at 1k / 8k, but 3-5% slower at L = 32k (43.18 vs
# 41.76, 76.66 vs 72.73): kept, short contexts being the common small-batch case.
SMALL_BATCH_DECODE = True
SMALL_BATCH_MAX = 4
# LEAN_TICKET (session 10): every default config takes DecodeConfig.lean_ticket (a no-op without the
# fused merge): the merging CTA's chain loses two fences, -0.4 to -0.5 µs wherever a request splits
# (H200 graph timer, 8x16x2 m128: bf16 B = 1 L = 1k 9.68 -> 9.22, 8k 13.79 -> 13.34, B = 8 L = 8k
# 70.83 -> 70.42; fp8 B = 1 8.78 -> 8.36, 11.68 -> 11.22) and neutral where none does (B = 8 L = 1k).
LEAN_TICKET = True


def small_batch_config(kv_dtype: str, head_dim: int, arch: str) -> DecodeConfig | None:
    """The small-batch decode shape (SMALL_BATCH_DECODE), or None where it was not measured (other
    archs, head dims) or does not fit."""
    if not SMALL_BATCH_DECODE or arch != "sm_90a" or head_dim != 128:
        return None
    cfg = DecodeConfig(warps=8, keys_per_warp=16, stages=2)
    return cfg if smem_bytes(kv_dtype, head_dim, head_dim, cfg) <= SMEM_LIMIT[arch] else None


# SINGLE_REQUEST_CLUSTER (session 10, H200 graph timer, Hq 32 / Hkv 8): plans of one request whose
# context capacity (max_page_table_width x page_size) is at most CLUSTER_MAX_CONTEXT keys take the
# small-batch shape as thread-block clusters of this many CTAs merging over distributed shared memory
# (DecodeConfig.cluster): B = 1 L = 1k bf16 9.06 -> 6.76 µs, fp8 8.24 -> 6.13; at L = 8k a tie (13.37 vs
# 13.30, fp8 11.77 vs 11.28) and at 32k 7-27% slower (each CTA takes L / 8 keys), at B = 2 slower
# everywhere; so one request and contexts up to 4k (interpolated: not timed between 1k and 8k).
SINGLE_REQUEST_CLUSTER = 8
CLUSTER_MAX_CONTEXT = 4096
# CLUSTER_PUSH (session 12, H200 graph timer, Hq 32 / Hkv 8, 8x16x2 c8 vs c8p in one job): the default
# cluster merges by st.async pushes (DecodeConfig.cluster_push) instead of DSMEM pulls behind two cluster
# barriers: B = 1 bf16 L = 1k / 4k 6.77 / 9.87 -> 6.62 / 9.41 µs, fp8 6.61 / 8.62 -> 5.77 / 8.27; in the
# llama-small block at T = 1, 37.10 -> 36.86 µs. GPU tests: test_paged_cluster_gpu.py -k push, 91 passed.
CLUSTER_PUSH = True


def cluster_by_default(max_batch: int, max_context: int, decode: DecodeConfig) -> bool:
    """Whether the plan's heuristic makes `decode` (its one-launch small-batch selection so far) a
    cluster of SINGLE_REQUEST_CLUSTER CTAs (see above; 0 turns it off)."""
    one_launch = decode.fused_merge and decode.fused_schedule and decode.pdl != "prefetch" and not decode.persistent
    return (
        SINGLE_REQUEST_CLUSTER > 0
        and max_batch == 1
        and max_context <= CLUSTER_MAX_CONTEXT
        and small_batch_chunk(decode)
        and one_launch
    )


def clustered_default(decode: DecodeConfig) -> DecodeConfig:
    """`decode` as the heuristic's cluster (`cluster_by_default`): SINGLE_REQUEST_CLUSTER CTAs, merged by
    pushes when CLUSTER_PUSH."""
    return replace(decode, cluster=SINGLE_REQUEST_CLUSTER, cluster_push=CLUSTER_PUSH)


# CLUSTER_PAIRS_MAX (session 37; the measurements behind it: docs/performance.md, session 37): plans of more than
# SMALL_BATCH_MAX and at most this many requests (capacity) on sm_90a at D 128 run the 8-warp tiles (fp8 8x32x2, as
# FP8_EIGHT_WARP_MAX already gives it; bf16 8x16x2, the small-batch shape) as cluster pairs merged by pushes
# (DecodeConfig.cluster_pairs, cluster 2, cluster_push): a live batch that pairs (`paired`: 2 B <= min(target_items,
# cap - B), B <= 8 on these tiles) merges each request's items two by two through DSMEM; one that does not runs the
# ticket merge as before, in clusters of two. Session 36 (s36_f / s36_h, capacity = live batch): B = 8 bf16 1k / 2k /
# 4k / 8k / 32k -20 / -11 / -5 / -3 / -1% against the heuristic, fp8 -15 / -27 / -5 / -3 / -2%, B = 16 -3 to +1%.
CLUSTER_PAIRS_MAX = 16


def pairs_tile_by_default(kv_dtype: str, head_dim: int, arch: str, max_batch: int | None) -> bool:
    """Whether a plan of `max_batch` requests takes CLUSTER_PAIRS_MAX's 8-warp tile and pairs (see above)."""
    return (
        CLUSTER_PAIRS_MAX > 0
        and max_batch is not None
        and SMALL_BATCH_MAX < max_batch <= CLUSTER_PAIRS_MAX
        and arch == "sm_90a"
        and head_dim == 128
        and kv_dtype in KV_DTYPES
    )


def pairs_by_default(kv_dtype: str, head_dim: int, arch: str, max_batch: int, decode: DecodeConfig) -> bool:
    """Whether the plan's heuristic makes `decode` (its one-launch selection so far) cluster pairs (CLUSTER_PAIRS_MAX)."""
    one_launch = decode.fused_merge and decode.fused_schedule and decode.pdl != "prefetch" and not decode.persistent
    eight_warps = decode.warps == 8 and not decode.cluster
    return pairs_tile_by_default(kv_dtype, head_dim, arch, max_batch) and one_launch and eight_warps


def paired_default(decode: DecodeConfig) -> DecodeConfig:
    """`decode` as the heuristic's cluster pairs (`pairs_by_default`): two CTAs a cluster, merged by pushes."""
    return replace(decode, cluster=2, cluster_push=True, cluster_pairs=True)


# KV16_HEADS_N8 (session 34, H200 graph timer, 8 calls a graph, Hq 32 / Hkv 8; docs/performance.md): 16-bit KV
# decode on the register-light tile (DecodeConfig.heads_n8) wherever the GQA group fits its 8 columns: bf16 B = 8
# L = 1k 14.00 -> 12.93 µs, B = 1 L = 1k / 8k 5.60 / 12.34 -> 5.15 / 11.60, B = 32 L = 1k 36.61 -> 35.85, the
# bandwidth-bound shapes within +-1%. fp8 KV takes it on the small-batch shape only (8x16x2, plans of at most
# SMALL_BATCH_MAX requests, s34_d: B = 1 L = 1k / 8k / 32k 4.95 / 10.22 / 25.53 -> 4.86 / 10.01 / 25.38, B = 2 / 4
# L = 8k / 1k 13.00 / 8.98 -> 12.37 / 8.57, nowhere slower); its batch tiles keep the m16 tile (8x32x2 +0.3 to
# +4% at B <= 8 below 32k; 4x32x2 +2-3% at B = 32 on the same split): there the e4m3 conversions and the per-item
# chain, not registers or MMAs, set the pace. sm_90a only until an SM120 GPU has measured it (sm_120a compiles it:
# bf16 4x16x2 196 -> 166 registers).
KV16_HEADS_N8 = True


def heads_n8_by_default(kv_dtype: str, group: int, arch: str, decode: DecodeConfig) -> bool:
    """Whether the plan's heuristic puts `decode` (its selection so far) on the heads_n8 tile (KV16_HEADS_N8 above)."""
    fits = KV16_HEADS_N8 and group <= N8_HEADS and arch == "sm_90a"
    return fits and (kv_dtype != "float8_e4m3fn" or small_batch_chunk(decode))


def small_batch_chunk(decode: DecodeConfig) -> bool:
    """Whether `decode` is the small-batch shape, whose schedule splits in chunks of one 128-key round
    (`split_schedule`) instead of two pipeline fills."""
    return (decode.warps, decode.keys_per_warp, decode.stages) == (8, 16, 2) and SMALL_BATCH_DECODE


def default_config(
    kv_dtype: str, head_dim: int, page_size: int, arch: str, max_batch: int | None = None
) -> DecodeConfig:
    """Unmeasured first choice: 4 warps x 16 keys, 3 stages on sm_90a (2 CTAs/SM fit in 227 KB),
    2 on the 99 KB parts; fewer stages, then fewer warps, until shared memory fits. The switches
    above change it (DECODE_LATENCY_FLAGS, FP8_TWO_PAGE_TILES and LEAN_TICKET are on, PERSISTENT_DECODE off);
    max_batch (the plan's request capacity) at most SMALL_BATCH_MAX takes `small_batch_config` (16-bit KV up to
    CLUSTER_PAIRS_MAX too, as the pairs' tile), and fp8's two-page tile changes its warps by max_batch
    (FP8_EIGHT_WARP_MAX, FP8_WIDE_BATCH)."""
    small_plan = max_batch is not None and max_batch <= SMALL_BATCH_MAX
    pairs_tile = kv_dtype != "float8_e4m3fn" and pairs_tile_by_default(kv_dtype, head_dim, arch, max_batch)
    small = small_batch_config(kv_dtype, head_dim, arch) if small_plan or pairs_tile else None
    cfg = small or _default_shape(kv_dtype, head_dim, page_size, arch)
    if not small and max_batch is not None:
        cfg = _fp8_batch_tile(cfg, kv_dtype, head_dim, arch, max_batch)
    if DECODE_LATENCY_FLAGS:
        cfg = DecodeConfig(cfg.warps, cfg.keys_per_warp, cfg.stages, fast_prologue=True, preload_lengths=True,
                           direct_items=True)  # fmt: skip
    if LEAN_TICKET:
        cfg = replace(cfg, lean_ticket=True)
    fp8 = kv_dtype == "float8_e4m3fn"
    if PERSISTENT_DECODE and fp8 and head_dim <= 128 and persistent_fits(kv_dtype, head_dim, head_dim, cfg):
        cfg = replace(cfg, persistent=True)
    return cfg


def _fp8_batch_tile(cfg: DecodeConfig, kv_dtype: str, head_dim: int, arch: str, max_batch: int) -> DecodeConfig:
    """fp8's two-page tile (4 warps x 32 keys, `_default_shape`'s choice where 32-key sub-tiles fit the
    pages) on 2 warps from FP8_WIDE_BATCH requests up to the one-launch schedule's FUSED_SCHEDULE_MAX_BATCH
    (the measured and GPU-tested range: the three-launch path above it keeps 4 warps), on 8 up to
    FP8_EIGHT_WARP_MAX (both with 2 stages, as measured); any other `cfg`, or a tile whose shared memory
    does not fit, stays as it is."""
    two_page_tile = (cfg.warps, cfg.keys_per_warp, kv_dtype, head_dim, arch) == (4, 32, "float8_e4m3fn", 128, "sm_90a")
    if not two_page_tile:
        return cfg
    if FP8_WIDE_BATCH and FP8_WIDE_BATCH <= max_batch <= FUSED_SCHEDULE_MAX_BATCH:  # measured and tested there
        warps = 2
    elif max_batch <= FP8_EIGHT_WARP_MAX:
        warps = 8
    else:
        return cfg
    tile = DecodeConfig(warps=warps, keys_per_warp=32, stages=2)
    return tile if smem_bytes(kv_dtype, head_dim, head_dim, tile) <= SMEM_LIMIT[arch] else cfg


def _default_shape(kv_dtype: str, head_dim: int, page_size: int, arch: str) -> DecodeConfig:
    limit = SMEM_LIMIT.get(arch, 99 * 1024)
    if FP8_TWO_PAGE_TILES and kv_dtype == "float8_e4m3fn" and head_dim == 128 and arch == "sm_90a":
        cfg = DecodeConfig(warps=4, keys_per_warp=32, stages=FP8_TILE_STAGES)
        if 2 * page_size >= 32 and smem_bytes(kv_dtype, head_dim, head_dim, cfg) <= limit:
            return cfg
    for warps in (4, 2):
        for stages in (3, 2) if arch == "sm_90a" else (2,):
            cfg = DecodeConfig(warps=warps, keys_per_warp=16, stages=stages)
            if smem_bytes(kv_dtype, head_dim, head_dim, cfg) <= limit:
                return cfg
    return DecodeConfig(warps=2, keys_per_warp=16, stages=2)


# ---- split-KV schedule ------------------------------------------------------------------------
SCHEDULE_THREADS = 512
FUSED_SCHEDULE_MAX_BATCH = 128  # each decode CTA scans the batch: 4 warp steps at 128 requests
# The plan's heuristic picks the one-launch decode (fused schedule up to FUSED_SCHEDULE_MAX_BATCH,
# fused merge) when True. Measured on the H200 (2026-11-30 08:30, bench_attention --batch 1 8 --kv
# bf16, docs/performance.md): "hfs" beat the three-launch "heuristic" in every case, B=1 L=1k 18.4 ->
# 13.5 µs, L=32k 60.1 -> 52.0, B=8 L=1k 29.6 -> 23.7, L=8k 85.8 -> 80.7.
FUSED_BY_DEFAULT = True
# split_schedule's shortest chunk counts pipeline fills of 16-key sub-tiles (True) instead of the
# config's own sub-tiles (False): fp8's two-page default 4x32x3 (4x32x2 since session 12) then keeps bf16's 256 keys instead of
# 512, so the small split shapes get shorter items (B=1 L=1k: 2 -> 4 items a head, B=1 L=8k: 16 -> 32,
# B=8 L=1k: 16 -> 24), each warp 2 sub-tiles in flight at once instead of 4 in two rounds; a batch
# whose total exceeds (target_items - B) x 512 keys splits as before. For the lead after the ':m256'
# rows of the session-7 sweep (docs/predictions/attention.md); off until measured.
MIN_CHUNK_16_KEY_FILLS = False


def decode_registers(head_dim: int, q_reload: bool = False) -> int:
    """Registers per thread of the decode kernel, as allocated (multiples of 8). ptxas (CUDA 13) on
    sm_90a and sm_120a, 2026-11-30: D 64: 126-146; D 128: 168-198 for every config and both KV
    dtypes, fused flags included; D 256: 255. With q_reload (session 14, sm_90a, one-launch flags):
    D 64 124, D 128 153-168, D 256 254."""
    if q_reload:
        return 256 if head_dim > 128 else 168 if head_dim > 64 else 128
    return 256 if head_dim > 128 else 200 if head_dim > 64 else 152


def bounded_registers(head_dim: int, config: DecodeConfig) -> int:
    """Registers per thread under the config's launch bound: ptxas keeps min_ctas CTAs' threads in
    the 64K registers (a multiple of 8, at most 255), else `decode_registers`."""
    # heads_n8 (not persistent): ptxas sm_90a / sm_120a 2026-12-04, D 128 124-168, D 64 96, D 256 202: the
    # q_reload figures bound it. On purpose not lower: fp8 8x16x2n fits two CTAs an SM by its 124 registers, and a
    # split for two (t33 / t66) ran 20-140% slower than the one-CTA split (session 34, s34_c)
    regs = decode_registers(head_dim, config.q_reload or (config.heads_n8 and not config.persistent))
    if config.min_ctas:
        regs = min(regs, 65536 // (config.min_ctas * 32 * config.warps) // 8 * 8)
    return regs


def resident_ctas(kv_dtype: str, head_dim: int, config: DecodeConfig, arch: str) -> int:
    """Decode CTAs one SM holds at once: the least of shared memory (2 at bf16 D 128 4 x 16 x 3 on
    sm_90a), the 64K registers (2 at D 128: 200 x 128 threads each; 3 with min_ctas 3) and the
    threads per SM."""
    threads = 32 * config.warps
    by_smem = SMEM_LIMIT.get(arch, 99 * 1024) // smem_bytes(kv_dtype, head_dim, head_dim, config)
    by_regs = 65536 // (bounded_registers(head_dim, config) * threads)
    return max(1, min(by_smem, by_regs, THREADS_PER_SM.get(arch, 1536) // threads))


def split_schedule(
    decode: DecodeConfig, kv_dtype: str, head_dim: int, num_kv_heads: int, sm_count: int, arch: str
) -> ScheduleConfig:
    """The split-KV schedule for `decode` on a GPU of `sm_count` SMs (the plan's heuristic).

    The schedule turns these static values into a live split on device: chunk = max(min_chunk,
    total / target_items), so a small batch (B * Hkv far below the SM count) gets many items per
    request and a large one (total / target_items >= every length) none.
    - target_items: one wave of resident CTAs over the KV heads, resident_ctas * SMs / Hkv (33 for
      bf16 KV, D 128, 4 warps x 3 stages, 8 KV heads on the H200's 132 SMs); the schedule makes at
      most that many items, so a split batch launches at most one wave. More items than one wave run
      in a second wave after the first: no more bytes in flight, more prologues and more partial
      rows for the merge to read, and a ragged last wave (the previous 4 * SMs / Hkv = 66 items plus
      one per request made 72 items, 2.2 waves, at B=8 L=32k; bench_attention --decode-configs
      times both).
    - min_chunk: two pipeline fills of the CTA (2 * warps * (stages - 1) * keys_per_warp; 256 keys
      for 4 x 16 x 3; with MIN_CHUNK_16_KEY_FILLS a fill counts 16-key sub-tiles). A CTA's fixed cost is about one memory latency (Q and the first sub-tiles
      travel together, then the partial row, the ticket and the merge); with two fills the KV
      stream still takes about two thirds of a shortest item's time.
    - tile_keys: items start on CTA-round boundaries, so no warp gets an extra partial sub-tile.
    Unmeasured as a whole; the choice it replaces (66 items, 256 keys) measured 0.70x FlashInfer at
    B=1 (docs/performance.md)."""
    slots = resident_ctas(kv_dtype, head_dim, decode, arch) * sm_count
    fill_keys = 16 if MIN_CHUNK_16_KEY_FILLS else decode.keys_per_warp
    fills = 1 if small_batch_chunk(decode) else 2
    return ScheduleConfig(
        tile_keys=decode.tile_keys,
        target_items=max(1, _ceil_div(slots, num_kv_heads)),
        min_chunk=max(decode.tile_keys, fills * decode.warps * (decode.stages - 1) * fill_keys),
        **pair_fields(decode),
    )


def pair_fields(decode: DecodeConfig) -> dict:
    """The ScheduleConfig fields that follow from a decode config's cluster pairs (pairs, group, budget): what
    `split_schedule` sets and the decode kernel takes from its config (a plan's override may carry a schedule
    without them)."""
    pairs = decode.cluster_pairs
    return dict(pairs=pairs, group=decode.cluster if pairs else 2, budget=pairs and decode.pair_budget)


# The extend / verify configuration, the bench entries and the fp8 fragment plumbing live in their own modules (one
# owner per file); re-exported here (the kernels and tests import them from _config).
from ._config_entry import parse_decode_entry  # noqa: E402, F401
from ._config_extend import (  # noqa: E402, F401
    ExtendConfig,
    default_extend_config,
    extend_item_capacity,
    extend_schedule_reference,
    extend_smem_bytes,
    parse_extend_config,
    why_not_extend,
)
from ._moves import (  # noqa: E402, F401
    PRMT_EVEN_DIM,
    PRMT_ODD_DIM,
    k_expand_moves,
    n8_k_expand_moves,
    n8_o_row_dim,
    n8_v_expand_moves,
    o_col_dim,
    q_dim_slot,
    q_slot_dim,
    v_expand_moves,
)
