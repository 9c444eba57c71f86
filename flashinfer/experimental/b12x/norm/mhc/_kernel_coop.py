"""One launch of norm.mhc for a few tokens without a norm weight ("coop"): every program is one
split of pass 1 AND one slice of y, all programs resident at once (issue #5: run_post_pre at
T = 1 under 8 µs on the H200).

Grid: N = H / BLOCK_Y programs (56 at H = 7168 with the default 128; the launcher refuses more
programs than the device has SMs, so all of them are resident and the wait cannot deadlock).
Program p
- runs pass 1 on columns [p * BLOCK_Y, +BLOCK_Y) of every stream (post_pre, bcast; pre: the same
  number of contiguous elements of the flat row) for all T <= BLOCK_T tokens with the selection's
  small stream tile (`_kernel_tiny._produce`: BLOCK_Y / BLOCK_H steps, post_pre storing its slice of
  the new residual) and stores its partials (split p of N);
- arrives: a CTA barrier, then one release add on an int64 epoch counter (the plan's "epoch"
  scratch, a multiple of N between calls: it is never reset, so no program has to leave last);
- issues the load of token 0's [4, BLOCK_Y] row slice (post_pre: the values this CTA just stored),
  then waits until the counter reaches the end of its epoch, (ticket // N + 1) * N, polling with
  ld.acquire.gpu (reads only) or, with CoopConfig.poll "atom", acquire atomics;
- runs the wide finish (`_kernel_wide._wide_y`) on that slice for each token: sums the N partial rows
  (.cg: written by other SMs this launch), the pre weights, y's slice; program 0 also post and comb
  (scalar Sinkhorn).
Against the two-pass path (stream kernel + wide kernel) it removes the second launch and the kernel
boundary, the second program ramp, and the row's load round trip after the boundary; against the
tiny kernel (13-15 µs measured) it has no role ticket (224 + 56 RMWs on one line before any work),
56 arrivals instead of 224, no RMW polls contending with the arrivals, and no counter reset.

The CPU interpreter runs programs in order (program 0 would wait forever): there, and with
CoopConfig.emulate on the GPU, the same kernel runs as two launches, PHASE 1 (pass 1 and partials)
then PHASE 2 (the finish), without the counter.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ._config import CoopConfig, StreamConfig
from ._kernel import MODES, _fake, _interpreting, _one_launch_fakes, fn_blocks_of, launch_options, stream_constexprs
from ._kernel_tiny import _finish_src, _produce
from ._kernel_wide import _wide_row, _wide_y


@triton.jit
def _ld_acquire(ptr):
    """An int64 load with acquire semantics at GPU scope (a read: no RMW on the polled line)."""
    return tl.inline_asm_elementwise(
        "ld.global.acquire.gpu.b64 $0, [$1];", "=l,l", [ptr], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _wait_epoch(cnt_ptr, target, POLL: tl.constexpr):
    """Spin until the epoch counter reaches target (every program of this launch arrived)."""
    if POLL == 0:
        c = _ld_acquire(cnt_ptr)
        while c < target:
            c = _ld_acquire(cnt_ptr)
    else:
        c = tl.atomic_add(cnt_ptr, 0, sem="acquire", scope="gpu")
        while c < target:
            c = tl.atomic_add(cnt_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit(do_not_specialize=["T", "cps", "fn_blocks", "sinkhorn_iters"])
def _mhc_coop_kernel(
    res_ptr,  # PRE/POST_PRE: residual [T, 4, H]; BCAST: x [T, H]
    x_ptr,  # POST_PRE: layer output x [T, H]
    pin_ptr,  # POST_PRE: previous post fp32 [T, 4]
    cin_ptr,  # POST_PRE: previous comb fp32 [T, 4, 4]
    out_ptr,  # POST_PRE/BCAST: new residual [T, 4, H]
    fn_ptr,  # fp32 [24, fn_blocks * H]
    part_ptr,  # fp32 [N, T, 32] partials (split p = program p)
    cnt_ptr,  # int64 [1] epoch counter: a multiple of N between calls
    scale_ptr,
    base_ptr,
    y_ptr,
    post_ptr,
    comb_ptr,
    T,
    cps,  # pass-1 steps a program: BLOCK_Y / BLOCK_H
    fn_blocks,
    sinkhorn_iters,
    rms_eps,
    hc_eps,
    H: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SQ_MODE: tl.constexpr,
    FN_SPLIT: tl.constexpr,  # 0: fp32 fn (one launch, no split launch before it)
    BLOCK_Y: tl.constexpr,
    BLOCK_S: tl.constexpr,
    FAST: tl.constexpr,  # CoopConfig.fast: the Sinkhorn's approximate reciprocals
    POLL: tl.constexpr,  # 0: ld.acquire polls; 1: acquire atomics
    PHASE: tl.constexpr,  # 0: the whole call (waits); 1: pass 1 only; 2: the finish only (emulation)
):
    N: tl.constexpr = H // BLOCK_Y
    pid = tl.program_id(0)
    if PHASE != 2:
        _produce(res_ptr, x_ptr, pin_ptr, cin_ptr, out_ptr, fn_ptr, part_ptr, 0, pid, T, cps, fn_blocks,
                 H, MODE, BLOCK_T, BLOCK_H, SQ_MODE, FN_SPLIT)  # fmt: skip
    if PHASE == 0:
        tl.debug_barrier()  # every thread's partial (and new residual) stores before the one release add
        ticket = tl.atomic_add(cnt_ptr, 1, sem="release", scope="gpu")
    if PHASE != 1:
        row_ptr, stream_stride = _finish_src(res_ptr, out_ptr, 0, H, MODE)
        v = _wide_row(row_ptr, stream_stride, pid, BLOCK_Y, ".cg")  # in flight during the wait
        if PHASE == 0:
            _wait_epoch(cnt_ptr, (ticket // N + 1) * N, POLL)
        for t in range(T):
            if t > 0:  # (T <= 16 tokens: int32 offsets)
                row_t, stride_t = _finish_src(res_ptr, out_ptr, t, H, MODE)
                v = _wide_row(row_t, stride_t, pid, BLOCK_Y, ".cg")
            _wide_y(v, part_ptr, scale_ptr, base_ptr, y_ptr, post_ptr, comb_ptr, t, pid, T, N, sinkhorn_iters,
                    rms_eps, hc_eps, H, BLOCK_Y, BLOCK_S, ".cg", FAST)  # fmt: skip


def coop_tile(hidden: int, stream: StreamConfig, coop: CoopConfig) -> tuple[int, int]:
    """(BLOCK_Y, programs) of `coop` at `hidden` (BLOCK_Y clipped to divide hidden, at least one
    pass-1 step of the stream tile)."""
    block_y = max(min(coop.block_y, hidden & -hidden), stream.block_h)
    return block_y, hidden // block_y


def coop_constexprs(hidden: int, mode: int, stream: StreamConfig, coop: CoopConfig, phase: int) -> dict:
    block_y, _ = coop_tile(hidden, stream, coop)
    consts = {k: v for k, v in stream_constexprs(hidden, mode, stream).items() if k != "PDL"}  # one launch
    return consts | dict(
        FN_SPLIT=0, BLOCK_Y=block_y, BLOCK_S=coop.block_s, FAST=int(coop.fast), POLL=int(coop.poll == "atom"),
        PHASE=phase,
    )  # fmt: skip


def coop_phases(coop: CoopConfig) -> tuple[int, ...]:
    """The launches of one call: (0,) waits in one launch; (1, 2) emulates it (CPU interpreter, emulate)."""
    return (1, 2) if coop.emulate or _interpreting() else (0,)


def launch_coop(
    mode: int, hidden: int, stream: StreamConfig, coop: CoopConfig,
    res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, y, post, comb, *, T, **s,
):  # fmt: skip
    """The whole call over T <= BLOCK_T tokens in one launch (two when emulated; no norm weight);
    unused pointers take stand-ins. cnt: the plan's int64 "epoch" scratch."""
    block_y, n = coop_tile(hidden, stream, coop)
    args = (res, res if x is None else x, part if post_in is None else post_in, part if comb_in is None else comb_in)
    args += (res if out is None else out, fn, part, cnt, hc_scale, hc_base, y, post, comb)
    for phase in coop_phases(coop):
        _mhc_coop_kernel[(n,)](
            *args,
            T,
            block_y // stream.block_h,
            fn_blocks_of(fn, hidden, res),
            int(s["sinkhorn_iters"]),
            float(s["rms_eps"]),
            float(s["hc_eps"]),
            **coop_constexprs(hidden, mode, stream, coop, phase),
            num_warps=stream.num_warps,
            num_stages=stream.num_stages,
            **launch_options(),
        )


