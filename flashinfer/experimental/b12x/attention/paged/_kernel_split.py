"""Split-KV scheduling and merging for paged decode, and the extend work list, on device (CUDA-graph safe).

`Schedule` (one CTA) reads the live `cache_seqlens` and writes the work list the decode kernel runs:
- each request's visible KV range is [lo, N) with lo = max(0, N - 1 - window_left) (all of it
  without a window); `total` is the sum of their lengths;
- chunk = round_up(max(min_chunk, ceil(total / T)), tile_keys) with T = min(target_items, cap) - B
  (cap = rows of the work list, B = live batch); T <= 0 means no splitting;
- request b gets n_b = ceil(len_b / chunk) items (1 for an empty request), re-balanced to equal
  sizes c_b = round_up(ceil(len_b / n_b), tile_keys), n_b = ceil(len_b / c_b);
- sum_b n_b <= total / chunk + B <= T + B = min(target_items, cap): the list never overflows, and
  a split batch makes at most target_items items (one wave of CTAs with `split_schedule`'s target).
Work row: (request, kv_start, kv_end, split = n_b > 1); request row: (first item, n_b); count[0] =
number of items. `schedule_reference` is the same algorithm in Python (tests compare the two).

`ExtendSchedule` (one CTA) lists the (request, first token) tiles of the extend/verify kernel from
the live `cu_seqlens_q` (`extend_schedule_reference` mirrors it).

`Merge` (one CTA per request x KV head, 4 warps) combines the partial rows of split requests with
`PartialMerge`: out = sum_i 2^(lse_i - m) o_i / sum_i 2^(lse_i - m), lse = m + log2(sum), then the
sink joins the denominator. Requests with one item were finished by the decode kernel and skip. With
`DecodeConfig.fused_merge` the decode kernel runs the same `PartialMerge` in the request's last CTA
and this launch is not made.
Bytes: n_b * Hq * (Dv + 1) * 4 read and Hq * (Dv * itemsize + 4) written per split request.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

from ..._lib.compile import cute_compile, kernel
from ._config import NO_SPLIT_CHUNK, SCHEDULE_THREADS, ScheduleConfig
from ._fake import CUTE_DTYPES
from ._fragments import fold_sink, softmax_finish


class Schedule:
    def __init__(self, config: ScheduleConfig) -> None:
        self.tile = config.tile_keys
        self.target = config.target_items
        self.pairs = config.pairs  # `ScheduleConfig.pairs`: the fused decode kernel's cluster pairs
        self.group = config.group  # the items of one request a cluster takes (2: pairs)
        self.budget = config.budget  # `ScheduleConfig.budget`: a paired split counts the rounding
        self.min_chunk = config.min_chunk
        self.threads = SCHEDULE_THREADS
        self.warps = SCHEDULE_THREADS // 32

    @cute.jit
    def __call__(
        self,
        mSeqlens: cute.Tensor,  # (batch,) int32: KV lengths
        mWork: cute.Tensor,  # (cap, 4) int32
        mReq: cute.Tensor,  # (batch, 2) int32
        mCount: cute.Tensor,  # (1,) int32
        window_left: Int32,
        stream: cuda.CUstream,
    ):
        self.kernel(mSeqlens, mWork, mReq, mCount, window_left).launch(
            grid=[1, 1, 1], block=[self.threads, 1, 1], stream=stream
        )

    @cute.jit
    def _visible(self, mSeqlens, b, window_left):
        n = mSeqlens[b]
        length = n
        if window_left >= 0:
            length = cutlass.min(n, window_left + 1)
        return n, length

    @cute.jit
    def _split(self, length, chunk, paired):
        """(items, keys an item) of one request (`_config._request_split`); paired != 0: even counts."""
        items = Int32(1)
        size = Int32(self.tile)
        if length > 0:
            n = (length + chunk - 1) // chunk
            if cutlass.const_expr(self.pairs):
                if paired != 0:
                    n = self._grouped(n)
            size = ((length + n - 1) // n + self.tile - 1) // self.tile * self.tile
            items = (length + size - 1) // size
        if cutlass.const_expr(self.pairs):
            if paired != 0:
                items = self._grouped(items)
        return items, size

    def _grouped(self, n):
        """n rounded up to a multiple of `group` (pairs: n + n % 2, as before groups)."""
        if cutlass.const_expr(self.group == 2):
            return n + n % 2
        return (n + self.group - 1) // self.group * self.group

    def _spare(self, batch):
        """Rows a paired batch keeps for the rounding: group - 1 a request."""
        if cutlass.const_expr(self.group == 2):
            return batch
        return (self.group - 1) * batch

    def launch_rows(self, batch, cap):
        """`_config.launch_rows` on the host (the launch's grid; no branch on the live values: `_paired`'s test as
        0 / 1 arithmetic)."""
        room = cutlass.min(Int32(self.target), cap)
        rows = cutlass.max(batch, room)
        if cutlass.const_expr(self.pairs):
            spare = self._spare(batch)
            room = cutlass.min(Int32(self.target), cap - spare)
            paired = cutlass.min(cutlass.max(room - self.group * batch + 1, Int32(0)), Int32(1))
            if cutlass.const_expr(self.budget):  # the split counted the rounding
                spare = Int32(0)
            rows = paired * (room + spare) + (1 - paired) * rows
        return rows

    @cute.jit
    def _paired(self, batch, cap):
        """1 when `ScheduleConfig.pairs` schedules this live batch in pairs (`_config.paired`), else 0."""
        paired = Int32(0)
        if cutlass.const_expr(self.pairs):
            if self.group * batch <= cutlass.min(Int32(self.target), cap - self._spare(batch)):
                paired = Int32(1)
        return paired

    @cute.jit
    def _block_scan(self, x, tid, sWarp):
        """(exclusive prefix sum of x over the CTA, total)."""
        lane = tid % 32
        wid = tid // 32
        incl = x
        for k in cutlass.range_constexpr(5):
            y = cute.arch.shuffle_sync_up(incl, offset=1 << k)
            if lane >= (1 << k):
                incl = incl + y
        if lane == 31:
            sWarp[wid] = incl
        cute.arch.sync_threads()
        before = Int32(0)
        total = Int32(0)
        for w in cutlass.range_constexpr(self.warps):
            t = sWarp[w]
            total = total + t
            if w < wid:
                before = before + t
        cute.arch.sync_threads()
        return before + incl - x, total

    @cute.jit
    def _warp_scan(self, x, lane):
        """Inclusive prefix sum of x over the warp."""
        incl = x
        for k in cutlass.range_constexpr(5):
            y = cute.arch.shuffle_sync_up(incl, offset=1 << k)
            if lane >= (1 << k):
                incl = incl + y
        return incl

    @cute.jit
    def locate(
        self,
        mSeqlens,
        item,
        cap,
        window_left,
        lane,
        preload: cutlass.Constexpr = False,
        max_batch: cutlass.Constexpr = 128,
        direct: cutlass.Constexpr = False,
    ):
        """The schedule of work row `item`, recomputed by one warp (the decode kernel's fused_schedule:
        every warp of every CTA runs this, no barrier, no scratch read). Same arithmetic as `kernel`:
        the total visible length over the batch, the chunk, then a warp-wide scan of the requests'
        item counts, 32 requests a step, until the request holding `item` is found.

        preload (`DecodeConfig.preload_lengths`, batch <= max_batch): each lane loads its
        max_batch / 32 lengths at once (one memory latency, not one per step and pass) and both
        passes run unrolled on registers (steps past the batch skipped, warp-uniformly).

        direct (`DecodeConfig.direct_items`): when min(target_items, cap) <= batch the schedule splits
        nothing (chunk = NO_SPLIT_CHUNK: one item per request, item b = request b), which the batch
        size alone tells: item's row is (item, n - visible, n) from its own length, no scan.

        Returns (request, kv_start, kv_end, first item, items of the request, total items); request
        is -1 when item >= total items (a dead row)."""
        if cutlass.const_expr(direct):
            return self._locate_direct(mSeqlens, item, cap, window_left, lane, preload, max_batch)
        if cutlass.const_expr(preload):
            return self._locate_preloaded(mSeqlens, item, cap, window_left, lane, max_batch)
        batch = mSeqlens.shape[0]
        total = Int32(0)
        for b0 in range(0, batch, 32):
            length = Int32(0)
            if b0 + lane < batch:
                _, length = self._visible(mSeqlens, b0 + lane, window_left)
            total = total + cute.arch.warp_redux_sync(length, "add")
        paired = self._paired(batch, cap)
        chunk = self._chunk(total, batch, cap, paired)

        req = Int32(-1)
        kv_start = Int32(0)
        kv_end = Int32(0)
        first = Int32(0)
        n_items = Int32(0)
        base = Int32(0)
        for b0 in range(0, batch, 32):
            b = b0 + lane
            n = Int32(0)
            length = Int32(0)
            items = Int32(0)
            size = Int32(self.tile)
            if b < batch:
                n, length = self._visible(mSeqlens, b, window_left)
                items, size = self._split(length, chunk, paired)
            incl = self._warp_scan(items, lane)
            mine = (item >= base + incl - items) & (item < base + incl)
            ballot = cute.arch.vote_ballot_sync(mine)
            if ballot != 0:  # one lane holds it: items of different requests never overlap
                src = Int32(31) - Int32(cute.arch.clz(ballot))
                req = b0 + src
                first = base + cute.arch.shuffle_sync(incl - items, src)
                n_items = cute.arch.shuffle_sync(items, src)
                size_b = cute.arch.shuffle_sync(size, src)
                n_b = cute.arch.shuffle_sync(n, src)
                lo = n_b - cute.arch.shuffle_sync(length, src)
                kv_start = lo + (item - first) * size_b
                kv_end = cutlass.min(kv_start + size_b, n_b)
            base = base + cute.arch.shuffle_sync(incl, 31)
        return req, kv_start, kv_end, first, n_items, base

    @cute.jit
    def _chunk(self, total, batch, cap, paired):
        room = cap
        if cutlass.const_expr(self.pairs):
            if paired != 0:  # group - 1 rows a request of cap left for the rounding
                room = cap - self._spare(batch)
        target = cutlass.min(Int32(self.target), room) - batch
        if cutlass.const_expr(self.pairs and self.budget):
            if paired != 0:
                target = target - self._spare(batch)
        chunk = Int32(NO_SPLIT_CHUNK)
        if target > 0:
            chunk = cutlass.max(Int32(self.min_chunk), (total + target - 1) // target)
            chunk = (chunk + self.tile - 1) // self.tile * self.tile
        return chunk

    @cute.jit
    def _locate_direct(self, mSeqlens, item, cap, window_left, lane, preload: cutlass.Constexpr, max_batch):
        """`locate(direct=True)`: the no-split case without a scan, else `locate` as configured."""
        batch = mSeqlens.shape[0]
        req = Int32(-1)
        kv_start = Int32(0)
        kv_end = Int32(0)
        first = Int32(0)
        n_items = Int32(0)
        count = Int32(0)
        if cutlass.min(Int32(self.target), cap) - batch <= 0:
            count = batch
            if item < batch:
                n, length = self._visible(mSeqlens, item, window_left)
                req = item
                kv_start = n - length
                kv_end = n
                first = item
                n_items = Int32(1)
        else:
            req, kv_start, kv_end, first, n_items, count = self.locate(
                mSeqlens, item, cap, window_left, lane, preload, max_batch
            )
        return req, kv_start, kv_end, first, n_items, count

    @cute.jit
    def _locate_preloaded(self, mSeqlens, item, cap, window_left, lane, max_batch: cutlass.Constexpr):
        """`locate` with the lengths loaded up front (see there)."""
        steps = max_batch // 32
        batch = mSeqlens.shape[0]
        lens = cute.make_rmem_tensor(cute.make_layout(steps), Int32)
        for s in cutlass.range_constexpr(steps):  # every load issued before any is used
            lens[s] = Int32(0)
            if s * 32 + lane < batch:
                lens[s] = mSeqlens[s * 32 + lane]
        vis = cute.make_rmem_tensor(cute.make_layout(steps), Int32)
        total = Int32(0)
        for s in cutlass.range_constexpr(steps):
            vis[s] = lens[s]
            if window_left >= 0:
                vis[s] = cutlass.min(lens[s], window_left + 1)
            if s * 32 < batch:
                total = total + cute.arch.warp_redux_sync(vis[s], "add")
        paired = self._paired(batch, cap)
        chunk = self._chunk(total, batch, cap, paired)

        req = Int32(-1)
        kv_start = Int32(0)
        kv_end = Int32(0)
        first = Int32(0)
        n_items = Int32(0)
        base = Int32(0)
        for s in cutlass.range_constexpr(steps):
            if s * 32 < batch:
                items = Int32(0)
                size = Int32(self.tile)
                if s * 32 + lane < batch:
                    items, size = self._split(vis[s], chunk, paired)
                incl = self._warp_scan(items, lane)
                mine = (item >= base + incl - items) & (item < base + incl)
                ballot = cute.arch.vote_ballot_sync(mine)
                if ballot != 0:
                    src = Int32(31) - Int32(cute.arch.clz(ballot))
                    req = s * 32 + src
                    first = base + cute.arch.shuffle_sync(incl - items, src)
                    n_items = cute.arch.shuffle_sync(items, src)
                    size_b = cute.arch.shuffle_sync(size, src)
                    n_b = cute.arch.shuffle_sync(lens[s], src)
                    lo = n_b - cute.arch.shuffle_sync(vis[s], src)
                    kv_start = lo + (item - first) * size_b
                    kv_end = cutlass.min(kv_start + size_b, n_b)
                base = base + cute.arch.shuffle_sync(incl, 31)
        return req, kv_start, kv_end, first, n_items, base

    @cute.kernel
    def kernel(
        self, mSeqlens: cute.Tensor, mWork: cute.Tensor, mReq: cute.Tensor, mCount: cute.Tensor, window_left: Int32
    ):
        tid, _, _ = cute.arch.thread_idx()
        smem = cutlass.memory.SmemAllocator()
        sWarp = smem.allocate_tensor(Int32, cute.make_layout(self.warps), 16)
        batch = mSeqlens.shape[0]
        cap = mWork.shape[0]
        per = (batch + self.threads - 1) // self.threads
        b0 = cutlass.min(tid * per, batch)
        b1 = cutlass.min(b0 + per, batch)

        visible = Int32(0)
        for b in range(b0, b1):
            _, length = self._visible(mSeqlens, b, window_left)
            visible = visible + length
        _, total = self._block_scan(visible, tid, sWarp)
        chunk = self._chunk(total, batch, cap, Int32(0))

        mine = Int32(0)
        for b in range(b0, b1):
            _, length = self._visible(mSeqlens, b, window_left)
            items, _ = self._split(length, chunk, Int32(0))
            mine = mine + items
        first, n_items = self._block_scan(mine, tid, sWarp)

        item = first
        for b in range(b0, b1):
            n, length = self._visible(mSeqlens, b, window_left)
            items, size = self._split(length, chunk, Int32(0))
            mReq[b, 0] = item
            mReq[b, 1] = items
            lo = n - length
            for c in range(items):
                mWork[item, 0] = b
                mWork[item, 1] = lo + c * size
                mWork[item, 2] = cutlass.min(lo + (c + 1) * size, n)
                mWork[item, 3] = Int32(1) if items > 1 else Int32(0)
                item = item + 1
        if tid == 0:
            mCount[0] = n_items


class ExtendSchedule(Schedule):
    """Extend/verify work list (one CTA): request b's q_len L_b = cu[b+1] - cu[b] (negative counts
    as empty) gives ceil(L_b / T) items (b, j * T), last tile first; count[0] = their number.
    sum_b ceil(L_b / T) <= ceil(total_q / T) + batch = the launched rows (`extend_item_capacity`)."""

    def __init__(self, tokens_per_tile: int) -> None:
        self.tq = tokens_per_tile
        self.threads = SCHEDULE_THREADS
        self.warps = SCHEDULE_THREADS // 32

    @cute.jit
    def __call__(
        self,
        mCu: cute.Tensor,  # (batch + 1,) int32: cu_seqlens_q
        mWork: cute.Tensor,  # (cap, 2) int32: request, first token
        mCount: cute.Tensor,  # (1,) int32
        stream: cuda.CUstream,
    ):
        self.kernel(mCu, mWork, mCount).launch(grid=[1, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.jit
    def _tiles(self, mCu, b):
        length = cutlass.max(mCu[b + 1] - mCu[b], 0)
        return (length + self.tq - 1) // self.tq

    @cute.kernel
    def kernel(self, mCu: cute.Tensor, mWork: cute.Tensor, mCount: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        smem = cutlass.memory.SmemAllocator()
        sWarp = smem.allocate_tensor(Int32, cute.make_layout(self.warps), 16)
        batch = mCu.shape[0] - 1
        cap = mWork.shape[0]
        per = (batch + self.threads - 1) // self.threads
        b0 = cutlass.min(tid * per, batch)
        b1 = cutlass.min(b0 + per, batch)
        mine = Int32(0)
        for b in range(b0, b1):
            mine = mine + self._tiles(mCu, b)
        first, n_items = self._block_scan(mine, tid, sWarp)
        item = first
        for b in range(b0, b1):
            tiles = self._tiles(mCu, b)
            for j in range(tiles):
                if item < cap:  # cannot overflow for valid cu_seqlens_q; bad ones must not fault
                    mWork[item, 0] = b
                    mWork[item, 1] = (tiles - 1 - j) * self.tq
                item = item + 1
        if tid == 0:
            mCount[0] = cutlass.min(n_items, cap)


class PartialMerge:
    """Device helper: combine the n partial rows (items first .. first + n - 1) of one (request, KV
    head) into its final G rows. Used by `Merge` (its own launch) and by the decode kernel's fused
    merge (`DecodeConfig.fused_merge`, the request's last CTA).

    Phase 1: warp w folds items w, w + W, ... of up to 4 rows at a time, online in base 2 (running
    max m, sum s = sum 2^(lse_i - m), acc = sum 2^(lse_i - m) o_i); lane l holds columns l + 32k, so
    each load instruction of a row is one coalesced 128-byte line. Phase 2: every thread combines
    the W warps' (m, s, acc) of its (row, column) pairs: out = sum_w 2^(m_w - M) acc_w / S, lse =
    M + log2 S, then the sink joins the denominator. The W warps split the items, so the serial
    chain of L2 reads is n / W long (the single-warp-per-row merge it replaces read n twice)."""

    ROWS = 4  # rows per pass: 4 x Dv / 32 accumulators per lane

    def __init__(self, out_dtype, group: int, head_dim_v: int, warps: int, unroll: int = 2) -> None:
        self.out_dtype = out_dtype  # a cutlass numeric type
        self.group, self.dv, self.warps = group, head_dim_v, warps
        self.unroll = unroll  # items a warp folds per unrolled step: their loads are in flight together
        self.threads = 32 * warps
        self.per_lane = head_dim_v // 32
        self.rows = min(group, self.ROWS)

    def smem_floats(self) -> int:
        return self.warps * self.rows * (self.dv + 2)

    @cute.jit
    def merge(self, mPartO, mPartLse, mSink, mOut, mLse, has_sink, first, n, out_row, kvh, tidx, fbuf):
        """fbuf: Float32 shared-memory pointer to `smem_floats()` free floats."""
        lane = tidx % 32
        wid = tidx // 32
        R = self.rows
        sAcc = cute.make_tensor(fbuf, cute.make_layout((self.warps, R, self.dv), stride=(R * self.dv, self.dv, 1)))
        sM = cute.make_tensor(fbuf + self.warps * R * self.dv, cute.make_layout((self.warps, R), stride=(R, 1)))
        sS = cute.make_tensor(fbuf + self.warps * R * (self.dv + 1), cute.make_layout((self.warps, R), stride=(R, 1)))
        for p in cutlass.range_constexpr((self.group + R - 1) // R):
            r0 = p * R
            here = min(R, self.group - r0)
            acc = cute.make_rmem_tensor((R, self.per_lane), Float32)
            acc.fill(0.0)
            m = cute.make_rmem_tensor(R, Float32)
            m.fill(-Float32.inf)
            s = cute.make_rmem_tensor(R, Float32)
            s.fill(0.0)
            if cutlass.const_expr(self.unroll == 2):
                for i in cutlass.range(first + wid, first + n, self.warps, unroll=2):
                    for rr in cutlass.range_constexpr(here):
                        head = kvh * self.group + r0 + rr
                        lse_i = mPartLse[i, head]
                        m_new = cute.arch.fmax(m[rr], lse_i)
                        m_use = Float32(0.0) if m_new == -Float32.inf else m_new
                        corr = cute.math.exp2(m[rr] - m_use, fastmath=True)
                        w = cute.math.exp2(lse_i - m_use, fastmath=True)
                        s[rr] = s[rr] * corr + w
                        m[rr] = m_new
                        for k in cutlass.range_constexpr(self.per_lane):
                            acc[rr, k] = acc[rr, k] * corr + w * mPartO[i, head, lane + 32 * k]
            else:
                self._fold_batched(mPartO, mPartLse, first, n, kvh, r0, here, wid, lane, acc, m, s)
            for rr in cutlass.range_constexpr(here):
                for k in cutlass.range_constexpr(self.per_lane):
                    sAcc[wid, rr, lane + 32 * k] = acc[rr, k]
                if lane == 0:
                    sM[wid, rr] = m[rr]
                    sS[wid, rr] = s[rr]
            cute.arch.sync_threads()
            for it in cutlass.range_constexpr((R * self.dv + self.threads - 1) // self.threads):
                idx = tidx + it * self.threads
                rr = idx // self.dv
                c = idx % self.dv
                if rr < here:
                    head = kvh * self.group + r0 + rr
                    top = sM[0, rr]
                    for w in cutlass.range_constexpr(1, self.warps):
                        top = cute.arch.fmax(top, sM[w, rr])
                    top_use = Float32(0.0) if top == -Float32.inf else top
                    total = Float32(0.0)
                    o = Float32(0.0)
                    for w in cutlass.range_constexpr(self.warps):
                        scale = cute.math.exp2(sM[w, rr] - top_use, fastmath=True)
                        total = total + sS[w, rr] * scale
                        o = o + sAcc[w, rr, c] * scale
                    lse, factor = softmax_finish(top_use, total, 1.0)
                    lse, factor = fold_sink(lse, factor, mSink, head, has_sink != 0)
                    mOut[out_row, head, c] = (o * factor).to(self.out_dtype)
                    if c == 0:
                        mLse[out_row, head] = lse
            cute.arch.sync_threads()  # sAcc / sM / sS are rewritten by the next pass

    @cute.jit
    def _fold_batched(self, mPartO, mPartLse, first, n, kvh, r0, here: cutlass.Constexpr, wid, lane, acc, m, s):
        """Phase 1 with `unroll` items a step whose loads all issue before any is used (the unrolled
        `cutlass.range` keeps a branch per item, so each item's loads waited for the previous
        item's math): items past the request read as (lse -inf, o 0), which fold to nothing."""
        U = self.unroll
        lse_b = cute.make_rmem_tensor((U, self.rows), Float32)
        o_b = cute.make_rmem_tensor((U, self.rows, self.per_lane), Float32)
        for i0 in range(first + wid, first + n, self.warps * U):
            for u in cutlass.range_constexpr(U):
                i = i0 + u * self.warps
                ok = i < first + n
                row = cutlass.min(i, first + n - 1)  # an address inside the request even when not ok
                for rr in cutlass.range_constexpr(here):
                    head = kvh * self.group + r0 + rr
                    lse_b[u, rr] = mPartLse[row, head]
                    for k in cutlass.range_constexpr(self.per_lane):
                        o_b[u, rr, k] = mPartO[row, head, lane + 32 * k]
                    if not ok:
                        lse_b[u, rr] = -Float32.inf
            for u in cutlass.range_constexpr(U):
                for rr in cutlass.range_constexpr(here):
                    lse_i = lse_b[u, rr]
                    m_new = cute.arch.fmax(m[rr], lse_i)
                    m_use = Float32(0.0) if m_new == -Float32.inf else m_new
                    corr = cute.math.exp2(m[rr] - m_use, fastmath=True)
                    w = cute.math.exp2(lse_i - m_use, fastmath=True)
                    s[rr] = s[rr] * corr + w
                    m[rr] = m_new
                    for k in cutlass.range_constexpr(self.per_lane):
                        acc[rr, k] = acc[rr, k] * corr + w * o_b[u, rr, k]


class Merge:
    """One CTA (4 warps) per (request, KV head): `PartialMerge` of split requests; requests with one
    item were finished by the decode kernel and skip."""

    def __init__(self, out_dtype: str, num_q_heads: int, num_kv_heads: int, head_dim_v: int) -> None:
        self.hkv = num_kv_heads
        self.rows = PartialMerge(CUTE_DTYPES[out_dtype], num_q_heads // num_kv_heads, head_dim_v, 4)

    @cute.jit
    def __call__(
        self,
        mReq: cute.Tensor,  # (batch, 2) int32: first item, items
        mPartO: cute.Tensor,  # (cap, Hq, Dv) fp32
        mPartLse: cute.Tensor,  # (cap, Hq) fp32
        mSink: cute.Tensor,  # (Hq,) fp32
        mOut: cute.Tensor,  # (total_q, Hq, Dv)
        mLse: cute.Tensor,  # (total_q, Hq) fp32
        has_sink: Int32,
        stream: cuda.CUstream,
    ):
        self.kernel(mReq, mPartO, mPartLse, mSink, mOut, mLse, has_sink).launch(
            grid=[mReq.shape[0], self.hkv, 1], block=[self.rows.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mReq: cute.Tensor,
        mPartO: cute.Tensor,
        mPartLse: cute.Tensor,
        mSink: cute.Tensor,
        mOut: cute.Tensor,
        mLse: cute.Tensor,
        has_sink: Int32,
    ):
        tid, _, _ = cute.arch.thread_idx()
        b, kvh, _ = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        sBuf = smem.allocate_tensor(Float32, cute.make_layout(self.rows.smem_floats()), 16)
        first = mReq[b, 0]
        n = mReq[b, 1]
        if n > 1:
            self.rows.merge(mPartO, mPartLse, mSink, mOut, mLse, has_sink, first, n, b, kvh, tid, sBuf.iterator)


@kernel(
    "attention.paged.schedule",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._config_schedule",
    ),
)
def compile_schedule(config: ScheduleConfig, arch: str):
    """tvm-ffi launcher `fn(cache_seqlens, work, req, count, window_left)` (one CTA)."""
    batch, cap = cute.sym_int(), cute.sym_int()
    seqlens = make_fake_compact_tensor(Int32, (batch,), assumed_align=4)
    work = make_fake_compact_tensor(Int32, (cap, 4), stride_order=(1, 0), assumed_align=16)
    req = make_fake_compact_tensor(Int32, (batch, 2), stride_order=(1, 0), assumed_align=8)
    count = make_fake_compact_tensor(Int32, (1,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(Schedule(config), seqlens, work, req, count, Int32(-1), stream, arch=arch)


@kernel("attention.paged.extend_schedule", sources=("flashinfer.experimental.b12x.attention.paged._config",))
def compile_extend_schedule(tokens_per_tile: int, arch: str):
    """tvm-ffi launcher `fn(cu_seqlens_q, work, count)` (one CTA)."""
    cu = make_fake_compact_tensor(Int32, (cute.sym_int(),), assumed_align=4)
    work = make_fake_compact_tensor(Int32, (cute.sym_int(), 2), stride_order=(1, 0), assumed_align=8)
    count = make_fake_compact_tensor(Int32, (1,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(ExtendSchedule(tokens_per_tile), cu, work, count, stream, arch=arch)


@kernel(
    "attention.paged.merge",
    sources=(
        "flashinfer.experimental.b12x.attention.paged._config",
        "flashinfer.experimental.b12x.attention.paged._fake",
        "flashinfer.experimental.b12x.attention.paged._fragments",
        "flashinfer.experimental.b12x.attention.paged._moves",
    ),
)
def compile_merge(out_dtype: str, num_q_heads: int, num_kv_heads: int, head_dim_v: int, arch: str):
    """tvm-ffi launcher `fn(req, part_o, part_lse, sink, out, lse, has_sink)`."""
    if head_dim_v % 32 or out_dtype not in CUTE_DTYPES:
        raise ValueError(f"attention.paged merge: head_dim_v % 32 == 0 and out dtype in {tuple(CUTE_DTYPES)} needed")
    batch, cap, total_q = cute.sym_int(), cute.sym_int(), cute.sym_int()
    req = make_fake_compact_tensor(Int32, (batch, 2), stride_order=(1, 0), assumed_align=8)
    part_o = make_fake_compact_tensor(Float32, (cap, num_q_heads, head_dim_v), stride_order=(2, 1, 0), assumed_align=16)
    part_lse = make_fake_compact_tensor(Float32, (cap, num_q_heads), stride_order=(1, 0), assumed_align=4)
    sink = make_fake_compact_tensor(Float32, (num_q_heads,), assumed_align=4)
    s64 = cute.sym_int64
    out = make_fake_tensor(
        CUTE_DTYPES[out_dtype], (total_q, num_q_heads, head_dim_v), stride=(s64(divisibility=8), s64(divisibility=8), 1),
        assumed_align=16,
    )  # fmt: skip
    lse = make_fake_tensor(Float32, (total_q, num_q_heads), stride=(s64(), 1), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    merge = Merge(out_dtype, num_q_heads, num_kv_heads, head_dim_v)
    return cute_compile(merge, req, part_o, part_lse, sink, out, lse, Int32(0), stream, arch=arch)
