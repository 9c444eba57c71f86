"""Device building blocks shared by the paged decode and extend kernels (traced inline).

- register plumbing: e4m3 -> fp16 conversion, prmt, float bit casts, quad (4-lane) reductions;
- fragment views: an mma C fragment as (rows, cols), a C fragment reused as the A operand;
- the swizzled shared-memory atom both kernels tile K/V/Q with, and the cp.async row copy K and V take;
- a softmax row's finish: its base-2 LSE and output factor (`softmax_finish`), then the attention sink
  in its denominator (`fold_sink`), which every kernel that writes final rows shares (decode, extend,
  the split merge, the cluster merge);
- the fp8 path (see `_kernel_decode` docstring): `expand_k` / `expand_v` rebuild real fp16 B
  fragments from e4m3 bytes moved through 16-bit ldmatrix, `stage_q_fp16` writes Q rescaled by a
  power of two and permuted to the k-slot order those fragments use (`_config.q_dim_slot`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warp
from cutlass.cutlass_dsl import T, dsl_user_op

from ._config import LOG2E, k_expand_moves, q_dim_slot, v_expand_moves


@dsl_user_op
def e4m3x4_to_f16x4(x, *, loc=None, ip=None):
    """Four e4m3 in one 32-bit register -> (f16x2 of bytes 0-1, f16x2 of bytes 2-3), exact."""
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.i32(), T.i32()]),
        [Int32(x).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, $2;\n\t"
        "cvt.rn.f16x2.e4m3x2 $0, lo;\n\tcvt.rn.f16x2.e4m3x2 $1, hi;\n\t}",
        "=r,=r,r",
    )
    lo = llvm.extractvalue(T.i32(), res, [0], loc=loc, ip=ip)
    hi = llvm.extractvalue(T.i32(), res, [1], loc=loc, ip=ip)
    return Int32(lo), Int32(hi)


@dsl_user_op
def byte_perm(a, b, selector: int, *, loc=None, ip=None):
    """prmt.b32: byte i of the result is byte (selector >> 4i) & 7 of the pair (a, b)."""
    res = llvm.inline_asm(
        T.i32(),
        [Int32(a).ir_value(loc=loc, ip=ip), Int32(b).ir_value(loc=loc, ip=ip)],
        f"prmt.b32 $0, $1, $2, {selector:#x};",
        "=r,r,r",
    )
    return Int32(res)


@dsl_user_op
def f32_bits(x, *, loc=None, ip=None):
    return Int32(llvm.bitcast(T.i32(), Float32(x).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def bits_f32(x, *, loc=None, ip=None):
    return Float32(llvm.bitcast(T.f32(), Int32(x).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


def quad_max(x):
    x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=2))
    return cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1))


def quad_sum(x):
    x = x + cute.arch.shuffle_sync_bfly(x, offset=2)
    return x + cute.arch.shuffle_sync_bfly(x, offset=1)


@cute.jit
def softmax_finish(m_use, total, numer):
    """(lse, factor) of a softmax row whose exp2 weights against the max m_use sum to total: lse =
    m_use + log2(total) (base 2) and factor = numer / total, what the row's unnormalised output is
    multiplied by; an empty row (total 0) gives (-inf, 0)."""
    lse = -Float32.inf
    factor = Float32(0.0)
    if total > 0.0:
        lse = m_use + cute.math.log2(total, fastmath=True)
        factor = numer / total
    return lse, factor


@cute.jit
def fold_sink(lse, factor, mSink, head, use):
    """With `use`, head's attention sink (mSink[head], natural-log units) joins the row's denominator:
    lse becomes log2(2^lse + 2^sink) and factor is scaled by 2^(old lse - new lse). mSink is read only
    then."""
    if use:
        sink = mSink[head] * LOG2E
        hi = cute.arch.fmax(lse, sink)
        full = hi + cute.math.log2(
            cute.math.exp2(lse - hi, fastmath=True) + cute.math.exp2(sink - hi, fastmath=True), fastmath=True
        )
        factor = factor * cute.math.exp2(lse - full, fastmath=True)
        lse = full
    return lse, factor


@cute.jit
def online_softmax(x, i: cutlass.Constexpr, row_max, row_sum, qk_scale, across: cutlass.Constexpr):
    """One online-softmax step of softmax row i (base 2): x, this thread's raw scores of the row for this
    sub-tile; `across` reduces a max over the lanes sharing the row (`quad_max` for the m16 tile's rows,
    `_decode_n8.column_max` for the n8 tile's columns). Updates row_max[i] and this thread's partial
    row_sum[i]; returns (p, corr): the row's weights and the factor its running output is scaled by."""
    x = x * qk_scale
    m_new = cute.arch.fmax(row_max[i], across(x.reduce(cute.ReductionOp.MAX, -Float32.inf, 0)))
    m_use = Float32(0.0) if m_new == -Float32.inf else m_new
    p = cute.math.exp2(x - m_use, fastmath=True)
    corr = cute.math.exp2(row_max[i] - m_use, fastmath=True)
    row_sum[i] = row_sum[i] * corr + p.reduce(cute.ReductionOp.ADD, Float32.zero, 0)
    row_max[i] = m_new
    return p, corr


def mn_view(acc: cute.Tensor) -> cute.Tensor:
    """An mma C fragment ((2, 2), MMA_M, MMA_N) viewed as (rows, cols) of this thread."""
    lay = cute.make_layout(acc.layout.shape)
    rows = (lay.shape[0][1], lay.shape[1])
    cols = (lay.shape[0][0], lay.shape[2])
    mn = cute.make_layout((rows, cols), stride=((lay.stride[0][1], lay.stride[1]), (lay.stride[0][0], lay.stride[2])))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, mn))


