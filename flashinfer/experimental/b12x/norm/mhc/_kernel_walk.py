"""Pass 2 of norm.mhc as a persistent walk over (token, chunk) units ("walk" pass 2, `RowConfig.walk`).

Why: the row pass 2 (`_kernel_row.py`) runs one program per token, 5 an SM on sm_90a (41 KB of
pipeline stages each), so T tokens fill T / (5 x SMs) waves. Each program keeps a fixed number of
chunks in flight, so the stream rate follows the programs resident, and a short last wave runs the
SMs part full: at T = 1024 on 132 SMs, 1.55 waves keep 1024 / (2 x 660) = 78% of the slots busy on
average. Inside a pre call (H100, session 58) that cost less than the count says at H = 7168 (the walk's pass 2
-1.7% at T = 1024); at H = 4096, where the row kernel's two chunks a token never fill its pipeline, -9 to -18%.

Here the grid is `walk` programs an SM, all resident, and the T x ceil(H / BLOCK_H) units of one
token's [4 streams, BLOCK_H] slice are dealt out in contiguous runs (program p takes units
[p U / P, (p + 1) U / P)), so every program streams until within one unit of the end. Per program:

1. the weights of every token its run touches (a boundary token is computed by both neighbours, with
   the same code on the same inputs, so both write the same bits): the partials summed over the
   splits (`_kernel._split_sums`), pre / post / comb (`_kernel._tok_weights`, which stores post and
   comb), and pre parked in the pad columns 28..31 of the token's split-0 partial row (pass 1 writes
   zeros there and no reader of this call reads them: `pass2_args` readers take columns 0..24);
2. a barrier (this program's threads read the pre it stored), then the unit loop, software-pipelined
   STAGES deep: y[t, chunk] = sum_i pre_i residual_i[chunk], pre reloaded per unit (16 bytes, L1).

Step 1 runs with nothing in flight on any SM (all programs start together): ~13 tokens' Sinkhorn chains a program at
T = 8192, which is why sm_90a's default stops the walk at 4096 tokens (session 58). Taking each token's weights just
before its units instead (built and timed in session 58, f3dd3ea) ran 72-148% slower: 120 registers (4 programs an
SM) and a pipeline refilled every token. Keeping DRAM busy through step 1 instead, each program asking L2 for its
first units' lines before it (`prefetch.global.L2`, session 59, in dc370d9), changed nothing at T <= 4096 and did not
recover T = 8192 (pass 2 223 µs against 218 without it, H = 7168): removed.

No norm weight: y's mean square needs the whole row, which no program holds (the selection runs the
row pass 2 when a norm weight is given). Bytes per token as the row pass 2: the row (8H) once, y
(2H), the partials (splits x 128, read by one or two programs).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.triton_pdl import gdc_enter
from ._config import RowConfig
from ._kernel import _split_sums, _tok_weights, launch_options, pass2_args, pass2_fakes, pdl_constexpr
from ._kernel_row import _stream_tile, row_tile

PRE_PAD = 28  # the partial row's columns where step 1 parks a token's pre (4 floats)
WALK_TOKENS = 4  # tokens a step of the weights loop


@triton.jit(do_not_specialize=["T", "splits", "sinkhorn_iters", "tok_stride", "stream_stride", "has_norm"])
def _mhc_walk_kernel(
    src_ptr,  # residual [T, 4, H] (broadcast form: x [T, H], read with stream stride 0)
    part_ptr,  # fp32 [splits, T, 32] from pass 1; split 0's columns 28..31 take pre
    scale_ptr,  # hc_scale fp32 [3]
    base_ptr,  # hc_base fp32 [24]
    w_ptr,  # norm weight: not read (the walk runs without one)
    y_ptr,  # y [T, H]
    post_ptr,  # post fp32 [T, 4]
    comb_ptr,  # comb fp32 [T, 4, 4]
    T,
    splits,
    sinkhorn_iters,
    tok_stride,  # 4H for a [T, 4, H] residual; H for the broadcast form's x [T, H]
    stream_stride,  # H; 0 for the broadcast form
    has_norm,  # must be 0
    rms_eps,
    hc_eps,
    norm_eps,
    H: tl.constexpr,
    BLOCK_H: tl.constexpr,  # a unit's slice of the row
    BLOCK_S: tl.constexpr,  # partial rows per step of the split sum
    STAGES: tl.constexpr,  # the unit loop's pipeline depth
    TOKB: tl.constexpr,  # tokens per step of the weights loop
    PAD: tl.constexpr,  # PRE_PAD
    PDL: tl.constexpr,
):
    gdc_enter(PDL)
    NC: tl.constexpr = (H + BLOCK_H - 1) // BLOCK_H
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    units = T * NC
    u0 = pid * units // programs
    u1 = (pid + 1) * units // programs
    tok_stride = (tok_stride // 128).to(tl.int64) * 128  # multiples of 128: 16-byte vector loads
    stream_stride = (stream_stride // 128).to(tl.int64) * 128
    i4 = tl.arange(0, 4)
    if u1 > u0:
        # 1. The weights of the tokens the run touches; post and comb stored, pre parked in the pad.
        t_last = (u1 - 1) // NC
        c8 = tl.arange(0, 8)
        for t0 in range(u0 // NC, t_last + 1, TOKB):
            tok = (t0 + tl.arange(0, TOKB)).to(tl.int64)
            t_mask = tok <= t_last
            acc8, l_0, l_1, l_2, l_3, ssq = _split_sums(part_ptr, T, splits, tok, t_mask, BLOCK_S, "", True)
            rs = 1.0 / tl.sqrt_rn(tl.sum(ssq, axis=1) / (4 * H) + rms_eps)
            pp = _tok_weights(acc8, l_0, l_1, l_2, l_3, rs, scale_ptr, base_ptr, post_ptr, comb_ptr, tok, t_mask,
                              sinkhorn_iters, hc_eps)  # fmt: skip
            pad = part_ptr + tok[:, None] * 32 + PAD + c8[None, :]
            tl.store(pad, pp, mask=(c8 < 4)[None, :] & t_mask[:, None])
        tl.debug_barrier()  # the unit loop's threads read what the others parked

        # 2. The units: y over one [4, BLOCK_H] slice each.
        hh = tl.arange(0, BLOCK_H)
        for u in tl.range(u0, u1, num_stages=STAGES):
            t = u // NC
            tok = t.to(tl.int64)
            h = (u - t * NC) * BLOCK_H + hh
            v = _stream_tile(src_ptr + tok * tok_stride, i4, h, stream_stride, H)
            pre = tl.load(part_ptr + tok * 32 + PAD + i4)
            y = tl.sum(pre[:, None] * v, axis=0)
            tl.store(y_ptr + tok * H + h, y.to(y_ptr.dtype.element_ty), mask=h < H)


def walk_constexprs(hidden: int, config: RowConfig) -> dict:
    """The walk kernel's constexprs for `config` at `hidden`."""
    block_h, block_s = row_tile(hidden, config)
    return dict(H=hidden, BLOCK_H=block_h, BLOCK_S=block_s, STAGES=config.stages, TOKB=WALK_TOKENS, PAD=PRE_PAD,
                PDL=pdl_constexpr(config.pdl, config.pdl_at_exit))  # fmt: skip


