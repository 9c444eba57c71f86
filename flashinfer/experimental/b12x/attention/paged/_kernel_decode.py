"""Paged decode attention (q_len == 1 per request) on warp-level mma.sync, one CTA per (work item, KV head).

A work item is a KV range [start, end) of one request (written on device by `_kernel_split.Schedule`).
The CTA loads the G = Hq / Hkv query rows of its KV head once (rows G..15 of the 16-row MMA tile are
zero), then each of its W warps streams its own 16-key sub-tiles (sub-tile w, w + W, ...) through a
private cp.async pipeline of `stages` buffers: no CTA barrier in the main loop, only __syncwarp.
Per sub-tile: S = Q K^T (mma m16n8k16, fp32 acc), mask keys outside [start, end), online softmax in
base 2, O += P V. The epilogue merges the W warps' (max, sum, O) through shared memory and writes
either the final row (request served by one item: out in q's dtype, LSE with the sink) or a partial
row (fp32 O normalised by its own sum + LSE) that `_kernel_split.Merge` combines.

Fused merge (`DecodeConfig.fused_merge`): after writing its partial rows, each CTA of a split request
takes a ticket (atomic add on tickets[request, KV head], acq_rel at GPU scope, after every thread's
release fence and a CTA barrier); the CTA that draws the last ticket (n - 1) acquires, merges the n
partial rows with `_kernel_split.PartialMerge` and stores 0 back, so the counter is zero again for
the next launch or graph replay (the plan zeroes the counters once, when it is primed). No CTA waits
on another: the merge runs in whichever CTA finishes last, and the third launch is not made.

Fused schedule (`DecodeConfig.fused_schedule`, batches up to FUSED_SCHEDULE_MAX_BATCH): every warp
finds its CTA's work row itself from cache_seqlens (`_kernel_split.Schedule.locate`, the schedule
launch's arithmetic), so the first launch is not made either; the CTAs of KV head 0 still write
their work row, request row and the item count to scratch, as the schedule launch would.

Streaming knobs (`DecodeConfig`; docs/predictions/attention.md; `_config.default_config` says which
the defaults have): keys_per_warp = 2 x page_size makes a sub-tile of two pages, copied as two
one-page pieces (`_decode_loads.DecodeLoads._load_piece`; the second page-table entry is read only
when its keys lie inside the item); fast_prologue (fp8) loads the descales with the first sub-tiles
and stages Q by 16-element vectors (`stage_q_fp16_vec`); min_ctas is a launch bound (nvvm.minctasm);
preload_lengths and direct_items select `Schedule.locate` variants; merge_unroll batches the fused
merge's loads (`PartialMerge`); prefetch_pages prefetches an item's page-table lines into L2 after
its prologue (persistent: the next item's, after issuing its head); q_reload reloads Q's fragments from
shared memory for every sub-tile, so they do not hold registers through P V.

Persistent (`DecodeConfig.persistent`, with the fused schedule; a no-op without): the grid is one wave (the schedule's
target_items rows a KV head) and CTA row y runs work rows y, y + rows, ... (`_persistent`). While an
item streams, its CTA locates the next item and loads that item's descales and first page-table
entries; after the main loop's last wait and the epilogue's first barrier it issues the next item's Q
(one cp.async group) and each warp's first sub-tile (the next group) into ring stage 0, then runs the
epilogue and merge in stages >= 1 (`_config.epilogue_offsets`; ring slots are stage-major there) and
ends the item with a barrier, so the next item's prologue starts with its Q and first sub-tiles in
flight. The commit-group sequence of every item (Q, stage 0, ..., stage S - 2, then one per main-loop
step) is the one-item kernel's, so the same waits apply.

B = 1 latency knobs (`DecodeConfig.lean_ticket`, `early_pages`): the ticket with one fence (thread
0's acq_rel atomic between two CTA barriers, the cooperative-groups grid-barrier pattern), and an L2
prefetch of the live page table by every CTA before it looks for its work row.

Cluster merge (`DecodeConfig.cluster` = C, with both fused flags): the grid is Hkv x B x C CTAs in
clusters of C along the rows, each request split into exactly C items (`_cluster_merge`); the C
partial rows stay in shared memory and are merged through DSMEM behind cluster barriers, so nothing
partial, no ticket and no fence touch global memory.

Programmatic dependent launch (`DecodeConfig.pdl`, "wait" / "prefetch"): the launch carries the
programmatic-stream-serialization attribute; every CTA runs griddepcontrol.wait before its first
global access and griddepcontrol.launch_dependents right after it, so the kernel before (the step's
KV append) and the kernel after (the o projection, prefetching its weights) overlap this one's launch
and run. "prefetch" also locates the CTA's item and prefetches its first keys' K/V lines into L2
before the wait (`DecodeLoads._prefetch_kv`).

KV storage and the MMA type:
- bf16/fp16 KV: mma in q's dtype; K via ldmatrix, V via ldmatrix.trans.
- fp8 e4m3 KV: mma in fp16. e4m3 -> fp16 is exact (`cvt.rn.f16x2.e4m3x2`). The cache is handed
  over as an fp16 view (two e4m3 per element) so the bf16 ldmatrix/cp.async machinery moves it:
  K through ldmatrix gives each lane 4 consecutive e4m3 of a row, i.e. head dims 4j..4j+3 where
  the mma expects 2j, 2j+1, 2j+8, 2j+9; Q is stored permuted the same way (`q_slot_dim`), so the
  dot products are unchanged. V through ldmatrix.trans gives each lane a 2-key x 2-dim block per
  register; two `prmt` turn a register pair into the mma's 4 keys of one dim, for dims 2g (even
  output block) and 2g + 1 (odd block), so the O accumulator's column n holds dim `o_col_dim(n)`.
  Q (bf16 or fp16) is rescaled by a power of two so its largest |q| is in [2^13, 2^14) before the
  fp16 cast: exact for every element above 2^-27 of the largest (smaller ones, negligible in a dot
  product, keep fewer bits); the scale folds into the softmax scale together with k_descale.
  v_descale multiplies O in the epilogue.

Bytes moved per item: (end - start) * Hkv-slice * (D + Dv) * kv_itemsize (the KV stream dominates);
FLOPs: 2 * 16 * (D + Dv) per key per KV head (the 16-row tile, G rows useful).
Offsets into the cache are 64-bit (page * page_stride is computed in Int64).
"""

