"""Configuration, validity predicate and host-side schedule mirror of the extend / verify kernel
(`_kernel_extend`). Stdlib only, like `_config` (which re-exports these names)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ._config import SMEM_LIMIT, DecodeConfig, _ceil_div, kv_itemsize, why_not


# ---- extend / verify (FlashAttention-2 style, `_kernel_extend`) ----------------------------------
@dataclass(frozen=True)
class ExtendConfig:
    """block_m: packed query rows per CTA (tokens x the G heads of one KV head); block_n: keys per
    KV tile (multiple of 16); stages: cp.async buffers of K and V tiles; row_blocks: 16-row mma
    blocks per warp (1: Q stays in registers; 2: FlashAttention-2's 32 rows a warp, half the shared
    memory reads of K and V per flop, Q re-read from shared memory every tile); page_prefetch: load
    the page-table entries of the tile after next into registers while the current tile computes
    (off: each tile's lookups stall every thread for one L2 round trip before its cp.async issue).

    sub_tiles: each KV tile is processed as this many key slices of block_n / sub_tiles keys, each
    its own online-softmax step, software-pipelined: the QK^T mma of slice s + 1 is issued before the
    softmax of slice s and the softmax of the last slice runs beside the PV mma of the one before,
    so a warp's exp2 / max / sum work hides behind its own tensor-core work (with 1 only the second
    row block's softmax overlaps the first one's PV). With more than 1 the loop body is traced twice,
    with and without the causal / window / length mask, so each body is one basic block ptxas can
    interleave. Costs per extra slice: one more row-max/sum step and Q fragment reload (row_blocks 2).
    lazy_rescale: 0 rescales O by exp2(m_old - m_new) on every step (exact FlashAttention-2); N > 0
    keeps a row's running max while no row of the warp's step grows it by more than N (base-2 units,
    so P <= 2^N before normalisation; FlashAttention-4's trick) and then skips the O rescale (one FMUL
    per O register per step) behind a warp vote. Same result up to rounding: the final sum uses the
    same stale max.
    cross_tile: the QK^T of tile i + 1 is issued in tile i's step, before tile i's softmax, so that
    softmax runs beside the next tile's mma across the tile boundary too (sub_tiles pipelines only
    inside a tile). Needs stages >= 3 (tiles i and i + 1 resident while i + 2 loads) and sub_tiles 1;
    one more S accumulator live (block_n 32 keeps it at the register budget of 64 with sub_tiles 2).

    stagger (8 warps: warps w and w + 4 share a scheduler): the first warp group (warps 0-3) runs each tile's PV
    one step late (P kept in registers as the mma dtype, the ring slot kept one more step: stages >= 3
    with stages - 2 tiles in flight), so within a tile its softmax meets the other group's PV mma and
    the other group's softmax meets its QK^T mma; one CTA barrier per tile as before.
    split_issue (with stagger): only the late group issues the K/V cp.async (and page lookups), twice
    as many per thread; the other group's step has no issue block (SASS a tile: 1047 + 867
    instructions for the two groups instead of 1009 + ~1110).
    wide_copy: half as many copying threads across a key row, each moving two 16-byte vectors De / 2
    apart in one row (one source address, the second at an immediate offset) instead of one vector
    in each of two rows: the cp.async issue needs half the 64-bit address chains (SASS at 128 x 64:
    1097 instructions a tile instead of 1142; 256x64x3x2pgi's late group 1001 instead of 1047).

    ranked: the work list in rank-major order (`_kernel_extend_ranked`: every request's last tile
    first, then every second-to-last, ...; longest-processing-time first for a batch of one q_len)
    instead of request by request, so the run does not end on the last request's longest tiles.
    Single-tile plans only (the dual schedule keeps its order).

    early_pages (with page_prefetch): the first tile's page-table entries are read right after the
    work row, beside the request's q_len / kv_len, instead of after them: the prologue's dependent
    chain (work row -> lengths -> pages -> K/V) loses one L2 round trip an item (~0.4-0.5 µs), which
    one 256-row CTA an SM has nothing to hide behind (a window that skips the first tile looks the
    pages up as before).

    block_m 256 (8 warps at row_blocks 2, 64 tokens x G 4): one CTA an SM (the 8 warps of two 128-row
    CTAs), each K / V tile loaded once for twice the rows: half the cp.async issue and L2 traffic
    per flop; 3 or 4 stages fit its shared memory (sm_90a; not sm_120a's 99 KB). stages: 2 to 4.

    small / small_below (the live tile choice, `_kernel_extend_schedule`): with `small` an
    ExtendConfig (itself without `small`), the plan compiles both kernels, this one without its
    `small` (`single`) and `small`, sizes the work list for the one with fewer tokens a tile, and
    the device schedule picks per run: the small tile when the live token-weighted mean q_len
    (sum L^2 / sum L over the requests) is below `small_below` tokens, else this one. Both kernels are launched;
    the schedule gives the other one 0 items (its CTAs exit at their first load). small_below 0:
    always this tile; a huge one: always the small tile (the bench's way to time each path's
    overhead against the single-kernel plans). conditional (with small): a run captured into a
    torch CUDA graph puts each kernel in a CUDA-graph if-node on the schedule's choice, so the
    unchosen grid is not launched at all (eager runs launch both as without it). overlap (with
    small, not conditional): the small kernel is a programmatic dependent launch of the large one,
    whose CTAs each let it start: its grid starts as soon as the large one's last wave is
    resident, so whichever grid is dead exits beside the other's tail instead of after it.
    small_first (with small): the small kernel is launched first (with overlap: it triggers, the
    large one is the dependent). early_launch (with small, not conditional): the dual schedule
    triggers at its start and the first extend kernel is its programmatic dependent, waiting for its
    results (griddepcontrol.wait) first: that kernel's launch overlaps the schedule instead of
    following its completion (~1 µs a run, a hop the single-tile plan has too). persistent (with small): 1: the small kernel, 2: both, run as
    persistent CTAs (`_kernel_extend_persistent`: one wave, `resident_ctas` an SM, each looping over
    items drawn from a counter the dual schedule resets), so a dead grid costs one wave instead of
    16-32 (the small tile's 4-8k CTAs from L = 1k). The large tile's persistent loop spills more in
    its tile loop (SASS, sm_90a: 26 / 32 STL / LDL a tile in the second warp group, 13 / 13 without),
    the small one's less (6 / 6 against 15 / 16): hence 1 (`r`) and 2 (`R`)."""

    block_m: int = 64
    block_n: int = 64
    stages: int = 2
    row_blocks: int = 1
    page_prefetch: bool = False
    sub_tiles: int = 1
    lazy_rescale: int = 0
    cross_tile: bool = False
    stagger: bool = False
    split_issue: bool = False
    wide_copy: bool = False
    early_pages: bool = False
    ranked: bool = False
    small: ExtendConfig | None = None
    small_below: int = 768  # = SMALL_BELOW
    conditional: bool = False
    overlap: bool = False
    small_first: bool = False
    early_launch: bool = False
    persistent: int = 0

    def __repr__(self) -> str:  # later fields only when set: the four-field form stays as it was
        extra = ", page_prefetch=True" if self.page_prefetch else ""
        extra += f", sub_tiles={self.sub_tiles}" if self.sub_tiles != 1 else ""
        extra += f", lazy_rescale={self.lazy_rescale}" if self.lazy_rescale else ""
        extra += ", cross_tile=True" if self.cross_tile else ""
        extra += ", stagger=True" if self.stagger else ""
        extra += ", split_issue=True" if self.split_issue else ""
        extra += ", wide_copy=True" if self.wide_copy else ""
        extra += ", early_pages=True" if self.early_pages else ""
        extra += ", ranked=True" if self.ranked else ""
        extra += f", small={self.small!r}, small_below={self.small_below}" if self.small is not None else ""
        extra += ", conditional=True" if self.conditional else ""
        extra += ", overlap=True" if self.overlap else ""
        extra += ", small_first=True" if self.small_first else ""
        extra += ", early_launch=True" if self.early_launch else ""
        extra += f", persistent={self.persistent}" if self.persistent else ""
        return (
            f"ExtendConfig(block_m={self.block_m}, block_n={self.block_n}, stages={self.stages}, "
            f"row_blocks={self.row_blocks}{extra})"
        )

    @property
    def slice_keys(self) -> int:
        """Keys of one online-softmax step (block_n / sub_tiles)."""
        return self.block_n // self.sub_tiles

    @property
    def warps(self) -> int:
        return self.block_m // (16 * self.row_blocks)

    def tokens_per_tile(self, group: int) -> int:
        """Query tokens one CTA owns: block_m // G (rows past tokens * G are padding)."""
        return self.block_m // group

    @property
    def single(self) -> ExtendConfig:
        """This tile's kernel config without the live choice (its compile key: the same kernel as
        the single-tile plan's)."""
        return dataclasses.replace(
            self, small=None, small_below=768, conditional=False, overlap=False, small_first=False,
            early_launch=False, persistent=0,
        )  # fmt: skip

    def pdl_modes(self) -> tuple[str, ...]:
        """`compile_extend`'s pdl argument of each of `tiles()`: overlap: the first launched triggers,
        the other is the dependent; early_launch: the first launched is the schedule's dependent and
        waits for its results ("wait", with overlap "wait+trigger")."""
        if self.small is None:
            return ("none",)
        first = "trigger" if self.overlap else "none"
        if self.early_launch:
            first = "wait+trigger" if self.overlap else "wait"
        second = "dependent" if self.overlap else "none"
        return (second, first) if self.small_first else (first, second)

    def persistent_tiles(self) -> tuple[bool, ...]:
        """Whether each of `tiles()` runs as persistent CTAs (persistent 1: the small one, 2: both)."""
        if self.small is None:
            return (False,)
        return (self.persistent >= 2, self.persistent >= 1)

    def tiles(self) -> tuple[ExtendConfig, ...]:
        """The kernel configs the plan compiles: (self,) or (single, small)."""
        return (self,) if self.small is None else (self.single, self.small)

    def list_tokens(self, group: int) -> int:
        """Tokens a tile of the work list is sized for: the fewest over `tiles()` (most items)."""
        return min(c.tokens_per_tile(group) for c in self.tiles())


def extend_smem_bytes(kv_dtype: str, head_dim: int, head_dim_v: int, config: ExtendConfig) -> int:
    """Q tile (fp8 path: plus its raw copy) + `stages` K and V tiles + the fp8 reduction slots."""
    fp8 = kv_dtype == "float8_e4m3fn"
    q = config.block_m * head_dim * 2 * (2 if fp8 else 1)
    kv = config.stages * config.block_n * (head_dim + head_dim_v) * kv_itemsize(kv_dtype)
    return q + kv + 1024 + 64


def resident_ctas(kv_dtype: str, head_dim: int, head_dim_v: int, config: ExtendConfig, arch: str) -> int:
    """CTAs of `config` an SM can hold (at least 1): its shared memory against the arch's, and 255
    registers a thread (what ptxas gives the row_blocks 2 tiles) against the 64k register file: the
    128-row tiles 2, the 256-row ones 1. The persistent grid's size (`ExtendConfig.persistent`)."""
    smem = SMEM_LIMIT.get(arch, 99 * 1024) // extend_smem_bytes(kv_dtype, head_dim, head_dim_v, config)
    regs = 65536 // (256 * 32 * config.warps)
    return max(1, min(smem, regs))


def persistent_grid_rows(work_rows: int, ctas: int, num_kv_heads: int) -> int:
    """CTA rows a KV head of a persistent extend kernel (`_kernel_extend_persistent`): enough for
    `ctas` CTAs (rounded up to whole rows), never more than the work rows, at least 1."""
    return max(1, min(work_rows, -(-ctas // num_kv_heads)))


def persistent_item_order(count: int, grid_rows: int, num_kv_heads: int, finish_order) -> list[tuple[int, int]]:
    """The persistent kernel's (work row, KV head) pairs in the order they start, in Python: CTA (kvh,
    row) first runs linear item row * Hkv + kvh (row < grid_rows), then each CTA that finishes an item
    draws the next linear index grid_rows * Hkv, + 1, ... (`finish_order(pending)` picks which running
    CTA finishes next: any order the hardware may take). Indices at or past count * Hkv exit."""
    ctas = grid_rows * num_kv_heads
    running = [i for i in range(ctas) if i // num_kv_heads < count]
    started = list(running)
    drawn = 0
    while running:
        running.remove(finish_order(running))
        nxt = ctas + drawn
        drawn += 1
        if nxt // num_kv_heads < count:
            running.append(nxt)
            started.append(nxt)
    return [(i // num_kv_heads, i % num_kv_heads) for i in started]


def why_not_extend(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, config, arch):
    """None when the extend kernel implements this problem with `config` on `arch`, else why not
    (with `config.small`: both tiles, the small one's reason prefixed "small: ")."""
    if isinstance(config, ExtendConfig) and config.small is None:
        if config.conditional is not False or config.overlap is not False:
            return f"conditional (CUDA-graph if-nodes) and overlap need small (two tiles), got {config}"
        if config.small_first is not False or config.persistent != 0 or config.early_launch is not False:
            return (
                f"small_first, early_launch and persistent need small (two tiles; the dual schedule resets the "
                f"counter and triggers the early launch), got {config}"
            )
    if isinstance(config, ExtendConfig) and config.small is not None:
        dims = (q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size)
        small, below = config.small, config.small_below
        if not isinstance(small, ExtendConfig) or small.small is not None:
            return f"small must be an ExtendConfig without its own small, got {small!r}"
        if not isinstance(below, int) or isinstance(below, bool) or not 0 <= below < 2**31:
            return f"small_below must be an int in [0, 2^31) (query tokens), got {below!r}"
        for flag in ("conditional", "overlap", "small_first", "early_launch"):
            if not isinstance(getattr(config, flag), bool):
                return f"{flag} must be a bool, got {getattr(config, flag)!r}"
        if config.ranked is not False or config.small.ranked is not False:
            return f"ranked is for single-tile plans (the dual schedule keeps its order), got {config}"
        if config.conditional and config.early_launch:
            return "conditional (if-nodes) and early_launch (a programmatic dependent launch) exclude each other"
        if type(config.persistent) is not int or config.persistent not in (0, 1, 2):
            return f"persistent must be 0, 1 (the small kernel) or 2 (both), got {config.persistent!r}"
        if config.conditional and config.overlap:
            return "conditional (if-nodes: one grid launched) and overlap (both, overlapped) exclude each other"
        reason = why_not_extend(*dims, config.single, arch)
        if reason is not None:
            return reason
        reason = why_not_extend(*dims, small, arch)
        return None if reason is None else f"small: {reason}"
    reason = why_not(
        q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, DecodeConfig(), arch
    )
    if reason is not None and "shared memory" not in reason:
        return reason
    c = config
    if c.block_m not in (16, 32, 64, 128, 256) or c.block_n not in (16, 32, 64, 128) or c.stages not in (2, 3, 4):
        return f"config out of range: {c}"
    if c.row_blocks not in (1, 2) or c.block_m < 16 * c.row_blocks:
        return f"config out of range: {c}"
    for flag in ("page_prefetch", "cross_tile", "stagger", "split_issue", "wide_copy", "early_pages", "ranked"):
        if not isinstance(getattr(c, flag), bool):
            return f"{flag} must be a bool, got {getattr(c, flag)!r}"
    if c.early_pages and not c.page_prefetch:
        return f"early_pages needs page_prefetch (the first tile's pages in registers), got {c}"
    if c.cross_tile and (c.stages < 3 or c.sub_tiles != 1):
        return f"cross_tile needs stages >= 3 and sub_tiles 1, got {c}"
    if c.stagger and (c.warps != 8 or c.stages < 3 or c.sub_tiles != 1 or c.cross_tile):
        return f"stagger needs 8 warps, stages >= 3, sub_tiles 1 and no cross_tile, got {c}"
    if c.split_issue and not c.stagger:
        return f"split_issue needs stagger, got {c}"
    if not isinstance(c.sub_tiles, int) or isinstance(c.sub_tiles, bool) or c.sub_tiles not in (1, 2, 4):
        return f"sub_tiles must be 1, 2 or 4, got {c.sub_tiles!r}"
    if c.block_n % (16 * c.sub_tiles):
        return f"block_n {c.block_n} must split into sub_tiles {c.sub_tiles} slices of a multiple of 16 keys"
    lazy = c.lazy_rescale
    if not isinstance(lazy, int) or isinstance(lazy, bool) or not 0 <= lazy <= 15:
        return f"lazy_rescale must be an int in [0, 15] (0: off; P <= 2^N stays below fp16's max), got {lazy!r}"
    need = extend_smem_bytes(kv_dtype, head_dim, head_dim_v, c)
    if need > SMEM_LIMIT.get(arch, 99 * 1024):
        return f"{c} needs {need} bytes of shared memory, {arch} has {SMEM_LIMIT.get(arch)}"
    return None


# The sm_90a extend default's switches, each off until an H200 run says so (docs/predictions/
# attention_extend.md, session 8): EARLY_PAGES: the 256-row tile's early_pages ('256x64x3x2pgiwe');
# LIVE_TILE_CHOICE: the live choice (ExtendConfig.small) of that tile and the 128-row one;
# LIVE_TILE_CONDITIONAL: its CUDA-graph if-node form ('@768c': the device's torch 2.11 has no if-nodes,
# so it launches both), else LIVE_TILE_LAUNCH ('@768oslr': the small kernel first, persistent and
# launched behind the schedule, the large one its programmatic dependent).
# H200 2026-11-30 21:16 (session 8, one benchmark at a time, SDPA FA2 in the same job): the live choice
# with the PDL overlap ('@768o') reads 165.4 / 482.3 / 1655 / 3070 µs at L = 512 / 1k / 2k / 4k, 1.11 /
# 1.14 / 1.13 / 1.13x FA2, against the single 256-row tile's 168.1 (1.09x) / 481.7 / 1642 / 3026: the one
# default that holds 1.1x at every length. '@768oslr', early_pages and the ranked list measured slower
# (docs/performance.md, session 8).
EARLY_PAGES = False
RANKED_LIST = False  # the single 256-row tile's ranked work list ('k'); not with the live choice
LIVE_TILE_CHOICE = True
LIVE_TILE_CONDITIONAL = False
LIVE_TILE_LAUNCH = dict(overlap=True)  # '@768o'; the other forms: small_first, early_launch, persistent
SMALL_BELOW = 768  # token-weighted mean live q_len under which the 128-row tile runs: 512 -> small, 1k -> large


def default_extend_config(kv_dtype: str, head_dim: int, arch: str, mode: str = "extend") -> ExtendConfig:
    """extend, bf16/fp16 KV, D <= 128: 128 rows, 64-key tiles, two stages, FlashAttention-2's 32 rows a
    warp (row_blocks 2: half the shared-memory reads of K and V per flop) and page prefetch. Measured
    on the H200 (2026-11-30 06:40, bench_attention --mode extend, 32 q / 8 kv heads, causal): 1.12x /
    1.05x / 1.06x / 0.99x SDPA's FA2 backend at L = 512 / 1k / 2k / 4k, the fastest of six configs
    within 2% at every length (the 16-rows-a-warp 128 x 64 below: 0.88-0.96x).

    On sm_90a (session 6, 2026-11-30 14:03, graph timer, same cases): 256 rows (8 warps x 32 rows, one
    CTA an SM), 3 stages, stagger (warps 0-3 run each tile's PV one step late so the two warps of a
    scheduler alternate softmax and mma), split_issue (only the late group issues the K/V copies) and
    wide_copy (two 16-byte vectors of one key row per copying thread): 168.4 / 493.5 / 1675 / 3108 µs
    at L = 512 / 1k / 2k / 4k against the 128-row default's 161.3 / 524.9 / 1806 / 3360 (SDPA FA2
    184.8 / 546.1 / 1873 / 3508): faster from 1k, 4% slower at 512 (one CTA an SM leaves its prologue
    and epilogue exposed). It does not fit sm_120a's 99 KB.

    Otherwise (fp8 KV, whose timing with row_blocks 2 has not been measured; verify; D 256) the first
    choice: 16 rows per warp (Q, S and O in registers: ~190 at D 128, no spills), 64-key tiles (32 at
    D 256), two stages.

    extend, D <= 128: block_m 128 (8 warps). Each CTA streams the keys below its diagonal once for
    block_m rows, so L2->SM traffic is (D + Dv) * 2 bytes per key per block_m rows: 64 rows need
    ~5 TB/s at 320 TFLOP/s causal (the H200's L2 is about that), 128 rows half of it.
    verify (q_len * G rows of a few tokens) and D 256 (255 registers a thread): block_m 64."""
    limit = SMEM_LIMIT.get(arch, 99 * 1024)
    fa2 = ExtendConfig(block_m=128, block_n=64, stages=2, row_blocks=2, page_prefetch=True)
    if mode == "extend" and head_dim <= 128 and kv_dtype != "float8_e4m3fn" and arch == "sm_90a":
        wide = ExtendConfig(
            block_m=256, block_n=64, stages=3, row_blocks=2, page_prefetch=True,
            stagger=True, split_issue=True, wide_copy=True, early_pages=EARLY_PAGES,
        )  # fmt: skip
        if extend_smem_bytes(kv_dtype, head_dim, head_dim, wide) <= limit:
            if LIVE_TILE_CHOICE and extend_smem_bytes(kv_dtype, head_dim, head_dim, fa2) <= limit:
                launch = {"conditional": True} if LIVE_TILE_CONDITIONAL else LIVE_TILE_LAUNCH
                return dataclasses.replace(wide, small=fa2, small_below=SMALL_BELOW, **launch)
            return dataclasses.replace(wide, ranked=RANKED_LIST)
    if mode == "extend" and head_dim <= 128 and kv_dtype != "float8_e4m3fn":
        if extend_smem_bytes(kv_dtype, head_dim, head_dim, fa2) <= limit:
            return fa2
    rows = (128, 64) if mode == "extend" and head_dim <= 128 else (64,)
    for block_m in rows:
        for block_n in (64, 32, 16) if head_dim <= 128 else (32, 16):
            cfg = ExtendConfig(block_m=block_m, block_n=block_n, stages=2)
            if extend_smem_bytes(kv_dtype, head_dim, head_dim, cfg) <= limit:
                return cfg
    return ExtendConfig(block_m=64, block_n=16, stages=2)


def extend_item_capacity(max_total_q: int, max_batch: int, tokens_per_tile: int) -> int:
    """Work items of the extend schedule: sum_b ceil(L_b / T) <= ceil(total_q / T) + batch."""
    return _ceil_div(max_total_q, tokens_per_tile) + max_batch


def extend_schedule_reference(cu_seqlens_q, tokens_per_tile: int):
    """The extend schedule kernel's output in Python: (work rows (request, first token), count).

    Request b's tiles start at tokens 0, T, 2T, ... of its q_len; they are listed last tile first
    (the causal tiles that see the most keys launch first). Non-monotone rows count as empty."""
    cu = [int(x) for x in cu_seqlens_q]
    work = []
    for b in range(len(cu) - 1):
        length = max(0, cu[b + 1] - cu[b])
        for j in reversed(range(_ceil_div(length, tokens_per_tile))):
            work.append((b, j * tokens_per_tile))
    return work, len(work)


RANK_CLASSES = 64  # `_kernel_extend_ranked`: ranks 0 .. 62 each their own class, the rest one


def ranked_extend_schedule_reference(cu_seqlens_q, tokens_per_tile: int):
    """The ranked schedule's list in Python, (rows, count): `extend_schedule_reference`'s items
    ordered by class min(tiles_b - 1 - j, RANK_CLASSES - 1), within a class by request then tile (the
    device orders a class by atomic arrival instead: compare classes, not positions)."""
    work, count = extend_schedule_reference(cu_seqlens_q, tokens_per_tile)
    return sorted(work, key=lambda w: (rank_class(cu_seqlens_q, w, tokens_per_tile), w)), count


def rank_class(cu_seqlens_q, row, tokens_per_tile: int) -> int:
    """The class of work row (request, first token) in the ranked order."""
    cu = [int(x) for x in cu_seqlens_q]
    b, tok0 = row
    tiles = _ceil_div(max(0, cu[b + 1] - cu[b]), tokens_per_tile)
    return min(tiles - 1 - tok0 // tokens_per_tile, RANK_CLASSES - 1)


def live_small_tile(cu_seqlens_q, small_below: int) -> bool:
    """The dual schedule's choice: the token-weighted mean q_len sum L^2 / sum L (the q_len of the
    request an average query token belongs to) < small_below, compared exactly as
    sum L^2 < small_below * sum L. No live token: the large tile (nothing is launched either way)."""
    cu = [int(x) for x in cu_seqlens_q]
    lens = [max(0, b - a) for a, b in zip(cu, cu[1:])]
    return sum(n * n for n in lens) < small_below * sum(lens)


def dual_extend_schedule_reference(cu_seqlens_q, large_tokens: int, small_tokens: int, small_below: int):
    """The dual schedule kernel's output in Python: (work rows, (large count, small count), small).

    The work list is `extend_schedule_reference`'s for the chosen tile; the other kernel's count is
    0. The list's capacity is `extend_item_capacity` of the smaller tile."""
    small = live_small_tile(cu_seqlens_q, small_below)
    work, count = extend_schedule_reference(cu_seqlens_q, small_tokens if small else large_tokens)
    return work, ((0, count) if small else (count, 0)), small


def parse_extend_config(text: str) -> ExtendConfig:
    """'128x64x2x1' -> ExtendConfig(block_m=128, block_n=64, stages=2, row_blocks=1); then optional flags
    in this order: 'p' page_prefetch, 'c' cross_tile, 'g' stagger, 'i' split_issue, 'w' wide_copy,
    'e' early_pages, 'k' ranked, 'sN' sub_tiles=N, 'lN' lazy_rescale=N ('128x64x2x2ps2l8', '128x32x3x2pc', '256x64x3x2pgiw').
    'LARGE+SMALL[@N][c|o][s][l][r|R]': the live choice (ExtendConfig.small = SMALL, small_below = N,
    default 768; 'c': conditional, CUDA-graph if-nodes; 'o': overlap; 's': small_first; 'l':
    early_launch; 'r': persistent 1 (the small kernel), 'R': 2 (both)), e.g.
    '256x64x3x2pgiw+128x64x2x2p@768c', '...@768osr', '...@768oslr'."""
    if "+" in text:
        large, _, rest = text.partition("+")
        small, at, tail = rest.partition("@")
        tail_match = re.fullmatch(r"(\d+)([co]?)(s?)(l?)([rR]?)", tail) if at else None
        if at and tail_match is None:
            raise ValueError(
                f"an extend config's '@N[c|o][s][l][r|R]' (small_below, conditional / overlap, small_first, "
                f"early_launch, persistent) needs a number of tokens, got {text!r}"
            )
        below, flag, first, launch, pers = tail_match.groups() if tail_match else ("768", "", "", "", "")
        return dataclasses.replace(
            parse_extend_config(large), small=parse_extend_config(small), small_below=int(below),
            conditional=flag == "c", overlap=flag == "o", small_first=first == "s", early_launch=launch == "l",
            persistent={"": 0, "r": 1, "R": 2}[pers],
        )  # fmt: skip
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)x(\d+)(p?)(c?)(g?)(i?)(w?)(e?)(k?)(?:s(\d+))?(?:l(\d+))?", text)
    if match is None:
        raise ValueError(
            f"an extend config is block_m x block_n x stages x row_blocks[p] like 128x64x2x1 (then optional "
            f"c: cross_tile, g: stagger, i: split_issue, w: wide_copy, sN: sub_tiles, lN: lazy_rescale, as in 128x64x2x2ps2l8), got {text!r}"
        )
    m, n, st, rb, p, cross, stagger, split, wide, early, ranked, sub, lazy = match.groups()
    flags = dict(page_prefetch=bool(p), cross_tile=bool(cross), stagger=bool(stagger), split_issue=bool(split), wide_copy=bool(wide),
                 early_pages=bool(early), ranked=bool(ranked), sub_tiles=int(sub or 1), lazy_rescale=int(lazy or 0))  # fmt: skip
    return ExtendConfig(int(m), int(n), int(st), int(rb), **flags)