@kernel("norm.mhc", backend="triton")
def compile_coop(mode: str, dtype: str, hidden: int, stream: StreamConfig, coop: CoopConfig, device_index: int, arch):
    """The coop one-launch kernel for one form (pre, post_pre, bcast)."""
    block_y, n = coop_tile(hidden, stream, coop)
    if coop.max_tokens > stream.block_t or block_y % stream.block_h:
        raise ValueError(
            f"norm.mhc coop: max_tokens={coop.max_tokens} must be <= the small stream tile's block_t="
            f"{stream.block_t} and block_y={block_y} a multiple of its block_h={stream.block_h}"
        )
    sms = torch.cuda.get_device_properties(device_index).multi_processor_count
    if n > sms and not coop.emulate:
        raise ValueError(
            f"norm.mhc coop: {n} programs (hidden {hidden} / block_y {block_y}) must all be resident at once, "
            f"but the device has {sms} SMs: raise CoopConfig.block_y"
        )
    fakes = _one_launch_fakes(dtype, "float32")
    args = fakes[:7] + (_fake(torch.int64),) + fakes[8:10] + fakes[11:] + (1, 1, 4, 1, 1e-6, 1e-6)  # no norm weight
    with torch.cuda.device(device_index):
        for phase in coop_phases(coop):
            _mhc_coop_kernel.warmup(
                *args,
                **coop_constexprs(hidden, MODES[mode], stream, coop, phase),
                num_warps=stream.num_warps,
                num_stages=stream.num_stages,
                grid=(1,),
                **launch_options(),
            )
    return functools.partial(launch_coop, MODES[mode], hidden, stream, coop)
