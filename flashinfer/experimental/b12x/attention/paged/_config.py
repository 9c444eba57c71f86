"""Configurations, validity predicates and host-side mirrors of the paged-attention kernels.

Stdlib only: `api.plan` validates caps and the tests check the schedule without importing the CuTe
DSL. The kernels (`_kernel_decode`, `_kernel_split`) import these and list this module in their
compile fingerprints, so an edit here recompiles them.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("bfloat16", "float16")
KV_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
LOG2E = 1.4426950408889634
M_TILE = 16  # query rows per MMA tile: the G heads of one KV head, zero-padded
SMEM_LIMIT = {"sm_90a": 227 * 1024, "sm_120a": 99 * 1024, "sm_121a": 99 * 1024}


# ---- configuration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeConfig:
    """warps: per CTA; keys_per_warp: keys of one pipeline stage of one warp (<= page_size, multiple
    of 16); stages: cp.async buffers per warp; fused_merge: the CTA of a split request that finishes
    last (an atomic ticket per (request, KV head)) merges the request's partial rows itself, instead
    of a third launch (`_kernel_split.Merge`) doing it; fused_schedule: every warp of every decode CTA
    recomputes the split from cache_seqlens (`_kernel_split.Schedule.locate`, O(batch / 32) steps,
    so batches up to FUSED_SCHEDULE_MAX_BATCH) instead of a first launch (`Schedule`) writing it.
    Both set: one launch."""

    warps: int = 4
    keys_per_warp: int = 16
    stages: int = 2
    fused_merge: bool = False
    fused_schedule: bool = False

    def __repr__(self) -> str:  # the fused flags only when set: the three-field form stays as it was
        extra = ", fused_merge=True" if self.fused_merge else ""
        extra += ", fused_schedule=True" if self.fused_schedule else ""
        return f"DecodeConfig(warps={self.warps}, keys_per_warp={self.keys_per_warp}, stages={self.stages}{extra})"

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
    return q + max(kv, epilogue) + ticket + 1024


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
    if head_dim != head_dim_v or head_dim not in (64, 128, 256):
        return f"head_dim_qk == head_dim_vo in (64, 128, 256) is implemented, got {head_dim}/{head_dim_v}"
    if page_size not in (16, 32, 64, 128):
        return f"page_size must be 16, 32, 64 or 128, got {page_size}"
    c = config
    if c.warps not in (2, 4, 8) or c.keys_per_warp not in (16, 32) or c.stages not in (2, 3, 4):
        return f"config out of range: {c}"
    if not isinstance(c.fused_merge, bool):
        return f"fused_merge must be a bool, got {c.fused_merge!r}"
    if not isinstance(c.fused_schedule, bool):
        return f"fused_schedule must be a bool, got {c.fused_schedule!r}"
    if c.keys_per_warp > page_size:
        return f"keys_per_warp {c.keys_per_warp} > page_size {page_size}: a warp's sub-tile must lie in one page"
    need = smem_bytes(kv_dtype, head_dim, head_dim_v, c)
    if need > SMEM_LIMIT.get(arch, 99 * 1024):
        return f"{c} needs {need} bytes of shared memory, {arch} has {SMEM_LIMIT.get(arch)}"
    return None


def default_config(kv_dtype: str, head_dim: int, page_size: int, arch: str) -> DecodeConfig:
    """Unmeasured first choice: 4 warps x 16 keys, 3 stages on sm_90a (2 CTAs/SM fit in 227 KB),
    2 on the 99 KB parts; fewer stages, then fewer warps, until shared memory fits."""
    limit = SMEM_LIMIT.get(arch, 99 * 1024)
    for warps in (4, 2):
        for stages in (3, 2) if arch == "sm_90a" else (2,):
            cfg = DecodeConfig(warps=warps, keys_per_warp=16, stages=stages)
            if smem_bytes(kv_dtype, head_dim, head_dim, cfg) <= limit:
                return cfg
    return DecodeConfig(warps=2, keys_per_warp=16, stages=2)


def q_slot_dim(slot: int) -> int:
    """fp8 path: head dim (within a 16-block) the mma k-slot `slot` multiplies (see docstring)."""
    return 4 * ((slot % 8) // 2) + (slot % 2) + 2 * (slot // 8)


def o_col_dim(n: int) -> int:
    """fp8 path: head dim that column n of the O accumulator holds (see docstring)."""
    return 16 * (n // 16) + 2 * (n % 8) + (n // 8) % 2


# ---- split-KV schedule ------------------------------------------------------------------------
NO_SPLIT_CHUNK = 1 << 30
SCHEDULE_THREADS = 512
FUSED_SCHEDULE_MAX_BATCH = 128  # each decode CTA scans the batch: 4 warp steps at 128 requests
# The plan's heuristic picks the one-launch decode (fused schedule up to FUSED_SCHEDULE_MAX_BATCH,
# fused merge) when True. Measured on the H200 (2026-11-30 08:30, bench_attention --batch 1 8 --kv
# bf16, docs/performance.md): "hfs" beat the three-launch "heuristic" in every case, B=1 L=1k 18.4 ->
# 13.5 µs, L=32k 60.1 -> 52.0, B=8 L=1k 29.6 -> 23.7, L=8k 85.8 -> 80.7.
FUSED_BY_DEFAULT = True


@dataclass(frozen=True)
class ScheduleConfig:
    """tile_keys: split granularity (keys a decode CTA covers per round); target_items: the most
    items a split batch makes (chunk = total / (target_items - B): each request's round-up adds at
    most one item); a batch of B >= target_items is not split; min_chunk: the shortest chunk (keys)."""

    tile_keys: int = 64
    target_items: int = 264
    min_chunk: int = 256


def _ceil_div(a, b):
    return (a + b - 1) // b


def why_not_schedule(config) -> str | None:
    """None when `config` is a usable ScheduleConfig, else why not (any values >= 1 are correct: the
    decode kernel masks keys outside its item's range, so a chunk need not align to anything)."""
    if not isinstance(config, ScheduleConfig):
        return f"schedule must be a ScheduleConfig, got {type(config).__name__}"
    for name in ("tile_keys", "target_items", "min_chunk"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"ScheduleConfig.{name} must be an int >= 1, got {value!r}"
    return None


THREADS_PER_SM = {"sm_90a": 2048, "sm_120a": 1536, "sm_121a": 1536}


def decode_registers(head_dim: int) -> int:
    """Registers per thread of the decode kernel, as allocated (multiples of 8). ptxas (CUDA 13) on
    sm_90a and sm_120a, 2026-11-30: D 64: 126-146; D 128: 168-198 for every config and both KV
    dtypes, fused flags included; D 256: 255."""
    return 256 if head_dim > 128 else 200 if head_dim > 64 else 152


def resident_ctas(kv_dtype: str, head_dim: int, config: DecodeConfig, arch: str) -> int:
    """Decode CTAs one SM holds at once: the least of shared memory (2 at bf16 D 128 4 x 16 x 3 on
    sm_90a), the 64K registers (2 at D 128: 200 x 128 threads each) and the threads per SM."""
    threads = 32 * config.warps
    by_smem = SMEM_LIMIT.get(arch, 99 * 1024) // smem_bytes(kv_dtype, head_dim, head_dim, config)
    by_regs = 65536 // (decode_registers(head_dim) * threads)
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
      for 4 x 16 x 3). A CTA's fixed cost is about one memory latency (Q and the first sub-tiles
      travel together, then the partial row, the ticket and the merge); with two fills the KV
      stream still takes about two thirds of a shortest item's time.
    - tile_keys: items start on CTA-round boundaries, so no warp gets an extra partial sub-tile.
    Unmeasured as a whole; the choice it replaces (66 items, 256 keys) measured 0.70x FlashInfer at
    B=1 (docs/performance.md)."""
    slots = resident_ctas(kv_dtype, head_dim, decode, arch) * sm_count
    return ScheduleConfig(
        tile_keys=decode.tile_keys,
        target_items=max(1, _ceil_div(slots, num_kv_heads)),
        min_chunk=max(decode.tile_keys, 2 * decode.keys_in_flight),
    )


def _request_split(length, chunk, tile):
    """(n_items, chunk_len) of one request: equal chunks, each a multiple of `tile` keys."""
    if length <= 0:
        return 1, tile
    n = _ceil_div(length, chunk)
    size = _ceil_div(_ceil_div(length, n), tile) * tile
    return _ceil_div(length, size), size


def chunk_size(total: int, batch: int, cap: int, config: ScheduleConfig) -> int:
    target = min(config.target_items, cap) - batch
    if target <= 0:
        return NO_SPLIT_CHUNK
    chunk = max(config.min_chunk, _ceil_div(total, target))
    return _ceil_div(chunk, config.tile_keys) * config.tile_keys


def schedule_reference(seqlens, window_left: int, cap: int, config: ScheduleConfig):
    """The schedule kernel's output in Python: (work rows, request rows, item count)."""
    lens = [int(n) for n in seqlens]
    visible = [n if window_left < 0 else min(n, window_left + 1) for n in lens]
    chunk = chunk_size(sum(visible), len(lens), cap, config)
    work, reqs = [], []
    for b, (n, length) in enumerate(zip(lens, visible)):
        items, size = _request_split(length, chunk, config.tile_keys)
        reqs.append((len(work), items))
        lo = n - length
        for c in range(items):
            work.append((b, lo + c * size, min(lo + (c + 1) * size, n), int(items > 1)))
    return work, reqs, len(work)


