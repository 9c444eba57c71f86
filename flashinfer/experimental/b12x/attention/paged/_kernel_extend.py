"""Paged extend / verify attention (q_len >= 1 per request, causal, right-aligned), FlashAttention-2 style
on warp-level mma.sync: one CTA per (work item, KV head).

A work item is (request, first token) of a tile of T = block_m // G query tokens of one request
(written on device by `_kernel_split.ExtendSchedule`, or `_kernel_extend_schedule.DualExtendSchedule`
when the plan holds two tiles and picks one per run). The CTA packs the G query heads of its KV
head with those tokens into block_m rows (row r = token r // G, head r % G; rows past T * G and
tokens past the request's q_len are zero padding, never written), stages Q with 16-byte cp.async
(padding rows zero-filled; it joins the first KV tile's group, so the two latencies overlap),
keeps Q in registers (ldmatrix once) and streams the request's visible keys in block_n-key tiles
through a `stages`-deep cp.async ring shared by all warps (one CTA barrier per tile). Each warp
owns 16 * row_blocks rows (with row_blocks 2, Q is re-read from shared memory per head-dim block
instead): S = Q K^T (mma m16n8k16, fp32 acc, one 16-wide head-dim block at a time), causal /
window mask on the tiles that need one, online softmax in base 2 (bf16/fp16 KV: the row max is
taken before scaling, so exp2(s * c - m) is one FFMA), O += P V (one 16-key block at a time). Tiles wholly above the diagonal of the tile's last token (or below the window of its first)
are never loaded. config.sub_tiles > 1 splits each tile into key slices, each its own online-softmax
step, software-pipelined (the next slice's QK^T is issued before a slice's softmax, in one basic
block per masked / unmasked body) so a warp's exp2 / max / sum work hides behind its own mma;
config.lazy_rescale keeps a warp's row maxima until one grows by more than N (base 2) and skips
the O rescale meanwhile; config.cross_tile issues the next tile's QK^T before a tile's softmax
(`_loop_cross`, a ring of >= 3 stages); config.stagger (8 warps) runs warps 0-3 one PV behind warps
4-7 (`_loop` lag 1: P kept in registers, stages - 2 tiles in flight) so the two warps sharing a
scheduler are in opposite phases, and config.split_issue leaves the K/V copies to warps 0-3
(`ExtendConfig`). With persistent_ctas (`ExtendConfig.persistent`, the live tile choice) the grid
is one wave and each CTA loops over items drawn from a counter (`_kernel_extend_persistent`); the
tile math and loads live in `_kernel_extend_tile`.

Query token t (0-based in its request, q_len L, kv_len N) sees keys k with
max(0, t + N - L - window_left) <= k <= t + N - L (FORMATS.md). A KV tile is loaded in chunks of
min(page_size, block_n) keys, each inside one cache page (page * page_stride in 64 bits); keys
>= N are zero-filled, never read. The chunks' page-table entries are read just before the tile's
cp.async issue, or (config.page_prefetch) one tile earlier into registers, after the previous
issue, so their L2 round trip overlaps a tile's math instead of stalling every thread. FP8 KV
uses decode's register plumbing (`_fragments`): fp16 mma, e4m3 moved through 16-bit ldmatrix and
expanded per k-block, Q rescaled by a power of two and permuted (`q_slot_dim`), accumulator column
n holding head dim `o_col_dim(n)`.

FLOPs per tile: 2 * block_m * block_n * (D + Dv); causal work per request and KV head is about
2 * G * (L * N - L^2 / 2) * (D + Dv). Bytes: the KV stream, once per CTA (T tokens share it).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync, warp
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

from ..._lib.compile import cute_compile, kernel
from ._config import ExtendConfig, why_not_extend
from ._fake import CUTE_DTYPES, paged_io
from ._fragments import row_copy, stage_q_fp16, swizzled
from ._kernel_extend_persistent import ExtendPersistent
from ._kernel_extend_tile import ExtendTile

PDL_MODES = ("none", "trigger", "dependent", "wait", "wait+trigger")


class PagedExtend(ExtendTile, ExtendPersistent):
    def __init__(
        self, q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, config, pdl="none",
        persistent_ctas=0,
    ):  # fmt: skip
        self.fp8 = kv_dtype == "float8_e4m3fn"
        self.q_dtype = CUTE_DTYPES[q_dtype]
        self.mma_dtype = cutlass.Float16 if self.fp8 else self.q_dtype
        self.kv_dtype = cutlass.Float16 if self.fp8 else self.q_dtype  # fp8: an fp16 view of byte pairs
        self.hq, self.hkv = num_q_heads, num_kv_heads
        self.group = num_q_heads // num_kv_heads
        self.d, self.dv = head_dim, head_dim_v
        self.de = head_dim // 2 if self.fp8 else head_dim
        self.dve = head_dim_v // 2 if self.fp8 else head_dim_v
        self.page_size = page_size
        self.bm, self.bn, self.stages = config.block_m, config.block_n, config.stages
        self.warps = config.warps
        self.row_blocks = config.row_blocks
        self.q_in_regs = config.row_blocks == 1  # 32 rows a warp: Q, S and O would not fit in registers
        self.threads = 32 * self.warps
        self.tokens = config.tokens_per_tile(self.group)
        self.rows = self.tokens * self.group  # useful rows of the block_m
        self.ck = min(page_size, self.bn)  # keys of one tile chunk: all inside one page
        self.chunks = self.bn // self.ck
        self.prefetch = config.page_prefetch
        self.sub_tiles, self.bs = config.sub_tiles, config.slice_keys
        self.lazy = config.lazy_rescale
        self.cross = config.cross_tile
        self.stagger = config.stagger
        # tiles in flight ahead of the one computed: stagger keeps one more ring slot for the second warp
        # group's PV of the previous tile, read after the barrier that frees the slot refilled next
        self.ahead = self.stages - 2 if self.stagger else self.stages - 1
        # threads issuing the K/V cp.async: with split_issue only the late group (warps < warps / 2, the
        # leaner loop), so the other group's step has no issue block or page lookups
        self.split_issue = config.split_issue
        self.copiers = self.threads // 2 if self.split_issue else self.threads
        self.wide_copy = config.wide_copy
        # programmatic dependent launch (the live tile choice's `overlap` / `early_launch`): "trigger"
        # lets the next kernel launch once every CTA has started; "dependent" is launched so (it needs
        # nothing the previous kernel writes: both extend kernels read only the schedule's output);
        # "wait" is launched so behind the schedule and waits for its results (griddepcontrol.wait)
        # before anything else; "wait+trigger" then lets the next kernel launch (which may read the
        # schedule's results: every CTA of this one has seen them complete)
        self.pdl = pdl
        # early_pages: the first tile's page-table entries load beside the request's lengths (its
        # lookups then cost no round trip of their own in the prologue chain; `_first_pages`)
        self.early_pages = config.early_pages
        # persistent (`ExtendConfig.persistent`): at most this many CTA rows a KV head, looping over items
        # (`_kernel_extend_persistent`); 0: one CTA per (work row, KV head)
        self.persistent_ctas = persistent_ctas

    def _smem_layouts(self):
        qa, _ = swizzled(self.bm, self.d, self.mma_dtype)
        sQ = cute.tile_to_shape(qa, (self.bm, self.d), (0, 1))
        ka, _ = swizzled(self.bn, self.de, self.kv_dtype)
        sK = cute.tile_to_shape(ka, (self.bn, self.de, self.stages), (0, 1, 2))
        va, _ = swizzled(self.bn, self.dve, self.kv_dtype)
        sV = cute.tile_to_shape(va, (self.bn, self.dve, self.stages), (0, 1, 2))
        return sQ, sK, sV

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (total_q, Hq, D) q dtype
        mK: cute.Tensor,  # (pages, page_size, Hkv, De) kv dtype (fp8: fp16 view)
        mV: cute.Tensor,  # (pages, page_size, Hkv, Dve)
        mPT: cute.Tensor,  # (batch, max_pages) int32
        mCu: cute.Tensor,  # (batch + 1,) int32: cu_seqlens_q
        mLens: cute.Tensor,  # (batch,) int32: cache_seqlens (KV length incl. the new tokens)
        mWork: cute.Tensor,  # (item_cap, 2) int32: request, first token of the tile
        mCount: cute.Tensor,  # (1,) int32: live items (persistent: (2,) stride 2: items, next-item counter)
        mOut: cute.Tensor,  # (total_q, Hq, Dv) q dtype
        mLse: cute.Tensor,  # (total_q, Hq) fp32, base 2
        mSink: cute.Tensor,  # (Hq,) fp32 (read when has_sink != 0)
        mKDesc: cute.Tensor,  # (batch, Hkv) fp32 (fp8 only)
        mVDesc: cute.Tensor,  # (batch, Hkv) fp32 (fp8 only)
        scale_log2: Float32,  # sm_scale * log2(e)
        has_sink: Int32,
        window_left: Int32,
        stream: cuda.CUstream,
    ):
        sQ_layout, sK_layout, sV_layout = self._smem_layouts()
        tiled_mma = cute.make_tiled_mma(
            warp.MmaF16BF16Op(self.mma_dtype, Float32, (16, 8, 16)),
            (self.warps, 1, 1),
            permutation_mnk=(self.warps * 16, 16, 16),
        )
        # One chunk (ck keys x De) per copy: 16-byte vectors, threads beyond the chunk's rows idle.
        # wide_copy: half the threads across a row, so each thread moves vectors De / 2 apart in one
        # key row (one source address, the second at an immediate offset) instead of two rows; a
        # warp's instruction still covers whole 32-byte sectors. V's own copy where Dv != Dqk: `_load_tile`.
        kv_copy, kv_copy_threads = row_copy(self.kv_dtype, self.de, self.copiers, self.ck, self.wide_copy)
        q_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.q_dtype, num_bits_per_copy=128
        )
        q_cols = self.d // 8
        q_copy = cute.make_tiled_copy_tv(
            q_atom, cute.make_layout((self.threads // q_cols, q_cols), stride=(q_cols, 1)), cute.make_layout((1, 8))
        )
        self.kernel(
            mQ, mK, mV, mPT, mCu, mLens, mWork, mCount, mOut, mLse, mSink, mKDesc, mVDesc, scale_log2, has_sink,
            window_left, sQ_layout, sK_layout, sV_layout, tiled_mma, kv_copy, kv_copy_threads, q_copy,
        ).launch(grid=[self.hkv, self._grid_rows(mWork), 1], block=[self.threads, 1, 1], stream=stream,
                 use_pdl=self.pdl in ("dependent", "wait", "wait+trigger"))  # fmt: skip

    def _grid_rows(self, mWork):
        """CTA rows a KV head: one per work row, or (persistent) `_config_extend.persistent_grid_rows`."""
        if self.persistent_ctas:
            rows = -(-self.persistent_ctas // self.hkv)
            return cutlass.max(cutlass.min(mWork.shape[0], Int32(rows)), Int32(1))
        return mWork.shape[0]

    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mPT: cute.Tensor,
        mCu: cute.Tensor,
        mLens: cute.Tensor,
        mWork: cute.Tensor,
        mCount: cute.Tensor,
        mOut: cute.Tensor,
        mLse: cute.Tensor,
        mSink: cute.Tensor,
        mKDesc: cute.Tensor,
        mVDesc: cute.Tensor,
        scale_log2: Float32,
        has_sink: Int32,
        window_left: Int32,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        tiled_mma: cute.TiledMma,
        kv_copy: cute.TiledCopy,
        kv_copy_threads: cutlass.Constexpr,
        q_copy: cute.TiledCopy,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        kvh, item, _ = cute.arch.block_idx()  # heads fastest: live items launch before dead ones
        lane = tidx % 32
        if cutlass.const_expr(self.pdl in ("wait", "wait+trigger")):
            cute.arch.griddepcontrol_wait()
        if cutlass.const_expr(self.pdl in ("trigger", "wait+trigger")):
            cute.arch.griddepcontrol_launch_dependents()
        tensors = (mQ, mK, mV, mPT, mCu, mLens, mWork, mCount, mOut, mLse, mSink, mKDesc, mVDesc)
        layouts = (sQ_layout, sK_layout, sV_layout)
        copies = (tiled_mma, kv_copy, kv_copy_threads, q_copy)
        scalars = (scale_log2, has_sink, window_left)
        if cutlass.const_expr(self.persistent_ctas > 0):
            self._persistent(tensors, layouts, copies, scalars, kvh, item, tidx, lane)
        else:
            if cutlass.const_expr(self.early_pages):
                # the work row (in bounds: one grid row per work row) loads beside the count: the
                # branch tests both (a live row's request is >= 0), so neither load sinks past the other
                row = (mWork[item, 0], mWork[item, 1])
                if (item < mCount[0]) & (row[0] >= 0):
                    self._item(tensors, layouts, copies, scalars, item, kvh, tidx, lane, row)
            else:
                if item < mCount[0]:
                    self._item(tensors, layouts, copies, scalars, item, kvh, tidx, lane)

    @cute.jit
    def _item(self, tensors, layouts, copies, scalars, item, kvh, tidx, lane, row=None):
        """Work row `item` for KV head kvh: Q and the first tiles, the main loop, the epilogue.
        Persistent: also draws the next item and returns its linear index (`_kernel_extend_persistent`)."""
        mQ, mK, mV, mPT, mCu, mLens, mWork, mCount, mOut, mLse, mSink, mKDesc, mVDesc = tensors
        sQ_layout, sK_layout, sV_layout = layouts
        tiled_mma, kv_copy, kv_copy_threads, q_copy = copies
        scale_log2, has_sink, window_left = scalars
        if cutlass.const_expr(row is None):
            req = mWork[item, 0]
            tok0 = mWork[item, 1]
        else:  # early_pages: the work row was loaded beside the live count
            req, tok0 = row
        early = None
        if cutlass.const_expr(self.early_pages):  # beside the q_len / kv_len loads, not after them
            early = self._first_pages(mPT, req)
        q0 = mCu[req]
        q_len = mCu[req + 1] - q0
        kv_len = mLens[req]
        n_tok = cutlass.min(Int32(self.tokens), q_len - tok0)
        diag = kv_len - q_len  # token t sees keys <= t + diag

        # ---- shared memory ------------------------------------------------------------------
        smem = cutlass.memory.SmemAllocator()
        sQ = smem.allocate_tensor(self.mma_dtype, sQ_layout, 1024)
        sK = smem.allocate_tensor(self.kv_dtype, sK_layout, 1024)
        sV = smem.allocate_tensor(self.kv_dtype, sV_layout, 1024)
        sQraw = None
        sRed = None
        if cutlass.const_expr(self.fp8):
            sQraw = smem.allocate_tensor(self.q_dtype, cute.make_layout((self.bm, self.d), stride=(self.d, 1)), 16)
            sRed = smem.allocate_tensor(Float32, cute.make_layout(self.warps), 16)
        sNext = None
        if cutlass.const_expr(self.persistent_ctas > 0):
            sNext = smem.allocate_tensor(Int32, cute.make_layout(1), 16)

        # ---- the keys this tile's rows see: [lo, hi) ----------------------------------------
        hi = cutlass.max(cutlass.min(tok0 + n_tok + diag, kv_len), 0)
        lo = Int32(0)
        if window_left >= 0:
            lo = cutlass.max(tok0 + diag - window_left, 0)
        t_begin = lo // self.bn
        t_end = (hi + self.bn - 1) // self.bn
        if hi <= lo:
            t_end = t_begin
        n_tiles = t_end - t_begin
        width = mPT.shape[1]
        cKV = kv_copy.get_slice(tidx % kv_copy_threads).partition_S(cute.make_identity_tensor((self.ck, self.de)))

        # ---- Q first (it joins the first tile's cp.async group): block_m packed rows, one
        # 16-byte vector per thread and copy step, zero-filled past the request's tokens -------
        sQdst = sQraw if cutlass.const_expr(self.fp8) else sQ
        valid_rows = n_tok * self.group
        self._load_q(mQ, sQdst, q0 + tok0, n_tok, valid_rows, kvh, q_copy, tidx)
        pages = cute.make_rmem_tensor(self.chunks, Int32)  # page_prefetch: the next tile's pages
        for s in cutlass.range_constexpr(self.ahead):
            key0 = (t_begin + s) * self.bn
            if cutlass.const_expr(self.early_pages and s == 0):
                self._early_page_ids(mPT, pages, early, req, t_begin, kv_len, width)
            elif cutlass.const_expr(self.prefetch):
                self._page_ids(mPT, pages, req, key0, kv_len, width)
            if s < n_tiles:
                self._load_tile(mK, mV, mPT, sK, sV, req, kvh, key0, kv_len, width, s, kv_copy,
                                kv_copy_threads, cKV, tidx, pages)  # fmt: skip
            cute.arch.cp_async_commit_group()
        if cutlass.const_expr(self.prefetch):
            self._page_ids(mPT, pages, req, (t_begin + self.ahead) * self.bn, kv_len, width)
        drawn = Int32(0)
        if cutlass.const_expr(self.persistent_ctas > 0):  # the next item's index: lands beside this prologue
            drawn = self._draw_next(mCount, tidx)
        cute.arch.cp_async_wait_group(self.ahead - 1)
        cute.arch.sync_threads()
        if cutlass.const_expr(self.persistent_ctas > 0):  # every thread has read the previous item's slot
            self._publish_next(sNext, drawn, tidx)
        qk_scale = scale_log2
        vd = Float32(1.0)
        if cutlass.const_expr(self.fp8):
            vd = mVDesc[req, kvh]
            q_unscale = stage_q_fp16(sQraw, sQ, sRed, tidx, self.bm, self.bm, self.d, self.threads)
            qk_scale = scale_log2 * mKDesc[req, kvh] * q_unscale
            cute.arch.sync_threads()

        thr_mma = tiled_mma.get_slice(tidx)
        tSrQ = thr_mma.make_fragment_A(thr_mma.partition_A(sQ))
        q_s2r = cute.make_tiled_copy_A(
            cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), self.mma_dtype), tiled_mma
        )
        thr_q_s2r = q_s2r.get_slice(tidx)
        tSsQ = thr_q_s2r.partition_S(sQ)
        tSrQ_v = thr_q_s2r.retile(tSrQ)
        if cutlass.const_expr(self.q_in_regs):
            cute.copy(q_s2r, tSsQ, tSrQ_v)

        acc_O = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.bm, self.dv)), Float32)
        acc_O.fill(0.0)
        row_max = cute.make_rmem_tensor(2 * self.row_blocks, Float32)
        row_sum = cute.make_rmem_tensor(2 * self.row_blocks, Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)

        # ---- main loop: one CTA barrier per tile (the stage refilled below was last read
        # in the previous iteration, which every warp has finished when it passes it) --------
        if cutlass.const_expr(self.cross):
            self._loop_cross(mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy,
                             kv_copy_threads, cKV, tidx, pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma,
                             thr_mma, tSrQ, acc_O, row_max, row_sum, q_s2r, tSsQ, tSrQ_v)  # fmt: skip
        else:
            args = (mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, kv_copy_threads, cKV,
                    tidx, pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max,
                    row_sum, q_s2r, tSsQ, tSrQ_v)  # fmt: skip
            if cutlass.const_expr(self.stagger):
                # warps w and w + warps / 2 share a scheduler: the first group runs each tile's PV
                # one step late, so its softmax meets the second group's mma and vice versa
                if cute.arch.make_warp_uniform(cute.arch.warp_idx()) < self.warps // 2:
                    self._loop(*args, 1)
                else:
                    self._loop(*args, 0)
            else:
                self._loop(*args, 0)
        cute.arch.cp_async_wait_group(0)

        # ---- epilogue: normalise, fold the sink, write rows of real tokens -----------------
        self._write_rows(acc_O, row_max, row_sum, thr_mma, q0, tok0, valid_rows, kvh, vd, lane,
                         mSink, has_sink, mOut, mLse)  # fmt: skip
        nxt = None
        if cutlass.const_expr(self.persistent_ctas > 0):  # every warp is past its last shared-memory read
            cute.arch.sync_threads()
            nxt = sNext[0]
        return nxt

    # ---- device helpers (traced inline) ----------------------------------------------------------
    @cute.jit
    def _loop(self, mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, copy_threads, cKV, tidx,
              pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, q_s2r,
              tSsQ, tSrQ_v, lag: cutlass.Constexpr):  # fmt: skip
        """Main loop, one CTA barrier per tile: the ring slot refilled after it was last read (PV) in an
        earlier step, which every warp has finished when it passes the barrier. lag 1 (stagger's second
        warp group): step i runs the PV of tile i - 1 (P kept in registers, its slot not yet refilled)
        before tile i's QK^T and softmax; the last tile's PV follows the loop."""
        rP = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.bm, self.bn)), self.mma_dtype)
        first = 0
        if cutlass.const_expr(lag == 1):  # step 0 has no previous PV: peeled, so no branch in the loop
            if n_tiles > 0:
                self._step(mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, copy_threads, cKV,
                           tidx, pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O,
                           row_max, row_sum, q_s2r, tSsQ, tSrQ_v, rP, 0, lag, False)  # fmt: skip
            first = 1
        for i in range(first, n_tiles):
            self._step(mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, copy_threads, cKV, tidx,
                       pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max,
                       row_sum, q_s2r, tSsQ, tSrQ_v, rP, i, lag, True)  # fmt: skip
        if cutlass.const_expr(lag == 1):
            if n_tiles > 0:
                self._pv_p(acc_O, rP, sV[None, None, (n_tiles - 1) % self.stages], tiled_mma, thr_mma, tidx)

    @cute.jit
    def _step(self, mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, copy_threads, cKV, tidx,
              pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, q_s2r,
              tSsQ, tSrQ_v, rP, i, lag: cutlass.Constexpr, prev: cutlass.Constexpr):  # fmt: skip
        """Step i of `_loop`: wait for tile i, barrier, issue tile i + ahead, then the tile's math (lag 1:
        the PV of tile i - 1 from rP first when `prev`, and tile i's P left in rP)."""
        cute.arch.cp_async_wait_group(self.ahead - 1)
        cute.arch.sync_threads()
        nxt = i + self.ahead
        if cutlass.const_expr(lag == 1 or not self.split_issue):  # this group issues the copies
            if nxt < n_tiles:
                self._load_tile(mK, mV, mPT, sK, sV, req, kvh, (t_begin + nxt) * self.bn, kv_len, width,
                                nxt % self.stages, kv_copy, copy_threads, cKV, tidx, pages)  # fmt: skip
            cute.arch.cp_async_commit_group()
            if cutlass.const_expr(self.prefetch):  # lands while this tile's math runs
                self._page_ids(mPT, pages, req, (t_begin + nxt + 1) * self.bn, kv_len, width)
        key0 = (t_begin + i) * self.bn
        if cutlass.const_expr(lag == 1):
            if cutlass.const_expr(prev):
                self._pv_p(acc_O, rP, sV[None, None, (i - 1) % self.stages], tiled_mma, thr_mma, tidx)
            acc_S = self._tile_scores(sK, i % self.stages, key0, tok0, n_tok, diag, kv_len, window_left, qk_scale,
                                      tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ,
                                      tSrQ_v)  # fmt: skip
            rP.store(acc_S.load().to(self.mma_dtype))
        elif cutlass.const_expr(self.sub_tiles == 1):
            self._tile(sK, sV, i % self.stages, key0, tok0, n_tok, diag, kv_len, window_left, qk_scale,
                       tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v)  # fmt: skip
        elif self._crosses(key0, tok0, n_tok, diag, kv_len, window_left):
            self._tile_sliced(sK, sV, i % self.stages, key0, tok0, diag, kv_len, window_left, qk_scale, tiled_mma,
                              thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v, True)  # fmt: skip
        else:
            self._tile_sliced(sK, sV, i % self.stages, key0, tok0, diag, kv_len, window_left, qk_scale, tiled_mma,
                              thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v, False)  # fmt: skip

    @cute.jit
    def _loop_cross(self, mK, mV, mPT, sK, sV, req, kvh, t_begin, n_tiles, kv_len, width, kv_copy, copy_threads, cKV,
                    tidx, pages, tok0, n_tok, diag, window_left, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max,
                    row_sum, q_s2r, tSsQ, tSrQ_v):  # fmt: skip
        """cross_tile main loop: step i issues QK^T of tile i + 1 before the softmax and PV of tile i (one
        basic block per masked / unmasked body), so that softmax runs beside the next tile's mma.
        Ring (stages >= 3): tile t sits in slot t % stages; at step i's barrier tiles i and i + 1 have
        landed (tile i + 1 was issued at step i - 1), and tile i + stages - 1 goes into the slot of
        tile i - 1, whose last reads (its PV) were in step i - 1. The last tile's step has no QK^T."""
        shape_S = thr_mma.partition_shape_C((self.bm, self.bn))
        acc_cur = cute.make_rmem_tensor(shape_S, Float32)
        acc_nxt = cute.make_rmem_tensor(shape_S, Float32)
        if n_tiles > 0:  # the prologue's wait and barrier cover tile 0
            self._qk(acc_cur, sK[None, None, 0], tiled_mma, thr_mma, tSrQ, tidx, q_s2r, tSsQ, tSrQ_v)
        for i in range(n_tiles):
            cute.arch.cp_async_wait_group(self.stages - 3)
            cute.arch.sync_threads()
            nxt = i + self.stages - 1
            if nxt < n_tiles:
                self._load_tile(mK, mV, mPT, sK, sV, req, kvh, (t_begin + nxt) * self.bn, kv_len, width,
                                nxt % self.stages, kv_copy, copy_threads, cKV, tidx, pages)  # fmt: skip
            cute.arch.cp_async_commit_group()
            if cutlass.const_expr(self.prefetch):
                self._page_ids(mPT, pages, req, (t_begin + nxt + 1) * self.bn, kv_len, width)
            key0 = (t_begin + i) * self.bn
            stage = i % self.stages
            ahead = (i + 1) % self.stages
            cross = self._crosses(key0, tok0, n_tok, diag, kv_len, window_left)
            if i + 1 < n_tiles:
                if cross:
                    self._step_ahead(acc_cur, acc_nxt, sK, sV, stage, ahead, key0, tok0, diag, kv_len, window_left,
                                     qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ,
                                     tSrQ_v, True, True)  # fmt: skip
                else:
                    self._step_ahead(acc_cur, acc_nxt, sK, sV, stage, ahead, key0, tok0, diag, kv_len, window_left,
                                     qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ,
                                     tSrQ_v, False, True)  # fmt: skip
            else:
                self._step_ahead(acc_cur, acc_nxt, sK, sV, stage, ahead, key0, tok0, diag, kv_len, window_left,
                                 qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ,
                                 tSrQ_v, True, False)  # fmt: skip

    @cute.jit
    def _step_ahead(self, acc_cur, acc_nxt, sK, sV, stage, ahead, key0, tok0, diag, kv_len, window_left, qk_scale,
                    tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v,
                    masked: cutlass.Constexpr, with_next: cutlass.Constexpr):  # fmt: skip
        """One cross_tile step: [QK^T of the next tile (slot `ahead`) into acc_nxt], mask / softmax / PV of
        the current tile (acc_cur, slot `stage`), then acc_nxt becomes acc_cur."""
        if cutlass.const_expr(with_next):
            self._qk(acc_nxt, sK[None, None, ahead], tiled_mma, thr_mma, tSrQ, tidx, q_s2r, tSsQ, tSrQ_v)
        if cutlass.const_expr(masked):
            self._mask(acc_cur, thr_mma, self.bn, key0, tok0, diag, kv_len, window_left)
        self._online_softmax(acc_cur, acc_O, qk_scale, row_max, row_sum)
        self._pv(acc_O, acc_cur, sV[None, None, stage], tiled_mma, thr_mma, tidx)
        if cutlass.const_expr(with_next):
            acc_cur.store(acc_nxt.load())