from __future__ import annotations

import dataclasses

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync, warp
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ._cluster_merge import ClusterMerge
from ._config import (
    M_TILE,
    N8_HEADS,
    DecodeConfig,
    ScheduleConfig,
    pair_fields,
    why_not,
)
from ._decode_loads import DecodeLoads
from ._decode_n8 import DecodeN8, column_sum, n8_tiled_mma
from ._fake import CUTE_DTYPES, paged_io
from ._fragments import (
    c_as_a,
    expand_k,
    expand_v,
    fold_sink,
    kv_operand,
    mn_view,
    online_softmax,
    quad_max,
    quad_sum,
    row_copy,
    softmax_finish,
    stage_q_fp16,
    stage_q_fp16_vec,
    swizzled,
)
from ._kernel_split import PartialMerge, Schedule


# ---- the kernel ----------------------------------------------------------------------------------
class PagedDecode(DecodeLoads, DecodeN8):
    def __init__(
        self, q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, config, schedule=None
    ):
        self.fp8 = kv_dtype == "float8_e4m3fn"
        self.q_dtype = CUTE_DTYPES[q_dtype]
        self.mma_dtype = cutlass.Float16 if self.fp8 else self.q_dtype
        self.kv_dtype = cutlass.Float16 if self.fp8 else self.q_dtype  # fp8: an fp16 view of byte pairs
        self.hq, self.hkv = num_q_heads, num_kv_heads
        self.group = num_q_heads // num_kv_heads
        self.d, self.dv = head_dim, head_dim_v
        self.de = head_dim // 2 if self.fp8 else head_dim  # kv_dtype elements per K row
        self.dve = head_dim_v // 2 if self.fp8 else head_dim_v
        self.page_size = page_size
        # keys_per_warp > page_size: a sub-tile spans `pieces` consecutive pages of `piece_keys` keys
        self.piece_keys = min(config.keys_per_warp, page_size)
        self.pieces = config.keys_per_warp // self.piece_keys
        self.warps, self.nw, self.stages = config.warps, config.keys_per_warp, config.stages
        self.threads = 32 * config.warps
        self.fused = config.fused_merge
        self.fused_schedule = config.fused_schedule
        self.fast_prologue = config.fast_prologue and self.fp8  # a no-op for bf16/fp16 KV
        self.min_ctas = config.min_ctas
        self.preload_lengths = config.preload_lengths
        self.direct_items = config.direct_items
        self.persistent = config.runs_persistent
        self.prefetch_pages = config.prefetch_pages
        self.pdl = config.pdl
        self.lean_ticket = config.lean_ticket and config.fused_merge  # a no-op without the fused merge
        self.early_pages = config.early_pages
        self.q_reload = config.q_reload
        self.n8 = config.heads_n8
        self.config, self.kv_name = config, kv_dtype
        self.schedule = None
        if config.fused_schedule:  # pairs from the decode config (a plan's override may carry a schedule without)
            self.schedule = Schedule(dataclasses.replace(schedule, **pair_fields(config)))
        self.merger = PartialMerge(self.q_dtype, self.group, head_dim_v, config.warps, config.merge_unroll)
        self.cluster = config.cluster
        self.pairs = config.cluster_pairs  # the clusters fed by the fused schedule (`_pair_epilogue`)
        self.cmerge = None
        if config.cluster:
            self.cmerge = ClusterMerge(self.q_dtype, self.group, head_dim_v, self.threads, config.cluster,
                                       config.tile_keys, config.cluster_push)  # fmt: skip

    def _smem_layouts(self):
        qa, _ = swizzled(M_TILE, self.d, self.mma_dtype)
        sQ = cute.tile_to_shape(qa, (M_TILE, self.d), (0, 1))
        ka, _ = swizzled(self.nw, self.de, self.kv_dtype)
        sK = cute.tile_to_shape(ka, (self.nw, self.de, self.warps * self.stages), (0, 1, 2))
        va, _ = swizzled(self.nw, self.dve, self.kv_dtype)
        sV = cute.tile_to_shape(va, (self.nw, self.dve, self.warps * self.stages), (0, 1, 2))
        return sQ, sK, sV

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (total_q, Hq, D) q dtype
        mK: cute.Tensor,  # (pages, page_size, Hkv, De) kv dtype (fp8: fp16 view)
        mV: cute.Tensor,  # (pages, page_size, Hkv, Dve)
        mPT: cute.Tensor,  # (batch, max_pages) int32
        mWork: cute.Tensor,  # (item_cap, 4) int32: request, kv start, kv end, split flag
        mCount: cute.Tensor,  # (1,) int32: live items
        mOut: cute.Tensor,  # (total_q, Hq, Dv) q dtype
        mLse: cute.Tensor,  # (total_q, Hq) fp32
        mPartO: cute.Tensor,  # (item_cap, Hq, Dv) fp32
        mPartLse: cute.Tensor,  # (item_cap, Hq) fp32
        mSink: cute.Tensor,  # (Hq,) fp32 (read when has_sink != 0)
        mKDesc: cute.Tensor,  # (batch, Hkv) fp32 (fp8 only)
        mVDesc: cute.Tensor,  # (batch, Hkv) fp32 (fp8 only)
        mReq: cute.Tensor,  # (batch, 2) int32: first item, items (read by the fused merge)
        mTicket: cute.Tensor,  # (batch, Hkv) int32: zero between launches (fused merge)
        mSeqlens: cute.Tensor,  # (batch,) int32: KV lengths (read by the fused schedule)
        scale_log2: Float32,  # sm_scale * log2(e)
        has_sink: Int32,
        window_left: Int32,  # (fused schedule)
        stream: cuda.CUstream,
    ):
        sQ_layout, sK_layout, sV_layout = self._smem_layouts()
        tiled_mma = cute.make_tiled_mma(
            warp.MmaF16BF16Op(self.mma_dtype, Float32, (16, 8, 16)), (1, 1, 1), permutation_mnk=(16, 16, 16)
        )
        if cutlass.const_expr(self.n8):
            tiled_mma = n8_tiled_mma(self.mma_dtype)
        # One warp copies one (keys_per_warp, De) sub-tile: 16-byte vectors, a row per 16*8 bytes (V's own copy
        # where Dv != Dqk: `_load_piece`).
        kv_copy, _ = row_copy(self.kv_dtype, self.de, 32, 32)
        q_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.q_dtype, num_bits_per_copy=128
        )
        q_cols = min(self.d // 8, 32)
        q_rows = min(M_TILE, self.threads // q_cols)
        q_copy = cute.make_tiled_copy_tv(
            q_atom, cute.make_layout((q_rows, q_cols), stride=(q_cols, 1)), cute.make_layout((1, 8))
        )
        self.kernel(
            mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket,
            mSeqlens, scale_log2, has_sink, window_left, sQ_layout, sK_layout, sV_layout, tiled_mma, kv_copy, q_copy, q_rows * q_cols,
        ).launch(grid=[self.hkv, self._grid_rows(mWork, mSeqlens), 1], block=[self.threads, 1, 1], stream=stream, use_pdl=self.pdl != "off", **self._bounds())  # fmt: skip

    def _grid_rows(self, mWork, mSeqlens):
        """CTA rows a KV head: (cluster) C a request, (persistent) `_config.persistent_grid_rows`, (fused schedule)
        the rows the live batch can fill (`_config.launch_rows`; pairs: whole clusters of C), else (or
        `DecodeConfig.full_grid`) one per work row."""
        batch, cap = mSeqlens.shape[0], mWork.shape[0]
        if self.cluster and not self.pairs:
            return batch * self.cluster
        if self.persistent:
            return cutlass.max(cutlass.min(cap, Int32(self.schedule.target)), Int32(1))
        rows = cap
        if cutlass.const_expr(self.fused_schedule and not self.config.full_grid):
            rows = self.schedule.launch_rows(batch, cap)
        if cutlass.const_expr(self.pairs):  # whole clusters
            rows = (rows + (self.cluster - 1)) // self.cluster * self.cluster
        return rows

    def _bounds(self):
        """Launch bound of `DecodeConfig.min_ctas` (nvvm.minctasm: ptxas caps the registers so that
        many CTAs fit an SM); the carveout is given so the DSL does not query a device for it. cluster:
        the cluster dims (1, C, 1), C consecutive rows of one KV head."""
        bounds = {"cluster": [1, self.cluster, 1]} if self.cluster else {}
        if self.min_ctas == 0:
            return bounds
        return {**bounds, "min_blocks_per_mp": self.min_ctas, "preferred_smem_carveout": 100}

    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mPT: cute.Tensor,
        mWork: cute.Tensor,
        mCount: cute.Tensor,
        mOut: cute.Tensor,
        mLse: cute.Tensor,
        mPartO: cute.Tensor,
        mPartLse: cute.Tensor,
        mSink: cute.Tensor,
        mKDesc: cute.Tensor,
        mVDesc: cute.Tensor,
        mReq: cute.Tensor,
        mTicket: cute.Tensor,
        mSeqlens: cute.Tensor,
        scale_log2: Float32,
        has_sink: Int32,
        window_left: Int32,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        tiled_mma: cute.TiledMma,
        kv_copy: cute.TiledCopy,
        q_copy: cute.TiledCopy,
        q_copy_threads: cutlass.Constexpr,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        kvh, item, _ = cute.arch.block_idx()  # heads fastest: live items launch before dead ones
        # ---- shared memory ----------------------------------------------------------------------
        smem = cutlass.memory.SmemAllocator()
        sQ = smem.allocate_tensor(self.mma_dtype, sQ_layout, 1024)
        sQraw = None
        sRed = None
        if cutlass.const_expr(self.fp8):
            sQraw = smem.allocate_tensor(self.q_dtype, cute.make_layout((M_TILE, self.d), stride=(self.d, 1)), 16)
            sRed = smem.allocate_tensor(Float32, cute.make_layout(self.warps), 16)
        sLast = None
        if cutlass.const_expr(self.fused):
            sLast = smem.allocate_tensor(Int32, cute.make_layout(1), 16)
        kv_bytes = cute.cosize(sK_layout) * 2 + cute.cosize(sV_layout) * 2
        epi_floats = self.warps * M_TILE * self.dv + self.warps * M_TILE * 3 + M_TILE
        union_bytes = max(kv_bytes, epi_floats * 4)
        buf = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(union_bytes), 1024)
        sK = cute.make_tensor(cute.recast_ptr(buf.iterator, dtype=self.kv_dtype), sK_layout)
        sV = cute.make_tensor(
            cute.recast_ptr(buf.iterator + cute.cosize(sK_layout) * 2, dtype=self.kv_dtype), sV_layout
        )
        sPart = None
        if cutlass.const_expr(self.cluster):  # the partial row the cluster's peers read (DSMEM)
            sPart = smem.allocate_tensor(Float32, cute.make_layout(self.cmerge.smem_floats()), 16)
            if cutlass.const_expr(self.config.cluster_push):  # its mbarrier, before any peer can push
                self.cmerge.start(sPart.iterator, tidx)
        sQdst = sQraw if cutlass.const_expr(self.fp8) else sQ
        tensors = (mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket,
                   mSeqlens)  # fmt: skip
        views = (sQ, sQdst, sRed, sLast, buf, sK, sV, sPart)
        copies = (tiled_mma, kv_copy, q_copy, q_copy_threads)
        if cutlass.const_expr(self.pdl == "prefetch"):  # this item's first keys into L2 while the kernel before runs
            self._prefetch_kv(mSeqlens, mPT, mK, mV, item, kvh, tidx, window_left, mWork.shape[0])
        if cutlass.const_expr(self.pdl != "off"):  # nothing global read or written above (the prefetch aside)
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        if cutlass.const_expr(self.early_pages):  # the page table's DRAM misses beside the lengths load
            self._prefetch_table(mPT, kvh, item, tidx)
        if cutlass.const_expr(self.persistent):
            self._persistent(tensors, views, copies, scale_log2, has_sink, window_left, kvh, item, tidx)
        else:
            # a fixed cluster split: the grid is the schedule, rank item % C of request item // C
            if cutlass.const_expr(self.cluster and not self.pairs):
                req, kv_start, kv_end = self.cmerge.item(mSeqlens, item, window_left)
                live = req >= 0
                split = Int32(1)
                first = Int32(0)
                n_items = Int32(self.cluster)
            elif cutlass.const_expr(self.fused_schedule):
                req, kv_start, kv_end, split, first, n_items, _ = self._locate(
                    mSeqlens, mWork, mCount, mReq, item, kvh, tidx, window_left
                )
                live = req >= 0
            else:
                live = item < mCount[0]
                req = Int32(0)
                kv_start = Int32(0)
                kv_end = Int32(0)
                split = Int32(0)
                first = Int32(0)
                n_items = Int32(0)
                if live:
                    req = mWork[item, 0]
                    kv_start = mWork[item, 1]
                    kv_end = mWork[item, 2]
                    split = mWork[item, 3]
            if live:
                kd_early = Float32(1.0)
                vd_early = Float32(1.0)
                if cutlass.const_expr(self.fast_prologue):  # in flight with Q and the first sub-tiles
                    kd_early = mKDesc[req, kvh]
                    vd_early = mVDesc[req, kvh]
                # Q: G rows of this KV head (rows >= G zero-filled by predicated cp.async)
                self._issue_q(mQ, sQdst, req, kvh, tidx, q_copy, q_copy_threads)
                cute.arch.cp_async_commit_group()
                self._run_item(tensors, views, copies, scale_log2, has_sink, window_left, kvh, tidx, item, req,
                               kv_start, kv_end, split, first, n_items, kd_early, vd_early, item)  # fmt: skip

    # ---- one work item, and the persistent loop over items -------------------------------------------
    @cute.jit
    def _persistent(self, tensors, views, copies, scale_log2, has_sink, window_left, kvh, item0, tidx):
        """`DecodeConfig.persistent`: CTA row item0 runs items item0, item0 + rows, ... (`persistent_items`);
        each item's head (Q, one sub-tile a warp) was issued before the previous item's epilogue."""
        mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket, mSeqlens = (
            tensors
        )
        sQ, sQdst, sRed, sLast, buf, sK, sV, sPart = views
        tiled_mma, kv_copy, q_copy, q_copy_threads = copies
        wid = tidx // 32
        stride = cute.arch.grid_dim()[1]
        req, kv_start, kv_end, split, first, n_items, _ = self._locate(
            mSeqlens, mWork, mCount, mReq, item0, kvh, tidx, window_left
        )
        kd = Float32(1.0)
        vd = Float32(1.0)
        if req >= 0:
            if cutlass.const_expr(self.fp8):
                kd = mKDesc[req, kvh]
                vd = mVDesc[req, kvh]
            page, page2 = self._first_pages(mPT, req, kv_start, kv_end, wid)
            self._issue_head(mQ, mK, mV, sQdst, sK, sV, req, kvh, kv_start, kv_end, page, page2, tidx, q_copy,
                             q_copy_threads, kv_copy)  # fmt: skip
            if cutlass.const_expr(self.prefetch_pages):
                self._prefetch_pages(mPT, req, kv_start, kv_end, tidx)
        for i in range(item0, mWork.shape[0], stride):
            if req >= 0:
                req, kv_start, kv_end, split, first, n_items, kd, vd = self._run_item(
                    tensors, views, copies, scale_log2, has_sink, window_left, kvh, tidx, i, req, kv_start, kv_end,
                    split, first, n_items, kd, vd, i + stride,
                )  # fmt: skip

    @cute.jit
    def _run_item(
        self, tensors, views, copies, scale_log2, has_sink, window_left, kvh, tidx, item, req, kv_start, kv_end,
        split, first, n_items, kd, vd, nxt_item,
    ):  # fmt: skip
        """Work row `item` (request req, keys [kv_start, kv_end)) of this CTA's KV head, its Q copy
        committed (persistent: also its first sub-tile a warp). kd / vd: its fp8 descales when loaded
        early (fast_prologue or persistent). Persistent: locates work row nxt_item while this one
        streams (when nxt_item < batch: a split batch makes at most grid-rows items, fewer than any
        CTA's second row, and an unsplit one exactly batch items, so that is nxt_item < live items,
        read from a launch parameter instead of a register), issues its head before this item's
        epilogue and returns its state."""
        mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket, mSeqlens = (
            tensors
        )
        sQ, sQdst, sRed, sLast, buf, sK, sV, sPart = views
        tiled_mma, kv_copy, q_copy, q_copy_threads = copies
        lane = tidx % 32
        wid = tidx // 32
        # ---- this warp's sub-tiles of [kv_start, kv_end) -------------------------------------------
        t_begin, n_mine = self._my_tiles(kv_start, kv_end, wid)
        thr_kv = kv_copy.get_slice(lane)
        cKV = thr_kv.partition_S(cute.make_identity_tensor((self.piece_keys, self.de)))

        # Prologue: stages - 1 sub-tiles in flight (a group is committed even when empty, so the wait
        # counts below stay uniform); persistent: the first was issued with Q.
        for s in cutlass.range_constexpr(1 if self.persistent else 0, self.stages - 1):
            if s < n_mine:
                tile = t_begin + wid + s * self.warps
                self._load_tile(mK, mV, sK, sV, self._pt(mPT, req, tile * self.nw // self.page_size), kvh, tile,
                                kv_start, kv_end, self._slot(wid, s), kv_copy, thr_kv, cKV,
                                self._second_page(mPT, req, tile, kv_end))  # fmt: skip
            cute.arch.cp_async_commit_group()
        # The page of the next sub-tile to prefetch is read one iteration ahead, so the main
        # loop never waits on a page-table load before issuing its cp.async.
        next_page = Int32(0)
        next_page2 = Int32(0)  # the sub-tile's second page (pieces == 2)
        if self.stages - 1 < n_mine:
            first_next = t_begin + wid + (self.stages - 1) * self.warps
            next_page = self._pt(mPT, req, first_next * self.nw // self.page_size)
            next_page2 = self._second_page(mPT, req, first_next, kv_end)
        if cutlass.const_expr(self.prefetch_pages and not self.persistent):  # (persistent: with the head)
            self._prefetch_pages(mPT, req, kv_start, kv_end, tidx)

        # persistent: the next item's row, descales and first pages load while this item streams
        n_req = Int32(-1)
        n_start = Int32(0)
        n_end = Int32(0)
        n_split = Int32(0)
        n_first = Int32(0)
        n_count = Int32(0)
        n_kd = Float32(1.0)
        n_vd = Float32(1.0)
        n_page = Int32(0)
        n_page2 = Int32(0)
        if cutlass.const_expr(self.persistent):
            if nxt_item < mSeqlens.shape[0]:
                n_req, n_start, n_end, n_split, n_first, n_count, _ = self._locate(
                    mSeqlens, mWork, mCount, mReq, nxt_item, kvh, tidx, window_left
                )
                if n_req >= 0:
                    if cutlass.const_expr(self.fp8):
                        n_kd = mKDesc[n_req, kvh]
                        n_vd = mVDesc[n_req, kvh]
                    n_page, n_page2 = self._first_pages(mPT, n_req, n_start, n_end, wid)

        # Q must be in smem (its group is the oldest) and visible to every warp.
        cute.arch.cp_async_wait_group(self.stages - 1)
        cute.arch.sync_threads()
        qk_scale = scale_log2
        vd_use = Float32(1.0)
        if cutlass.const_expr(self.fp8):
            kd_use = kd
            if cutlass.const_expr(not (self.fast_prologue or self.persistent)):
                kd_use = mKDesc[req, kvh]
            sQraw = sQdst
            if cutlass.const_expr(self.fast_prologue):
                q_scale = stage_q_fp16_vec(sQraw, sQ, sRed, tidx, self.group, M_TILE, self.d, self.threads)
            else:
                q_scale = stage_q_fp16(sQraw, sQ, sRed, tidx, self.group, M_TILE, self.d, self.threads)
            qk_scale = scale_log2 * kd_use * q_scale
            vd_use = vd
            if cutlass.const_expr(not (self.fast_prologue or self.persistent)):
                vd_use = mVDesc[req, kvh]
            cute.arch.sync_threads()

        thr_mma = tiled_mma.get_slice(lane)
        if cutlass.const_expr(self.n8):  # Q as the B operand (`_decode_n8`)
            tSrQ, q_s2r, thr_q_s2r, q_src = self.n8_q_fragment(sQ, tiled_mma, thr_mma, lane)
        else:
            tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
            q_s2r = cute.make_tiled_copy_A(
                cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), self.mma_dtype),
                tiled_mma,
            )
            thr_q_s2r = q_s2r.get_slice(lane)
            q_src = thr_q_s2r.partition_S(sQ)
        if cutlass.const_expr(not self.q_reload):  # q_reload: every sub-tile loads them (below)
            cute.copy(q_s2r, q_src, thr_q_s2r.retile(tSrQ))

        o_shape = (self.dv, N8_HEADS) if self.n8 else (M_TILE, self.dv)  # n8: O^T, (Dv, the 8 head columns)
        acc_O = cute.make_rmem_tensor(thr_mma.partition_shape_C(o_shape), Float32)
        acc_O.fill(0.0)
        row_max = cute.make_rmem_tensor(2, Float32)
        row_sum = cute.make_rmem_tensor(2, Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)

        for i in range(n_mine):
            cute.arch.cp_async_wait_group(self.stages - 2)
            cute.arch.sync_warp()
            nxt = i + self.stages - 1
            if nxt < n_mine:
                self._load_tile(mK, mV, sK, sV, next_page, kvh, t_begin + wid + nxt * self.warps,
                                kv_start, kv_end, self._slot(wid, nxt % self.stages), kv_copy, thr_kv, cKV,
                                next_page2)  # fmt: skip
            cute.arch.cp_async_commit_group()
            if nxt + 1 < n_mine:
                nt = t_begin + wid + (nxt + 1) * self.warps
                next_page = self._pt(mPT, req, nt * self.nw // self.page_size)
                next_page2 = self._second_page(mPT, req, nt, kv_end)
            if cutlass.const_expr(self.q_reload):  # Q's fragments live from here to S = Q K^T only
                cute.copy(q_s2r, q_src, thr_q_s2r.retile(tSrQ))
            tile = self._tile_n8 if self.n8 else self._tile
            tile(sK, sV, self._slot(wid, i % self.stages), (t_begin + wid + i * self.warps) * self.nw,
                       kv_start, kv_end, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, lane)  # fmt: skip
        cute.arch.cp_async_wait_group(0)

        # ---- epilogue: merge the warps, write final or partial rows ---------------------------------
        for r in cutlass.range_constexpr(2):
            row_sum[r] = column_sum(row_sum[r]) if self.n8 else quad_sum(row_sum[r])
        cute.arch.sync_threads()  # every warp is done with sK/sV: the buffer becomes sO/sML
        if cutlass.const_expr(self.persistent):
            if n_req >= 0:  # the next item's Q and first sub-tiles (stage 0: outside sO / sML)
                self._issue_head(mQ, mK, mV, sQdst, sK, sV, n_req, kvh, n_start, n_end, n_page, n_page2, tidx,
                                 q_copy, q_copy_threads, kv_copy)  # fmt: skip
                if cutlass.const_expr(self.prefetch_pages):
                    self._prefetch_pages(mPT, n_req, n_start, n_end, tidx)
        fbuf, stats = self._epilogue_ptrs(buf)
        sO = cute.make_tensor(
            fbuf, cute.make_layout((self.warps, M_TILE, self.dv), stride=(M_TILE * self.dv, self.dv, 1))
        )
        sM = cute.make_tensor(stats, cute.make_layout((self.warps, M_TILE), stride=(M_TILE, 1)))
        sL = cute.make_tensor(stats + self.warps * M_TILE, cute.make_layout((self.warps, M_TILE), stride=(M_TILE, 1)))
        sW = cute.make_tensor(
            stats + 2 * self.warps * M_TILE, cute.make_layout((self.warps, M_TILE), stride=(M_TILE, 1))
        )
        sLse = cute.make_tensor(stats + 3 * self.warps * M_TILE, cute.make_layout(M_TILE))
        store = self._store_warp_state_n8 if self.n8 else self._store_warp_state
        store(sO, sM, sL, wid, lane, thr_mma, acc_O, row_max, row_sum)
        cute.arch.sync_threads()
        if tidx < M_TILE:
            self._row_weights(sM, sL, sW, sLse, tidx, kvh, vd_use, split, mSink, has_sink)
        cute.arch.sync_threads()
        if cutlass.const_expr(self.pairs):
            self._pair_epilogue(tensors, sO, sW, sLse, sPart, tidx, item, req, kvh, split, first, n_items, has_sink,
                                sLast, fbuf)  # fmt: skip
        elif cutlass.const_expr(self.cluster):
            self.cmerge.merge(sO, sW, sLse, sPart.iterator, tidx, item, req, kvh, mOut, mLse, mSink, has_sink,
                              self.warps)  # fmt: skip
        else:
            self._write_rows(sO, sW, sLse, tidx, item, req, kvh, split, mOut, mLse, mPartO, mPartLse)
        if cutlass.const_expr(self.fused and not self.cluster):
            self._ticket_merge(tensors, has_sink, req, kvh, split, first, n_items, tidx, sLast, fbuf)
        if cutlass.const_expr(self.persistent):
            cute.arch.sync_threads()  # sO / sML / the merge's buffer are the next item's stages >= 1
        return n_req, n_start, n_end, n_split, n_first, n_count, n_kd, n_vd

    @cute.jit
    def _pair_epilogue(self, tensors, sO, sW, sLse, sPart, tidx, item, req, kvh, split, first, n_items, has_sink,
                       sLast, fbuf):  # fmt: skip
        """`DecodeConfig.cluster_pairs`: a paired batch (`Schedule._paired`, uniform over the grid, so the C CTAs of a
        cluster agree) merges the C items of one request a cluster holds (rows C k .. C k + C - 1; C = 2: pairs)
        through DSMEM; a request of one group writes its output there, one of P > 1 groups the group's partial row
        first + (item - first) / C, and its C P CTAs draw the ticket, the last merging the P rows. An unpaired batch
        runs the ticket merge."""
        mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket, mSeqlens = (
            tensors
        )
        if self.schedule._paired(mSeqlens.shape[0], mWork.shape[0]) != 0:
            pairs = n_items // self.cluster  # the request's clusters (groups of C items)
            prow = first + (item - first) // self.cluster
            self.cmerge.merge(sO, sW, sLse, sPart.iterator, tidx, item, req, kvh, mOut, mLse, mSink, has_sink,
                              self.warps, (mPartO, mPartLse, prow, pairs - 1))  # fmt: skip
            if pairs > 1:
                self._merge_if_last(mTicket, mPartO, mPartLse, mSink, mOut, mLse, has_sink, req, kvh, first, n_items,
                                    tidx, sLast, fbuf, pairs)  # fmt: skip
        else:
            self._write_rows(sO, sW, sLse, tidx, item, req, kvh, split, mOut, mLse, mPartO, mPartLse)
            self._ticket_merge(tensors, has_sink, req, kvh, split, first, n_items, tidx, sLast, fbuf)

    @cute.jit
    def _ticket_merge(self, tensors, has_sink, req, kvh, split, first, n_items, tidx, sLast, fbuf):
        """The fused merge of a split request's item rows (after `_write_rows`): the ticket, the last CTA merges."""
        mQ, mK, mV, mPT, mWork, mCount, mOut, mLse, mPartO, mPartLse, mSink, mKDesc, mVDesc, mReq, mTicket, mSeqlens = (
            tensors
        )
        if split != 0:
            if cutlass.const_expr(not self.fused_schedule):
                first = mReq[req, 0]
                n_items = mReq[req, 1]
            self._merge_if_last(mTicket, mPartO, mPartLse, mSink, mOut, mLse, has_sink, req, kvh, first, n_items,
                                tidx, sLast, fbuf, n_items)  # fmt: skip

    @cute.jit
    def _merge_if_last(
        self, mTicket, mPartO, mPartLse, mSink, mOut, mLse, has_sink, req, kvh, first, n, tidx, sLast, fbuf, rows
    ):
        """Ticket protocol of the fused merge (module docstring); request `req` has items first ..
        first + n - 1 (n CTAs draw), whose `rows` partial rows from first on are merged (n, or with
        cluster_pairs the n / 2 pair rows). Called after `_write_rows`. lean_ticket: no fences of the other
        threads; the barriers carry thread 0's release and acquire to them (`DecodeConfig.lean_ticket`)."""
        if cutlass.const_expr(not self.lean_ticket):
            cute.arch.fence_acq_rel_gpu()  # release: this thread's partial rows before the ticket
        cute.arch.sync_threads()
        if tidx == 0:
            ticket = mTicket.iterator + (req * self.hkv + kvh)
            old = cute.arch.atomic_add(ticket, Int32(1), sem="acq_rel", scope="gpu")
            last = Int32(0)
            if old == n - 1:
                last = Int32(1)
                mTicket[req, kvh] = Int32(0)  # every CTA of this (request, head) has drawn: reset
            sLast[0] = last
        cute.arch.sync_threads()  # also: every thread is done reading sO / sW (fbuf is reused)
        if sLast[0] != 0:
            if cutlass.const_expr(not self.lean_ticket):
                cute.arch.fence_acq_rel_gpu()  # acquire: the other CTAs' partial rows
            self.merger.merge(mPartO, mPartLse, mSink, mOut, mLse, has_sink, first, rows, req, kvh, tidx, fbuf)

    @cute.jit
    def _tile(
        self, sK, sV, slot, key0, kv_start, kv_end, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, lane
    ):
        """One warp's sub-tile: S = Q K^T, mask, online softmax (base 2), O += P V."""
        sKt = sK[None, None, slot]  # (nw, De)
        sVt = sV[None, None, slot]  # (nw, Dve)
        acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((M_TILE, self.nw)), Float32)
        acc_S.fill(0.0)
        ops = (tiled_mma, thr_mma, lane, self.kv_dtype, self.mma_dtype)
        tSrK = kv_operand(sKt, (self.nw, self.d), *ops, expand_k if self.fp8 else None, operand="B", transpose=False)
        cute.gemm(tiled_mma, acc_S, tSrQ, tSrK, acc_S)

        s_mn = mn_view(acc_S)
        # Mask keys outside [kv_start, kv_end) (only sub-tiles at the ends of the range have any).
        if (key0 < kv_start) | (key0 + self.nw > kv_end):
            cS = mn_view(thr_mma.partition_C(cute.make_identity_tensor((M_TILE, self.nw))))
            for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                key = key0 + cS[0, c][1]
                if (key < kv_start) | (key >= kv_end):
                    for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
                        s_mn[r, c] = -Float32.inf
        o_mn = mn_view(acc_O)
        for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            p, corr = online_softmax(s_mn[r, None].load(), r, row_max, row_sum, qk_scale, quad_max)
            s_mn[r, None] = p
            o_mn[r, None] = o_mn[r, None].load() * corr

        rP = cute.make_fragment_like(acc_S, self.mma_dtype)
        rP.store(acc_S.load().to(self.mma_dtype))
        tOrP = c_as_a(rP)
        # V^T view (Dve, nw) of the (nw, Dve) sub-tile: the B operand of O += P V.
        sVtT = cute.composition(sVt, cute.make_layout((self.dve, self.nw), stride=(self.nw, 1)))
        tOrV = kv_operand(sVtT, (self.dv, self.nw), *ops, expand_v if self.fp8 else None, operand="B", transpose=True)
        cute.gemm(tiled_mma, acc_O, tOrP, tOrV, acc_O)

    @cute.jit
    def _store_warp_state(self, sO, sM, sL, wid, lane, thr_mma, acc_O, row_max, row_sum):
        """This warp's unnormalised O (fp32), row max and row sum into shared memory."""
        sOw = sO[wid, None, None]  # (16, Dv)
        if cutlass.const_expr(self.fp8):
            # Accumulator column n holds head dim o_col_dim(n): n = n0 + 8 n1 + 16 n2 -> 2 n0 + n1 + 16 n2.
            sOw = cute.make_tensor(
                sOw.iterator,
                cute.make_layout((M_TILE, (8, 2, self.dv // 16)), stride=(self.dv, (2, 1, 16))),
            )
        cute.autovec_copy(acc_O, thr_mma.partition_C(sOw))
        if lane % 4 == 0:
            cS = mn_view(thr_mma.partition_C(cute.make_identity_tensor((M_TILE, self.nw))))
            for r in cutlass.range_constexpr(2):
                row = cS[r, 0][0]
                sM[wid, row] = row_max[r]
                sL[wid, row] = row_sum[r]

    @cute.jit
    def _row_weights(self, sM, sL, sW, sLse, r, kvh, vd, split, mSink, has_sink):
        """Thread r < 16: the weight of each warp's O for row r, and the row's LSE (base 2).

        A final row (split == 0) folds the sink logit into the denominator; a partial row keeps
        its own LSE and leaves the sink to the merge."""
        m = sM[0, r]
        for w in cutlass.range_constexpr(1, self.warps):
            m = cute.arch.fmax(m, sM[w, r])
        m_use = Float32(0.0) if m == -Float32.inf else m
        total = Float32(0.0)
        for w in cutlass.range_constexpr(self.warps):
            total = total + sL[w, r] * cute.math.exp2(sM[w, r] - m_use, fastmath=True)
        lse, factor = softmax_finish(m_use, total, vd)
        sinked = (split == 0) & (has_sink != 0) & (r < self.group)
        lse, factor = fold_sink(lse, factor, mSink, kvh * self.group + r, sinked)
        for w in cutlass.range_constexpr(self.warps):
            sW[w, r] = cute.math.exp2(sM[w, r] - m_use, fastmath=True) * factor
        sLse[r] = lse

    @cute.jit
    def _write_rows(self, sO, sW, sLse, tidx, item, req, kvh, split, mOut, mLse, mPartO, mPartLse):
        """Rows r < G: out = sum_w weight[w, r] * O_w[r, :] to the final or the partial buffers."""
        for it in cutlass.range_constexpr((M_TILE * self.dv + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads
            r = idx // self.dv
            c = idx % self.dv
            if r < self.group:
                o = Float32(0.0)
                for w in cutlass.range_constexpr(self.warps):
                    o = o + sW[w, r] * sO[w, r, c]
                head = kvh * self.group + r
                if split != 0:
                    mPartO[item, head, c] = o
                    if c == 0:
                        mPartLse[item, head] = sLse[r]
                else:
                    mOut[req, head, c] = o.to(self.q_dtype)
                    if c == 0:
                        mLse[req, head] = sLse[r]


# ---- compile -------------------------------------------------------------------------------------
def fake_args(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size):
    """Fake tensors with the runtime contract of `PagedDecode.__call__`: `_fake.paged_io` plus the
    work list, its count, the partial rows, the request list, the merge tickets and the lengths."""
    io = paged_io(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size)
    batch, cap = io.batch, cute.sym_int()
    work = make_fake_compact_tensor(Int32, (cap, 4), stride_order=(1, 0), assumed_align=16)
    count = make_fake_compact_tensor(Int32, (1,), assumed_align=4)
    part_o = make_fake_compact_tensor(Float32, (cap, num_q_heads, head_dim_v), stride_order=(2, 1, 0), assumed_align=16)
    part_lse = make_fake_compact_tensor(Float32, (cap, num_q_heads), stride_order=(1, 0), assumed_align=4)
    req = make_fake_compact_tensor(Int32, (batch, 2), stride_order=(1, 0), assumed_align=8)
    tickets = make_fake_compact_tensor(Int32, (batch, num_kv_heads), stride_order=(1, 0), assumed_align=4)
    seqlens = make_fake_compact_tensor(Int32, (batch,), assumed_align=4)
    return (io.q, io.k, io.v, io.page_table, work, count, io.out, io.lse, part_o, part_lse, io.sink, io.k_descale,
            io.v_descale, req, tickets, seqlens)  # fmt: skip


@kernel(
    "attention.paged.decode",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._cluster_merge",
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._config_schedule",
        "flashinfer.experimental.b12x.attention.paged._decode_loads",
        "flashinfer.experimental.b12x.attention.paged._decode_n8",
        "flashinfer.experimental.b12x.attention.paged._fake",
        "flashinfer.experimental.b12x.attention.paged._fragments",
        "flashinfer.experimental.b12x.attention.paged._kernel_split",
        "flashinfer.experimental.b12x.attention.paged._moves",
    ),
)
def compile_decode(
    q_dtype: str,
    kv_dtype: str,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    head_dim_v: int,
    page_size: int,
    config: DecodeConfig,
    arch: str,
    schedule: ScheduleConfig | None = None,
):
    """tvm-ffi launcher `fn(q, k, v, page_table, work, count, out, lse, part_o, part_lse, sink,
    k_descale, v_descale, requests, tickets, cache_seqlens, scale_log2, has_sink, window_left)` on
    torch's current stream. `config.fused_merge`: requests (read) and tickets; `config.fused_schedule`
    (needs `schedule`, the split to recompute): cache_seqlens and window_left are read, work /
    requests / count written. Otherwise those are not touched (schedule must be None)."""
    dims = (q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size)
    reason = why_not(*dims, config, arch)
    if reason is None and config.fused_schedule != (schedule is not None):
        reason = f"schedule must be a ScheduleConfig with fused_schedule and None without, got {schedule!r}"
    if reason is not None:
        raise ValueError(f"attention.paged decode kernel: {reason}")
    args = fake_args(*dims)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    decode = PagedDecode(*dims, config, schedule)
    return cute_compile(decode, *args, Float32(1.0), Int32(0), Int32(-1), stream, arch=arch)
