"""The comparison encodes of the NVFP4 quantizer ("div", "mul", "search"), the bit-level E4M3 scale
rounding the division-free encodes use, and the swizzled scale store every tile ends with: E2M1 codes
of a [rows, blocks, E] tile under block scales [rows, blocks]. The kernel (`_kernel.py`) picks one by `NvFp4Config.encode`; "steps" is in
`_steps.py`. Each function's docstring carries its exactness argument; `test_e2m1_division_free.py`
mirrors them in torch and checks them exhaustively against the oracle.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..._lib.triton_quant import pack_bytes4, swizzled_scale_offsets


@triton.jit
def _e2m1_codes_div(xb, gs, sf):
    """E2M1 codes of div_rn(x * gs, sf) [rows, blocks, 16] (ties to the even code, NaN -> +0,
    +-Inf -> +-6); all 0 where sf == 0 (the block underflowed)."""
    sf3 = sf[:, :, None]
    y = tl.math.div_rn(xb * gs, sf3)
    a = tl.abs(y)
    code = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
    code += (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32)
    code = tl.where((y < 0) & (code != 0), code | 8, code)
    return tl.where(sf3 == 0, 0, code)


@triton.jit
def _e2m1_codes_mul(xb, gs, sf):
    """The codes of `_e2m1_codes_div`, bit for bit, without a division.

    With p = fl(x * gs) (the oracle's product, kept) and q = p / sf exact, the oracle encodes
    y = RN(q) by comparing y against the midpoints m in {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}
    (`y > m` where the tie goes down to the even code, `y >= m` where it goes up). Claim: for every
    fp32 p and every E4M3 scale sf > 0,  RN(p / sf) > m  <=>  p > m * sf,  and the same for >=, <,
    ==; so the codes count |p| against the exact products m * sf with the same > / >= pattern.

    Proof. mid = m * sf is exact in fp32: m has <= 3 significant bits, sf <= 4 (E4M3, subnormals
    included), and mid lies in [2^-11, 2240]. Write m = Mm 2^a, sf = Ms 2^b (Mm, Ms in [1, 2)), so
    ulp(m) = 2^(a-23). m's last mantissa bit is 0, so both halfway points round to m: RN(q) == m
    exactly when -g/2 <= q - m <= ulp(m)/2, g the gap below m (ulp(m), or ulp(m)/2 when m is a
    power of two). Times sf: p - mid lies within [-sf g/2, sf ulp(m)/2], and sf ulp(m)/2 =
    Ms 2^(a+b-24) < 2^(a+b-23) <= ulp(mid) (ulp(mid) is 2^(a+b-23) if Mm Ms < 2, else 2^(a+b-22)).
    Below mid the fp32 gap is ulp(mid)/2 only when mid is a power of two, which needs Mm = Ms = 1
    (odd mantissa integers multiplying to 1); then m is a power of two too and sf g/2 =
    2^(a+b-25) < 2^(a+b-24) = that gap. So no fp32 p other than mid rounds to m: RN(q) == m <=>
    p == mid, and RN being monotone, RN(q) > m <=> p > mid and RN(q) < m <=> p < mid.
    NaN p fails every comparison (code 0, as NaN y does); p = +-Inf passes all (7, as Inf y does);
    q overflowing to Inf has p > 5 * sf, code 7. sign(y) == sign(p) whenever the code is non-zero.
    sf == 0: the thresholds become NaN, every comparison fails, the block's codes are 0.
    `test_e2m1_division_free_is_exact` checks this on every bf16 and fp16 x, every E4M3 scale and
    the fp32 neighbourhoods of every m * sf.
    """
    nan = tl.full(sf.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    s = tl.where(sf == 0, nan, sf)[:, :, None]
    p = xb * gs
    a = tl.abs(p)
    # The thresholds increase, so passing one means passing every lower one: the code is the index
    # of the last one passed (one select per threshold, no sums).
    code = tl.where(a > 0.25 * s, 1, 0)
    code = tl.where(a >= 0.75 * s, 2, code)
    code = tl.where(a > 1.25 * s, 3, code)
    code = tl.where(a >= 1.75 * s, 4, code)
    code = tl.where(a > 2.5 * s, 5, code)
    code = tl.where(a >= 3.5 * s, 6, code)
    code = tl.where(a > 5.0 * s, 7, code)
    # Negative with a non-zero code is p < -0.25 * s (the first threshold, negated exactly).
    return tl.where(p < -0.25 * s, code | 8, code)


@triton.jit
def _e4m3_rn(t):
    """(byte, value) of the E4M3 scale of t (fp32 in [0, 448], never NaN: the kernel's clamped
    gs * amax / 6), both int32/fp32 tensors of t's shape, with integer ops and exact fp32 ops only:
    the same RNE result as `t.to(tl.float8e4nv)` (hardware `cvt.rn.satfinite.e4m3x2.f32`), with no
    fp8 instruction in the kernel at all.

    - t >= 2^-6 (E4M3 normal): round the fp32 mantissa to 3 bits, ties to even, on the bits
      (`bits + 0x7FFFF + lsb`, then drop 20 bits; a carry moves into the exponent as it should, and
      448 is the largest t, so no overflow). byte = the rounded bits >> 20 minus the exponent
      re-bias (127 - 7) << 3; value = the rounded bits, a normal fp32.
    - t < 2^-6 (E4M3 subnormal, multiples of 2^-9): t + 2^14 rounds t to a multiple of 2^-9 (the
      ulp of 2^14), ties to even, in one IEEE add; its mantissa is then the count k (0..8; 8 is
      2^-6, the byte of the smallest normal, as E4M3 encodes it); value = k * 2^-9 (exact).
      A subnormal fp32 t flushed to zero would still give k = 0, its right code.

    Why not `t.to(tl.float8e4nv)`: with Triton 3.6 (ptxas of CUDA 12.8) the packed 16-bit result
    of `cvt.rn.satfinite.e4m3x2.f32` (SASS `F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C`) was read
    before it was written in 16x256x4-like "mul"/"search" tiles (16x256x4 "mul": the threshold
    decode reads R26, which holds the constant 6.0 of the div_rn fast path, so sf == 0, NaN
    thresholds, all codes 0), and stored from a register holding something else in 64x512x8
    "halves" (wrong scale bytes at columns 28-31 of a tile): the 05:55 H200 failures. The PTX is
    right; the pack is what ptxas mishandles, so the division-free encodes never emit it.
    `test_e2m1_division_free.test_e4m3_rounding_by_bits_is_exact` checks this rounding against
    torch's fp32 -> float8_e4m3fn on every fp32 around every E4M3 value and midpoint.
    """
    bits = t.to(tl.int32, bitcast=True)
    r = (bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20  # 8 exponent + 3 mantissa bits, rounded
    big = t + 16384.0  # in [2^14, 2^14 + 2^-6]: ulp 2^-9
    k = big.to(tl.int32, bitcast=True) - 0x46800000  # 0x46800000: the bits of 2^14
    normal = bits >= 0x3C800000  # 2^-6
    byte = tl.where(normal, r - 960, k)
    value = tl.where(normal, (r << 20).to(tl.float32, bitcast=True), k.to(tl.float32) * 0.001953125)
    return byte, value


@triton.jit
def _below(t):
    """The fp32 just below each positive t (NaN stays NaN): for a not NaN, a >= t <=> a > _below(t)."""
    return (t.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_codes_search(xb, gs, sf):
    """`_e2m1_codes_mul` (same thresholds, same bits) by binary search: with u_j the thresholds made
    strict (u_j = _below(m_j * sf) where a tie rounds up; all are normal positive fp32, or NaN when
    sf == 0), the code counts the u_j below |p|; as u_0 < ... < u_6, three comparisons find it."""
    nan = tl.full(sf.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    s = tl.where(sf == 0, nan, sf)
    u0 = (0.25 * s)[:, :, None]
    u1 = _below(0.75 * s)[:, :, None]
    u2 = (1.25 * s)[:, :, None]
    u3 = _below(1.75 * s)[:, :, None]
    u4 = (2.5 * s)[:, :, None]
    u5 = _below(3.5 * s)[:, :, None]
    u6 = (5.0 * s)[:, :, None]
    p = xb * gs
    a = tl.abs(p)
    b2 = a > u3  # count >= 4
    b1 = a > tl.where(b2, u5, u1)  # count >= 6, or >= 2
    b0 = a > tl.where(b2, tl.where(b1, u6, u4), tl.where(b1, u2, u0))
    code = tl.where(b2, 4, 0) | tl.where(b1, 2, 0) | tl.where(b0, 1, 0)
    return tl.where(p < -u0, code | 8, code)


@triton.jit
def _store_scales(
    scales_ptr,
    rows64,
    pid_k,
    sbits,
    NB: tl.constexpr,
    TILE_NB: tl.constexpr,
    WORDS: tl.constexpr,
    CS: tl.constexpr = False,
):
    """Scale bytes sbits (int32 0..255, [rows, TILE_NB]) at their swizzled offsets; padding columns
    (K/16 <= c < ceil4(K/16)) included (they hold 0), columns past them masked. CS: streaming stores
    (`st.global.cs`, `NvFp4Config.stream`)."""
    NB_PAD: tl.constexpr = (NB + 3) // 4 * 4
    if WORDS:
        gcols = pid_k * TILE_NB + tl.arange(0, TILE_NB // 4) * 4  # first column of each 4-group
        offs = swizzled_scale_offsets(rows64, gcols, NB) // 4
        mask = (gcols < NB_PAD)[None, :] & (rows64 >= 0)[:, None]
        if CS:
            tl.store(
                scales_ptr.to(tl.pointer_type(tl.int32)) + offs, pack_bytes4(sbits), mask=mask, cache_modifier=".cs"
            )
        else:
            tl.store(scales_ptr.to(tl.pointer_type(tl.int32)) + offs, pack_bytes4(sbits), mask=mask)
    else:
        scols = pid_k * TILE_NB + tl.arange(0, TILE_NB)
        mask = (scols < NB_PAD)[None, :] & (rows64 >= 0)[:, None]
        if CS:
            tl.store(
                scales_ptr + swizzled_scale_offsets(rows64, scols, NB),
                sbits.to(tl.uint8),
                mask=mask,
                cache_modifier=".cs",
            )
        else:
            tl.store(scales_ptr + swizzled_scale_offsets(rows64, scols, NB), sbits.to(tl.uint8), mask=mask)
