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
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from ._config import LOG2E, M_TILE


@dsl_user_op
def load_peer_f32(ptr, rank, *, loc=None, ip=None):
    """The fp32 at the same shared-memory offset as `ptr` in cluster CTA `rank` (mapa, then
    ld.shared::cluster: CuTe tensors over DSMEM pointers do not load)."""
    peer = cute.arch.map_dsmem_ptr(ptr, rank, loc=loc, ip=ip)
    return Float32(llvm.load(T.f32(), peer.llvm_ptr, loc=loc, ip=ip))


class ClusterMerge:
    def __init__(self, out_dtype, group: int, head_dim_v: int, threads: int, cluster: int, tile_keys: int) -> None:
        self.out_dtype = out_dtype  # a cutlass numeric type
        self.group, self.dv, self.threads = group, head_dim_v, threads
        self.cluster, self.tile = cluster, tile_keys
        self.cols = head_dim_v // cluster  # head-dim columns each rank combines

    def smem_floats(self) -> int:
        """The partial row: M_TILE x Dv values, then M_TILE LSEs."""
        return M_TILE * self.dv + M_TILE

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
    def merge(self, sO, sW, sLse, part, tidx, row, req, kvh, mOut, mLse, mSink, has_sink, warps: cutlass.Constexpr):
        """sO (warps, 16, Dv) / sW (warps, 16) / sLse (16,): the epilogue's warp state and weights (split
        rows: no sink); part: Float32 shared-memory pointer to `smem_floats()` floats of this CTA."""
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
                out_lse = -Float32.inf
                factor = Float32(0.0)
                if total > 0.0:
                    out_lse = top_use + cute.math.log2(total, fastmath=True)
                    factor = 1.0 / total
                head = kvh * self.group + r
                if has_sink != 0:
                    sink = mSink[head] * LOG2E
                    hi = cute.arch.fmax(out_lse, sink)
                    full = hi + cute.math.log2(
                        cute.math.exp2(out_lse - hi, fastmath=True) + cute.math.exp2(sink - hi, fastmath=True),
                        fastmath=True,
                    )
                    factor = factor * cute.math.exp2(out_lse - full, fastmath=True)
                    out_lse = full
                mOut[req, head, c] = (o * factor).to(self.out_dtype)
                if c == 0:
                    mLse[req, head] = out_lse
        # Relaxed: this CTA's DSMEM loads have returned (their values are in the output), nothing to
        # order; the release form would add a second MEMBAR.ALL.GPU to the exit path.
        cute.arch.cluster_arrive_relaxed()  # this CTA's reads of its peers are done
        cute.arch.cluster_wait()  # and theirs of it: its shared memory may go
