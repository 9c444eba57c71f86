"""One launch of norm.mhc for a few tokens without a norm weight ("tiny"): pass 1 and the wide pass 2
in one grid, the second half waiting on the first (no serial finisher).

Why: at T = 1 the two-pass call is two launches (~2.5 us each under a CUDA graph on the H200) whose
work is a few dependent L2 round trips; run_post_pre measured 5.2 + 8.7 us. The one-launch kernels
tried so far finish in ONE program (the last split to arrive), which then walks all of y serially
(`small`: 32.7 us, `fused_t1`: 61.5). Here the grid is n_prod + n_y programs:
- every program first takes a role ticket (an atomic counter), so roles go in start order;
- tickets 0 .. n_prod - 1 run pass 1 (`_kernel._pass1_tile`, the selection's small stream tile:
  token block ticket // splits, split ticket % splits), store their partials and arrive on a
  counter (CTA barrier, then a release add at GPU scope);
- tickets n_prod .. n_prod + T * H / BLOCK_Y - 1 each own one token and BLOCK_Y columns of y: they
  spin (acquire) until all n_prod producers arrived, then run `_kernel_wide._wide_finish` with
  L1-bypassing loads (.cg: the partials and post_pre's new residual were written this launch);
- the last consumer to leave zeroes the 3 counters (graph replays start from 0).
Deadlock-free: a consumer only waits on producers, and every producer took its ticket before any
consumer did, so each producer is running or done when a consumer spins. The CPU interpreter runs
programs in order (tickets = program ids), so the producers are done before the first consumer.

Critical path at T = 1, H = 7168: launch, pass-1 work of one program (one [16, 128] step: ~2 L2
round trips), the arrival, one poll round trip, the consumers' partial + row loads (one round
trip), the y store; program (t, 0) adds the scalar Sinkhorn (~1 us) in parallel with the others.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ._config import StreamConfig, WideConfig
from ._kernel import (
    MODES,
    _one_launch_fakes,
    _pass1_tile,
    fn_blocks_of,
    launch_options,
    one_launch_args,
    stream_constexprs,
)
from ._kernel_wide import _wide_finish, wide_tile


@triton.jit(do_not_specialize=["T", "splits", "cps", "fn_blocks", "sinkhorn_iters"])
def _mhc_tiny_kernel(
    res_ptr,  # PRE/POST_PRE: residual [T, 4, H]; BCAST: x [T, H]
    x_ptr,  # POST_PRE: layer output x [T, H]
    pin_ptr,  # POST_PRE: previous post fp32 [T, 4]
    cin_ptr,  # POST_PRE: previous comb fp32 [T, 4, 4]
    out_ptr,  # POST_PRE/BCAST: new residual [T, 4, H]
    fn_ptr,  # fp32 [24, fn_blocks * H]
    part_ptr,  # fp32 [splits, T, 32] partials
    cnt_ptr,  # int32 [>= 3]: role tickets, producer arrivals, consumer exits (0 between calls)
    scale_ptr,
    base_ptr,
    y_ptr,
    post_ptr,
    comb_ptr,
    T,
    splits,
    cps,
    fn_blocks,
    sinkhorn_iters,
    rms_eps,
    hc_eps,
    H: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SQ_MODE: tl.constexpr,
    FN_SPLIT: tl.constexpr,  # 0: fp32 fn (tiny_constexprs; one launch, no split launch before it)
    BLOCK_Y: tl.constexpr,
    BLOCK_S: tl.constexpr,
    FAST: tl.constexpr,  # WideConfig.fast: the Sinkhorn's approximate reciprocals
):
    N_CHUNKS: tl.constexpr = H // BLOCK_H
    N_Y: tl.constexpr = H // BLOCK_Y
    n_prod = tl.cdiv(T, BLOCK_T) * splits
    ticket = tl.atomic_add(cnt_ptr, 1, sem="relaxed", scope="gpu")
    if ticket < n_prod:
        pid_t = ticket // splits
        pid_s = ticket - pid_t * splits
        offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        t_mask = offs_t < T
        row = offs_t.to(tl.int64)
        c_begin = pid_s * cps
        c_end = tl.minimum(c_begin + cps, N_CHUNKS)
        acc = _pass1_tile(
            res_ptr, x_ptr, pin_ptr, cin_ptr, out_ptr, fn_ptr, row, t_mask, c_begin, c_end, fn_blocks,
            H, MODE, BLOCK_T, BLOCK_H, SQ_MODE, FN_SPLIT,
        )  # fmt: skip
        m32 = tl.arange(0, 32)
        part = part_ptr + (pid_s.to(tl.int64) * T + row[:, None]) * 32
        tl.store(part + m32[None, :], acc, mask=t_mask[:, None])
        tl.debug_barrier()  # every thread's stores before the one release add
        tl.atomic_add(cnt_ptr + 1, 1, sem="release", scope="gpu")
    else:
        k = ticket - n_prod
        tok = (k // N_Y).to(tl.int64)
        pid_h = k - (k // N_Y) * N_Y
        c = tl.atomic_add(cnt_ptr + 1, 0, sem="acquire", scope="gpu")
        while c < n_prod:
            c = tl.atomic_add(cnt_ptr + 1, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
        if MODE == 3:  # BCAST: the streams are x (stride 0)
            row_ptr = res_ptr + tok * H
            stream_stride = 0
        elif MODE == 2:  # POST_PRE: the residual this launch stored
            row_ptr = out_ptr + tok * (4 * H)
            stream_stride = H
        else:
            row_ptr = res_ptr + tok * (4 * H)
            stream_stride = H
        _wide_finish(row_ptr, stream_stride, part_ptr, scale_ptr, base_ptr, y_ptr, post_ptr, comb_ptr, tok, pid_h,
                     T, splits, sinkhorn_iters, rms_eps, hc_eps, H, BLOCK_Y, BLOCK_S, ".cg", FAST, False)  # fmt: skip
        tl.debug_barrier()
        done = tl.atomic_add(cnt_ptr + 2, 1, sem="acq_rel", scope="gpu")
        if done == T * N_Y - 1:  # the last consumer: every ticket was taken, every producer arrived
            tl.atomic_xchg(cnt_ptr, 0)
            tl.atomic_xchg(cnt_ptr + 1, 0)
            tl.atomic_xchg(cnt_ptr + 2, 0)


COUNTERS = 3  # int32 counters the tiny kernel uses (the plan's "counter" scratch has at least these)


def tiny_constexprs(hidden: int, mode: int, stream: StreamConfig, wide: WideConfig) -> dict:
    block_y, block_s = wide_tile(hidden, wide)
    consts = {k: v for k, v in stream_constexprs(hidden, mode, stream).items() if k != "PDL"}  # one launch: no PDL
    return consts | dict(FN_SPLIT=0, BLOCK_Y=block_y, BLOCK_S=block_s, FAST=int(wide.fast))


def tiny_warps(stream: StreamConfig, wide: WideConfig) -> int:
    """Both roles share the launch's warp count: the pass-1 tile's (its dots are laid out for it)."""
    return stream.num_warps


def launch_tiny(
    mode: int, hidden: int, stream: StreamConfig, wide: WideConfig,
    res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, y, post, comb, *, T, splits, cps, **s,
):  # fmt: skip
    """The whole call over T tokens in one launch (no norm weight); unused pointers take stand-ins."""
    block_y, _ = wide_tile(hidden, wide)
    n_prod = triton.cdiv(T, stream.block_t) * splits
    ptrs = one_launch_args(
        res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, None, y, post, comb, norm=False
    )
    _mhc_tiny_kernel[(n_prod + T * (hidden // block_y),)](
        *ptrs,
        T,
        splits,
        cps,
        fn_blocks_of(fn, hidden, res),
        int(s["sinkhorn_iters"]),
        float(s["rms_eps"]),
        float(s["hc_eps"]),
        **tiny_constexprs(hidden, mode, stream, wide),
        num_warps=tiny_warps(stream, wide),
        num_stages=stream.num_stages,
        **launch_options(),
    )


@kernel("norm.mhc", backend="triton")
def compile_tiny(mode: str, dtype: str, hidden: int, stream: StreamConfig, wide: WideConfig, device_index: int, arch):
    """The tiny one-launch kernel for one form (pre, post_pre, bcast)."""
    fakes = _one_launch_fakes(dtype, "float32")
    args = fakes[:10] + fakes[11:] + (1, 1, 1, 4, 1, 1e-6, 1e-6)  # no norm weight
    with torch.cuda.device(device_index):
        _mhc_tiny_kernel.warmup(
            *args,
            **tiny_constexprs(hidden, MODES[mode], stream, wide),
            num_warps=tiny_warps(stream, wide),
            num_stages=stream.num_stages,
            grid=(1,),
            **launch_options(),
        )
    return functools.partial(launch_tiny, MODES[mode], hidden, stream, wide)