# ---- compile -------------------------------------------------------------------------------------
def fake_args(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size, persistent=False):
    """Fake tensors with the runtime contract of `PagedExtend.__call__`: `_fake.paged_io` plus
    cu_seqlens_q, the lengths, the tile list and its count (persistent: the (2,) stride-2 view (items,
    next-item counter) of the dual schedule's count[0::2] or count[1::2])."""
    io = paged_io(q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size)
    cu = make_fake_compact_tensor(Int32, (cute.sym_int(),), assumed_align=4)
    lens = make_fake_compact_tensor(Int32, (io.batch,), assumed_align=4)
    work = make_fake_compact_tensor(Int32, (cute.sym_int(), 2), stride_order=(1, 0), assumed_align=8)
    if persistent:
        count = make_fake_tensor(Int32, (2,), stride=(2,), assumed_align=4)
    else:
        count = make_fake_compact_tensor(Int32, (1,), assumed_align=4)
    return (io.q, io.k, io.v, io.page_table, cu, lens, work, count, io.out, io.lse, io.sink, io.k_descale,
            io.v_descale)  # fmt: skip


@kernel(
    "attention.paged.extend",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._config_extend",
        "flashinfer.experimental.b12x.attention.paged._fake",
        "flashinfer.experimental.b12x.attention.paged._fragments",
        "flashinfer.experimental.b12x.attention.paged._moves",
        "flashinfer.experimental.b12x.attention.paged._kernel_extend_persistent",
        "flashinfer.experimental.b12x.attention.paged._kernel_extend_tile",
    ),
)
def compile_extend(
    q_dtype: str,
    kv_dtype: str,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    head_dim_v: int,
    page_size: int,
    config: ExtendConfig,
    arch: str,
    pdl: str = "none",
    persistent_ctas: int = 0,
):
    """tvm-ffi launcher `fn(q, k, v, page_table, cu_seqlens_q, cache_seqlens, work, count, out, lse,
    sink, k_descale, v_descale, scale_log2, has_sink, window_left)` on torch's current stream.
    pdl: "none", "trigger" (each CTA lets the next launch start), "dependent" (launched as a
    programmatic dependent: it may start before the previous kernel ends, so it must read nothing
    that kernel writes), "wait" (launched so, it waits for the previous kernel's results first: the
    dual schedule's, which triggers at its start) or "wait+trigger" (then lets the next one start).
    persistent_ctas > 0: at most that many CTAs (rounded up to whole KV-head
    rows) loop over the items (`_kernel_extend_persistent`; count is then (items, counter), stride 2)."""
    if pdl not in PDL_MODES:
        raise ValueError(f"pdl must be one of {', '.join(map(repr, PDL_MODES))}, got {pdl!r}")
    if not isinstance(persistent_ctas, int) or isinstance(persistent_ctas, bool) or not 0 <= persistent_ctas < 2**16:
        raise ValueError(
            f"persistent_ctas must be an int in [0, 65536) (0: one CTA per work row), got {persistent_ctas!r}"
        )
    dims = (q_dtype, kv_dtype, num_q_heads, num_kv_heads, head_dim, head_dim_v, page_size)
    reason = why_not_extend(*dims, config, arch)
    if reason is not None:
        raise ValueError(f"attention.paged extend kernel: {reason}")
    args = fake_args(*dims, persistent=persistent_ctas > 0)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    extend = PagedExtend(*dims, config, pdl, persistent_ctas)
    return cute_compile(extend, *args, Float32(1.0), Int32(0), Int32(-1), stream, arch=arch)
