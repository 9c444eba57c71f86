"""norm.mhc at a few tokens in ONE launch ("small" path): split-H programs, the last one finishes.

Grid: one program per BLOCK_H slice of the hidden dimension (all 4 streams, all T <= BLOCK_T live
tokens). Each program does pass 1's work on its slice (pre: reads the residual; post_pre: writes the
new residual; bcast: writes x's 4-stream repeat), stores its partial mixes and sum of squares
(column 24) in the workspace, then takes a ticket from a device counter (atomic, acq_rel at GPU
scope, after a CTA barrier so every thread's partial store is ordered before it). The program that
draws the last ticket sums the partials over the slices, computes pre / post / comb (Sinkhorn) for
the T tokens, writes y for every token from the whole row (reads of other programs' new residual
bypass L1: `.cg`), and resets the counter to 0 for the next call (stream order makes that visible).
No program waits for another, so there is no co-residency requirement and no deadlock; the
interpreter (programs run one after the other) runs the same code.

This saves pass 2's launch and its serial single-program split sum at T = 1 (the H200 measured
pass 1 ~6 us + pass 2 ~8.7 us there; a launch in a CUDA graph costs ~2-3 us by itself).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ._config import SmallConfig
from ._kernel import (
    MODES,
    _mix_step,
    _new_stream,
    _one_launch_fakes,
    _split_dot,
    _tok_weights,
    fn_blocks_of,
    launch_options,
    one_launch_args,
)


@triton.jit
def _sum_sq(a):
    f = a.to(tl.float32)
    return tl.sum(f * f, axis=1)


@triton.jit
def _pick(v, tok, t):
    """v[t] of a [TOK] vector as a scalar."""
    return tl.sum(tl.where(tok == t, v, 0.0), axis=0)


@triton.jit(do_not_specialize=["T", "fn_blocks", "sinkhorn_iters", "has_norm"])
def _mhc_small_kernel(
    res_ptr,  # PRE/POST_PRE: residual [T, 4, H]; BCAST: x [T, H]
    x_ptr,  # POST_PRE: layer output x [T, H]
    pin_ptr,  # POST_PRE: previous post fp32 [T, 4]
    cin_ptr,  # POST_PRE: previous comb fp32 [T, 4, 4]
    out_ptr,  # POST_PRE/BCAST: new residual [T, 4, H]
    fn_ptr,  # fp32 [24, fn_blocks * H]
    part_ptr,  # fp32 [slices, T, 32] workspace
    cnt_ptr,  # int32 [1] ticket counter, 0 between calls
    scale_ptr,
    base_ptr,
    w_ptr,
    y_ptr,
    post_ptr,
    comb_ptr,
    T,
    fn_blocks,
    sinkhorn_iters,
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    MODE: tl.constexpr,  # 0 pre, 2 post_pre, 3 bcast (_kernel.MODES)
    BLOCK_T: tl.constexpr,  # >= T; 16 (a dot's M)
    BLOCK_H: tl.constexpr,  # slice of each stream per program; divides H
    TOK: tl.constexpr,  # tokens of the finishing math (>= T)
    BLOCK_Y: tl.constexpr,  # power of two >= H: the whole row per token in the finish
):
    NS: tl.constexpr = H // BLOCK_H
    NSP: tl.constexpr = triton.next_power_of_2(NS)
    pid = tl.program_id(0)
    offs_t = tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    row = offs_t.to(tl.int64)
    mask2 = t_mask[:, None]
    hh = tl.arange(0, BLOCK_H)
    m32 = tl.arange(0, 32)
    f_mask = m32[None, :] < 24
    h0 = pid * BLOCK_H
    tile = row[:, None] * (4 * H) + h0 + hh[None, :]  # stream 0 of the slice; stream i at + i * H
    fn_t = m32[None, :] * (fn_blocks * H) + hh[:, None]
    acc = tl.zeros([BLOCK_T, 32], dtype=tl.float32)

    # Phase A: this slice's share of the mixes and of sum(flat^2).
    if MODE == 3:
        xv = tl.load(res_ptr + row[:, None] * H + h0 + hh[None, :], mask=mask2, other=0.0)
        for i in tl.static_range(4):
            tl.store(out_ptr + tile + i * H, xv, mask=mask2)
        f = tl.zeros([BLOCK_H, 32], dtype=tl.float32)
        for blk in range(fn_blocks):
            f += tl.load(fn_ptr + fn_t + blk * H + h0, mask=f_mask, other=0.0)
        acc = _split_dot(xv, f, acc)
        sq = 4.0 * _sum_sq(xv)
    else:
        if MODE == 2:
            xf = tl.load(x_ptr + row[:, None] * H + h0 + hh[None, :], mask=mask2, other=0.0).to(tl.float32)
            r_0 = tl.load(res_ptr + tile, mask=mask2, other=0.0).to(tl.float32)
            r_1 = tl.load(res_ptr + tile + H, mask=mask2, other=0.0).to(tl.float32)
            r_2 = tl.load(res_ptr + tile + 2 * H, mask=mask2, other=0.0).to(tl.float32)
            r_3 = tl.load(res_ptr + tile + 3 * H, mask=mask2, other=0.0).to(tl.float32)
            wp = pin_ptr + row * 4
            cp = cin_ptr + row * 16
            dt = out_ptr.dtype.element_ty
            n_0 = _post_stream(xf, r_0, r_1, r_2, r_3, wp, cp, 0, t_mask).to(dt)
            n_1 = _post_stream(xf, r_0, r_1, r_2, r_3, wp, cp, 1, t_mask).to(dt)
            n_2 = _post_stream(xf, r_0, r_1, r_2, r_3, wp, cp, 2, t_mask).to(dt)
            n_3 = _post_stream(xf, r_0, r_1, r_2, r_3, wp, cp, 3, t_mask).to(dt)
            tl.store(out_ptr + tile, n_0, mask=mask2)
            tl.store(out_ptr + tile + H, n_1, mask=mask2)
            tl.store(out_ptr + tile + 2 * H, n_2, mask=mask2)
            tl.store(out_ptr + tile + 3 * H, n_3, mask=mask2)
        else:
            n_0 = tl.load(res_ptr + tile, mask=mask2, other=0.0)
            n_1 = tl.load(res_ptr + tile + H, mask=mask2, other=0.0)
            n_2 = tl.load(res_ptr + tile + 2 * H, mask=mask2, other=0.0)
            n_3 = tl.load(res_ptr + tile + 3 * H, mask=mask2, other=0.0)
        acc = _mix_step(n_0, fn_ptr + h0, fn_t, f_mask, acc)
        acc = _mix_step(n_1, fn_ptr + H + h0, fn_t, f_mask, acc)
        acc = _mix_step(n_2, fn_ptr + 2 * H + h0, fn_t, f_mask, acc)
        acc = _mix_step(n_3, fn_ptr + 3 * H + h0, fn_t, f_mask, acc)
        sq = _sum_sq(n_0) + _sum_sq(n_1) + _sum_sq(n_2) + _sum_sq(n_3)
    acc = tl.where(m32[None, :] == 24, sq[:, None], acc)
    tl.store(part_ptr + (pid * T + row[:, None]) * 32 + m32[None, :], acc, mask=mask2)

    # Ticket: every thread's stores are ordered before it (barrier, then a release at GPU scope).
    tl.debug_barrier()
    ticket = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    if ticket == NS - 1:
        _finish(
            res_ptr if MODE == 0 else out_ptr,
            part_ptr,
            cnt_ptr,
            scale_ptr,
            base_ptr,
            w_ptr,
            y_ptr,
            post_ptr,
            comb_ptr,
            T,
            sinkhorn_iters,
            has_norm,
            rms_eps,
            hc_eps,
            norm_eps,
            H,
            NSP,
            NS,
            TOK,
            BLOCK_Y,
        )


@triton.jit
def _post_stream(xf, r_0, r_1, r_2, r_3, wp, cp, j: tl.constexpr, t_mask):
    """new_j = post_j * x + sum_i comb[i, j] * res_i (fp32), as the stream kernel computes it."""
    p = tl.load(wp + j, mask=t_mask, other=0.0)
    c_0 = tl.load(cp + j, mask=t_mask, other=0.0)
    c_1 = tl.load(cp + 4 + j, mask=t_mask, other=0.0)
    c_2 = tl.load(cp + 8 + j, mask=t_mask, other=0.0)
    c_3 = tl.load(cp + 12 + j, mask=t_mask, other=0.0)
    return _new_stream(xf, r_0, r_1, r_2, r_3, p, c_0, c_1, c_2, c_3)


@triton.jit
def _part_cols(part_ptr, s, tok, mask, col: tl.constexpr, N: tl.constexpr, T):
    """Partial columns col..col+N of every slice, summed: [NSP, TOK, N] -> [TOK, N] (L1 bypassed)."""
    ptr = part_ptr + (s[:, None, None] * T + tok[None, :, None]) * 32 + col + tl.arange(0, N)[None, None, :]
    return tl.sum(tl.load(ptr, mask=mask, other=0.0, cache_modifier=".cg"), axis=0)


@triton.jit
def _finish(
    src_ptr,
    part_ptr,
    cnt_ptr,
    scale_ptr,
    base_ptr,
    w_ptr,
    y_ptr,
    post_ptr,
    comb_ptr,
    T,
    sinkhorn_iters,
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    NSP: tl.constexpr,
    NS: tl.constexpr,
    TOK: tl.constexpr,
    BLOCK_Y: tl.constexpr,
):
    tok = tl.arange(0, TOK)
    t_ok = tok < T
    s = tl.arange(0, NSP)
    mask = (s < NS)[:, None, None] & t_ok[None, :, None]
    acc8 = _part_cols(part_ptr, s, tok, mask, 0, 8, T)
    l_0 = _part_cols(part_ptr, s, tok, mask, 8, 4, T)
    l_1 = _part_cols(part_ptr, s, tok, mask, 12, 4, T)
    l_2 = _part_cols(part_ptr, s, tok, mask, 16, 4, T)
    l_3 = _part_cols(part_ptr, s, tok, mask, 20, 4, T)
    ssq = tl.sum(_part_cols(part_ptr, s, tok, mask, 24, 1, T), axis=1)
    tl.atomic_xchg(cnt_ptr, 0)  # every ticket is drawn: ready for the next call
    rs = 1.0 / tl.sqrt_rn(ssq / (4 * H) + rms_eps)  # [TOK]

    pp = _tok_weights(acc8, l_0, l_1, l_2, l_3, rs, scale_ptr, base_ptr, post_ptr, comb_ptr, tok, t_ok,
                      sinkhorn_iters, hc_eps)  # fmt: skip
    c8 = tl.arange(0, 8)
    i4 = tl.arange(0, 4)
    pre = tl.where(c8[None, :] < 4, pp, 0.0)  # [TOK, 8]: columns 0..3 are pre

    # y per token from its whole row ([4, BLOCK_Y] tile), then the optional RMS norm.
    hy = tl.arange(0, BLOCK_Y)
    hm = hy < H
    for t in range(T):
        pt = tl.sum(tl.where(tok[:, None] == t, pre, 0.0), axis=0)  # [8]
        p4 = tl.sum(tl.where(c8[None, :] == i4[:, None], pt[None, :], 0.0), axis=1)  # [4]
        rowp = src_ptr + t * (4 * H) + i4[:, None] * H + hy[None, :]  # t < 16: no int32 overflow
        v = tl.load(rowp, mask=hm[None, :], other=0.0, cache_modifier=".cg").to(tl.float32)
        y = tl.sum(p4[:, None] * v, axis=0)
        inv = 1.0
        if has_norm:
            inv = 1.0 / tl.sqrt_rn(tl.sum(y * y, axis=0) / H + norm_eps)
        w = tl.load(w_ptr + hy, mask=hy < H * has_norm, other=1.0).to(tl.float32)
        tl.store(y_ptr + t * H + hy, (y * inv * w).to(y_ptr.dtype.element_ty), mask=hm)


def small_tile(hidden: int, config: SmallConfig, mode: int) -> dict:
    """The constexprs of one form's small kernel at `hidden`."""
    form = next(k for k, v in MODES.items() if v == mode)
    return dict(
        BLOCK_T=16,
        BLOCK_H=config.slice_h(form, hidden),
        TOK=config.max_tokens,
        BLOCK_Y=triton.next_power_of_2(hidden),
    )


