"""The cluster split of the decode kernel (`DecodeConfig.cluster`): C CTAs a (request, KV head) as one
thread-block cluster, merging through distributed shared memory instead of global partial rows.

Split (`item`, mirrored by `_config.cluster_ranges`): CTA row y of the grid (B x C rows a KV head) is
rank y % C of request y // C; request b's visible range [lo, N) splits into C chunks of
round_up(ceil((N - lo) / C), tile_keys) keys, so no work list, no scan and no item counter: the grid's
shape (B x C rows, cluster dims (1, C, 1)) is the schedule, fixed under CUDA-graph capture.

Merge (`merge`, after the kernel's warp merge `_row_weights`): each CTA stores its partial row
(o = sum_w weight_w O_w, i.e. O normalised by its own sum with v_descale folded, and its base-2 LSE)
into its own shared memory; barrier.cluster.arrive (release) / wait (acquire) makes the C partials
visible cluster-wide; rank r combines head-dim columns [r Dv / C, (r + 1) Dv / C) of the G rows:
out = sum_i 2^(lse_i - M) o_i / sum_i 2^(lse_i - M), lse = M + log2 S, then the sink joins the
denominator (`PartialMerge`'s math), reading the peers' rows with mapa + ld.shared::cluster; a second
cluster barrier (relaxed arrive) keeps every CTA's shared memory alive until its peers' reads are done.
Bytes: per (request, KV head) C x G x (Dv + 1) x 4 over DSMEM, G x Dv x itemsize + G x 4 to global.

Push (`DecodeConfig.cluster_push`): each CTA sends every rank d its slice (G rows x Dv / C columns and
its G LSEs) with st.async.shared::cluster.mbarrier::complete_tx::bytes (16-byte vectors) into d's
receive buffer [C senders][G][Dv / C] + [C][G] LSEs, and combines from its own shared memory: no
remote load, no release barrier (no MEMBAR.ALL.GPU), no exit barrier. `start` (kernel start, one
thread) initialises this CTA's mbarrier (arrive count 1, expecting the C x G x (Dv / C + 1) x 4 bytes
it receives), fences the init (fence.mbarrier_init.release.cluster) and arrives relaxed on the
cluster barrier; `merge` waits on the cluster barrier (every peer's mbarrier is initialised) before
its first st.async, then waits on its own mbarrier (try_wait.parity.acquire.cluster: the
complete_tx of each st.async releases its write at cluster scope). No exit barrier: the CUDA
guide's rule is that a CTA's shared memory outlive every access to it; the only accesses to this
CTA's shared memory from peers are the st.async writes (and their complete_tx) counted by its
mbarrier, all landed when its wait returns, and st.async takes its data from registers, so a
sender that exits with its stores in flight leaves nothing they still read.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from ._config import M_TILE
from ._fragments import fold_sink, softmax_finish


def push_slot(sender, r, c, group: int, cols: int):
    """Push layout: (rank, float offset in its receive buffer) of `sender`'s partial value at row r, head-dim
    column c. Rank c // cols combines column c; its buffer is [C senders][G rows][cols] values, then the
    [C][G] LSEs (`push_lse_slot`). Plain integer arithmetic: the kernel's (Int32) and the tests' (int)."""
    return c // cols, (sender * group + r) * cols + c % cols


def push_lse_slot(sender, r, group: int, cols: int, cluster: int):
    """Push layout: float offset, in every rank's receive buffer, of `sender`'s LSE of row r."""
    return cluster * group * cols + sender * group + r


@dsl_user_op
def load_peer_f32(ptr, rank, *, loc=None, ip=None):
    """The fp32 at the same shared-memory offset as `ptr` in cluster CTA `rank` (mapa, then
    ld.shared::cluster: CuTe tensors over DSMEM pointers do not load)."""
    peer = cute.arch.map_dsmem_ptr(ptr, rank, loc=loc, ip=ip)
    return Float32(llvm.load(T.f32(), peer.llvm_ptr, loc=loc, ip=ip))


@dsl_user_op
def store_peer_f32(addr, values, mbar, rank, *, loc=None, ip=None):
    """st.async of 1, 2 or 4 fp32 `values` (one vector: addr aligned to their size) to shared::cta
    address `addr`'s counterpart in cluster CTA `rank`, completing their bytes on the mbarrier at
    `mbar`'s counterpart there (mapa.shared::cluster of both addresses)."""
    n = len(values)
    data = "$3" if n == 1 else "{" + ", ".join(f"${3 + i}" for i in range(n)) + "}"
    vec = "" if n == 1 else f".v{n}"
    llvm.inline_asm(
        None,
        [Int32(addr).ir_value(loc=loc, ip=ip), Int32(mbar).ir_value(loc=loc, ip=ip),
         Int32(rank).ir_value(loc=loc, ip=ip)] + [Float32(v).ir_value(loc=loc, ip=ip) for v in values],
        "{\n\t.reg .b32 ra, rb;\n\tmapa.shared::cluster.u32 ra, $0, $2;\n\tmapa.shared::cluster.u32 rb, $1, $2;\n\t"
        f"st.async.shared::cluster.mbarrier::complete_tx::bytes{vec}.f32 [ra], {data}, [rb];\n\t}}",
        "r,r,r" + ",f" * n,
        has_side_effects=True,
        is_align_stack=False,
        loc=loc,
        ip=ip,
    )  # fmt: skip


