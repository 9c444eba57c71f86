"""Pass 2 of norm.mhc, one token per program, reading its residual row once ("row" pass 2).

Pass 1 (`_kernel._mhc_stream_kernel`) leaves each split's sum of squares of the flat 4H row in the
partials' column 24, so this pass needs no row loop for the mean square: it sums the partials over
the splits ([BLOCK_S, 4] / [BLOCK_S, 4, 4] tiles, one reduction after the loop), applies the
sigmoids, the softmax and the Sinkhorn rounds on a [4, 4] tile (row sums along axis 1, column sums
along axis 0), writes post and comb, and then y = sum_i pre_i * residual_i from the row it loaded
as one [4, BLOCK_H] tile at the start (the load is issued before the partial sums and the 4x4 math,
so its latency overlaps them). With a norm weight, mean(y^2) comes from that same tile in registers.

When H > BLOCK_H (hidden sizes above the one-shot width), the row is streamed in BLOCK_H chunks
instead: one loop for y (plus one for mean(y^2) with a norm weight, re-reading from L1/L2), the y
loop software-pipelined STAGES deep (RowConfig.stages: fewer registers than the one-shot tile, so
more programs per SM, each with STAGES - 1 chunks in flight).

Bytes per token: the row (8H) once, y (2H), the partials (splits x 128) and post/comb (80). The
legacy pass 2 (`_kernel._mhc_apply_kernel`) reads the row twice or three times.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.triton_pdl import gdc_enter
from ._config import RowConfig
from ._kernel import launch_options, pass2_args, pass2_fakes, pdl_constexpr
from ._kernel_wide import _pick, _post_comb, _weight_params


@triton.jit
def _stream_tile(row, i4, h, stream_stride, H: tl.constexpr):
    """[4, BLOCK_H] fp32: the 4 streams at hidden offsets h (stream stride 0: all four are x)."""
    m = (h < H)[None, :] & (i4 < 4)[:, None]
    return tl.load(row + i4[:, None] * stream_stride + h[None, :], mask=m, other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=["T", "splits", "sinkhorn_iters", "tok_stride", "stream_stride", "has_norm"])
def _mhc_row_kernel(
    src_ptr,  # residual [T, 4, H] (broadcast form: x [T, H], read with stream stride 0)
    part_ptr,  # fp32 [splits, T, 32] from pass 1 (columns 0..23 mixes, 24 sum of squares)
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
    stream_stride,  # H; 0 for the broadcast form
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,  # power of two; the whole row in one tile when BLOCK_H >= H
    BLOCK_S: tl.constexpr,  # partial rows per step of the split sum
    STAGES: tl.constexpr,  # chunked rows: the y loop's pipeline depth (RowConfig.stages)
    SCALAR: tl.constexpr,  # the weights as per-thread scalars (RowConfig.scalar; _kernel_wide._post_comb)
    PDL: tl.constexpr,  # programmatic dependent launch (RowConfig.pdl)
):
    gdc_enter(PDL)
    tok = tl.program_id(0).to(tl.int64)
    tok_stride = (tok_stride // 128).to(tl.int64) * 128  # multiples of 128: 16-byte vector loads
    stream_stride = (stream_stride // 128).to(tl.int64) * 128
    ONE_SHOT: tl.constexpr = BLOCK_H >= H
    i4 = tl.arange(0, 4)
    hh = tl.arange(0, BLOCK_H)
    row = src_ptr + tok * tok_stride
    if ONE_SHOT:
        v = _stream_tile(row, i4, hh, stream_stride, H)  # issued first: overlaps the 4x4 math

    if SCALAR:
        # One [BLOCK_S, 32] partial tile a step, one reduction; the weights as scalars
        # (_kernel_wide: pre by a masked sum, post and comb with a shuffle-free Sinkhorn).
        c = tl.arange(0, 32)
        acc = tl.zeros([BLOCK_S, 32], dtype=tl.float32)
        for s0 in range(0, splits, BLOCK_S):
            s = s0 + tl.arange(0, BLOCK_S)
            prow = part_ptr + (s.to(tl.int64) * T + tok) * 32
            acc += tl.load(prow[:, None] + c[None, :], mask=(s < splits)[:, None], other=0.0)
        tot = tl.sum(acc, axis=0)
        rs = 1.0 / tl.sqrt_rn(_pick(tot, c, 24) / (4 * H) + rms_eps)
        pre = tl.sum(tl.where(c[None, :] == i4[:, None], tot[None, :], 0.0), axis=1)
        pre = tl.sigmoid(pre * rs * tl.load(scale_ptr) + tl.load(base_ptr + i4)) + hc_eps
        s1, s2, b32 = _weight_params(scale_ptr, base_ptr, c)
        _post_comb(tot, c, rs, s1, s2, b32, post_ptr, comb_ptr, tok, sinkhorn_iters, hc_eps, False)
    else:
        # The mixes: partials summed over the splits (elementwise per step, one reduction at the end).
        ss = tl.arange(0, BLOCK_S)
        a_pre = tl.zeros([BLOCK_S, 4], dtype=tl.float32)
        a_post = tl.zeros([BLOCK_S, 4], dtype=tl.float32)
        # comb's 16 logits as a flat [BLOCK_S, 16] tile, reshaped to [4, 4] after the split sum: a
        # [BLOCK_S, 4, 4] pointer tile made Triton 3.6 put the 4 x 4 tile's rows on different warps
        # (its 3-D order [2, 0, 1]; 3.9: [2, 1, 0]), so every Sinkhorn column sum went through
        # shared memory (3 barriers a round at 4 warps); 2-D tiles get one layout from both
        c16 = tl.arange(0, 16)
        a_comb = tl.zeros([BLOCK_S, 16], dtype=tl.float32)
        a_sq = tl.zeros([BLOCK_S], dtype=tl.float32)
        for s0 in range(0, splits, BLOCK_S):
            s = s0 + ss
            sm = s < splits
            prow = part_ptr + (s.to(tl.int64) * T + tok) * 32  # [BS]
            a_pre += tl.load(prow[:, None] + i4[None, :], mask=sm[:, None], other=0.0)
            a_post += tl.load(prow[:, None] + 4 + i4[None, :], mask=sm[:, None], other=0.0)
            a_comb += tl.load(prow[:, None] + 8 + c16[None, :], mask=sm[:, None], other=0.0)
            a_sq += tl.load(prow + 24, mask=sm, other=0.0)
        rs = 1.0 / tl.sqrt_rn(tl.sum(a_sq, axis=0) / (4 * H) + rms_eps)

        # pre / post (sigmoids) and comb (softmax over j, + hc_eps, Sinkhorn rounds) as a [4, 4] tile.
        pre = tl.sigmoid(tl.sum(a_pre, axis=0) * rs * tl.load(scale_ptr) + tl.load(base_ptr + i4)) + hc_eps
        post = 2.0 * tl.sigmoid(tl.sum(a_post, axis=0) * rs * tl.load(scale_ptr + 1) + tl.load(base_ptr + 4 + i4))
        tl.store(post_ptr + tok * 4 + i4, post)
        cij = i4[:, None] * 4 + i4[None, :]
        comb_sum = tl.reshape(tl.sum(a_comb, axis=0), [4, 4])
        logits = comb_sum * (rs * tl.load(scale_ptr + 2)) + tl.load(base_ptr + 8 + cij)
        e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        comb = e / tl.sum(e, axis=1)[:, None] + hc_eps
        for _ in range(sinkhorn_iters):  # reciprocals, then multiplies
            comb = comb * (1.0 / (tl.sum(comb, axis=1) + hc_eps))[:, None]
            comb = comb * (1.0 / (tl.sum(comb, axis=0) + hc_eps))[None, :]
        tl.store(comb_ptr + tok * 16 + cij, comb)

    # y = sum_i pre_i * residual_i, then the optional RMS norm (weight load masked by has_norm).
    y_row = y_ptr + tok * H
    if ONE_SHOT:
        y = tl.sum(pre[:, None] * v, axis=0)
        inv = 1.0
        if has_norm:
            inv = 1.0 / tl.sqrt_rn(tl.sum(y * y, axis=0) / H + norm_eps)
        w = tl.load(w_ptr + hh, mask=hh < H * has_norm, other=1.0).to(tl.float32)
        tl.store(y_row + hh, (y * inv * w).to(y_ptr.dtype.element_ty), mask=hh < H)
    else:
        inv = 1.0
        if has_norm:
            yy = tl.zeros([BLOCK_H], dtype=tl.float32)
            for h0 in tl.range(0, H, BLOCK_H, num_stages=1):
                y = tl.sum(pre[:, None] * _stream_tile(row, i4, h0 + hh, stream_stride, H), axis=0)
                yy += y * y
            inv = 1.0 / tl.sqrt_rn(tl.sum(yy, axis=0) / H + norm_eps)
        for h0 in tl.range(0, H, BLOCK_H, num_stages=STAGES):
            y = tl.sum(pre[:, None] * _stream_tile(row, i4, h0 + hh, stream_stride, H), axis=0)
            hm = (h0 + hh) < H
            w = tl.load(w_ptr + h0 + hh, mask=h0 + hh < H * has_norm, other=1.0).to(tl.float32)
            tl.store(y_row + h0 + hh, (y * inv * w).to(y_ptr.dtype.element_ty), mask=hm)


def row_tile(hidden: int, config: RowConfig) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_S) of `config` at `hidden`: the row in one tile up to config.block_h."""
    return min(config.block_h, triton.next_power_of_2(hidden)), config.block_s


