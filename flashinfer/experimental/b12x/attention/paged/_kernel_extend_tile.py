"""One KV tile of the paged extend kernel (`_kernel_extend.PagedExtend`): the Q and K/V cp.async
issue (paged: one chunk of min(page_size, block_n) keys a page), S = Q K^T, the causal / window /
length mask, the online softmax (base 2, optional lazy rescale), O += P V and the epilogue's row
writes. A mixin: every method reads the kernel's geometry from `PagedExtend.__init__`'s attributes
and is traced inline into its caller (no device code of its own)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64
from cutlass.cute.nvgpu import warp

from ._fragments import (
    c_as_a,
    expand_k_block,
    expand_v_block,
    fold_sink,
    mn_view,
    quad_max,
    quad_sum,
    row_copy,
    row_predicate,
    softmax_finish,
)


class ExtendTile:
    """Device helpers of `PagedExtend` (see the module docstring)."""

    @cute.jit
    def _load_q(self, mQ, sQdst, row0, n_tok, valid_rows, kvh, q_copy, tidx):
        """cp.async the packed Q tile (row r: token row0 + r // G, head kvh * G + r % G) into sQdst;
        rows >= valid_rows are zero-filled (their clamped source address is not read)."""
        thr = q_copy.get_slice(tidx)
        tQs = thr.partition_D(sQdst)  # ((8, 1), block_m / rows per step, 1)
        cQ = thr.partition_S(cute.make_identity_tensor((self.bm, self.d)))
        pred = cute.make_rmem_tensor(cute.make_layout(1), cutlass.Boolean)
        for st in cutlass.range_constexpr(cute.size(tQs, mode=[1])):
            r = cQ[0, st, 0][0]
            tok = row0 + cutlass.min(r // self.group, n_tok - 1)
            off = Int64(tok) * mQ.stride[0] + Int64(kvh * self.group + r % self.group) * mQ.stride[1]
            src = cute.make_tensor(mQ.iterator + off + cQ[0, st, 0][1], cute.make_layout(((8, 1),), stride=((1, 0),)))
            pred[0] = r < valid_rows
            cute.copy(q_copy, src, tQs[None, st, 0], pred=pred)

    @cute.jit
    def _page_ids(self, mPT, pages, req, key0, kv_len, width):
        """page_prefetch: the page of each chunk of the tile at key0 into registers (0 past kv_len),
        loaded one tile before `_load_tile` issues that tile, so the lookup latency hides behind math."""
        for ch in cutlass.range_constexpr(self.chunks):
            k0 = key0 + ch * self.ck
            page = Int32(0)
            if k0 < kv_len:
                page = mPT[req, cutlass.min(k0 // self.page_size, width - 1)]
            pages[ch] = page

    @cute.jit
    def _first_pages(self, mPT, req):
        """early_pages: the page of each chunk of keys [0, block_n) (a causal request's first tile),
        read right after the work row, so the loads run beside those of the request's q_len and
        kv_len instead of after them (the prologue chain: work row -> lengths -> pages -> K/V was
        four L2 round trips before the first tile's math, with no other CTA on the SM to cover them
        at 256 rows). Columns clamped into the table; unused past kv_len (`_early_page_ids`)."""
        early = cute.make_rmem_tensor(self.chunks, Int32)
        width = mPT.shape[1]
        for ch in cutlass.range_constexpr(self.chunks):
            early[ch] = mPT[req, cutlass.min((ch * self.ck) // self.page_size, width - 1)]
        return early

    @cute.jit
    def _early_page_ids(self, mPT, pages, early, req, t_begin, kv_len, width):
        """The first tile's pages: `_first_pages`' (0 past kv_len, as `_page_ids`) when the tile starts
        at key 0, else (a window past the first tile) looked up as `_page_ids` does."""
        for ch in cutlass.range_constexpr(self.chunks):
            pages[ch] = early[ch] if ch * self.ck < kv_len else Int32(0)
        if t_begin != 0:
            self._page_ids(mPT, pages, req, t_begin * self.bn, kv_len, width)

    @cute.jit
    def _load_tile(self, mK, mV, mPT, sK, sV, req, kvh, key0, kv_len, width, stage, kv_copy, copy_threads, cKV, tidx,
                   pages):  # fmt: skip
        """cp.async keys [key0, key0 + block_n) of K and V into `stage`, chunk by chunk (one page
        each); keys >= kv_len are zero-filled and their page-table entries are not read. With
        page_prefetch the chunks' pages come from `pages` (`_page_ids` of this tile), else from mPT."""
        if tidx < copy_threads:
            thr = kv_copy.get_slice(tidx)
            thr_v, v_copy, v_threads = thr, kv_copy, copy_threads
            if cutlass.const_expr(self.dve != self.de):  # V's rows have their own width: their own copy, whose
                # threads past v_threads skip V
                v_copy, v_threads = row_copy(self.kv_dtype, self.dve, copy_threads, self.ck, self.wide_copy)
                thr_v = v_copy.get_slice(tidx % v_threads)
            for ch in cutlass.range_constexpr(self.chunks):
                k0 = key0 + ch * self.ck
                page = Int32(0)
                if cutlass.const_expr(self.prefetch):
                    page = pages[ch]
                elif k0 < kv_len:
                    page = mPT[req, cutlass.min(k0 // self.page_size, width - 1)]
                within = Int64(k0 % self.page_size)
                page = cutlass.min(cutlass.max(page, Int32(0)), mK.shape[0] - 1)  # an id outside the cache (a
                # table changed under graph replay; bind rejects it eagerly) reads page 0 or the last: never outside
                off = Int64(page) * mK.stride[0] + within * mK.stride[1] + Int64(kvh) * mK.stride[2]
                gK = cute.make_tensor(mK.iterator + off, cute.make_layout((self.ck, self.de), stride=(mK.stride[1], 1)))
                offv = Int64(page) * mV.stride[0] + within * mV.stride[1] + Int64(kvh) * mV.stride[2]
                gV = cute.make_tensor(
                    mV.iterator + offv, cute.make_layout((self.ck, self.dve), stride=(mV.stride[1], 1))
                )
                tKs = thr.partition_D(cute.local_tile(sK[None, None, stage], (self.ck, self.de), (ch, 0)))
                keep = lambda row, k0=k0: k0 + row < kv_len  # noqa: E731 (keys past kv_len: zero-filled, not read)
                pred = row_predicate(tKs, cKV, keep)
                cute.copy(kv_copy, thr.partition_S(gK), tKs, pred=pred)
                tVs = thr_v.partition_D(cute.local_tile(sV[None, None, stage], (self.ck, self.dve), (ch, 0)))
                if cutlass.const_expr(self.dve == self.de):
                    cute.copy(kv_copy, thr.partition_S(gV), tVs, pred=pred)
                elif tidx < v_threads:
                    cV = thr_v.partition_S(cute.make_identity_tensor((self.ck, self.dve)))
                    cute.copy(v_copy, thr_v.partition_S(gV), tVs, pred=row_predicate(tVs, cV, keep))

    @cute.jit
    def _tile(self, sK, sV, stage, key0, tok0, n_tok, diag, kv_len, window_left, qk_scale, tiled_mma, thr_mma,
              tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v):  # fmt: skip
        """One KV tile for this warp's rows: S = Q K^T, mask, online softmax (base 2), O += P V."""
        acc_S = self._tile_scores(sK, stage, key0, tok0, n_tok, diag, kv_len, window_left, qk_scale, tiled_mma,
                                  thr_mma, tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v)  # fmt: skip
        self._pv(acc_O, acc_S, sV[None, None, stage], tiled_mma, thr_mma, tidx)

    @cute.jit
    def _tile_scores(self, sK, stage, key0, tok0, n_tok, diag, kv_len, window_left, qk_scale, tiled_mma, thr_mma,
                     tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v):  # fmt: skip
        """S = Q K^T of one tile, masked, through the online softmax: returns P (fp32, relative to the
        new row max; O and the row sums already rescaled)."""
        acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.bm, self.bn)), Float32)
        self._qk(acc_S, sK[None, None, stage], tiled_mma, thr_mma, tSrQ, tidx, q_s2r, tSsQ, tSrQ_v)
        # Mask only tiles that cross the diagonal of the first token, the window of the last
        # token, or the end of the cache.
        if self._crosses(key0, tok0, n_tok, diag, kv_len, window_left):
            self._mask(acc_S, thr_mma, self.bn, key0, tok0, diag, kv_len, window_left)
        self._online_softmax(acc_S, acc_O, qk_scale, row_max, row_sum)
        return acc_S

    @cute.jit
    def _tile_sliced(self, sK, sV, stage, key0, tok0, diag, kv_len, window_left, qk_scale, tiled_mma, thr_mma,
                     tSrQ, acc_O, row_max, row_sum, tidx, q_s2r, tSsQ, tSrQ_v, masked: cutlass.Constexpr):  # fmt: skip
        """`_tile` in sub_tiles key slices, software-pipelined: QK^T of slice h + 1 is issued before
        the softmax of slice h (one basic block: `masked` is a trace-time choice, so ptxas can
        interleave one slice's exp2 / max / sum with the next slice's mma)."""
        sKt = sK[None, None, stage]  # (block_n, De)
        sVt = sV[None, None, stage]  # (block_n, Dve)
        shape_S = thr_mma.partition_shape_C((self.bm, self.bs))
        accs = [cute.make_rmem_tensor(shape_S, Float32)]
        self._qk(accs[0], cute.local_tile(sKt, (self.bs, self.de), (0, 0)), tiled_mma, thr_mma, tSrQ, tidx, q_s2r,
                 tSsQ, tSrQ_v)  # fmt: skip
        for h in cutlass.range_constexpr(self.sub_tiles):
            if cutlass.const_expr(h + 1 < self.sub_tiles):
                accs.append(cute.make_rmem_tensor(shape_S, Float32))
                sKs = cute.local_tile(sKt, (self.bs, self.de), (h + 1, 0))
                if cutlass.const_expr(not self.q_in_regs):
                    # Without it ptxas drops the next slice's Q ldmatrix as redundant and keeps the
                    # first slice's Q fragments live (64 registers: the loop spilled ~50 values a
                    # tile); a warp barrier orders shared memory, so the reloads stay (SASS: none)
                    cute.arch.sync_warp()
                self._qk(accs[h + 1], sKs, tiled_mma, thr_mma, tSrQ, tidx, q_s2r, tSsQ, tSrQ_v)
            if cutlass.const_expr(masked):
                self._mask(accs[h], thr_mma, self.bs, key0 + h * self.bs, tok0, diag, kv_len, window_left)
            self._online_softmax(accs[h], acc_O, qk_scale, row_max, row_sum)
            sVs = cute.local_tile(sVt, (self.bs, self.dve), (h, 0))
            self._pv(acc_O, accs[h], sVs, tiled_mma, thr_mma, tidx)

    @cute.jit
    def _crosses(self, key0, tok0, n_tok, diag, kv_len, window_left):
        """Whether the tile at key0 needs the mask: it crosses the diagonal of the tile's first token,
        the window of its last token, or the end of the cache."""
        last_tok = tok0 + n_tok - 1
        cross = (key0 + self.bn - 1 > tok0 + diag) | (key0 + self.bn > kv_len)
        if window_left >= 0:
            cross = cross | (key0 < last_tok + diag - window_left)
        return cross

    @cute.jit
    def _qk(self, acc_S, sKs, tiled_mma, thr_mma, tSrQ, tidx, q_s2r, tSsQ, tSrQ_v):
        """acc_S = Q K^T over the keys of sKs ((keys, De) in shared memory), one 16-wide head-dim
        block at a time (row_blocks 2: Q's fragments of that block re-read from shared memory)."""
        acc_S.fill(0.0)
        k_s2r = cute.make_tiled_copy_B(
            cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), self.kv_dtype), tiled_mma
        )
        thr_k = k_s2r.get_slice(tidx)
        tSsK = thr_k.partition_S(sKs)
        if cutlass.const_expr(not self.fp8):
            tSrK = thr_mma.make_fragment_B(thr_mma.partition_B(sKs))  # ((2,2), keys/8, D/16)
            tSrK_v = thr_k.retile(tSrK)
            for kb in cutlass.range_constexpr(cute.size(tSrK, mode=[2])):
                if cutlass.const_expr(not self.q_in_regs):
                    cute.copy(q_s2r, tSsQ[None, None, kb], tSrQ_v[None, None, kb])
                cute.copy(k_s2r, tSsK[None, None, kb], tSrK_v[None, None, kb])
                cute.gemm(tiled_mma, acc_S, tSrQ[None, None, kb], tSrK[None, None, kb], acc_S)
        else:
            tSrK = cute.make_rmem_tensor(thr_mma.partition_shape_B((cute.size(sKs, mode=[0]), self.d)), self.mma_dtype)
            raw = thr_mma.make_fragment_B(thr_mma.partition_B(sKs))  # fake fp16: 4 e4m3 per register
            raw_v = thr_k.retile(raw)
            for kb in cutlass.range_constexpr(cute.size(raw, mode=[2])):
                cute.copy(k_s2r, tSsK[None, None, kb], raw_v[None, None, kb])
                expand_k_block(raw, tSrK, kb)
                for h in cutlass.range_constexpr(2):
                    if cutlass.const_expr(not self.q_in_regs):
                        cute.copy(q_s2r, tSsQ[None, None, 2 * kb + h], tSrQ_v[None, None, 2 * kb + h])
                    cute.gemm(tiled_mma, acc_S, tSrQ[None, None, 2 * kb + h], tSrK[None, None, 2 * kb + h], acc_S)

    @cute.jit
    def _mask(self, acc_S, thr_mma, width: cutlass.Constexpr, key0, tok0, diag, kv_len, window_left):
        """-inf where the key (key0 + column of the width-key slice) is past the row's diagonal,
        below its window or past the cache."""
        s_mn = mn_view(acc_S)
        cS = mn_view(thr_mma.partition_C(cute.make_identity_tensor((self.bm, width))))
        for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            limit = tok0 + cS[r, 0][0] // self.group + diag
            low = Int32(-1)
            if window_left >= 0:
                low = limit - window_left
            for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                key = key0 + cS[r, c][1]
                if (key > limit) | (key < low) | (key >= kv_len):
                    s_mn[r, c] = -Float32.inf

    @cute.jit
    def _online_softmax(self, acc_S, acc_O, qk_scale, row_max, row_sum):
        """One online-softmax step (base 2) over acc_S's keys: S becomes P (relative to the running
        row max), the row sums and O are rescaled (lazy_rescale: see ExtendConfig)."""
        s_mn = mn_view(acc_S)
        o_mn = mn_view(acc_O)
        if cutlass.const_expr(self.lazy == 0):
            for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
                raw = s_mn[r, None].load()
                # max(s * c) = c * max(s) for c > 0 (sm_scale > 0 is a bind check; the fp8 descales are
                # data, so that path keeps the scaled row), and exp2(s * c - m) is one FFMA + EX2
                if cutlass.const_expr(self.fp8):
                    raw = raw * qk_scale
                    top = raw.reduce(cute.ReductionOp.MAX, -Float32.inf, 0)
                else:
                    top = raw.reduce(cute.ReductionOp.MAX, -Float32.inf, 0) * qk_scale
                m_new = cute.arch.fmax(row_max[r], quad_max(top))
                m_use = Float32(0.0) if m_new == -Float32.inf else m_new
                if cutlass.const_expr(self.fp8):
                    p = cute.math.exp2(raw - m_use, fastmath=True)
                else:
                    p = cute.math.exp2(raw * qk_scale - m_use, fastmath=True)
                corr = cute.math.exp2(row_max[r] - m_use, fastmath=True)
                row_sum[r] = row_sum[r] * corr + p.reduce(cute.ReductionOp.ADD, Float32.zero, 0)
                row_max[r] = m_new
                s_mn[r, None] = p
                o_mn[r, None] = o_mn[r, None].load() * corr
        else:
            rows = cute.size(s_mn, mode=[0])
            tops = cute.make_rmem_tensor(rows, Float32)
            corrs = cute.make_rmem_tensor(rows, Float32)
            grow = cutlass.Boolean(False)
            for r in cutlass.range_constexpr(rows):
                if cutlass.const_expr(self.fp8):
                    s_mn[r, None] = s_mn[r, None].load() * qk_scale
                    top = s_mn[r, None].load().reduce(cute.ReductionOp.MAX, -Float32.inf, 0)
                else:
                    top = s_mn[r, None].load().reduce(cute.ReductionOp.MAX, -Float32.inf, 0) * qk_scale
                tops[r] = cute.arch.fmax(row_max[r], quad_max(top))
                grow = grow | (tops[r] > row_max[r] + Float32(self.lazy))
            # warp-uniform: every row of the warp keeps its max, or every row takes its new one
            renew = cute.arch.vote_any_sync(grow)
            for r in cutlass.range_constexpr(rows):
                m_new = tops[r] if renew else row_max[r]
                m_use = Float32(0.0) if m_new == -Float32.inf else m_new
                raw = s_mn[r, None].load()
                if cutlass.const_expr(self.fp8):
                    p = cute.math.exp2(raw - m_use, fastmath=True)
                else:
                    p = cute.math.exp2(raw * qk_scale - m_use, fastmath=True)
                corrs[r] = cute.math.exp2(row_max[r] - m_use, fastmath=True)
                row_sum[r] = row_sum[r] * corrs[r] + p.reduce(cute.ReductionOp.ADD, Float32.zero, 0)
                row_max[r] = m_new
                s_mn[r, None] = p
            if renew:
                for r in cutlass.range_constexpr(rows):
                    o_mn[r, None] = o_mn[r, None].load() * corrs[r]

    @cute.jit
    def _pv(self, acc_O, acc_S, sVs, tiled_mma, thr_mma, tidx):
        """O += P V for the keys of sVs ((keys, Dve) in shared memory), P = acc_S in the mma dtype fed
        as the A operand from registers, one 16-key block at a time."""
        rP = cute.make_fragment_like(acc_S, self.mma_dtype)
        rP.store(acc_S.load().to(self.mma_dtype))
        self._pv_p(acc_O, rP, sVs, tiled_mma, thr_mma, tidx)

    @cute.jit
    def _pv_p(self, acc_O, rP, sVs, tiled_mma, thr_mma, tidx):
        """O += P V with P already in the mma dtype (rP: a C-fragment-shaped register tensor)."""
        tOrP = c_as_a(rP)  # ((2,2,2), 1, keys/16)
        keys = cute.size(sVs, mode=[0])
        v_s2r = cute.make_tiled_copy_B(
            cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=True, num_matrices=4), self.kv_dtype), tiled_mma
        )
        thr_v = v_s2r.get_slice(tidx)
        # V^T view (Dve, keys) of the (keys, Dve) tile: the B operand of O += P V.
        sVtT = cute.composition(sVs, cute.make_layout((self.dve, keys), stride=(keys, 1)))
        tOsV = thr_v.partition_S(sVtT)
        if cutlass.const_expr(not self.fp8):
            tOrV = thr_mma.make_fragment_B(thr_mma.partition_B(sVtT))
            tOrV_v = thr_v.retile(tOrV)
            for kb in cutlass.range_constexpr(cute.size(tOrV, mode=[2])):
                cute.copy(v_s2r, tOsV[None, None, kb], tOrV_v[None, None, kb])
                cute.gemm(tiled_mma, acc_O, tOrP[None, None, kb], tOrV[None, None, kb], acc_O)
        else:
            tOrV = cute.make_rmem_tensor(thr_mma.partition_shape_B((self.dv, keys)), self.mma_dtype)
            raw = thr_mma.make_fragment_B(thr_mma.partition_B(sVtT))
            raw_v = thr_v.retile(raw)
            for kb in cutlass.range_constexpr(cute.size(raw, mode=[2])):
                cute.copy(v_s2r, tOsV[None, None, kb], raw_v[None, None, kb])
                expand_v_block(raw, tOrV, kb)
                cute.gemm(tiled_mma, acc_O, tOrP[None, None, kb], tOrV[None, None, kb], acc_O)

    @cute.jit
    def _write_rows(self, acc_O, row_max, row_sum, thr_mma, q0, tok0, valid_rows, kvh, vd, lane, mSink, has_sink,
                    mOut, mLse):  # fmt: skip
        """Rows of real tokens: out = v_descale * O / sum (sink in the denominator), LSE base 2."""
        o_mn = mn_view(acc_O)
        cO = mn_view(thr_mma.partition_C(cute.make_identity_tensor((self.bm, self.dv))))
        for r in cutlass.range_constexpr(cute.size(o_mn, mode=[0])):
            total = quad_sum(row_sum[r])
            row = cO[r, 0][0]
            m = row_max[r]
            m_use = Float32(0.0) if m == -Float32.inf else m
            lse, factor = softmax_finish(m_use, total, vd)
            head = kvh * self.group + row % self.group
            lse, factor = fold_sink(lse, factor, mSink, head, has_sink != 0)
            if row < valid_rows:
                tok = q0 + tok0 + row // self.group
                for c in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                    col = cO[r, c][1]
                    if cutlass.const_expr(self.fp8):  # accumulator column n holds dim o_col_dim(n)
                        col = (col // 16) * 16 + 2 * (col % 8) + (col // 8) % 2
                    mOut[tok, head, col] = (o_mn[r, c] * factor).to(self.q_dtype)
                if lane % 4 == 0:
                    mLse[tok, head] = lse