@dsl_user_op
def try_wait_cluster(mbar, parity, *, loc=None, ip=None):
    """1 when phase `parity` of the mbarrier at shared::cta address `mbar` has completed, else 0 (after a
    bounded suspend); acquire at cluster scope, so the peers' st.async writes it counted are visible."""
    res = llvm.inline_asm(
        T.i32(),
        [Int32(mbar).ir_value(loc=loc, ip=ip), Int32(parity).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [$1], $2;\n\t"
        "selp.b32 $0, 1, 0, p;\n\t}",
        "=r,r,r",
        has_side_effects=True,
        is_align_stack=False,
        loc=loc,
        ip=ip,
    )
    return Int32(res)


class ClusterMerge:
    def __init__(
        self, out_dtype, group: int, head_dim_v: int, threads: int, cluster: int, tile_keys: int, push: bool = False
    ) -> None:
        self.out_dtype = out_dtype  # a cutlass numeric type
        self.group, self.dv, self.threads = group, head_dim_v, threads
        self.cluster, self.tile, self.push = cluster, tile_keys, push
        self.cols = head_dim_v // cluster  # head-dim columns each rank combines
        assert self.cols % 4 == 0, "push: a rank's columns are whole 16-byte vectors"
        # push: the bytes one CTA receives, C senders x G rows x (Dv / C values + 1 LSE) fp32
        self.recv_bytes = cluster * group * (self.cols + 1) * 4

    def smem_floats(self) -> int:
        """Pull: the partial row, M_TILE x Dv values, then M_TILE LSEs. Push: the mbarrier (4 floats,
        keeping the buffer 16-byte aligned), then the receive buffer [C][G][Dv / C], then [C][G] LSEs."""
        if self.push:
            return 4 + self.group * self.dv + self.cluster * self.group
        return M_TILE * self.dv + M_TILE

    @cute.jit
    def start(self, part, tidx):
        """Push, at kernel start: one thread initialises this CTA's mbarrier (one arrival, its own
        expect_tx of `recv_bytes`) and fences the init for the cluster; every thread arrives (relaxed) on
        the cluster barrier whose wait `merge` passes before its first st.async."""
        if tidx == 0:
            mbar = cute.recast_ptr(part, dtype=cutlass.Int64)
            cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init_fence()
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, self.recv_bytes)
        cute.arch.cluster_arrive_relaxed()

    @cute.jit
    def item(self, mSeqlens, row, window_left):
        """(request, kv_start, kv_end) of CTA row `row` (`_config.cluster_ranges`)."""
        req = row // self.cluster
        rank = row % self.cluster
        n = mSeqlens[req]
        length = n
        if window_left >= 0:
            length = cutlass.min(n, window_left + 1)
        chunk = ((length + self.cluster - 1) // self.cluster + self.tile - 1) // self.tile * self.tile
        kv_start = cutlass.min(n - length + rank * chunk, n)
        kv_end = cutlass.min(kv_start + chunk, n)
        return req, kv_start, kv_end

    @cute.jit
    def merge(
        self, sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps: cutlass.Constexpr, pdst=None
    ):
        """sO (warps, 16, Dv) / sW (warps, 16) / sLse (16,): the epilogue's warp state and weights (split
        rows: no sink); part: Float32 shared-memory pointer to `smem_floats()` floats of this CTA. pdst
        (`DecodeConfig.cluster_pairs`): (mPartO, mPartLse, row, partial): where partial != 0 the
        combined row goes to partial row `row` without the sink (the ticket merge of the request's pairs
        adds it), else to the output."""
        if cutlass.const_expr(self.push):
            self._merge_push(sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps, pdst)
        else:
            self._merge_pull(sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps, pdst)

    @cute.jit
    def _merge_pull(self, sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps, pdst=None):
        sPart = cute.make_tensor(part, cute.make_layout((M_TILE, self.dv), stride=(self.dv, 1)))
        sPartLse = cute.make_tensor(part + M_TILE * self.dv, cute.make_layout(M_TILE))
        for it in cutlass.range_constexpr((M_TILE * self.dv + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads
            r = idx // self.dv
            c = idx % self.dv
            if r < self.group:
                o = Float32(0.0)
                for w in cutlass.range_constexpr(warps):
                    o = o + sW[w, r] * sO[w, r, c]
                sPart[r, c] = o
        if tidx < self.group:
            sPartLse[tidx] = sLse[tidx]
        # Release (sm_90 SASS: MEMBAR.ALL.GPU, ptxas has no cluster-scope membar; only shared stores are
        # outstanding here) / acquire (CCTL.IVALL): the partial rows are ordered before the peers' reads.
        cute.arch.cluster_arrive()  # release: this CTA's partial row, for its peers' reads
        cute.arch.cluster_wait()  # acquire: every peer's partial row (and every peer is running)
        rank = row % self.cluster
        for it in cutlass.range_constexpr((M_TILE * self.cols + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads
            r = idx // self.cols
            c = rank * self.cols + idx % self.cols
            if r < self.group:
                lse = cute.make_rmem_tensor(self.cluster, Float32)
                val = cute.make_rmem_tensor(self.cluster, Float32)
                for i in cutlass.range_constexpr(self.cluster):  # every remote load issued before any use
                    lse[i] = load_peer_f32(part + (M_TILE * self.dv + r), i)
                    val[i] = load_peer_f32(part + (r * self.dv + c), i)
                self._combine(lse, val, r, c, req, kvh, mOut, mLse, mSink, has_sink, pdst)
        # Relaxed: this CTA's DSMEM loads have returned (their values are in the output), nothing to
        # order; the release form would add a second MEMBAR.ALL.GPU to the exit path.
        cute.arch.cluster_arrive_relaxed()  # this CTA's reads of its peers are done
        cute.arch.cluster_wait()  # and theirs of it: its shared memory may go

    @cute.jit
    def _merge_push(self, sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps, pdst=None):
        g, cols = self.group, self.cols
        rank = row % self.cluster
        mbar = part.toint()  # shared::cta address of the mbarrier (`start`)
        recv = mbar + 16  # the receive buffer (`push_slot`, `push_lse_slot`), 16-byte aligned
        cute.arch.cluster_wait()  # the start's arrive: every peer's mbarrier is initialised
        vecs = self.dv // 4  # 16-byte vectors a row; cols % 4 == 0, so one never straddles two ranks
        for it in cutlass.range_constexpr((g * vecs + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads
            r = idx // vecs
            c = idx % vecs * 4
            if r < g:
                o = cute.make_rmem_tensor(4, Float32)
                for j in cutlass.range_constexpr(4):
                    o[j] = Float32(0.0)
                    for w in cutlass.range_constexpr(warps):
                        o[j] = o[j] + sW[w, r] * sO[w, r, c + j]
                dest, off = push_slot(rank, r, c, g, cols)
                store_peer_f32(recv + off * 4, (o[0], o[1], o[2], o[3]), mbar, dest)
        for it in cutlass.range_constexpr((self.cluster * g + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads  # this CTA's G LSEs to every rank: row idx % G to rank idx // G
            if idx < self.cluster * g:
                r = idx % g
                store_peer_f32(recv + push_lse_slot(rank, r, g, cols, self.cluster) * 4, (sLse[r],), mbar, idx // g)
        while try_wait_cluster(mbar, 0) == 0:  # every sender's bytes have landed here
            pass
        sRecv = cute.make_tensor(part + 4, cute.make_layout(self.cluster * g * (cols + 1)))
        for it in cutlass.range_constexpr((g * cols + self.threads - 1) // self.threads):
            idx = tidx + it * self.threads
            r = idx // cols
            c = rank * cols + idx % cols
            if r < g:
                lse = cute.make_rmem_tensor(self.cluster, Float32)
                val = cute.make_rmem_tensor(self.cluster, Float32)
                for i in cutlass.range_constexpr(self.cluster):
                    lse[i] = sRecv[push_lse_slot(i, r, g, cols, self.cluster)]
                    val[i] = sRecv[push_slot(i, r, c, g, cols)[1]]
                self._combine(lse, val, r, c, req, kvh, mOut, mLse, mSink, has_sink, pdst)

    @cute.jit
    def _combine(self, lse, val, r, c, req, kvh, mOut, mLse, mSink, has_sink, pdst=None):
        """Row r, column c of the output from the C ranks' partials (lse[i], val[i] in rank order):
        out = sum_i 2^(lse_i - M) val_i / sum_i 2^(lse_i - M), lse = M + log2 S, then the sink (or, with
        `merge`'s pdst and its partial flag set, a partial row without it)."""
        top = lse[0]
        for i in cutlass.range_constexpr(1, self.cluster):
            top = cute.arch.fmax(top, lse[i])
        top_use = Float32(0.0) if top == -Float32.inf else top
        total = Float32(0.0)
        o = Float32(0.0)
        for i in cutlass.range_constexpr(self.cluster):
            scale = cute.math.exp2(lse[i] - top_use, fastmath=True)
            total = total + scale
            o = o + val[i] * scale
        out_lse, factor = softmax_finish(top_use, total, 1.0)
        head = kvh * self.group + r
        if cutlass.const_expr(pdst is None):
            self._store_out(o, out_lse, factor, c, req, head, mOut, mLse, mSink, has_sink)
        else:
            mPartO, mPartLse, prow, partial = pdst
            if partial != 0:
                mPartO[prow, head, c] = o * factor
                if c == 0:
                    mPartLse[prow, head] = out_lse
            else:
                self._store_out(o, out_lse, factor, c, req, head, mOut, mLse, mSink, has_sink)

    @cute.jit
    def _store_out(self, o, out_lse, factor, c, req, head, mOut, mLse, mSink, has_sink):
        """The output's (head, c) and the head's LSE, the sink joined to the denominator."""
        out_lse, factor = fold_sink(out_lse, factor, mSink, head, has_sink != 0)
        mOut[req, head, c] = (o * factor).to(self.out_dtype)
        if c == 0:
            mLse[req, head] = out_lse
