"""Triton kernels of norm.mhc (math: reference.py), on torch's current stream. Pass 1 and the older
pass 2 live here, with the jit pieces the other kernels share: `_pass1_tile` (pass 1's work on one
tile; also the one-launch kernel's first phase), `_tok_weights` (sigmoids, softmax + Sinkhorn for a
block of tokens) and `_write_y`. The default pass 2 is `_kernel_row.py` (one token per program, the
row read once), the optional one-launch small-T path `_kernel_small.py`, and the one-launch kernel
at any T `_kernel_fused.py` (the heuristic's choice from MhcConfig.fused_min_tokens tokens).

`_mhc_stream_kernel` (pass 1), grid (token blocks, splits): each program walks its split of the
hidden dimension in steps of [BLOCK_T tokens, 4 streams, BLOCK_H]. By MODE it
- PRE: reads residual [T, 4, H];
- POST: writes residual'[:, j] = post_j * x + sum_i comb[i, j] * residual[:, i] (no mixes);
- POST_PRE: POST, rounded to the storage dtype, then the mixes of that stored residual;
- BCAST: reads x [T, H] and writes its 4-stream repeat (the first layer's residual);
and, except POST, accumulates this split's share of flat @ fn^T (24 mixes) into fp32 partials
[splits, T, 32] (row stride 32 floats, columns 0..23) in the plan's workspace, and its share of
sum(flat^2) into column 24 (read by the row pass 2; the apply pass 2 computes its own).
`_mhc_apply_kernel` (pass 2, `MhcConfig(pass2="apply")`), TOK tokens per program (one warp each at large T; one token over 4
warps at small T): streams each token's residual row (cp.async-prefetched chunks) for its mean
square, sums the partials over the splits, applies the sigmoids, softmax + Sinkhorn on the 4x4
combination (as four row vectors: column sums are elementwise), writes post [T, 4] and comb
[T, 4, 4] fp32, then y = sum_i pre_i * residual_i [T, H] re-reading the row (L1/L2), with one more
pass for mean(y^2) when a norm weight is given. The broadcast form is a stride (0 between streams).

The mixes run on tensor cores through warp-level mma.sync (m16n8k16; hardware policy: never wgmma,
which Triton picks on sm_90a for a num_warps % 4 == 0 program with a dot of M >= 64: the pass-1 tiles
keep M = BLOCK_T <= 32 at 4 warps or use 2 warps, and test_mhc_compile.py fails on any `wgmma` in the
PTX). Exactness: fn (fp32) is split in registers into hi = act(fn) and lo = act(fn - hi) in the
activation dtype (bf16 or fp16), and mixes = a @ hi + a @ lo with fp32 accumulation; the residual
operand is already in that dtype (exact), so the only loss is the ~2^-16 relative rest of the split
(fp32 FMA gave 2^-24; a bf16-only torch matmul loses 2^-9 on fn alone: the tolerance rule holds with
a margin of ~100x). N = 24 is padded to 32 (masked fn loads: the 8 pad columns are exact zeros and are
written to the partials' unused columns 24..31). The split costs ~4 ALU ops per fn element per program
(amortized over BLOCK_T tokens: ~0.03 warp-instructions per residual byte at BLOCK_T = 64, against the
H200's ~0.25 per byte of HBM): it is done in the kernel rather than by a separate pass, so every call
honours the fn it is given (graph replays included), no launch is added at T = 1, and no
per-layer state lives in the shared plan. hi + lo are 4 bytes per fn element, like fp32: L2 traffic
for fn is unchanged (32 x 4 bytes per k per program against BLOCK_T x 2 residual bytes).

Roofline of the previous fp32-FMA pass 1: 96 FMAs per token per h against 8 residual bytes (12
FMA/byte; the H200's balance is ~8 FMA/byte), measured at 5% of copy for pre and 8% for post_pre at
T=8192, H=7168 (2633 / 3355 us, tree 0d1ebe2). With mma.sync the same work is 2 x 24/32-padded MACs
per element in ~1/64 warp-instruction per residual byte: pass 1 becomes a stream.
PREDICTION (written before the change, T=8192, H=7168, H200 copy ~4.25 TB/s): the bytes we move are
18H per token for pre (pass 1 reads 8H, pass 2 re-reads 8H and writes 2H) against a 10H minimum, so
pre is capped at 10/18 = 55% of copy by design; at ~88% of copy per pass, pre ~280 us = ~48% of copy
(~9x faster than 2633 us). post_pre moves 28H (pass 1: x 2H + residual 8H in, 8H out; pass 2: 8H in,
2H out) against a 20H minimum: cap 71%, predicted ~450 us = ~62% of copy (~7x faster). Reaching 75%
needs pass 2 not to re-read the residual (out of reach while the mixes need all of 4H before y).

Bytes per token (H hidden, 2-byte dtype): pre reads the residual twice (pass 1 and 2: 16H) and writes
y (2H); post reads x and the residual (10H) and writes the new residual (8H); post_pre = post + pass 2
(reads the new residual, 8H; writes y, 2H). fn (96H bytes) is read once per token block (L2 hits
after the first). Live sizes (T, splits, chunks per split) are runtime arguments, never specialized;
H, dtype, MODE and the tile are compile keys.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.triton_build import jit_options, pdl_constexpr
from ..._lib.triton_pdl import gdc_enter
from ._config import ApplyConfig, StreamConfig

MODE_PRE, MODE_POST, MODE_POST_PRE, MODE_BCAST = 0, 1, 2, 3
MODES = {"pre": MODE_PRE, "post": MODE_POST, "post_pre": MODE_POST_PRE, "bcast": MODE_BCAST}
_TL_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@triton.jit
def _split_dot(a, f, acc):
    """acc += a @ f with f fp32 [K, 32] split into hi + lo in a's dtype: two mma.sync dots.

    Round-to-nearest-even, spelled out: it is the GPU's default (cvt.rn), and Triton's interpreter
    truncates a plain fp32 -> bf16 `.to` (reference.split_fn models the RNE split)."""
    hi = f.to(a.dtype, fp_downcast_rounding="rtne")
    lo = (f - hi.to(tl.float32)).to(a.dtype, fp_downcast_rounding="rtne")
    acc = tl.dot(a, hi, acc)
    return tl.dot(a, lo, acc)


@triton.jit
def _sum_sq(a):
    """[BT] fp32 sum over a row tile's squares (the mean square of the flat row, in pieces)."""
    f = a.to(tl.float32)
    return tl.sum(f * f, axis=1)


