"""norm.mhc in ONE launch at any T ("fused" path): split-K programs, the last of each token block
finishes it.

Grid: one program per (token block of BLOCK_T tokens, split of the hidden dimension), numbered
block-major (program id = block * splits + split) so that the programs of one token block start
side by side. Each program does pass 1's work (`_kernel._pass1_tile`: pre reads its slice of the
residual; post_pre first forms and stores the new residual of its slice; bcast writes x's 4-stream
repeat) and stores its partial mixes and sum of squares (column 24) in the workspace [splits, T,
32]. Then it takes a ticket from its token block's counter (a CTA barrier, then an atomic add,
acq_rel at GPU scope: every thread's partial stores are ordered before it). The program that draws
ticket splits - 1 finishes the block: it sums the partials (loads bypass L1: `.cg`), resets the
counter to 0 for the next launch or graph replay, computes pre / post / comb (`_kernel._tok_weights`)
and y (`_kernel._write_y`) from the block's rows, which its sibling programs have just read (pre) or
written (post_pre), so they come from L2. No program waits for another: no co-residency requirement,
no deadlock, and the interpreter (programs run one after another) runs the same code.

Bytes per token: the residual once from HBM (8H; post_pre also x 2H and the new residual 8H out), y
(2H), the partials (splits x 128, L2), the row again from L2 (8H). fn (96H bytes) is read from L2
once per token block (BLOCK_T tokens): 1.5 x the residual bytes at BLOCK_T = 32.

The sum of squares can ride the tensor cores (FusedConfig.sq = "gram": the diagonal of a @ a^T,
BLOCK_T more dot columns per step against the mixes' 64, exact for bf16/fp16 products in fp32) or
stay elementwise ("lazy": one reduction after the loop; "step": one per step).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ._config import FusedConfig
from ._kernel import (
    MODES,
    _one_launch_fakes,
    _pass1_tile,
    _split_sums,
    _tok_weights,
    _write_y,
    fn_blocks_of,
    launch_options,
    one_launch_args,
    stream_constexprs,
)


@triton.jit(do_not_specialize=["T", "splits", "cps", "fn_blocks", "sinkhorn_iters", "has_norm"])
def _mhc_fused_kernel(
    res_ptr,  # PRE/POST_PRE: residual [T, 4, H]; BCAST: x [T, H]
    x_ptr,  # POST_PRE: layer output x [T, H]
    pin_ptr,  # POST_PRE: previous post fp32 [T, 4]
    cin_ptr,  # POST_PRE: previous comb fp32 [T, 4, 4]
    out_ptr,  # POST_PRE/BCAST: new residual [T, 4, H]
    fn_ptr,  # fp32 [24, fn_blocks * H]
    part_ptr,  # fp32 [splits, T, 32] workspace
    cnt_ptr,  # int32 [>= token blocks] ticket counters, 0 between calls
    scale_ptr,  # hc_scale fp32 [3]
    base_ptr,  # hc_base fp32 [24]
    w_ptr,  # norm weight [H] (read only when has_norm)
    y_ptr,  # y [T, H]
    post_ptr,  # post fp32 [T, 4]
    comb_ptr,  # comb fp32 [T, 4, 4]
    T,
    splits,
    cps,  # steps of BLOCK_H per split
    fn_blocks,  # BCAST: 4 ([24, 4H] fn) or 1 (fn folded to [24, H]); else 4
    sinkhorn_iters,
    has_norm,
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    MODE: tl.constexpr,  # 0 pre, 2 post_pre, 3 bcast (_kernel.MODES)
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    SQ_MODE: tl.constexpr,  # _kernel.stream_constexprs
    FN_SPLIT: tl.constexpr,  # _kernel.stream_constexprs (pre: 1, 2 read the split_fn launch's output)
    FINISH_H: tl.constexpr,  # chunk of a row in the finisher's y loops
    PREFETCH: tl.constexpr,  # the y loops keep the next chunk's loads in flight (_kernel._y_walk)
    BLOCK_S: tl.constexpr,  # partial rows per step of the finisher's split sum
):
    N_STEPS: tl.constexpr = H // BLOCK_H
    pid = tl.program_id(0)
    blk = pid // splits
    pid_s = pid - blk * splits
    row = blk.to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)  # T * 4H can pass 2^31
    t_mask = row < T
    c_begin = pid_s * cps
    c_end = tl.minimum(c_begin + cps, N_STEPS)

    # Phase A: this split's share of the mixes and of sum(flat^2) (column 24), to the workspace.
    acc = _pass1_tile(
        res_ptr, x_ptr, pin_ptr, cin_ptr, out_ptr, fn_ptr, row, t_mask, c_begin, c_end, fn_blocks,
        H, MODE, BLOCK_T, BLOCK_H, SQ_MODE, FN_SPLIT,
    )  # fmt: skip
    m32 = tl.arange(0, 32)
    tl.store(part_ptr + (pid_s.to(tl.int64) * T + row[:, None]) * 32 + m32[None, :], acc, mask=t_mask[:, None])

    # Ticket: every thread's stores are ordered before it (barrier, then a release at GPU scope).
    tl.debug_barrier()
    ticket = tl.atomic_add(cnt_ptr + blk, 1, sem="acq_rel", scope="gpu")
    if ticket == splits - 1:
        # Phase B (the block's last program): partials summed over the splits, L1 bypassed.
        acc8, l_0, l_1, l_2, l_3, ssq = _split_sums(part_ptr, T, splits, row, t_mask, BLOCK_S, ".cg", True)
        tl.atomic_xchg(cnt_ptr + blk, 0)  # every ticket of this block is drawn: ready for the next call
        rs = 1.0 / tl.sqrt_rn(tl.sum(ssq, axis=1) / (4 * H) + rms_eps)

        # Phase C: pre / post / comb, then y from the rows in L2 (bcast: x, stream stride 0).
        pp = _tok_weights(acc8, l_0, l_1, l_2, l_3, rs, scale_ptr, base_ptr, post_ptr, comb_ptr, row, t_mask,
                          sinkhorn_iters, hc_eps)  # fmt: skip
        if MODE == 0:
            _write_y(res_ptr, row, t_mask, 4 * H, H, pp, has_norm, norm_eps, w_ptr, y_ptr,
                     H, FINISH_H, 1, ".cg", PREFETCH)  # fmt: skip
        elif MODE == 2:
            _write_y(out_ptr, row, t_mask, 4 * H, H, pp, has_norm, norm_eps, w_ptr, y_ptr,
                     H, FINISH_H, 1, ".cg", PREFETCH)  # fmt: skip
        else:
            _write_y(res_ptr, row, t_mask, H, 0, pp, has_norm, norm_eps, w_ptr, y_ptr,
                     H, FINISH_H, 1, ".cg", PREFETCH)  # fmt: skip


def fused_constexprs(hidden: int, mode: int, config: FusedConfig) -> dict:
    """The one-launch kernel's constexprs for one form at `hidden`."""
    return dict(
        stream_constexprs(hidden, mode, config),
        FINISH_H=min(config.finish_h, hidden & -hidden),
        PREFETCH=config.prefetch,
        BLOCK_S=config.block_s,
    )