def c_as_a(frag: cute.Tensor) -> cute.Tensor:
    """A C fragment (4, MMA_M, MMA_N) viewed as the A operand ((4, 2), MMA_M, MMA_N / 2) of m16n8k16."""
    div = cute.logical_divide(frag.layout, (None, None, 2))
    lay = cute.make_layout(
        ((div.shape[0], div.shape[2][0]), div.shape[1], div.shape[2][1]),
        stride=((div.stride[0], div.stride[2][0]), div.stride[1], div.stride[2][1]),
    )
    return cute.make_tensor(frag.iterator, lay)


def swizzled(rows: int, cols: int, dtype) -> cute.ComposedLayout:
    """(rows, cols) smem atom of 16-bit elements, XOR-swizzled so ldmatrix rows hit distinct banks."""
    width = 64 if cols % 64 == 0 else 32
    bits = 3 if width == 64 else 2
    atom = cute.make_composed_layout(cute.make_swizzle(bits, 3, 3), 0, cute.make_layout((8, width), stride=(width, 1)))
    return atom, width


def row_copy(dtype, cols: int, threads: int, max_rows: int, wide: bool = False):
    """(cp.async tiled copy, threads it uses) of 16-byte vectors (8 `dtype` elements) over (rows, cols) tiles:
    min(cols / 8, 32) threads across a row (cols / 16 with `wide`: each thread's vectors half a row apart, one source
    address), min(threads / that, max_rows) rows. K and V take one each, so Dv may differ from Dqk."""
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), dtype, num_bits_per_copy=128)
    across = min(cols // (16 if wide else 8), 32)
    rows = min(threads // across, max_rows)
    tv = cute.make_tiled_copy_tv(atom, cute.make_layout((rows, across), stride=(across, 1)), cute.make_layout((1, 8)))
    return tv, rows * across


def row_predicate(tS, cS, keep):
    """A thread's cp.async predicate over its rows of a (rows, cols) copy, one flag a row (stride 0 across the
    row's vectors): keep(row) with row the coordinate `cS` (the identity tensor partitioned alike) gives it."""
    pred = cute.make_rmem_tensor(
        cute.make_layout((1, cute.size(tS, mode=[1]), cute.size(tS, mode=[2])), stride=(0, 1, 0)), cutlass.Boolean
    )
    for r in range(cute.size(tS, mode=[1])):  # a static count: unrolled as it is traced (a plain function)
        pred[0, r, 0] = keep(cS[0, r, 0][0])
    return pred


def kv_operand(src, real_shape, tiled_mma, thr_mma, lane, kv_dtype, mma_dtype, expand, *, operand, transpose):
    """The MMA operand fragment (`operand` "A" or "B") of the shared-memory tile `src`, through ldmatrix (x4,
    `transpose` for V). 16-bit KV: the loaded fragment itself. fp8 KV (`expand` not None): src is a fake fp16 view
    of e4m3 pairs; the fake fragment is loaded and `expand(raw, frag)` rebuilds the real fp16 fragment of
    `real_shape` (the operand's logical (rows, cols) in real elements)."""
    a = operand == "A"
    atom = cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=transpose, num_matrices=4), kv_dtype)
    s2r = (cute.make_tiled_copy_A if a else cute.make_tiled_copy_B)(atom, tiled_mma)
    thr = s2r.get_slice(lane)
    raw = (thr_mma.make_fragment_A if a else thr_mma.make_fragment_B)(
        (thr_mma.partition_A if a else thr_mma.partition_B)(src)
    )
    cute.copy(s2r, thr.partition_S(src), thr.retile(raw))
    if expand is None:
        return raw
    shape = thr_mma.partition_shape_A(real_shape) if a else thr_mma.partition_shape_B(real_shape)
    frag = cute.make_rmem_tensor(shape, mma_dtype)
    expand(raw, frag)
    return frag


