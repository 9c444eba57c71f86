"""Per-item loads of the paged decode kernel (`_kernel_decode.PagedDecode` inherits them): finding a
work row (fused schedule), the Q copy, the cp.async of K/V sub-tiles from cache pages, the ring-slot
and epilogue placement in shared memory, and the persistent kernel's head of an item (its Q and first
sub-tile a warp, issued before the previous item's epilogue). Traced inline into the decode kernel.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from ._config import FUSED_SCHEDULE_MAX_BATCH, M_TILE, PDL_PREFETCH_KEYS, epilogue_offsets
from ._fragments import row_copy, row_predicate


class DecodeLoads:
    """Mixin of `PagedDecode` (its attributes: warps, nw, stages, de, dve, d, dv, group, page_size,
    piece_keys, pieces, persistent, schedule, preload_lengths, direct_items, config, kv_name, hkv,
    threads)."""

    @cute.jit
    def _locate(self, mSeqlens, mWork, mCount, mReq, item, kvh, tidx, window_left):
        """Fused schedule: (request or -1, kv_start, kv_end, split, first item, items, live items of the
        launch) of work row `item`; the CTAs of KV head 0 write the scratch rows the schedule launch
        would have."""
        req, kv_start, kv_end, first, n_items, count = self.schedule.locate(
            mSeqlens,
            item,
            mWork.shape[0],
            window_left,
            tidx % 32,
            self.preload_lengths,
            FUSED_SCHEDULE_MAX_BATCH,
            self.direct_items,
        )
        split = Int32(1) if n_items > 1 else Int32(0)
        if (tidx == 0) & (kvh == 0):  # the scratch rows the schedule launch would have written
            if req >= 0:
                mWork[item, 0] = req
                mWork[item, 1] = kv_start
                mWork[item, 2] = kv_end
                mWork[item, 3] = split
                if item == first:
                    mReq[req, 0] = first
                    mReq[req, 1] = n_items
            if item == 0:
                mCount[0] = count
        return req, kv_start, kv_end, split, first, n_items, count

    @cute.jit
    def _issue_q(self, mQ, sQdst, req, kvh, tidx, q_copy, q_copy_threads: cutlass.Constexpr):
        """cp.async the G query rows of (req, kvh) into sQdst (rows >= G zero-filled); no commit."""
        q_row0 = mQ.iterator + Int64(req) * mQ.stride[0] + Int64(kvh * self.group) * mQ.stride[1]
        gQ = cute.make_tensor(q_row0, cute.make_layout((M_TILE, self.d), stride=(mQ.stride[1], 1)))
        if tidx < q_copy_threads:
            thr_q = q_copy.get_slice(tidx)
            tQg = thr_q.partition_S(gQ)
            tQs = thr_q.partition_D(sQdst)
            cQ = thr_q.partition_S(cute.make_identity_tensor((M_TILE, self.d)))
            cute.copy(q_copy, tQg, tQs, pred=row_predicate(tQs, cQ, lambda row: row < self.group))

    @cute.jit
    def _issue_head(self, mQ, mK, mV, sQdst, sK, sV, req, kvh, kv_start, kv_end, page, page2, tidx, q_copy,
                    q_copy_threads: cutlass.Constexpr, kv_copy):  # fmt: skip
        """Persistent: an item's Q (one commit group) and each warp's first sub-tile (the next group),
        into stage 0; page / page2: that sub-tile's pages (`_first_pages`)."""
        lane = tidx % 32
        wid = tidx // 32
        self._issue_q(mQ, sQdst, req, kvh, tidx, q_copy, q_copy_threads)
        cute.arch.cp_async_commit_group()
        t_begin, n_mine = self._my_tiles(kv_start, kv_end, wid)
        if 0 < n_mine:
            thr_kv = kv_copy.get_slice(lane)
            cKV = thr_kv.partition_S(cute.make_identity_tensor((self.piece_keys, self.de)))
            self._load_tile(mK, mV, sK, sV, page, kvh, t_begin + wid, kv_start, kv_end, self._slot(wid, 0), kv_copy,
                            thr_kv, cKV, page2)  # fmt: skip
        cute.arch.cp_async_commit_group()

    @cute.jit
    def _prefetch_pages(self, mPT, req, kv_start, kv_end, tidx):
        """`DecodeConfig.prefetch_pages`: page-table entries kv_start // page_size .. (kv_end - 1) //
        page_size of request req into L2, one prefetch per 128-byte line (32 entries; the last
        entry's line once more, in case the range straddles one line more), the CTA's threads in turn.
        Only entries the item reads itself are touched."""
        if kv_end > kv_start:
            p0 = kv_start // self.page_size
            p1 = cutlass.min((kv_end - 1) // self.page_size, mPT.shape[1] - 1)  # inside the table (`_pt`)
            row = mPT.iterator + Int64(req) * mPT.stride[0]
            for k in range(tidx, (p1 - p0) // 32 + 2, self.threads):
                entry = cutlass.min(p0 + 32 * k, p1)
                cute.arch.prefetch((row + entry).llvm_ptr, cache_level="L2")

    @cute.jit
    def _prefetch_table(self, mPT, kvh, cta_row, tidx):
        """`DecodeConfig.early_pages`: line tidx + threads x (cta_row x Hkv + kvh) of the page table's
        B x early_page_lines(W) 128-byte lines into L2 (`_config.early_page_entry` is its mirror),
        before the CTA knows its work row: the grid's first CTAs cover the whole table of a small batch."""
        width = mPT.shape[1]
        per_row = (width + 31) // 32 + 1
        line = (cta_row * self.hkv + kvh) * self.threads + tidx
        if (width > 0) & (line < mPT.shape[0] * per_row):
            row = line // per_row
            entry = cutlass.min((line - row * per_row) * 32, width - 1)
            ptr = mPT.iterator + Int64(row) * mPT.stride[0] + entry
            cute.arch.prefetch(ptr.llvm_ptr, cache_level="L2")

    @cute.jit
    def _prefetch_kv(self, mSeqlens, mPT, mK, mV, item, kvh, tidx, window_left, cap):
        """`DecodeConfig.pdl == "prefetch"`, before griddepcontrol.wait: locate work row `item` (read
        only: `Schedule.locate`, no scratch write, so nothing races the kernel before) and prefetch
        into L2 every 128-byte line of the K and V rows of its first PDL_PREFETCH_KEYS keys (KV head
        kvh), the CTA's threads in turn; the page of each key is read from the page table."""
        req, kv_start, kv_end, _, _, _ = self.schedule.locate(
            mSeqlens, item, cap, window_left, tidx % 32, self.preload_lengths, FUSED_SCHEDULE_MAX_BATCH,
            self.direct_items,
        )  # fmt: skip
        k_lines = max(1, self.de * 2 // 128)  # 128-byte lines of one K row (16-bit elements)
        v_lines = max(1, self.dve * 2 // 128)  # and of one V row (fewer or more where Dv != Dqk)
        per_row = max(k_lines, v_lines)
        if req >= 0:
            end = cutlass.min(kv_end, kv_start + PDL_PREFETCH_KEYS)
            for i in range(tidx, (end - kv_start) * per_row, self.threads):
                key = kv_start + i // per_row
                line = i % per_row
                col = Int64(line * 64)  # 64 16-bit elements a line
                page = Int64(self._page_id(self._pt(mPT, req, key // self.page_size), mK.shape[0]))
                row = Int64(key % self.page_size)
                k_off = page * mK.stride[0] + row * mK.stride[1] + Int64(kvh) * mK.stride[2] + col
                v_off = page * mV.stride[0] + row * mV.stride[1] + Int64(kvh) * mV.stride[2] + col
                if cutlass.const_expr(k_lines == v_lines):
                    cute.arch.prefetch((mK.iterator + k_off).llvm_ptr, cache_level="L2")
                    cute.arch.prefetch((mV.iterator + v_off).llvm_ptr, cache_level="L2")
                else:  # each row's own lines only: never past a row (nor past the cache's end)
                    if line < k_lines:
                        cute.arch.prefetch((mK.iterator + k_off).llvm_ptr, cache_level="L2")
                    if line < v_lines:
                        cute.arch.prefetch((mV.iterator + v_off).llvm_ptr, cache_level="L2")

    @cute.jit
    def _first_pages(self, mPT, req, kv_start, kv_end, wid):
        """The page(s) of this warp's first sub-tile of [kv_start, kv_end) (0 when it has none)."""
        t_begin, n_mine = self._my_tiles(kv_start, kv_end, wid)
        page = Int32(0)
        page2 = Int32(0)
        if 0 < n_mine:
            page = self._pt(mPT, req, (t_begin + wid) * self.nw // self.page_size)
            page2 = self._second_page(mPT, req, t_begin + wid, kv_end)
        return page, page2

    @cute.jit
    def _my_tiles(self, kv_start, kv_end, wid):
        """(first sub-tile of the range, sub-tiles of warp wid: t_begin + wid, + W, ...)."""
        t_begin = kv_start // self.nw
        t_end = (kv_end + self.nw - 1) // self.nw
        if kv_end <= kv_start:
            t_end = t_begin
        n_mine = cutlass.max(t_end - t_begin - wid + self.warps - 1, 0) // self.warps
        return t_begin, n_mine

    def _slot(self, wid, s):
        """K/V ring buffer of warp wid's stage s: warp-major, or stage-major when persistent (stage 0 of
        every warp first, so the epilogue can use stages >= 1 while the next item's stage 0 fills)."""
        if self.persistent:
            return s * self.warps + wid
        return wid * self.stages + s

    def _epilogue_ptrs(self, buf):
        """Float32 pointers to the epilogue's O rows (and the merge's buffer) and to its stats (max,
        sum, weights, LSE) in the K/V ring (`_config.epilogue_offsets`)."""
        o_off, stats_off = epilogue_offsets(self.kv_name, self.d, self.dv, self.config)
        fbuf = cute.recast_ptr(buf.iterator + o_off, dtype=Float32)
        return fbuf, cute.recast_ptr(buf.iterator + stats_off, dtype=Float32)

    # ---- device helpers (traced inline) ----------------------------------------------------------
    @cute.jit
    def _pt(self, mPT, req, col):
        """Page-table entry (req, col), its column clamped into the table. The id itself is clamped where it
        addresses the cache (`_page_id`), not here: the loop reads the next sub-tile's id an iteration
        ahead, and a min on the loaded value would make the warp wait for that load at once (session 47's
        sm_90a SASS: LDG then VIMNMX.U32 on its result, inside the loop). bind checks both; under graph
        replay the lengths and the table are the caller's, and a bad one then reads another page of the
        cache (wrong keys), never past the table or outside the cache."""
        return mPT[req, cutlass.min(col, mPT.shape[1] - 1)]

    @cute.jit
    def _page_id(self, page, pages):
        """A page id clamped into [0, pages), at the address that uses it (`_pt`). A negative id wraps high."""
        return Int32(cutlass.min(cutlass.Uint32(page), cutlass.Uint32(pages - 1)))

    @cute.jit
    def _second_page(self, mPT, req, tile, kv_end):
        """The page of keys tile*nw + page_size .. of a sub-tile spanning two pages; 0 (unused: that
        piece's copy is predicated off) when they lie past kv_end, so the read stays inside the
        request's page-table entries."""
        page = Int32(0)
        if cutlass.const_expr(self.pieces == 2):
            if tile * self.nw + self.piece_keys < kv_end:
                page = self._pt(mPT, req, tile * self.pieces + 1)
        return page

    @cute.jit
    def _load_tile(self, mK, mV, sK, sV, page, kvh, tile, kv_start, kv_end, slot, kv_copy, thr_kv, cKV, page2):
        """cp.async sub-tile `tile` (keys tile*nw .., inside cache page `page`, or pages `page` and
        `page2` when keys_per_warp = 2 x page_size) of K and V into buffer `slot`; keys outside
        [kv_start, kv_end) are zero-filled (never read from the cache)."""
        if cutlass.const_expr(self.pieces == 1):
            self._load_piece(mK, mV, sK[None, None, slot], sV[None, None, slot], page, kvh, tile * self.nw,
                             kv_start, kv_end, kv_copy, thr_kv, cKV)  # fmt: skip
        else:
            rows = self.piece_keys
            for h in cutlass.range_constexpr(self.pieces):
                sKh = cute.local_tile(sK[None, None, slot], (rows, self.de), (h, 0))
                sVh = cute.local_tile(sV[None, None, slot], (rows, self.dve), (h, 0))
                self._load_piece(mK, mV, sKh, sVh, page if h == 0 else page2, kvh, tile * self.nw + h * rows,
                                 kv_start, kv_end, kv_copy, thr_kv, cKV)  # fmt: skip

    @cute.jit
    def _load_piece(self, mK, mV, sKt, sVt, page, kvh, key0, kv_start, kv_end, kv_copy, thr_kv, cKV):
        """cp.async keys key0 .. key0 + piece_keys (one cache page) of K and V into sKt / sVt."""
        nw = self.piece_keys
        page = self._page_id(page, mK.shape[0])
        off = Int64(page) * mK.stride[0] + Int64(key0 % self.page_size) * mK.stride[1] + Int64(kvh) * mK.stride[2]
        gK = cute.make_tensor(mK.iterator + off, cute.make_layout((nw, self.de), stride=(mK.stride[1], 1)))
        offv = Int64(page) * mV.stride[0] + Int64(key0 % self.page_size) * mV.stride[1] + Int64(kvh) * mV.stride[2]
        gV = cute.make_tensor(mV.iterator + offv, cute.make_layout((nw, self.dve), stride=(mV.stride[1], 1)))
        tKs = thr_kv.partition_D(sKt)

        def keep(row):  # the row's key in [kv_start, kv_end)
            key = key0 + row
            return (key >= kv_start) & (key < kv_end)

        pred = row_predicate(tKs, cKV, keep)
        cute.copy(kv_copy, thr_kv.partition_S(gK), tKs, pred=pred)
        if cutlass.const_expr(self.dve == self.de):
            cute.copy(kv_copy, thr_kv.partition_S(gV), thr_kv.partition_D(sVt), pred=pred)
        else:  # Dv != Dqk: V's rows have their own width, so their own copy (threads across a row) and predicate
            v_copy, _ = row_copy(self.kv_dtype, self.dve, 32, 32)
            thr_v = v_copy.get_slice(thr_kv.thr_idx)
            tVs = thr_v.partition_D(sVt)
            cV = thr_v.partition_S(cute.make_identity_tensor((nw, self.dve)))
            cute.copy(v_copy, thr_v.partition_S(gV), tVs, pred=row_predicate(tVs, cV, keep))
