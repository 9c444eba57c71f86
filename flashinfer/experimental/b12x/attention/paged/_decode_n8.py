"""The decode kernel's register-light tile (`DecodeConfig.heads_n8`): the GQA group on the MMA's n8 side.

The m16 tile (`PagedDecode._tile`) puts the G query heads of a KV head on the 16 rows of m16n8k16
(rows G..15 zero), so O is Dv / 8 accumulator tiles and Q D / 16 A fragments a thread: 64 + 32
registers at D 128, and at G = 4 three quarters of every MMA multiplies zeros. Here the roles turn:

    S^T (keys x heads) = K (keys x D) . Q^T        A = K (16 keys a tile, ldmatrix), B = Q (8 heads)
    O^T (Dv x heads)  += V^T (Dv x keys) . P^T     A = V^T (ldmatrix.trans), B = P^T

so O^T is Dv / 16 tiles (32 registers at D 128), Q D / 16 B fragments of two registers (16), and each
MMA has G of its 8 columns live: half the MMAs of the m16 tile for the same keys. S^T's accumulator
holds, in lane l, keys l / 4 and l / 4 + 8 of a 16-key tile for heads 2 (l % 4) and 2 (l % 4) + 1;
the B operand of the second MMA wants keys 2 (l % 4) + {0, 1, 8, 9} for head l / 4, which is the same
8 x 8 blocks transposed: one movmatrix.trans per block (two per 16 keys) after the cast to 16 bits.

Softmax runs down S^T's columns (a head's keys are spread over the 8 lanes of equal l % 4: three
butterfly steps, xor 4, 8, 16); a thread's running sum stays partial until the epilogue
(`column_sum`), as the m16 tile's does until its quad sum.

fp8 KV: K and V arrive as fake fp16 pairs (the m16 tile's trick). K as the A operand: fake register
i (4 e4m3 of one key) becomes two real registers, `_moves.n8_k_expand_moves`, in the k-slot order Q is
already staged in (`q_slot_dim`). V^T as the A operand through ldmatrix.trans: each fake register holds
2 keys x 2 dims; prmt pairs registers a and a + 2 into one dim's 4 keys (`n8_v_expand_moves`), so row m
of the O^T accumulator holds dim `n8_o_row_dim(m)`, which the epilogue's shared-memory view undoes.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import warp
from cutlass.cutlass_dsl import T, dsl_user_op

from ._config import N8_HEADS, n8_k_expand_moves, n8_v_expand_moves
from ._fragments import byte_perm, e4m3x4_to_f16x4, kv_operand, mn_view, online_softmax


@dsl_user_op
def movmatrix_t(x, *, loc=None, ip=None):
    """movmatrix.sync.aligned.m8n8.trans.b16: the warp's 8 x 8 matrix of 16-bit values (lane l holds
    row l / 4, columns 2 (l % 4), +1) transposed, in the same fragment layout."""
    res = llvm.inline_asm(
        T.i32(),
        [Int32(x).ir_value(loc=loc, ip=ip)],
        "movmatrix.sync.aligned.m8n8.trans.b16 $0, $1;",
        "=r,r",
        has_side_effects=True,
    )
    return Int32(res)


def column_max(x):
    """Max over the 8 lanes that share l % 4 (one S^T column pair)."""
    for off in (4, 8, 16):
        x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=off))
    return x


def column_sum(x):
    for off in (4, 8, 16):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=off)
    return x


def n8_tiled_mma(mma_dtype):
    """One m16n8k16 atom, no permutation: M = keys (S^T) or head dims (O^T), N = the 8 head columns."""
    return cute.make_tiled_mma(
        warp.MmaF16BF16Op(mma_dtype, Float32, (16, 8, 16)), (1, 1, 1), permutation_mnk=(16, N8_HEADS, 16)
    )


@cute.jit
def expand_k_n8(raw, frag):
    """fp8 K: fake fp16 A fragment ((2,2,2), N/16, D/32) -> fp16 A fragment ((2,2,2), N/16, D/16)."""
    raw_i = cute.recast_tensor(raw, Int32)
    frag_i = cute.recast_tensor(frag, Int32)
    for m in cutlass.range_constexpr(cute.size(raw, mode=[1])):
        for kb, i, dst, reg in n8_k_expand_moves(cute.size(raw, mode=[2])):
            lo, hi = e4m3x4_to_f16x4(raw_i[i, m, kb])
            frag_i[reg, m, dst] = lo
            frag_i[reg + 2, m, dst] = hi


@cute.jit
def expand_v_n8(raw, frag):
    """fp8 V^T: fake fp16 A fragment ((2,2,2), Dv/32, N/16) -> fp16 A fragment ((2,2,2), Dv/16, N/16)."""
    raw_i = cute.recast_tensor(raw, Int32)
    frag_i = cute.recast_tensor(frag, Int32)
    for kb in cutlass.range_constexpr(cute.size(raw, mode=[2])):
        for mt, a, b, selector, dst in n8_v_expand_moves(cute.size(raw, mode=[1])):
            lo, hi = e4m3x4_to_f16x4(byte_perm(raw_i[a, mt, kb], raw_i[b, mt, kb], selector))
            frag_i[a, dst, kb] = lo
            frag_i[a + 2, dst, kb] = hi


class DecodeN8:
    """Mixin of `PagedDecode` (its attributes: fp8, d, dv, dve, nw, mma_dtype, kv_dtype): the heads_n8
    tile, Q's B fragment and the epilogue's per-warp state store."""

    def n8_q_fragment(self, sQ, tiled_mma, thr_mma, lane):
        """(fragment, copy, thread copy, source) of Q as the B operand: rows 0..7 of the staged sQ."""
        sQ8 = cute.composition(sQ, cute.make_layout((N8_HEADS, self.d), stride=(1, 16)))
        frag = thr_mma.make_fragment_B(thr_mma.partition_B(sQ8))
        s2r = cute.make_tiled_copy_B(
            cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=2), self.mma_dtype), tiled_mma
        )
        thr = s2r.get_slice(lane)
        return frag, s2r, thr, thr.partition_S(sQ8)

    @cute.jit
    def _tile_n8(
        self, sK, sV, slot, key0, kv_start, kv_end, qk_scale, tiled_mma, thr_mma, tSrQ, acc_O, row_max, row_sum, lane
    ):
        """One warp's sub-tile on the n8 tile: S^T = K Q^T, mask, online softmax down the columns, O^T += V^T P^T."""
        sKt = sK[None, None, slot]  # (nw, De)
        sVt = sV[None, None, slot]  # (nw, Dve)
        acc_S = cute.make_rmem_tensor(thr_mma.partition_shape_C((self.nw, N8_HEADS)), Float32)
        acc_S.fill(0.0)
        ops = (tiled_mma, thr_mma, lane, self.kv_dtype, self.mma_dtype)
        tSrK = kv_operand(sKt, (self.nw, self.d), *ops, expand_k_n8 if self.fp8 else None, operand="A", transpose=False)
        cute.gemm(tiled_mma, acc_S, tSrK, tSrQ, acc_S)

        s_mn = mn_view(acc_S)  # (keys, heads)
        if (key0 < kv_start) | (key0 + self.nw > kv_end):
            cS = mn_view(thr_mma.partition_C(cute.make_identity_tensor((self.nw, N8_HEADS))))
            for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
                key = key0 + cS[r, 0][0]
                if (key < kv_start) | (key >= kv_end):
                    for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                        s_mn[r, c] = -Float32.inf
        o_mn = mn_view(acc_O)  # (head dims, heads)
        for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
            p, corr = online_softmax(s_mn[None, c].load(), c, row_max, row_sum, qk_scale, column_max)
            s_mn[None, c] = p
            o_mn[None, c] = o_mn[None, c].load() * corr

        # P^T as the B operand: each 8 x 8 block of S^T (16-bit) transposed across the warp
        rP = cute.make_fragment_like(acc_S, self.mma_dtype)
        rP.store(acc_S.load().to(self.mma_dtype))
        tOrP = cute.make_rmem_tensor(thr_mma.partition_shape_B((N8_HEADS, self.nw)), self.mma_dtype)
        rP_i = cute.recast_tensor(rP, Int32)
        tOrP_i = cute.recast_tensor(tOrP, Int32)
        for kb in cutlass.range_constexpr(self.nw // 16):
            for h in cutlass.range_constexpr(2):
                tOrP_i[h, 0, kb] = movmatrix_t(rP_i[h, kb, 0])

        sVtT = cute.composition(sVt, cute.make_layout((self.dve, self.nw), stride=(self.nw, 1)))  # (Dve, nw)
        tOrV = kv_operand(
            sVtT, (self.dv, self.nw), *ops, expand_v_n8 if self.fp8 else None, operand="A", transpose=True
        )
        cute.gemm(tiled_mma, acc_O, tOrV, tOrP, acc_O)

    @cute.jit
    def _store_warp_state_n8(self, sO, sM, sL, wid, lane, thr_mma, acc_O, row_max, row_sum):
        """This warp's unnormalised O^T (fp32) into sO[wid] as (heads, Dv), its column max and sum into
        rows 0..7 of sM / sL (rows 8..15: empty, -inf and 0)."""
        base = sO[wid, None, None].iterator
        if cutlass.const_expr(self.fp8):  # row m = 16 t + s holds dim 32 (t // 2) + 2 s + t % 2
            view = cute.make_layout(((16, 2, self.dv // 32), N8_HEADS), stride=((2, 1, 32), self.dv))
        else:
            view = cute.make_layout((self.dv, N8_HEADS), stride=(1, self.dv))
        cute.autovec_copy(acc_O, thr_mma.partition_C(cute.make_tensor(base, view)))
        if lane < 4:
            for c in cutlass.range_constexpr(2):
                sM[wid, 2 * lane + c] = row_max[c]
                sL[wid, 2 * lane + c] = row_sum[c]
                sM[wid, N8_HEADS + 2 * lane + c] = -Float32.inf
                sL[wid, N8_HEADS + 2 * lane + c] = Float32(0.0)