# ---- fp8 fragment plumbing (shared by the decode kernel and its CPU emulation test) ---------------
PRMT_EVEN_DIM, PRMT_ODD_DIM = 0x6420, 0x7531


def k_expand_moves(fake_kblocks: int) -> tuple[tuple[int, int, int], ...]:
    """(fake k-block, fake register, real k-block): fake register h of fake k-block kb (4 e4m3 of
    one key) becomes real k-block 2kb + h (bytes 0-1 -> register 0, bytes 2-3 -> register 1)."""
    return tuple((kb, h, 2 * kb + h) for kb in range(fake_kblocks) for h in range(2))


def v_expand_moves(fake_nblocks: int) -> tuple[tuple[int, int, int], ...]:
    """(fake n-block, prmt selector, real n-block): prmt(reg0, reg1, selector) of fake n-block nb
    gathers 4 keys of one head dim; it becomes real n-block 2nb (even dims) or 2nb + 1 (odd)."""
    return tuple((nb, PRMT_ODD_DIM if e else PRMT_EVEN_DIM, 2 * nb + e) for nb in range(fake_nblocks) for e in range(2))


def q_dim_slot(d16: int) -> int:
    """Inverse of `q_slot_dim`: the mma k-slot that head dim d16 (within a 16-block) goes to."""
    return 2 * (d16 // 4) + d16 % 2 + 8 * ((d16 // 2) % 2)


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
    one more S accumulator live (block_n 32 keeps it at the register budget of 64 with sub_tiles 2)."""

    block_m: int = 64
    block_n: int = 64
    stages: int = 2
    row_blocks: int = 1
    page_prefetch: bool = False
    sub_tiles: int = 1
    lazy_rescale: int = 0
    cross_tile: bool = False

    def __repr__(self) -> str:  # later fields only when set: the four-field form stays as it was
        extra = ", page_prefetch=True" if self.page_prefetch else ""
        extra += f", sub_tiles={self.sub_tiles}" if self.sub_tiles != 1 else ""
        extra += f", lazy_rescale={self.lazy_rescale}" if self.lazy_rescale else ""
        extra += ", cross_tile=True" if self.cross_tile else ""
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


def extend_smem_bytes(kv_dtype: str, head_dim: int, head_dim_v: int, config: ExtendConfig) -> int:
    """Q tile (fp8 path: plus its raw copy) + `stages` K and V tiles + the fp8 reduction slots."""
    fp8 = kv_dtype == "float8_e4m3fn"
    q = config.block_m * head_dim * 2 * (2 if fp8 else 1)
    kv = config.stages * config.block_n * (head_dim + head_dim_v) * kv_itemsize(kv_dtype)
    return q + kv + 1024 + 64


def why_not_extend(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, config, arch):
    """None when the extend kernel implements this problem with `config` on `arch`, else why not."""
    reason = why_not(
        q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, DecodeConfig(), arch
    )
    if reason is not None and "shared memory" not in reason:
        return reason
    c = config
    if c.block_m not in (16, 32, 64, 128) or c.block_n not in (16, 32, 64, 128) or c.stages not in (2, 3):
        return f"config out of range: {c}"
    if c.row_blocks not in (1, 2) or c.block_m < 16 * c.row_blocks:
        return f"config out of range: {c}"
    for flag in ("page_prefetch", "cross_tile"):
        if not isinstance(getattr(c, flag), bool):
            return f"{flag} must be a bool, got {getattr(c, flag)!r}"
    if c.cross_tile and (c.stages < 3 or c.sub_tiles != 1):
        return f"cross_tile needs stages >= 3 and sub_tiles 1, got {c}"
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


def default_extend_config(kv_dtype: str, head_dim: int, arch: str, mode: str = "extend") -> ExtendConfig:
    """extend, bf16/fp16 KV, D <= 128: 128 rows, 64-key tiles, two stages, FlashAttention-2's 32 rows a
    warp (row_blocks 2: half the shared-memory reads of K and V per flop) and page prefetch. Measured
    on the H200 (2026-11-30 06:40, bench_attention --mode extend, 32 q / 8 kv heads, causal): 1.12x /
    1.05x / 1.06x / 0.99x SDPA's FA2 backend at L = 512 / 1k / 2k / 4k, the fastest of six configs
    within 2% at every length (the 16-rows-a-warp 128 x 64 below: 0.88-0.96x).

    Otherwise (fp8 KV, whose timing with row_blocks 2 has not been measured; verify; D 256) the first
    choice: 16 rows per warp (Q, S and O in registers: ~190 at D 128, no spills), 64-key tiles (32 at
    D 256), two stages.

    extend, D <= 128: block_m 128 (8 warps). Each CTA streams the keys below its diagonal once for
    block_m rows, so L2->SM traffic is (D + Dv) * 2 bytes per key per block_m rows: 64 rows need
    ~5 TB/s at 320 TFLOP/s causal (the H200's L2 is about that), 128 rows half of it.
    verify (q_len * G rows of a few tokens) and D 256 (255 registers a thread): block_m 64."""
    limit = SMEM_LIMIT.get(arch, 99 * 1024)
    if mode == "extend" and head_dim <= 128 and kv_dtype != "float8_e4m3fn":
        fa2 = ExtendConfig(block_m=128, block_n=64, stages=2, row_blocks=2, page_prefetch=True)
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
