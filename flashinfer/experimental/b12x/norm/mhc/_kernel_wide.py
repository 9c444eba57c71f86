"""The "wide" pass 2 of norm.mhc for a few tokens: y spread over many programs, scalar Sinkhorn.

At T = 1 the row pass 2 (`_kernel_row.py`) is one program: it loads the whole [4, H] row, sums
the split partials, runs 20 Sinkhorn rounds on a [4, 4] tile (every row / column sum a cross-lane
or cross-warp reduction, ~40 of them in a dependent chain) and then writes all of y. Here the grid
is (T, H / BLOCK_Y): every program sums its token's partials itself ([BLOCK_S, 32] tiles, one
reduction over the splits: no exchange between programs), computes the 4 pre weights and writes
its BLOCK_Y columns of y from a [4, BLOCK_Y] tile whose load is issued first. Program (t, 0) also
writes post and comb: the 16 comb entries are scalars in every thread (extracted once from the
summed vector), so each Sinkhorn round is adds, 8 reciprocals and 32 multiplies with no reduction.

Critical path per token: one L2 round trip (partials, row slice and the hc_scale / hc_base scalars in
flight together), one [BLOCK_S, 32] reduction, 4 sigmoids, the y store; the weights program adds the
picks, exponentials and the Sinkhorn chain (84 instructions a round on sm_90a, one warp an SM
sub-partition: issue-bound). ncu (session 29, post_pre T = 1, H = 7168): that program was the pass's
critical path by ~4000 cycles while it also wrote y and loaded the scalars after its y store; with
WideConfig.apart it is one more program, (t, H / BLOCK_Y), that writes no y.

No norm weight: mean(y^2) needs all of y, which no single program holds here; the host runs the row
kernel instead when a norm weight is given (api._apply).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..._lib.compile import kernel
from ..._lib.triton_pdl import gdc_enter
from ._config import WideConfig
from ._kernel import _TL_DTYPES, _fake, launch_options, pass2_args, pdl_constexpr


@triton.jit
def _pick(v, c, j: tl.constexpr):
    """Element j of the summed partial vector v [32] as a scalar (in-warp reduction)."""
    return tl.sum(tl.where(c == j, v, 0.0), axis=0)


@triton.jit
def _softmax4(a, b, c, d, hc_eps):
    m = tl.maximum(tl.maximum(a, b), tl.maximum(c, d))
    ea = tl.exp(a - m)
    eb = tl.exp(b - m)
    ec = tl.exp(c - m)
    ed = tl.exp(d - m)
    inv = 1.0 / (ea + eb + ec + ed)
    return ea * inv + hc_eps, eb * inv + hc_eps, ec * inv + hc_eps, ed * inv + hc_eps


@triton.jit
def _scale4(a, b, c, d, s):
    return a * s, b * s, c * s, d * s


@triton.jit
def _normalize4(a, b, c, d, hc_eps, FAST: tl.constexpr):
    """(a, b, c, d) / (a + b + c + d + hc_eps). FAST: the sum as a tree and the reciprocal as
    rsqrt.approx squared (the sum is >= hc_eps > 0; ~2^-22 relative): a shorter dependent chain."""
    if FAST:
        r = tl.rsqrt((a + b) + (c + d) + hc_eps)
        return _scale4(a, b, c, d, r * r)
    return _scale4(a, b, c, d, 1.0 / (a + b + c + d + hc_eps))


@triton.jit
def _comb_row(z, c, i: tl.constexpr, hc_eps):
    """Row i of comb before the Sinkhorn: softmax over j of the logits z [32] (mixes scaled, plus
    hc_base) at entries 8 + 4 i + j."""
    k: tl.constexpr = 8 + 4 * i
    return _softmax4(_pick(z, c, k), _pick(z, c, k + 1), _pick(z, c, k + 2), _pick(z, c, k + 3), hc_eps)


@triton.jit
def _weight_params(scale_ptr, base_ptr, c):
    """(hc_scale[1], hc_scale[2], hc_base as a [32] vector over the mix columns c (zero past 23)): what
    post and comb read, loaded by the caller with its first loads. Issued after the y store (and after
    post's store, which may alias them) they were two dependent L2 round trips on the Sinkhorn
    program's chain."""
    return tl.load(scale_ptr + 1), tl.load(scale_ptr + 2), tl.load(base_ptr + c, mask=c < 24, other=0.0)


@triton.jit
def _post_comb(v, c, rs, s1, s2, b32, post_ptr, comb_ptr, tok, sinkhorn_iters, hc_eps, FAST: tl.constexpr):
    """post [4] and comb [4, 4] of one token from its summed mixes v [32] (scalars throughout);
    s1, s2, b32 from `_weight_params`. Each logit is the same fma as a scalar's (the pick is exact)."""
    i4 = tl.arange(0, 4)
    zp = v * rs * s1 + b32  # post logits at columns 4..7
    post = 2.0 * tl.sigmoid(tl.sum(tl.where(c[None, :] == i4[:, None] + 4, zp[None, :], 0.0), axis=1))
    tl.store(post_ptr + tok * 4 + i4, post)
    zc = v * (rs * s2) + b32  # comb[i, j] = entry 8 + 4 i + j (row i over j: the softmax axis)
    a00, a01, a02, a03 = _comb_row(zc, c, 0, hc_eps)
    a10, a11, a12, a13 = _comb_row(zc, c, 1, hc_eps)
    a20, a21, a22, a23 = _comb_row(zc, c, 2, hc_eps)
    a30, a31, a32, a33 = _comb_row(zc, c, 3, hc_eps)
    for _ in range(sinkhorn_iters):  # rows, then columns; reciprocals, then multiplies
        a00, a01, a02, a03 = _normalize4(a00, a01, a02, a03, hc_eps, FAST)
        a10, a11, a12, a13 = _normalize4(a10, a11, a12, a13, hc_eps, FAST)
        a20, a21, a22, a23 = _normalize4(a20, a21, a22, a23, hc_eps, FAST)
        a30, a31, a32, a33 = _normalize4(a30, a31, a32, a33, hc_eps, FAST)
        a00, a10, a20, a30 = _normalize4(a00, a10, a20, a30, hc_eps, FAST)
        a01, a11, a21, a31 = _normalize4(a01, a11, a21, a31, hc_eps, FAST)
        a02, a12, a22, a32 = _normalize4(a02, a12, a22, a32, hc_eps, FAST)
        a03, a13, a23, a33 = _normalize4(a03, a13, a23, a33, hc_eps, FAST)
    # one [16] store: entry k = 4 i + j
    k = tl.arange(0, 16)
    out = tl.where(k == 0, a00, tl.where(k == 1, a01, tl.where(k == 2, a02, tl.where(k == 3, a03, 0.0))))
    out = tl.where(k == 4, a10, tl.where(k == 5, a11, tl.where(k == 6, a12, tl.where(k == 7, a13, out))))
    out = tl.where(k == 8, a20, tl.where(k == 9, a21, tl.where(k == 10, a22, tl.where(k == 11, a23, out))))
    out = tl.where(k == 12, a30, tl.where(k == 13, a31, tl.where(k == 14, a32, tl.where(k == 15, a33, out))))
    tl.store(comb_ptr + tok * 16 + k, out)


@triton.jit
def _wide_finish(
    row,  # this token's row: residual + tok * tok_stride (broadcast form: x + tok * H)
    stream_stride,
    part_ptr,
    scale_ptr,
    base_ptr,
    y_ptr,
    post_ptr,
    comb_ptr,
    tok,
    pid_h,
    T,
    splits,
    sinkhorn_iters,
    rms_eps,
    hc_eps,
    H: tl.constexpr,
    BLOCK_Y: tl.constexpr,
    BLOCK_S: tl.constexpr,
    CACHE: tl.constexpr,  # "" in pass 2; ".cg" in the one-launch kernel (written by other SMs this launch)
    FAST: tl.constexpr,  # WideConfig.fast (_normalize4)
    APART: tl.constexpr,  # WideConfig.apart: post and comb in program pid_h == H // BLOCK_Y, which writes no y
):
    """Columns [pid_h * BLOCK_Y, +BLOCK_Y) of token tok's y; post and comb in the weights program
    (pid_h == 0, or with APART the extra program pid_h == H // BLOCK_Y, which writes no y)."""
    N_Y: tl.constexpr = H // BLOCK_Y
    W = N_Y if APART else 0  # the program that writes post and comb
    i4 = tl.arange(0, 4)
    h = (pid_h % N_Y) * BLOCK_Y + tl.arange(0, BLOCK_Y)
    # the row slice first: its latency overlaps the split sum
    v = tl.load(row + i4[:, None] * stream_stride + h[None, :], cache_modifier=CACHE).to(tl.float32)
    c = tl.arange(0, 32)
    s_pre = tl.load(scale_ptr)
    b_pre = tl.load(base_ptr + i4)
    s1, s2, b32 = _weight_params(scale_ptr, base_ptr, c)

    # The token's mixes: partials summed over the splits. Programs other than the weights program
    # need only columns 0..3 (pre) and 24 (the sum of squares).
    need = (c < 4) | (c == 24) | ((c * 0 + pid_h) == W)
    ss = tl.arange(0, BLOCK_S)
    acc = tl.zeros([BLOCK_S, 32], dtype=tl.float32)
    for s0 in range(0, splits, BLOCK_S):
        s = s0 + ss
        prow = part_ptr + (s.to(tl.int64) * T + tok) * 32
        m = (s < splits)[:, None] & need[None, :]
        acc += tl.load(prow[:, None] + c[None, :], mask=m, other=0.0, cache_modifier=CACHE)
    tot = tl.sum(acc, axis=0)  # [32]
    rs = 1.0 / tl.sqrt_rn(_pick(tot, c, 24) / (4 * H) + rms_eps)

    if pid_h < N_Y:
        pre = tl.sum(tl.where(c[None, :] == i4[:, None], tot[None, :], 0.0), axis=1)  # [4]
        pre = tl.sigmoid(pre * rs * s_pre + b_pre) + hc_eps
        y = tl.sum(pre[:, None] * v, axis=0)
        tl.store(y_ptr + tok * H + h, y.to(y_ptr.dtype.element_ty))
    if pid_h == W:
        _post_comb(tot, c, rs, s1, s2, b32, post_ptr, comb_ptr, tok, sinkhorn_iters, hc_eps, FAST)


@triton.jit(do_not_specialize=["T", "splits", "sinkhorn_iters", "tok_stride", "stream_stride"])
def _mhc_wide_kernel(
    src_ptr,  # residual [T, 4, H] (broadcast form: x [T, H], read with stream stride 0)
    part_ptr,  # fp32 [splits, T, 32] from pass 1 (columns 0..23 mixes, 24 sum of squares)
    scale_ptr,  # hc_scale fp32 [3]
    base_ptr,  # hc_base fp32 [24]
    y_ptr,  # y [T, H]
    post_ptr,  # post fp32 [T, 4]
    comb_ptr,  # comb fp32 [T, 4, 4]
    T,
    splits,
    sinkhorn_iters,
    tok_stride,  # 4H for a [T, 4, H] residual; H for the broadcast form's x [T, H]
    stream_stride,  # H; 0 for the broadcast form
    rms_eps,
    hc_eps,
    H: tl.constexpr,
    BLOCK_Y: tl.constexpr,  # columns of y per program (divides H)
    BLOCK_S: tl.constexpr,  # partial rows per step of the split sum
    PDL: tl.constexpr,  # programmatic dependent launch (WideConfig.pdl)
    FAST: tl.constexpr,  # WideConfig.fast (_normalize4)
    APART: tl.constexpr,  # WideConfig.apart (_wide_finish)
):
    gdc_enter(PDL)
    tok = tl.program_id(0).to(tl.int64)
    tok_stride = (tok_stride // 128).to(tl.int64) * 128  # multiples of 128: 16-byte vector loads
    stream_stride = (stream_stride // 128).to(tl.int64) * 128
    _wide_finish(src_ptr + tok * tok_stride, stream_stride, part_ptr, scale_ptr, base_ptr, y_ptr, post_ptr,
                 comb_ptr, tok, tl.program_id(1), T, splits, sinkhorn_iters, rms_eps, hc_eps, H, BLOCK_Y,
                 BLOCK_S, "", FAST, APART)  # fmt: skip


def wide_tile(hidden: int, config: WideConfig) -> tuple[int, int]:
    """(BLOCK_Y, BLOCK_S) of `config` at `hidden` (BLOCK_Y clipped to divide hidden)."""
    return min(config.block_y, hidden & -hidden), config.block_s


def wide_constexprs(hidden: int, config: WideConfig) -> dict:
    """The wide kernel's constexprs for `config` at `hidden`."""
    block_y, block_s = wide_tile(hidden, config)
    return dict(
        H=hidden, BLOCK_Y=block_y, BLOCK_S=block_s, PDL=pdl_constexpr(config.pdl), FAST=int(config.fast),
        APART=int(config.apart),
    )  # fmt: skip


def launch_wide(hidden: int, config: WideConfig, src, part, hc_scale, hc_base, y, post, comb, *, T, splits, **s):
    """The wide pass 2 over T tokens (no norm weight): grid (T, hidden / BLOCK_Y, plus one with apart)."""
    consts = wide_constexprs(hidden, config)
    _mhc_wide_kernel[(T, hidden // consts["BLOCK_Y"] + int(config.apart))](
        *pass2_args(hidden, src, part, hc_scale, hc_base, None, y, post, comb, T, splits, s, norm=False),
        **consts,
        num_warps=config.num_warps,
        **launch_options(config.pdl),
    )


@kernel("norm.mhc", backend="triton")
def compile_wide(dtype: str, hidden: int, config: WideConfig, device_index: int, arch: str):
    """The wide pass 2 (the broadcast form is a runtime stride)."""
    act, f32 = _TL_DTYPES[dtype], torch.float32
    args = (_fake(act), _fake(f32), _fake(f32), _fake(f32), _fake(act), _fake(f32), _fake(f32))
    args += (1, 1, 1, 4 * hidden, hidden, 1e-6, 1e-6)
    consts = wide_constexprs(hidden, config)
    with torch.cuda.device(device_index):
        _mhc_wide_kernel.warmup(*args, **consts, num_warps=config.num_warps, grid=(1, 1), **launch_options(config.pdl))
    return functools.partial(launch_wide, hidden, config)