@cute.jit
def expand_k(raw, frag):
    """fp8 K: fake fp16 B fragment ((2,2), N/8, D/32) -> fp16 B fragment ((2,2), N/8, D/16).

    Fake register 0 of k-block kb holds dims 32kb + 4j .. +3, register 1 holds 32kb + 16 + 4j ..
    +3: they become real k-blocks 2kb and 2kb + 1 (low byte pair -> slots 2j, 2j+1, high pair
    -> slots 2j+8, 2j+9), matching `q_slot_dim`."""
    raw_i = cute.recast_tensor(raw, Int32)
    frag_i = cute.recast_tensor(frag, Int32)
    for n in cutlass.range_constexpr(cute.size(raw, mode=[1])):
        for kb, h, dst in k_expand_moves(cute.size(raw, mode=[2])):
            lo, hi = e4m3x4_to_f16x4(raw_i[h, n, kb])
            frag_i[0, n, dst] = lo
            frag_i[1, n, dst] = hi


@cute.jit
def expand_k_block(raw, frag, kb: cutlass.Constexpr):
    """`expand_k` for fake k-block kb only (its moves: `k_expand_moves` entries of block kb)."""
    raw_i = cute.recast_tensor(raw, Int32)
    frag_i = cute.recast_tensor(frag, Int32)
    moves = [m for m in k_expand_moves(kb + 1) if m[0] == kb]
    for n in cutlass.range_constexpr(cute.size(raw, mode=[1])):
        for _, h, dst in moves:
            lo, hi = e4m3x4_to_f16x4(raw_i[h, n, kb])
            frag_i[0, n, dst] = lo
            frag_i[1, n, dst] = hi


@cute.jit
def expand_v(raw, frag):
    """fp8 V: fake fp16 B fragment ((2,2), Dv/16, N/16) of V^T -> fp16 ((2,2), Dv/8, N/16).

    Fake register 0 holds keys (2j, 2j+1) x dims (2g, 2g+1) of fake block nb, register 1 the
    same for keys 2j+8, 2j+9; prmt 0x6420 gathers dim 2g (-> block 2nb), 0x7531 dim 2g+1
    (-> block 2nb + 1), so accumulator column n holds dim `o_col_dim(n)`."""
    for kb in cutlass.range_constexpr(cute.size(raw, mode=[2])):
        expand_v_block(raw, frag, kb)


@cute.jit
def expand_v_block(raw, frag, kb: cutlass.Constexpr):
    """`expand_v` for key block kb (16 keys) only."""
    raw_i = cute.recast_tensor(raw, Int32)
    frag_i = cute.recast_tensor(frag, Int32)
    for nb, selector, dst in v_expand_moves(cute.size(raw, mode=[1])):
        lo, hi = e4m3x4_to_f16x4(byte_perm(raw_i[0, nb, kb], raw_i[1, nb, kb], selector))
        frag_i[0, dst, kb] = lo
        frag_i[1, dst, kb] = hi