@triton.jit
def _diag_sq(a, dg):
    """dg [BT / 16, 16, 16] += the 16 x 16 diagonal blocks of a @ a^T (a [BT, K] bf16/fp16: the
    products are exact in fp32): one batched mma.sync dot, 16 x fewer MACs than the full BT x BT gram
    at BT = 64; each row's sum of squares is on the blocks' diagonals (_diag_rows)."""
    a3 = tl.reshape(a, [a.shape[0] // 16, 16, a.shape[1]])
    return tl.dot(a3, tl.permute(a3, (0, 2, 1)), dg)


@triton.jit
def _diag_rows(dg, BLOCK_T: tl.constexpr):
    """[BLOCK_T]: the diagonals of _diag_sq's blocks, in row order."""
    i = tl.arange(0, 16)
    return tl.reshape(tl.sum(tl.where((i[:, None] == i[None, :])[None, :, :], dg, 0.0), axis=2), [BLOCK_T])


@triton.jit
def _mix_step(a, fn_base, f_off, f_mask, acc):
    """acc [BT, 32] += a [BT, K] @ fn-tile [K, 32] (columns 24..31 masked to zero)."""
    return _split_dot(a, tl.load(fn_base + f_off, mask=f_mask, other=0.0), acc)


@triton.jit
def _new_stream(xf, r_0, r_1, r_2, r_3, p, c_0, c_1, c_2, c_3):
    """Stream j of the new residual in fp32: post_j * x + sum_i comb[i, j] * res_i (p = post_j,
    c_i = comb[i, j]); the stored, rounded value is what pre sees."""
    return p[:, None] * xf + c_0[:, None] * r_0 + c_1[:, None] * r_1 + c_2[:, None] * r_2 + c_3[:, None] * r_3


@triton.jit
def _pass1_tile(
    res_ptr,
    x_ptr,
    post_ptr,
    comb_ptr,
    out_ptr,
    fn_ptr,
    row,
    t_mask,
    c_begin,
    c_end,
    fn_blocks,
    H: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SQ_MODE: tl.constexpr,
    FN_SPLIT: tl.constexpr,
):
    """Pass 1's work on steps c_begin..c_end of the token rows `row` (arguments as
    _mhc_stream_kernel's): fp32 [BLOCK_T, 32], columns 0..23 the partial mixes, 24 the partial sum
    of squares, 25..31 zero. Shared by the two-pass stream kernel and the one-launch kernels.
    FN_SPLIT (PRE only; stream_constexprs): 0 fn is fp32 [24, 4H], split here each step; 1 fn is
    the split_fn launch's [2, 24, 4H] hi, lo in the activation dtype; 2 the same, hi only."""
    READS_X: tl.constexpr = (MODE == 1) or (MODE == 2)
    hh = tl.arange(0, BLOCK_H)
    k4 = tl.arange(0, 4 * BLOCK_H)
    m32 = tl.arange(0, 32)  # mixes 0..23, the sum of squares (24) and 7 zero pad columns (N = 32)
    f_mask = m32[None, :] < 24
    fk = m32[None, :] * (4 * H) + k4[:, None]  # PRE: [4 * BH, 32] fn columns of that operand

    # Phase 0: the previous layer's mixing weights of each token (20 fp32), loaded once.
    if READS_X:
        wp = post_ptr + row * 4
        p_0 = tl.load(wp + 0, mask=t_mask, other=0.0)
        p_1 = tl.load(wp + 1, mask=t_mask, other=0.0)
        p_2 = tl.load(wp + 2, mask=t_mask, other=0.0)
        p_3 = tl.load(wp + 3, mask=t_mask, other=0.0)
        cp = comb_ptr + row * 16  # comb[t, i, j] at i * 4 + j
        c_00 = tl.load(cp + 0, mask=t_mask, other=0.0)
        c_01 = tl.load(cp + 1, mask=t_mask, other=0.0)
        c_02 = tl.load(cp + 2, mask=t_mask, other=0.0)
        c_03 = tl.load(cp + 3, mask=t_mask, other=0.0)
        c_10 = tl.load(cp + 4, mask=t_mask, other=0.0)
        c_11 = tl.load(cp + 5, mask=t_mask, other=0.0)
        c_12 = tl.load(cp + 6, mask=t_mask, other=0.0)
        c_13 = tl.load(cp + 7, mask=t_mask, other=0.0)
        c_20 = tl.load(cp + 8, mask=t_mask, other=0.0)
        c_21 = tl.load(cp + 9, mask=t_mask, other=0.0)
        c_22 = tl.load(cp + 10, mask=t_mask, other=0.0)
        c_23 = tl.load(cp + 11, mask=t_mask, other=0.0)
        c_30 = tl.load(cp + 12, mask=t_mask, other=0.0)
        c_31 = tl.load(cp + 13, mask=t_mask, other=0.0)
        c_32 = tl.load(cp + 14, mask=t_mask, other=0.0)
        c_33 = tl.load(cp + 15, mask=t_mask, other=0.0)

    acc = tl.zeros([BLOCK_T, 32], dtype=tl.float32)
    sq = tl.zeros([BLOCK_T], dtype=tl.float32)  # SQ_MODE 0: per-step row reductions
    # SQ_MODE 1 (PRE): squares summed elementwise, reduced once after the loop (a per-step row
    # reduction nearly doubled pass 1 at T=8192 on the H200: 403 us, 224 without the squares)
    sqe = tl.zeros([BLOCK_T, 4 * BLOCK_H if SQ_MODE == 1 else 1], dtype=tl.float32)
    # SQ_MODE 2: on the tensor cores, gram = sum of a @ a^T (bf16/fp16 products are exact in fp32),
    # whose diagonal is each row's sum of squares
    gram = tl.zeros([BLOCK_T, BLOCK_T if SQ_MODE == 2 else 1], dtype=tl.float32)
    # SQ_MODE 3: only the 16 x 16 diagonal blocks of that gram (one batched dot: _diag_sq)
    dg = tl.zeros([BLOCK_T // 16 if SQ_MODE == 3 else 1, 16, 16], dtype=tl.float32)
    mask2 = t_mask[:, None]
    tile = row[:, None] * (4 * H) + hh[None, :]  # [BT, BH]: stream 0 of this step; stream i at + i * H
    fn_t = m32[None, :] * (fn_blocks * H) + hh[:, None]  # [BH, 32]: fn block 0 (block i at + i * H)
    for c in range(c_begin, c_end):
        h0 = c * BLOCK_H
        if MODE == 3:
            # BCAST: the 4 streams are x; mixes = x @ (sum of fn's blocks)^T.
            xv = tl.load(res_ptr + row[:, None] * H + h0 + hh[None, :], mask=mask2, other=0.0)
            for i in tl.static_range(4):
                tl.store(out_ptr + tile + i * H + h0, xv, mask=mask2)
            f = tl.zeros([BLOCK_H, 32], dtype=tl.float32)
            for blk in range(fn_blocks):  # folded in fp32, then split: one hi + lo pair of dots
                f += tl.load(fn_ptr + fn_t + blk * H + h0, mask=f_mask, other=0.0)
            acc = _split_dot(xv, f, acc)
            if SQ_MODE == 2:
                gram = tl.dot(xv, tl.trans(xv), gram)
            elif SQ_MODE == 3:
                dg = _diag_sq(xv, dg)
            else:
                sq += _sum_sq(xv)
        elif READS_X:
            xf = tl.load(x_ptr + row[:, None] * H + h0 + hh[None, :], mask=mask2, other=0.0).to(tl.float32)
            r_0 = tl.load(res_ptr + tile + h0, mask=mask2, other=0.0).to(tl.float32)
            r_1 = tl.load(res_ptr + tile + H + h0, mask=mask2, other=0.0).to(tl.float32)
            r_2 = tl.load(res_ptr + tile + 2 * H + h0, mask=mask2, other=0.0).to(tl.float32)
            r_3 = tl.load(res_ptr + tile + 3 * H + h0, mask=mask2, other=0.0).to(tl.float32)
            dt = out_ptr.dtype.element_ty
            n_0 = _new_stream(xf, r_0, r_1, r_2, r_3, p_0, c_00, c_10, c_20, c_30).to(dt)
            n_1 = _new_stream(xf, r_0, r_1, r_2, r_3, p_1, c_01, c_11, c_21, c_31).to(dt)
            n_2 = _new_stream(xf, r_0, r_1, r_2, r_3, p_2, c_02, c_12, c_22, c_32).to(dt)
            n_3 = _new_stream(xf, r_0, r_1, r_2, r_3, p_3, c_03, c_13, c_23, c_33).to(dt)
            tl.store(out_ptr + tile + h0, n_0, mask=mask2)
            tl.store(out_ptr + tile + H + h0, n_1, mask=mask2)
            tl.store(out_ptr + tile + 2 * H + h0, n_2, mask=mask2)
            tl.store(out_ptr + tile + 3 * H + h0, n_3, mask=mask2)
            if MODE == 2:
                if SQ_MODE == 2:
                    gram = tl.dot(n_0, tl.trans(n_0), gram)
                    gram = tl.dot(n_1, tl.trans(n_1), gram)
                    gram = tl.dot(n_2, tl.trans(n_2), gram)
                    gram = tl.dot(n_3, tl.trans(n_3), gram)
                elif SQ_MODE == 3:
                    dg = _diag_sq(n_3, _diag_sq(n_2, _diag_sq(n_1, _diag_sq(n_0, dg))))
                else:
                    sq += _sum_sq(n_0) + _sum_sq(n_1) + _sum_sq(n_2) + _sum_sq(n_3)
                acc = _mix_step(n_0, fn_ptr + h0, fn_t, f_mask, acc)
                acc = _mix_step(n_1, fn_ptr + H + h0, fn_t, f_mask, acc)
                acc = _mix_step(n_2, fn_ptr + 2 * H + h0, fn_t, f_mask, acc)
                acc = _mix_step(n_3, fn_ptr + 3 * H + h0, fn_t, f_mask, acc)
        else:
            # PRE: one [BT, 4 * BH] operand, 4 * BH CONTIGUOUS elements of each token's flat 4H row
            # (k0 = c * 4 * BH), against fn's same columns: a 128-byte run per row per step at
            # BH = 16 (the stream-split layout, 4 runs of BH H apart, read 32-byte runs).
            k0 = c * (4 * BLOCK_H)
            a = tl.load(res_ptr + row[:, None] * (4 * H) + k0 + k4[None, :], mask=mask2, other=0.0)
            if SQ_MODE == 1:
                af = a.to(tl.float32)
                sqe += af * af
            elif SQ_MODE == 2:
                gram = tl.dot(a, tl.trans(a), gram)
            elif SQ_MODE == 3:
                dg = _diag_sq(a, dg)
            else:
                sq += _sum_sq(a)
            if FN_SPLIT == 0:
                acc = _mix_step(a, fn_ptr + k0, fk, f_mask, acc)
            else:
                acc = tl.dot(a, tl.load(fn_ptr + k0 + fk, mask=f_mask, other=0.0), acc)
                if FN_SPLIT == 1:
                    acc = tl.dot(a, tl.load(fn_ptr + 96 * H + k0 + fk, mask=f_mask, other=0.0), acc)

    if SQ_MODE == 1:
        sq = tl.sum(sqe, axis=1)
    elif SQ_MODE == 2:
        ti = tl.arange(0, BLOCK_T)
        sq = tl.sum(tl.where(ti[:, None] == ti[None, :], gram, 0.0), axis=1)
    elif SQ_MODE == 3:
        sq = _diag_rows(dg, BLOCK_T)
    if MODE == 3:
        sq = 4.0 * sq  # the flat 4H row holds x four times
    return tl.where(m32[None, :] == 24, sq[:, None], acc)


@triton.jit(do_not_specialize=["T", "chunks_per_split", "fn_blocks"])
def _mhc_stream_kernel(
    res_ptr,  # PRE/POST/POST_PRE: residual [T, 4, H]; BCAST: x [T, H]
    x_ptr,  # POST/POST_PRE: layer output x [T, H]
    post_ptr,  # POST/POST_PRE: previous post fp32 [T, 4]
    comb_ptr,  # POST/POST_PRE: previous comb fp32 [T, 4, 4]
    out_ptr,  # POST/POST_PRE/BCAST: new residual [T, 4, H]
    fn_ptr,  # fp32 [24, fn_blocks * H]
    part_ptr,  # fp32 [splits, T, 32] partials of this call
    T,
    chunks_per_split,
    fn_blocks,  # BCAST: 4 ([24, 4H] fn) or 1 (fn folded to [24, H])
    H: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SQ_MODE: tl.constexpr,  # 0 per-step reduction, 1 elementwise (PRE only), 2 gram, 3 diag (stream_constexprs)
    FN_SPLIT: tl.constexpr,  # PRE: 0 fp32 fn, 1 pre-split hi + lo, 2 hi only (_pass1_tile)
    PDL: tl.constexpr,  # programmatic dependent launch (StreamConfig.pdl)
):
    gdc_enter(PDL)
    N_CHUNKS: tl.constexpr = H // BLOCK_H
    pid_t = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    row = offs_t.to(tl.int64)  # T * 4H can pass 2^31
    c_begin = pid_s * chunks_per_split
    c_end = tl.minimum(c_begin + chunks_per_split, N_CHUNKS)
    acc = _pass1_tile(
        res_ptr, x_ptr, post_ptr, comb_ptr, out_ptr, fn_ptr, row, t_mask, c_begin, c_end, fn_blocks,
        H, MODE, BLOCK_T, BLOCK_H, SQ_MODE, FN_SPLIT,
    )  # fmt: skip
    # This split's partial mixes and sum of squares (row stride 32 floats: 0..23 mixes, 24 the sum
    # of squares, 25..31 the zero pad of the dot); POST has no mixes.
    if MODE != 1:
        m32 = tl.arange(0, 32)
        part = part_ptr + (pid_s.to(tl.int64) * T + row[:, None]) * 32
        tl.store(part + m32[None, :], acc, mask=t_mask[:, None])


@triton.jit
def _softmax_rows(logits, hc_eps):
    e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
    return e / tl.sum(e, axis=1)[:, None] + hc_eps


@triton.jit
def _load_streams(src_ptr, tok, t_mask, h, tok_stride, stream_stride, CACHE: tl.constexpr):
    """The 4 streams of a chunk, fp32 [TOK, BLOCK_H] each (stream stride 0: all four are x).
    CACHE ".cg" bypasses L1 (rows other programs of the same launch wrote)."""
    row = src_ptr + tok[:, None] * tok_stride + h[None, :]
    m = t_mask[:, None]
    v_0 = tl.load(row, mask=m, other=0.0, cache_modifier=CACHE).to(tl.float32)
    v_1 = tl.load(row + stream_stride, mask=m, other=0.0, cache_modifier=CACHE).to(tl.float32)
    v_2 = tl.load(row + 2 * stream_stride, mask=m, other=0.0, cache_modifier=CACHE).to(tl.float32)
    v_3 = tl.load(row + 3 * stream_stride, mask=m, other=0.0, cache_modifier=CACHE).to(tl.float32)
    return v_0, v_1, v_2, v_3


@triton.jit
def _split_sum(
    part_ptr, s0, T, splits, tok, t_mask, col: tl.constexpr, N: tl.constexpr, BS: tl.constexpr, CACHE: tl.constexpr
):
    """sum over splits s0..s0+BS of partial columns col..col+N: [TOK, N] (CACHE: the loads' cache
    modifier, "" or ".cg" to bypass L1; no default: Triton 3.6 passes a str default as a plain str). The pointer tile is flat [TOK, BS * N], reshaped after the load:
    a [TOK, BS, N] pointer tile gets lanes down the tokens from Triton 3.6 (its 3-D order [2, 0, 1];
    3.9: [2, 1, 0]), which spilled the apply pass 2."""
    k = tl.arange(0, BS * N)
    s = s0 + k // N
    ptr = part_ptr + (s.to(tl.int64)[None, :] * T + tok[:, None]) * 32 + col + (k % N)[None, :]
    v = tl.load(ptr, mask=(s < splits)[None, :] & t_mask[:, None], other=0.0, cache_modifier=CACHE)
    return tl.sum(tl.reshape(v, [tok.shape[0], BS, N]), axis=1)


@triton.jit
def _split_sums(part_ptr, T, splits, tok, t_mask, BS: tl.constexpr, CACHE: tl.constexpr, SQ: tl.constexpr):
    """TOK tokens' partials summed over all splits: (pre / post [TOK, 8], comb logit rows l_0..l_3 [TOK, 4],
    and with SQ the sum of squares (column 24) [TOK, 1], else zeros)."""
    acc8 = tl.zeros([tok.shape[0], 8], dtype=tl.float32)
    l_0 = tl.zeros([tok.shape[0], 4], dtype=tl.float32)
    l_1 = tl.zeros([tok.shape[0], 4], dtype=tl.float32)
    l_2 = tl.zeros([tok.shape[0], 4], dtype=tl.float32)
    l_3 = tl.zeros([tok.shape[0], 4], dtype=tl.float32)
    ssq = tl.zeros([tok.shape[0], 1], dtype=tl.float32)
    for s0 in range(0, splits, BS):
        acc8 += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 0, 8, BS, CACHE)
        l_0 += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 8, 4, BS, CACHE)
        l_1 += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 12, 4, BS, CACHE)
        l_2 += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 16, 4, BS, CACHE)
        l_3 += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 20, 4, BS, CACHE)
        if SQ:
            ssq += _split_sum(part_ptr, s0, T, splits, tok, t_mask, 24, 1, BS, CACHE)
    return acc8, l_0, l_1, l_2, l_3, ssq