def row_constexprs(hidden: int, config: RowConfig) -> dict:
    """The row kernel's constexprs for `config` at `hidden`."""
    block_h, block_s = row_tile(hidden, config)
    return dict(H=hidden, BLOCK_H=block_h, BLOCK_S=block_s, STAGES=config.stages, SCALAR=config.scalar,
                PDL=pdl_constexpr(config.pdl, config.pdl_at_exit))  # fmt: skip


def launch_row(hidden: int, config: RowConfig, src, part, hc_scale, hc_base, weight, y, post, comb, *, T, splits, **s):
    """Pass 2 over T tokens (one program each); same arguments as _kernel.launch_apply."""
    _mhc_row_kernel[(T,)](
        *pass2_args(hidden, src, part, hc_scale, hc_base, weight, y, post, comb, T, splits, s),
        **row_constexprs(hidden, config),
        num_warps=config.num_warps,
        **launch_options(config.pdl),
    )


@kernel("norm.mhc", backend="triton")
def compile_row(dtype: str, hidden: int, weight_dtype: str, config: RowConfig, device_index: int, arch: str):
    """The row pass 2 for one norm weight dtype (the broadcast form is a runtime stride)."""
    with torch.cuda.device(device_index):
        _mhc_row_kernel.warmup(
            *pass2_fakes(dtype, hidden, weight_dtype),
            **row_constexprs(hidden, config),
            num_warps=config.num_warps,
            grid=(1,),
            **launch_options(config.pdl),
        )
    return functools.partial(launch_row, hidden, config)