@cute.jit
def _pow2_scale(amax, sRed, tidx, threads: cutlass.Constexpr):
    """The fp8 Q staging's scale (`stage_q_fp16`, `stage_q_fp16_vec`): the CTA-wide max of each
    thread's `amax` (a warp butterfly, then the warps' maxima through sRed: one barrier) and the
    power of two 2^e that puts it in [2^13, 2^14), e clamped to normal exponents; returns (2^e, 2^-e)."""
    for off in cutlass.range_constexpr(5):
        amax = cute.arch.fmax(amax, cute.arch.shuffle_sync_bfly(amax, offset=16 >> off))
    if tidx % 32 == 0:
        sRed[tidx // 32] = amax
    cute.arch.sync_threads()
    amax = sRed[0]
    for w in cutlass.range_constexpr(1, threads // 32):
        amax = cute.arch.fmax(amax, sRed[w])
    exp = ((f32_bits(amax) >> 23) & 0xFF) - 127
    shift = cutlass.min(cutlass.max(13 - exp, -126), 126)
    return bits_f32((127 + shift) << 23), bits_f32((127 - shift) << 23)


@cute.jit
def stage_q_fp16(
    sQraw,
    sQ,
    sRed,
    tidx,
    amax_rows: cutlass.Constexpr,
    rows: cutlass.Constexpr,
    d: cutlass.Constexpr,
    threads: cutlass.Constexpr,
):
    """fp8 path: sQ = fp16(q * 2^e) in the permuted k order of `q_slot_dim`; returns 2^-e.

    e puts max|q| over the first `amax_rows` rows in [2^13, 2^14): fp16 (normal from 2^-14) keeps
    every bf16 mantissa bit of each element above 2^-27 of that maximum, far from fp16 overflow.
    Needs a CTA barrier-free entry (it syncs once) and sRed of threads // 32 floats."""
    amax = Float32(0.0)
    for e in range(tidx, amax_rows * d, threads):
        amax = cute.arch.fmax(amax, cute.math.absf(sQraw[e // d, e % d].to(Float32)))
    scale, unscale = _pow2_scale(amax, sRed, tidx, threads)
    for e in range(tidx, rows * d, threads):
        r = e // d
        c = e % d
        d16 = c % 16
        sQ[r, c - d16 + q_dim_slot(d16)] = (sQraw[r, c].to(Float32) * scale).to(cutlass.Float16)
    return unscale


@cute.jit
def stage_q_fp16_vec(
    sQraw,
    sQ,
    sRed,
    tidx,
    amax_rows: cutlass.Constexpr,
    rows: cutlass.Constexpr,
    d: cutlass.Constexpr,
    threads: cutlass.Constexpr,
):
    """`stage_q_fp16` (same result, bit for bit) in one shared-memory pass: each thread holds whole
    16-element blocks of Q rows in registers (read as 16-byte vectors), takes the amax over them,
    then writes them scaled, cast and permuted (`q_dim_slot`) without re-reading sQraw. Blocks per
    thread: rows * d / 16 / threads (1 for 16 x 128 at 4 warps). Same barrier contract."""
    blocks_per_row = d // 16
    per_thread = (rows * blocks_per_row + threads - 1) // threads
    src = cute.flat_divide(sQraw, (1, 16))  # (1, 16, rows, d / 16)
    dst = cute.flat_divide(sQ, (1, 16))
    held = cute.make_rmem_tensor(cute.make_layout((16, per_thread), stride=(1, 16)), sQraw.element_type)
    amax = Float32(0.0)
    for i in cutlass.range_constexpr(per_thread):
        blk = tidx + i * threads
        if blk < rows * blocks_per_row:
            r = blk // blocks_per_row
            cute.autovec_copy(src[0, None, r, blk % blocks_per_row], held[None, i])
            if r < amax_rows:
                vals = held[None, i].load().to(Float32)
                for j in cutlass.range_constexpr(16):
                    amax = cute.arch.fmax(amax, cute.math.absf(vals[j]))
    scale, unscale = _pow2_scale(amax, sRed, tidx, threads)
    out = cute.make_rmem_tensor(cute.make_layout(16), cutlass.Float16)
    for i in cutlass.range_constexpr(per_thread):
        blk = tidx + i * threads
        if blk < rows * blocks_per_row:
            vals = held[None, i].load().to(Float32)
            for j in cutlass.range_constexpr(16):
                out[q_dim_slot(j)] = (vals[j] * scale).to(cutlass.Float16)
            cute.autovec_copy(out, dst[0, None, blk // blocks_per_row, blk % blocks_per_row])
    return unscale