@triton.jit
def _tok_weights(
    acc8, l_0, l_1, l_2, l_3, rs, scale_ptr, base_ptr, post_ptr, comb_ptr, tok, t_mask, sinkhorn_iters, hc_eps
):
    """The weights of TOK tokens from their summed mixes (acc8 [TOK, 8] pre/post, l_i [TOK, 4] row i
    of the comb logits) and rsqrt(mean square) rs [TOK]: writes post [T, 4] and comb [T, 4, 4] and
    returns pp [TOK, 8] (columns 0..3 pre). Comb as four row vectors: column sums are elementwise."""
    c8 = tl.arange(0, 8)
    i4 = tl.arange(0, 4)
    s_0 = tl.load(scale_ptr)
    s_1 = tl.load(scale_ptr + 1)
    s_2 = tl.load(scale_ptr + 2)
    z8 = acc8 * rs[:, None] * tl.where(c8 < 4, s_0, s_1)[None, :] + tl.load(base_ptr + c8)[None, :]
    g8 = tl.sigmoid(z8)
    pp = tl.where(c8[None, :] < 4, g8 + hc_eps, 2.0 * g8)
    tl.store(post_ptr + tok[:, None] * 4 + (c8 - 4)[None, :], pp, mask=(c8[None, :] >= 4) & t_mask[:, None])
    scale = (rs * s_2)[:, None]
    r_0 = _softmax_rows(l_0 * scale + tl.load(base_ptr + 8 + i4)[None, :], hc_eps)
    r_1 = _softmax_rows(l_1 * scale + tl.load(base_ptr + 12 + i4)[None, :], hc_eps)
    r_2 = _softmax_rows(l_2 * scale + tl.load(base_ptr + 16 + i4)[None, :], hc_eps)
    r_3 = _softmax_rows(l_3 * scale + tl.load(base_ptr + 20 + i4)[None, :], hc_eps)
    for _ in range(sinkhorn_iters):  # reciprocals, then multiplies: 5 divisions a round, not 32
        r_0 = r_0 * (1.0 / (tl.sum(r_0, axis=1) + hc_eps))[:, None]
        r_1 = r_1 * (1.0 / (tl.sum(r_1, axis=1) + hc_eps))[:, None]
        r_2 = r_2 * (1.0 / (tl.sum(r_2, axis=1) + hc_eps))[:, None]
        r_3 = r_3 * (1.0 / (tl.sum(r_3, axis=1) + hc_eps))[:, None]
        inv_col = 1.0 / (r_0 + r_1 + r_2 + r_3 + hc_eps)
        r_0 = r_0 * inv_col
        r_1 = r_1 * inv_col
        r_2 = r_2 * inv_col
        r_3 = r_3 * inv_col
    cp = comb_ptr + tok[:, None] * 16 + i4[None, :]
    tl.store(cp, r_0, mask=t_mask[:, None])
    tl.store(cp + 4, r_1, mask=t_mask[:, None])
    tl.store(cp + 8, r_2, mask=t_mask[:, None])
    tl.store(cp + 12, r_3, mask=t_mask[:, None])
    return pp


