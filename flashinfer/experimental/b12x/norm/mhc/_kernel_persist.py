"""norm.mhc pre in ONE launch with persistent split programs ("persist" path, issue #5).

Grid: splits x lanes programs (splits = H / BLOCK_W; lanes sized from the SM count so that all are
co-resident). Program (lane, s) walks the token blocks b = lane, lane + lanes, ... of BLOCK_T tokens:
  1. pass 1's tile (`_kernel._pass1_tile`, shared with the two-pass and fused kernels) on its 4 *
     BLOCK_W contiguous elements of each token's flat 4H row: its share of the 24 mixes (mma.sync, fn
     split hi + lo) and of sum(flat^2) -> workspace row [s, token] (column 24 the squares);
  2. arrives on block b's counter (CTA barrier, then an acq_rel atomic at GPU scope);
  3. waits until all splits of the block have arrived (spins on an acquire load);
  4. sums columns 0..3 and 24 of the block's partials over the splits itself (no serial finisher:
     every program reads splits x BLOCK_T x 20 bytes from L2), computes pre, and writes y for ITS
     OWN hidden slice [s * BLOCK_W, (s + 1) * BLOCK_W) of all 4 streams, re-reading those rows
     (L2 hits: the lane's programs read them just now) in BLOCK_Y chunks, or at once when BLOCK_Y
     = BLOCK_W; then post and comb of its share of the block's tokens (token t by split t % splits:
     all 25 columns, loaded in the same loop, and the Sinkhorn rounds).
With a norm weight, y's mean square over H needs one more exchange: each program writes its slice's
sum of y^2 into partial column 25, arrives on a second counter and waits for the block's others.
LOOK = 1 mixes a program's next block before it finishes the previous one (the wait is then usually
over when reached).

Bytes per token from HBM: the residual once (8H), y once (2H). On L2 besides: the residual again for
y (8H), fn (every program re-reads its [4 * BLOCK_W, 24] fp32 slice per token block, as pass 1
does: 96H bytes per block; fn kept in registers across blocks spilled), partials 128 bytes per split
written and ~splits x 20 bytes per program read back.

Deadlock freedom: a program takes its (lane, split) from a slot ticket (atomic counter) when it
starts, so slots are handed out in start order; a program only ever waits on the programs of its own
lane, and the lowest unfinished lane always has all its programs started as long as `splits` programs
fit on the GPU at once (28 at H = 7168 with the default tile). The last program to exit (a "done"
ticket) zeroes every counter it used, so graph replays start from 0.

The interpreter runs programs one after another, so a spin-wait would never end there: STAGE > 0
runs the same arithmetic as 2-3 launches that never wait (1: mixes; 2: y, or with a norm weight the
slices' sums of y^2; 3: y with the norm), selected by the launcher under TRITON_INTERPRET=1 or by
PersistConfig.emulate (so the GPU tests can check both).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._config import PersistConfig
from ._kernel import _pass1_tile, _tok_weights


@triton.jit
def _slice_y(res_ptr, row, t_mask, h0, p_0, p_1, p_2, p_3, H: tl.constexpr, BLOCK_Y: tl.constexpr):
    """y = sum_i p_i * residual_i of the tokens `row` at hidden offsets h0 + [0, BLOCK_Y), fp32."""
    base = res_ptr + row[:, None] * (4 * H) + h0 + tl.arange(0, BLOCK_Y)[None, :]
    m = t_mask[:, None]
    y = p_0[:, None] * tl.load(base, mask=m, other=0.0).to(tl.float32)
    y += p_1[:, None] * tl.load(base + H, mask=m, other=0.0).to(tl.float32)
    y += p_2[:, None] * tl.load(base + 2 * H, mask=m, other=0.0).to(tl.float32)
    y += p_3[:, None] * tl.load(base + 3 * H, mask=m, other=0.0).to(tl.float32)
    return y


@triton.jit
def _wait_count(ptr, target):
    """Spin until *ptr >= target (acquire at GPU scope: the arrivals' stores are visible after)."""
    c = tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")
    while c < target:
        c = tl.atomic_add(ptr, 0, sem="acquire", scope="gpu")


@triton.jit
def _arrive(ptr):
    """Every thread's prior stores ordered before one release increment at GPU scope."""
    tl.debug_barrier()
    return tl.atomic_add(ptr, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _store_y(y_ptr, row, t_mask, hy, y, inv, w_ptr, H: tl.constexpr, NORM: tl.constexpr):
    """y [BLOCK_T, n] at hidden offsets hy, times inv [BLOCK_T] and the norm weight when NORM."""
    if NORM:
        y = y * inv[:, None] * tl.load(w_ptr + hy).to(tl.float32)[None, :]
    tl.store(y_ptr + row[:, None] * H + hy[None, :], y.to(y_ptr.dtype.element_ty), mask=t_mask[:, None])


@triton.jit
def _put_ysq(part, t_mask, yy, cnt):
    """This slice's sum of y^2 per token into partial column 25, then an arrival on the block's
    second counter."""
    tl.store(part + 25, yy, mask=t_mask)
    _arrive(cnt)


@triton.jit
def _block_inv(part_ptr, row, t_mask, T, splits, cnt, H: tl.constexpr, BLOCK_T: tl.constexpr,
               SPLIT_U: tl.constexpr, norm_eps):  # fmt: skip
    """rsqrt(mean(y^2) + norm_eps) of the block's tokens once every split put its sum of y^2."""
    _wait_count(cnt, splits)
    yy = tl.zeros([BLOCK_T], dtype=tl.float32)
    for sp0 in range(0, splits, SPLIT_U):
        for u in tl.static_range(SPLIT_U):
            sp = sp0 + u
            ym = t_mask & (tl.full([BLOCK_T], sp, tl.int32) < splits)
            yy += tl.load(part_ptr + (sp * T + row) * 32 + 25, mask=ym, other=0.0, cache_modifier=".cg")
    return 1.0 / tl.sqrt_rn(yy / H + norm_eps)


@triton.jit
def _zero_blocks(cnt_ptr, nblocks):
    """The per-block counters (2 a block after the slot and done tickets) back to 0."""
    z = tl.arange(0, 256)
    for c0 in range(0, 2 * nblocks, 256):
        tl.store(cnt_ptr + 2 + c0 + z, tl.zeros([256], dtype=tl.int32), mask=c0 + z < 2 * nblocks)


@triton.jit(do_not_specialize=["T", "splits", "lanes", "sinkhorn_iters", "has_norm"])
def _mhc_persist_kernel(
    res_ptr,  # residual [T, 4, H]
    fn_ptr,  # fp32 [24, 4H]
    part_ptr,  # fp32 [splits, T, 32] workspace (0..23 mixes, 24 sum of squares, 25 sum of y^2)
    cnt_ptr,  # int32 [2 + 2 * token blocks]: slot, done, then (mixes, y^2) per block; 0 between calls
    scale_ptr,  # hc_scale fp32 [3]
    base_ptr,  # hc_base fp32 [24]
    w_ptr,  # norm weight [H] (read only when has_norm)
    y_ptr,  # y [T, H]
    post_ptr,  # post fp32 [T, 4]
    comb_ptr,  # comb fp32 [T, 4, 4]
    T,
    splits,  # H // BLOCK_W (runtime: the split loops stay loops)
    lanes,
    sinkhorn_iters,
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    MODE: tl.constexpr,  # _kernel.MODE_PRE
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,  # pass-1 step: 4 * BLOCK_H contiguous elements of the flat row
    SQ_MODE: tl.constexpr,  # _kernel.stream_constexprs
    BLOCK_W: tl.constexpr,  # a split: 4 * BLOCK_W flat elements mixed, BLOCK_W of y written
    BLOCK_Y: tl.constexpr,  # chunk of the y walk (divides BLOCK_W)
    SPLIT_U: tl.constexpr,  # splits summed per loop step (unrolled: their loads overlap)
    TPP: tl.constexpr,  # post/comb tokens per program and block: next_pow2(cdiv(BLOCK_T, splits))
    LOOK: tl.constexpr,  # 0 or 1: blocks a program mixes ahead of the one it finishes
    STAGE: tl.constexpr,  # 0 all with waits; 1 mixes, 2 y / y^2, 3 y with the norm (no waits)
):
    CPS: tl.constexpr = BLOCK_W // BLOCK_H  # pass-1 steps of a split
    FINAL: tl.constexpr = (STAGE == 0) or (STAGE == 3)  # stage 2 is final without a norm weight
    ONE_Y: tl.constexpr = BLOCK_Y >= BLOCK_W
    nblocks = tl.cdiv(T, BLOCK_T)
    slot = tl.atomic_add(cnt_ptr, 1, sem="relaxed", scope="gpu")
    lane = slot // splits
    s = slot - lane * splits
    h_lo = s * BLOCK_W  # this program's y slice (all 4 streams); it mixes flat [4 h_lo, 4 h_lo + 4 BLOCK_W)
    tb = tl.arange(0, BLOCK_T)
    m32 = tl.arange(0, 32)
    c4 = tl.arange(0, 4)
    c8 = tl.arange(0, 8)
    tp = s + splits * tl.arange(0, TPP)  # this program's post/comb tokens within a block

    # Step i mixes this lane's block i and finishes its block i - LOOK: with LOOK = 1 a program
    # arrives on its next block before it waits on the previous one (by then usually complete).
    n_mine = (nblocks - lane + lanes - 1) // lanes
    for i in range(0, n_mine + LOOK):
        if STAGE <= 1:
            if i < n_mine:
                bm = lane + i * lanes
                mrow = (bm * BLOCK_T + tb).to(tl.int64)  # T * 4H can pass 2^31
                m_mask = mrow < T
                acc = _pass1_tile(res_ptr, res_ptr, part_ptr, part_ptr, res_ptr, fn_ptr, mrow, m_mask, s * CPS,
                                  s * CPS + CPS, 4, H, MODE, BLOCK_T, BLOCK_H, SQ_MODE)  # fmt: skip
                mpart = part_ptr + (s.to(tl.int64) * T + mrow) * 32
                tl.store(mpart[:, None] + m32[None, :], acc, mask=m_mask[:, None] & (m32[None, :] < 25))
                _arrive(cnt_ptr + 2 + 2 * bm)
        if STAGE != 1:
            if i >= LOOK:
                b = lane + (i - LOOK) * lanes
                row = (b * BLOCK_T + tb).to(tl.int64)
                t_mask = row < T
                part = part_ptr + (s.to(tl.int64) * T + row) * 32  # [BLOCK_T]: this split's rows
                _wait_count(cnt_ptr + 2 + 2 * b, splits)
                # pre and the rms of every token of the block (columns 0..3 and 24 of every split), and
                # all 25 columns of this program's post/comb tokens, in one loop (L2, L1 bypassed)
                a4 = tl.zeros([BLOCK_T, 4], dtype=tl.float32)
                ssq = tl.zeros([BLOCK_T], dtype=tl.float32)
                tok = (b * BLOCK_T + tp).to(tl.int64)
                k_mask = (tp < BLOCK_T) & (tok < T)
                acc8 = tl.zeros([TPP, 8], dtype=tl.float32)
                l_0 = tl.zeros([TPP, 4], dtype=tl.float32)
                l_1 = tl.zeros([TPP, 4], dtype=tl.float32)
                l_2 = tl.zeros([TPP, 4], dtype=tl.float32)
                l_3 = tl.zeros([TPP, 4], dtype=tl.float32)
                ksq = tl.zeros([TPP], dtype=tl.float32)
                for sp0 in range(0, splits, SPLIT_U):  # SPLIT_U splits' loads in flight per round trip
                    for u in tl.static_range(SPLIT_U):
                        sp = sp0 + u
                        pm = t_mask & (tl.full([BLOCK_T], sp, tl.int32) < splits)
                        pr = part_ptr + (sp * T + row) * 32
                        a4 += tl.load(pr[:, None] + c4[None, :], mask=pm[:, None], other=0.0, cache_modifier=".cg")
                        ssq += tl.load(pr + 24, mask=pm, other=0.0, cache_modifier=".cg")
                        if STAGE <= 2:
                            km1 = k_mask & (tl.full([TPP], sp, tl.int32) < splits)
                            km = km1[:, None]
                            kr = part_ptr + (sp * T + tok) * 32
                            acc8 += tl.load(kr[:, None] + c8[None, :], mask=km, other=0.0, cache_modifier=".cg")
                            l_0 += tl.load(kr[:, None] + 8 + c4[None, :], mask=km, other=0.0, cache_modifier=".cg")
                            l_1 += tl.load(kr[:, None] + 12 + c4[None, :], mask=km, other=0.0, cache_modifier=".cg")
                            l_2 += tl.load(kr[:, None] + 16 + c4[None, :], mask=km, other=0.0, cache_modifier=".cg")
                            l_3 += tl.load(kr[:, None] + 20 + c4[None, :], mask=km, other=0.0, cache_modifier=".cg")
                            ksq += tl.load(kr + 24, mask=km1, other=0.0, cache_modifier=".cg")
                rs = 1.0 / tl.sqrt_rn(ssq / (4 * H) + rms_eps)
                pre = tl.sigmoid(a4 * rs[:, None] * tl.load(scale_ptr) + tl.load(base_ptr + c4)[None, :]) + hc_eps
                # y of this slice (the rows again: L2 hits, the lane's programs read them just now)
                p_0 = tl.sum(tl.where(c4[None, :] == 0, pre, 0.0), axis=1)
                p_1 = tl.sum(tl.where(c4[None, :] == 1, pre, 0.0), axis=1)
                p_2 = tl.sum(tl.where(c4[None, :] == 2, pre, 0.0), axis=1)
                p_3 = tl.sum(tl.where(c4[None, :] == 3, pre, 0.0), axis=1)
                if ONE_Y:  # the slice's y in registers: one round trip, no re-read for the norm
                    y = _slice_y(res_ptr, row, t_mask, h_lo, p_0, p_1, p_2, p_3, H, BLOCK_W)
                    hy = h_lo + tl.arange(0, BLOCK_W)
                    if has_norm:
                        if STAGE != 3:
                            _put_ysq(part, t_mask, tl.sum(y * y, axis=1), cnt_ptr + 3 + 2 * b)
                        if STAGE != 2:
                            inv = _block_inv(part_ptr, row, t_mask, T, splits, cnt_ptr + 3 + 2 * b, H, BLOCK_T, SPLIT_U,
                                             norm_eps)  # fmt: skip
                            _store_y(y_ptr, row, t_mask, hy, y, inv, w_ptr, H, True)
                    elif STAGE != 3:
                        _store_y(y_ptr, row, t_mask, hy, y, 1.0, w_ptr, H, False)
                elif has_norm:
                    if STAGE != 3:  # this slice's sum of y^2 -> column 25, then the block's second exchange
                        yy = tl.zeros([BLOCK_T], dtype=tl.float32)
                        for y0 in tl.range(0, BLOCK_W, BLOCK_Y, num_stages=1):
                            y = _slice_y(res_ptr, row, t_mask, h_lo + y0, p_0, p_1, p_2, p_3, H, BLOCK_Y)
                            yy += tl.sum(y * y, axis=1)
                        _put_ysq(part, t_mask, yy, cnt_ptr + 3 + 2 * b)
                    if STAGE != 2:
                        inv = _block_inv(part_ptr, row, t_mask, T, splits, cnt_ptr + 3 + 2 * b, H, BLOCK_T, SPLIT_U,
                                         norm_eps)  # fmt: skip
                        for y0 in tl.range(0, BLOCK_W, BLOCK_Y, num_stages=1):
                            y = _slice_y(res_ptr, row, t_mask, h_lo + y0, p_0, p_1, p_2, p_3, H, BLOCK_Y)
                            _store_y(y_ptr, row, t_mask, h_lo + y0 + tl.arange(0, BLOCK_Y), y, inv, w_ptr, H, True)
                elif STAGE != 3:
                    for y0 in tl.range(0, BLOCK_W, BLOCK_Y, num_stages=1):
                        y = _slice_y(res_ptr, row, t_mask, h_lo + y0, p_0, p_1, p_2, p_3, H, BLOCK_Y)
                        _store_y(y_ptr, row, t_mask, h_lo + y0 + tl.arange(0, BLOCK_Y), y, 1.0, w_ptr, H, False)
                if STAGE <= 2:  # post and comb of this program's tokens (after y: off its critical path)
                    krs = 1.0 / tl.sqrt_rn(ksq / (4 * H) + rms_eps)
                    _tok_weights(acc8, l_0, l_1, l_2, l_3, krs, scale_ptr, base_ptr, post_ptr, comb_ptr, tok, k_mask,
                                 sinkhorn_iters, hc_eps)  # fmt: skip

    # Exit: the last program to leave zeroes the counters (the block counters after the last stage).
    done = _arrive(cnt_ptr + 1)
    if done == splits * lanes - 1:
        if FINAL:
            _zero_blocks(cnt_ptr, nblocks)
        elif STAGE == 2:
            if has_norm == 0:
                _zero_blocks(cnt_ptr, nblocks)
        tl.atomic_xchg(cnt_ptr, 0)
        tl.atomic_xchg(cnt_ptr + 1, 0)


_OPTS = {"enable_fp_fusion": True}


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def persist_constexprs(hidden: int, config: PersistConfig) -> dict:
    """The persist kernel's constexprs at `hidden` (pre's pass-1 tile pieces: _kernel.stream_constexprs)."""
    from ._kernel import MODE_PRE, stream_constexprs

    splits = config.splits(hidden)
    return dict(
        stream_constexprs(hidden, MODE_PRE, config),
        BLOCK_W=config.block_w,
        BLOCK_Y=min(config.block_y, config.block_w),
        SPLIT_U=config.split_unroll,
        LOOK=int(config.lookahead),
        TPP=triton.next_power_of_2(-(-config.block_t // splits)),
    )


def lanes_for(config: PersistConfig, hidden: int, tokens: int, sm_count: int) -> int:
    """Lanes of a call: config.lanes, else enough programs for ctas_per_sm per SM; never more than
    the token blocks, at least 1 (a lane's SPLITS programs must fit on the GPU at once)."""
    blocks = -(-tokens // config.block_t)
    want = config.lanes or max(1, (sm_count * config.ctas_per_sm) // config.splits(hidden))
    return max(1, min(want, blocks))


def launch_persist(
    mode: int,
    hidden: int,
    config: PersistConfig,
    res,
    x,
    post_in,
    comb_in,
    out,
    fn,
    part,
    cnt,
    hc_scale,
    hc_base,
    w,
    y,
    post,
    comb,
    *,
    T,
    splits=None,
    cps=None,
    **s,
):
    """The one-launch pre over T tokens (same arguments as _kernel_fused.launch_fused; pre only)."""
    from ._kernel import MODE_PRE, _interpreting

    if mode != MODE_PRE:
        raise ValueError(f"the persist kernel runs pre only (mode {MODE_PRE}), got mode {mode}")
    interp = _interpreting()
    sms = 4 if interp else _sm_count(res.device.index or 0)
    lanes = lanes_for(config, hidden, T, sms)
    if interp or config.emulate:
        stages = (1, 2, 3) if w is not None else (1, 2)
    else:
        stages = (0,)
    for stage in stages:
        _mhc_persist_kernel[(config.splits(hidden) * lanes,)](
            res,
            fn,
            part,
            cnt,
            hc_scale,
            hc_base,
            part if w is None else w,
            y,
            post,
            comb,
            T,
            config.splits(hidden),
            lanes,
            int(s["sinkhorn_iters"]),
            int(w is not None),
            float(s["rms_eps"]),
            float(s["hc_eps"]),
            float(s["norm_eps"]),
            **persist_constexprs(hidden, config),
            STAGE=stage,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            **({} if interp else _OPTS),
        )


def warmup_persist(dtype: str, hidden: int, weight_dtype: str, config: PersistConfig, device_index: int):
    """Compile every stage the launcher will run for one norm weight dtype."""
    from ._kernel import _TL_DTYPES, _fake

    act, f32 = _TL_DTYPES[dtype], torch.float32
    args = (_fake(act), _fake(f32), _fake(f32), _fake(torch.int32), _fake(f32), _fake(f32))
    args += (_fake(getattr(torch, weight_dtype)), _fake(act), _fake(f32), _fake(f32), 1, 1, 1, 1, 1, 1e-6, 1e-6)
    args += (1e-6,)
    with torch.cuda.device(device_index):
        for stage in (1, 2, 3) if config.emulate else (0,):
            _mhc_persist_kernel.warmup(
                *args,
                **persist_constexprs(hidden, config),
                STAGE=stage,
                num_warps=config.num_warps,
                num_stages=config.num_stages,
                grid=(1,),
                **_OPTS,
            )