def launch_walk(hidden: int, config: RowConfig, src, part, hc_scale, hc_base, weight, y, post, comb, *, T, splits,
                programs, **s):  # fmt: skip
    """Pass 2 over T tokens on `programs` programs (the caller's config.walk x SMs); the arguments of the row launch,
    no norm weight."""
    if weight is not None:
        raise ValueError("norm.mhc: the walk pass 2 takes no norm weight (the selection runs the row pass 2 then)")
    _mhc_walk_kernel[(max(1, min(programs, T * triton.cdiv(hidden, row_tile(hidden, config)[0]))),)](
        *pass2_args(hidden, src, part, hc_scale, hc_base, weight, y, post, comb, T, splits, s),
        **walk_constexprs(hidden, config),
        num_warps=config.num_warps,
        **launch_options(config.pdl),
    )


@kernel("norm.mhc", backend="triton")
def compile_walk(dtype: str, hidden: int, config: RowConfig, device_index: int, arch: str):
    """The walk pass 2 (no norm weight; the broadcast form is a runtime stride); its launch takes the program count."""
    with torch.cuda.device(device_index):
        _mhc_walk_kernel.warmup(
            *pass2_fakes(dtype, hidden, "float32"),
            **walk_constexprs(hidden, config),
            num_warps=config.num_warps,
            grid=(1,),
            **launch_options(config.pdl),
        )
    return functools.partial(launch_walk, hidden, config)