@triton.jit
def _stream_raw(src_ptr, tok, t_mask, h, tok_stride, stream_stride, H: tl.constexpr, CACHE: tl.constexpr):
    """The 4 streams at hidden offsets h (masked at H), [TOK, BLOCK_H] each in the storage dtype."""
    row = src_ptr + tok[:, None] * tok_stride + h[None, :]
    m = t_mask[:, None] & (h < H)[None, :]
    r_0 = tl.load(row, mask=m, other=0.0, cache_modifier=CACHE)
    r_1 = tl.load(row + stream_stride, mask=m, other=0.0, cache_modifier=CACHE)
    r_2 = tl.load(row + 2 * stream_stride, mask=m, other=0.0, cache_modifier=CACHE)
    r_3 = tl.load(row + 3 * stream_stride, mask=m, other=0.0, cache_modifier=CACHE)
    return r_0, r_1, r_2, r_3


@triton.jit
def _y_walk(
    src_ptr,
    tok,
    t_mask,
    tok_stride,
    stream_stride,
    p_0,
    p_1,
    p_2,
    p_3,
    inv,
    has_norm,
    w_ptr,
    y_ptr,
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,
    STAGES: tl.constexpr,
    CACHE: tl.constexpr,
    PREFETCH: tl.constexpr,
    STORE: tl.constexpr,
):
    """One walk over the rows for y = sum_i p_i * residual_i: STORE writes y * inv * w (the weight
    load masked by has_norm: w = 1 without one), else returns sum(y^2) per token.

    PREFETCH issues the next chunk's loads before this chunk's math (two chunks in flight, in
    registers): the one-launch kernel's finisher loop, inside its ticket branch, gets no cp.async
    pipelining from Triton 3.9, so each step would wait a whole L2 round trip. Without it the loop
    is left to Triton's pipeliner (STAGES; the apply kernel: 64 registers on sm_120a, which the
    prefetch's extra chunk would spill)."""
    hh = tl.arange(0, BLOCK_H)
    yy = tl.zeros([p_0.shape[0], BLOCK_H], dtype=tl.float32)
    if PREFETCH:
        a_0, a_1, a_2, a_3 = _stream_raw(src_ptr, tok, t_mask, hh, tok_stride, stream_stride, H, CACHE)
    for h0 in tl.range(0, H, BLOCK_H, num_stages=1 if PREFETCH else STAGES):
        if PREFETCH:
            h = h0 + BLOCK_H + hh
            b_0, b_1, b_2, b_3 = _stream_raw(src_ptr, tok, t_mask, h, tok_stride, stream_stride, H, CACHE)
        else:
            a_0, a_1, a_2, a_3 = _stream_raw(src_ptr, tok, t_mask, h0 + hh, tok_stride, stream_stride, H, CACHE)
        y = p_0[:, None] * a_0.to(tl.float32) + p_1[:, None] * a_1.to(tl.float32)
        y += p_2[:, None] * a_2.to(tl.float32) + p_3[:, None] * a_3.to(tl.float32)
        if STORE:
            w = tl.load(w_ptr + h0 + hh, mask=hh < BLOCK_H * has_norm, other=1.0).to(tl.float32)
            y = y * inv[:, None] * w[None, :]
            tl.store(y_ptr + tok[:, None] * H + h0 + hh[None, :], y.to(y_ptr.dtype.element_ty), mask=t_mask[:, None])
        else:
            yy += y * y
        if PREFETCH:
            a_0, a_1, a_2, a_3 = b_0, b_1, b_2, b_3
    return tl.sum(yy, axis=1)