def launch_small(
    mode: int, hidden: int, config,
    res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, w, y, post, comb, *, T, **s,
):  # fmt: skip
    """The whole call (pass 1 + finish) at T <= config.max_tokens in one launch."""
    tiles = small_tile(hidden, config, mode)
    _mhc_small_kernel[(hidden // tiles["BLOCK_H"],)](
        *one_launch_args(res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, w, y, post, comb),
        T,
        fn_blocks_of(fn, hidden, res),
        int(s["sinkhorn_iters"]),
        int(w is not None),
        float(s["rms_eps"]),
        float(s["hc_eps"]),
        float(s["norm_eps"]),
        H=hidden,
        MODE=mode,
        num_warps=config.num_warps,
        **tiles,
        **launch_options(),
    )


@kernel("norm.mhc", backend="triton")
def compile_small(
    mode: str, dtype: str, hidden: int, weight_dtype: str, config: SmallConfig, device_index: int, arch: str
):
    """The one-launch small-T kernel for one form (pre, post_pre, bcast) and norm weight dtype."""
    args = _one_launch_fakes(dtype, weight_dtype) + (1, 4, 1, 1, 1e-6, 1e-6, 1e-6)
    with torch.cuda.device(device_index):
        _mhc_small_kernel.warmup(
            *args,
            H=hidden,
            MODE=MODES[mode],
            num_warps=config.num_warps,
            grid=(1,),
            **small_tile(hidden, config, MODES[mode]),
            **launch_options(),
        )
    return functools.partial(launch_small, MODES[mode], hidden, config)