def launch_fused(
    mode: int, hidden: int, config: FusedConfig,
    res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, w, y, post, comb, *, T, splits, cps, **s,
):  # fmt: skip
    """The whole call (pass 1 + finish) over T tokens in one launch; unused pointers take stand-ins."""
    _mhc_fused_kernel[(triton.cdiv(T, config.block_t) * splits,)](
        *one_launch_args(res, x, post_in, comb_in, out, fn, part, cnt, hc_scale, hc_base, w, y, post, comb),
        T,
        splits,
        cps,
        fn_blocks_of(fn, hidden, res),
        int(s["sinkhorn_iters"]),
        int(w is not None),
        float(s["rms_eps"]),
        float(s["hc_eps"]),
        float(s["norm_eps"]),
        **fused_constexprs(hidden, mode, config),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **launch_options(),
    )


@kernel("norm.mhc", backend="triton")
def compile_fused(
    mode: str, dtype: str, hidden: int, weight_dtype: str, config: FusedConfig, device_index: int, arch: str
):
    """The one-launch kernel for one form (pre, post_pre, bcast) and norm weight dtype."""
    args = _one_launch_fakes(dtype, weight_dtype) + (1, 1, 1, 4, 1, 1, 1e-6, 1e-6, 1e-6)
    if fused_constexprs(hidden, MODES[mode], config)["FN_SPLIT"]:  # fn: the split_fn launch's output
        args = args[:5] + (args[0],) + args[6:]
    with torch.cuda.device(device_index):
        _mhc_fused_kernel.warmup(
            *args,
            **fused_constexprs(hidden, MODES[mode], config),
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            grid=(1,),
            **launch_options(),
        )
    return functools.partial(launch_fused, MODES[mode], hidden, config)