@triton.jit
def _write_y(
    src_ptr,
    tok,
    t_mask,
    tok_stride,
    stream_stride,
    pp,
    has_norm,
    norm_eps,
    w_ptr,
    y_ptr,
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,
    STAGES: tl.constexpr,
    CACHE: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """y = sum_i pre_i * residual_i for TOK tokens (pre = pp[:, :4]); with a norm weight, a walk
    for mean(y^2) first (the rows again: L1/L2 hits; never pipelined: it codegens badly)."""
    c8 = tl.arange(0, 8)
    p_0 = tl.sum(tl.where(c8[None, :] == 0, pp, 0.0), axis=1)
    p_1 = tl.sum(tl.where(c8[None, :] == 1, pp, 0.0), axis=1)
    p_2 = tl.sum(tl.where(c8[None, :] == 2, pp, 0.0), axis=1)
    p_3 = tl.sum(tl.where(c8[None, :] == 3, pp, 0.0), axis=1)
    inv = tl.full(p_0.shape, 1.0, dtype=tl.float32)
    if has_norm:
        yy = _y_walk(src_ptr, tok, t_mask, tok_stride, stream_stride, p_0, p_1, p_2, p_3, inv, has_norm, w_ptr,
                     y_ptr, H, BLOCK_H, 1, CACHE, PREFETCH, False)  # fmt: skip
        inv = 1.0 / tl.sqrt_rn(yy / H + norm_eps)
    _y_walk(src_ptr, tok, t_mask, tok_stride, stream_stride, p_0, p_1, p_2, p_3, inv, has_norm, w_ptr,
            y_ptr, H, BLOCK_H, STAGES, CACHE, PREFETCH, True)  # fmt: skip


@triton.jit(do_not_specialize=["T", "splits", "sinkhorn_iters", "tok_stride", "stream_stride", "has_norm"])
def _mhc_apply_kernel(
    src_ptr,  # residual [T, 4, H] (broadcast form: x [T, H], read with stream stride 0)
    part_ptr,  # fp32 [splits, T, 32] from pass 1
    scale_ptr,  # hc_scale fp32 [3]
    base_ptr,  # hc_base fp32 [24]
    w_ptr,  # norm weight [H] (read only when has_norm)
    y_ptr,  # y [T, H]
    post_ptr,  # post fp32 [T, 4]
    comb_ptr,  # comb fp32 [T, 4, 4]
    T,
    splits,
    sinkhorn_iters,
    tok_stride,  # 4H for a [T, 4, H] residual; H for the broadcast form's x [T, H]
    stream_stride,  # H; 0 for the broadcast form (every stream is x: re-reads hit L1)
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    TOK: tl.constexpr,  # tokens per program (warps spread over tokens first: less replicated 4x4 math)
    BLOCK_H: tl.constexpr,  # chunk of a row; divides H
    STAGES: tl.constexpr,  # row loops prefetch STAGES - 1 chunks ahead (cp.async)
    BLOCK_S: tl.constexpr,
):
    tok = (tl.program_id(0) * TOK + tl.arange(0, TOK)).to(tl.int64)
    t_mask = tok < T
    # Both strides are multiples of 128 (H is); saying so keeps the row loads 16-byte vectors
    # (tl.multiple_of on a scalar argument did not survive the widening to int64).
    tok_stride = (tok_stride // 128).to(tl.int64) * 128
    stream_stride = (stream_stride // 128).to(tl.int64) * 128
    hh = tl.arange(0, BLOCK_H)

    # Phase 1: mean square of each token's residual row (the later passes re-read the row from
    # L1/L2: this program just read it). Branch-free loops, so the pipeliner prefetches them.
    sq = tl.zeros([TOK, BLOCK_H], dtype=tl.float32)
    for h0 in tl.range(0, H, BLOCK_H, num_stages=STAGES):
        v_0, v_1, v_2, v_3 = _load_streams(src_ptr, tok, t_mask, h0 + hh, tok_stride, stream_stride, "")
        sq += v_0 * v_0 + v_1 * v_1 + v_2 * v_2 + v_3 * v_3
    rs = 1.0 / tl.sqrt_rn(tl.sum(sq, axis=1) / (4 * H) + rms_eps)  # [TOK]

    # Phase 2: the tokens' mixes, partials summed over the splits: pre/post [TOK, 8] and the comb
    # logits as four row tiles [TOK, 4] over j (Sinkhorn's column sums are then elementwise).
    acc8, l_0, l_1, l_2, l_3, _ = _split_sums(part_ptr, T, splits, tok, t_mask, BLOCK_S, "", False)

    # Phase 3: pre / post (sigmoids) and comb (softmax over j, + hc_eps, Sinkhorn rounds); phase 4: y.
    pp = _tok_weights(acc8, l_0, l_1, l_2, l_3, rs, scale_ptr, base_ptr, post_ptr, comb_ptr, tok, t_mask,
                      sinkhorn_iters, hc_eps)  # fmt: skip
    _write_y(src_ptr, tok, t_mask, tok_stride, stream_stride, pp, has_norm, norm_eps, w_ptr, y_ptr,
             H, BLOCK_H, STAGES, "", False)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Launchers (the interpret tier calls these directly on CPU tensors) and compile functions.
# ---------------------------------------------------------------------------------------------

APPLY_BLOCK_S = 16  # partial rows summed per step of pass 2


def launch_options(pdl: bool = False) -> dict:
    """Launch / warmup options of every norm.mhc kernel (FMA contraction on; `launch_pdl` for a tile
    whose PDL constexpr is pdl_constexpr(pdl)): `_lib.triton_build.jit_options`."""
    return jit_options(pdl, fp_fusion=True)


def stream_constexprs(hidden: int, mode: int, config: StreamConfig) -> dict:
    """Pass 1's constexprs (also the one-launch kernel's: `config` may be a FusedConfig).

    SQ_MODE from config.sq: "step" 0, "lazy" 1 (pre only: the other forms sum per step), "gram" 2
    (pre, post_pre, bcast), "diag" 3 (gram's 16 x 16 diagonal blocks only: _diag_sq); "auto" sums the squares elementwise when that accumulator costs at most
    32 fp32 registers a thread (block_t x 4 block_h over the program's threads), else per step (the
    2-warp 64-token tile would spill)."""
    sq = {"step": 0, "lazy": 1, "gram": 2, "diag": 3}.get(config.sq)
    if sq is None:  # auto
        sq = int(config.block_t * 4 * config.block_h <= 32 * 32 * config.num_warps)
    if mode == MODE_POST or (sq == 1 and mode != MODE_PRE):
        sq = 0
    fn_split = FN_SPLIT_MODES[config.fn_split] if mode == MODE_PRE else 0
    out = dict(H=hidden, MODE=mode, BLOCK_T=config.block_t, BLOCK_H=config.block_h, SQ_MODE=sq, FN_SPLIT=fn_split)
    if isinstance(config, StreamConfig):  # (the one-launch kernel has no PDL)
        out["PDL"] = pdl_constexpr(config.pdl, config.pdl_at_exit)
    return out


FN_SPLIT_MODES = {"kernel": 0, "pre": 1, "hi": 2}  # StreamConfig.fn_split -> _pass1_tile's FN_SPLIT


@triton.jit(do_not_specialize=["n"])
def _mhc_split_fn_kernel(fn_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """fn fp32 [24, 4H] (n elements) -> out [2, 24, 4H] in out's dtype: hi = RNE(fn), lo = RNE(fn - hi)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    f = tl.load(fn_ptr + i, mask=m, other=0.0)
    hi = f.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    lo = (f - hi.to(tl.float32)).to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(out_ptr + i, hi, mask=m)
    tl.store(out_ptr + n + i, lo, mask=m)


SPLIT_FN_BLOCK = 4096


def launch_split_fn(fn, out):
    """out [2, 24, 4H] (activation dtype) = the hi, lo split of fn fp32 [24, 4H]; one launch."""
    n = fn.numel()
    _mhc_split_fn_kernel[(triton.cdiv(n, SPLIT_FN_BLOCK),)](
        fn, out, n, BLOCK=SPLIT_FN_BLOCK, num_warps=4, **launch_options()
    )


@kernel("norm.mhc", backend="triton")
def compile_split_fn(dtype: str, hidden: int, device_index: int, arch: str):
    """The fn split launch of fn_split="pre" / "hi" pass-1 tiles."""
    with torch.cuda.device(device_index):
        _mhc_split_fn_kernel.warmup(
            _fake(torch.float32),
            _fake(_TL_DTYPES[dtype]),
            1,
            BLOCK=SPLIT_FN_BLOCK,
            num_warps=4,
            grid=(1,),
            **launch_options(),
        )
    return launch_split_fn


def launch_stream(mode: int, hidden: int, config: StreamConfig, res, x, post, comb, out, fn, part, *, T, splits, cps):
    """Pass 1 over T tokens: grid (token blocks, splits); unused pointers take a same-dtype stand-in."""
    fn_blocks = fn.shape[1] // hidden
    grid = (triton.cdiv(T, config.block_t), splits)
    _mhc_stream_kernel[grid](
        res,
        res if x is None else x,
        part if post is None else post,
        part if comb is None else comb,
        res if out is None else out,
        fn,
        part,
        T,
        cps,
        fn_blocks,
        **stream_constexprs(hidden, mode, config),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **launch_options(config.pdl),
    )


def pass2_args(hidden: int, src, part, hc_scale, hc_base, weight, y, post, comb, T, splits, s, *, norm=True):
    """The runtime arguments of a pass-2 kernel (apply, row; wide with norm=False: no norm weight),
    in their order. `s`: sinkhorn_iters, rms_eps, hc_eps (, norm_eps); src 2-D means bcast (x read
    with stream stride 0); an absent weight takes a stand-in."""
    bcast = src.dim() == 2
    strides = (hidden if bcast else 4 * hidden, 0 if bcast else hidden)
    head = (src, part, hc_scale, hc_base) + ((part if weight is None else weight,) if norm else ())
    args = head + (y, post, comb, T, splits, int(s["sinkhorn_iters"])) + strides
    if not norm:
        return args + (float(s["rms_eps"]), float(s["hc_eps"]))
    return args + (int(weight is not None), float(s["rms_eps"]), float(s["hc_eps"]), float(s["norm_eps"]))


def pass2_fakes(dtype: str, hidden: int, weight_dtype: str) -> tuple:
    """pass2_args' stand-ins for a warmup (apply, row)."""
    act, f32 = _TL_DTYPES[dtype], torch.float32
    args = (_fake(act), _fake(f32), _fake(f32), _fake(f32), _fake(getattr(torch, weight_dtype)), _fake(act))
    return args + (_fake(f32), _fake(f32), 1, 1, 1, 4 * hidden, hidden, 1, 1e-6, 1e-6, 1e-6)


def one_launch_args(res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, w, y, post, comb, *, norm=True):
    """The 14 tensor arguments the one-launch kernels (small, fused; tiny with norm=False: 13, no
    norm weight) take first, in their order; absent ones take a same-dtype stand-in."""
    head = (res, res if x is None else x, part if post_in is None else post_in, part if comb_in is None else comb_in)
    head += (res if out is None else out, fn, part, cnt, hc_scale, hc_base)
    return head + ((part if w is None else w,) if norm else ()) + (y, post, comb)


def fn_blocks_of(fn, hidden: int, res) -> int:
    """fn's column blocks of H: 4 ([24, 4H]), or 1 for the broadcast form's folded [24, H]."""
    return fn.shape[1] // hidden if res.dim() == 2 else 4


def launch_apply(hidden: int, config, src, part, hc_scale, hc_base, weight, y, post, comb, *, T, splits, **s):
    """Pass 2 over T tokens. `s`: sinkhorn_iters, rms_eps, hc_eps, norm_eps; src 2-D means bcast."""
    tok, block_h, stages = config.tile(hidden)
    _mhc_apply_kernel[(triton.cdiv(T, tok),)](
        *pass2_args(hidden, src, part, hc_scale, hc_base, weight, y, post, comb, T, splits, s),
        H=hidden,
        TOK=tok,
        BLOCK_H=block_h,
        STAGES=stages,
        BLOCK_S=APPLY_BLOCK_S,
        num_warps=config.num_warps,
        **launch_options(),
    )


def _fake(dtype):
    return triton.runtime.jit.MockTensor(dtype)


def _one_launch_fakes(dtype: str, weight_dtype: str) -> tuple:
    """The 14 tensor stand-ins both one-launch kernels (small, fused) take first: residual, x,
    post_in, comb_in, out, fn, part, counters, hc_scale, hc_base, norm weight, y, post, comb."""
    act, f32 = _TL_DTYPES[dtype], torch.float32
    args = (_fake(act), _fake(act), _fake(f32), _fake(f32), _fake(act), _fake(f32), _fake(f32), _fake(torch.int32))
    return args + (_fake(f32), _fake(f32), _fake(getattr(torch, weight_dtype)), _fake(act), _fake(f32), _fake(f32))


@kernel("norm.mhc", backend="triton")
def compile_stream(mode: str, dtype: str, hidden: int, config: StreamConfig, device_index: int, arch: str):
    """Pass 1 for one mode (pre, post, post_pre, bcast): compiled now, for `device_index`."""
    act, f32 = _TL_DTYPES[dtype], torch.float32
    # stand-ins as launch_stream passes them: x -> res (act), post/comb -> part (f32), out -> res.
    consts = stream_constexprs(hidden, MODES[mode], config)
    fn = act if consts["FN_SPLIT"] else f32  # fn split once: the split_fn launch's output (activation dtype)
    args = (_fake(act), _fake(act), _fake(f32), _fake(f32), _fake(act), _fake(fn), _fake(f32), 1, 1, 1)
    with torch.cuda.device(device_index):
        _mhc_stream_kernel.warmup(
            *args,
            **consts,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            grid=(1, 1),
            **launch_options(config.pdl),
        )
    return functools.partial(launch_stream, MODES[mode], hidden, config)


@kernel("norm.mhc", backend="triton")
def compile_apply(dtype: str, hidden: int, weight_dtype: str, config: ApplyConfig, device_index: int, arch: str):
    """Pass 2 (pre/post/comb and y; the broadcast form is a runtime flag) for one norm weight dtype."""
    tok, block_h, stages = config.tile(hidden)
    with torch.cuda.device(device_index):
        _mhc_apply_kernel.warmup(
            *pass2_fakes(dtype, hidden, weight_dtype),
            H=hidden,
            TOK=tok,
            BLOCK_H=block_h,
            STAGES=stages,
            BLOCK_S=APPLY_BLOCK_S,
            num_warps=config.num_warps,
            grid=(1,),
            **launch_options(),
        )
    return functools.partial(launch_apply, hidden, config)
