"""The "pairs" E2M1 encode of the NVFP4 quantizer (bf16 input): the codes of `_encodes._e2m1_codes_mul`,
bit for bit, decided on the raw bf16 pairs, two values per instruction.

Why. "steps" (`_steps.py`) spends ~15 instructions per value on the encode (1 FMUL for |x * gs|,
7 saturating FFMAs, 3 IADD3 + 1 IMAD for the count, 2 for the sign, ~1 to pack): at 21.8 SASS
instructions per value in all it issues ~5.9 values per SM cycle at best, and the H200 ran it at
62.6% of the copy ceiling (16384 x 7168). The thresholds can move into the input's own domain
instead, where bf16x2 instructions decide two values at once.

How. p = fl(x * gs) is monotone in x, so for every strict threshold u of `_encodes._e2m1_codes_search`
(u_j = m_j * sf, or the fp32 just below it where a tie rounds up) there is one bf16 value

    T(u) = the largest finite bf16 X >= 0 with fl(X * gs) <= u,     and   [|p| > u] == [|x| > T(u)]

for every bf16 x (NaN compares false on both sides; |x| = Inf exceeds every finite T, as |p| = Inf
exceeds every u). Per block, each T comes from c = RD(u * RD(1/gs)) <= u / gs <= T's real bound B
(directed roundings: `mul.rm`, and a float64 check for 1/gs): X = c truncated to bf16 is <= B, and B - c < one bf16 ulp
(c is within 2^-22 of u / gs relatively, or 2^-149 absolutely when subnormal; B within 2^-24 of
it), so T is X or the next bf16, the one with fl(next * gs) <= u. One FMUL and one compare decide
which. RD never overflows to Inf (it saturates at the largest fp32, whose truncation is the largest
bf16: an |x| = Inf still counts). When 1/gs would overflow (gs < 2^-64 here), u and gs are scaled by
2^64 first (exact; fl(next * gs) is a normal number near u there, so the scaled check rounds the
same). sf == 0 makes u NaN, T a NaN bf16: every comparison fails, the block's codes are 0.
Per pair of values (one 32-bit word w of two bf16): |w| = w & 0x7FFF7FFF, then seven
`set.gt.u32.bf16x2` (a 0xFFFF mask per true half) and one `set.lt.u32.bf16x2` on w against -T(u_0)
(the sign, weighted 8), summed as 32-bit integers and fixed up by one multiply (`pair_codes`), so
each half ends as its code; two `prmt` and a shift-or per 8 values pack the low nibbles. The block
amax is a `max.bf16x2` tree on the |w| (NaN-ignoring, as `block_amax_maxnum`).
Per value: ~7 instructions of encode (session 6's bf16 sums ~8.5; "steps" ~15); per block: ~45 for
the seven T (vs ~12): four computed, three doubled (`pair_thresholds`), or ~19 by the lane table.

`test_nvfp4_pairs.py` mirrors the rule in torch and checks it exhaustively (every bf16 x against
every E4M3 scale under 30+ global scales from 1e-45 to 3e38, and T against a brute-force search);
under TRITON_INTERPRET (no inline asm there) the kernel runs the same rule in plain Triton
(`ASM` False: float64 for the directed roundings, integer compares on the 15-bit magnitudes).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..._lib.triton_quant import div_ptx, div_rn_by

DIV6 = tl.constexpr(div_ptx(6.0))  # `block_t`'s division-free gs * amax / 6


@triton.jit
def _rd_mul(a, b, ASM: tl.constexpr):
    """RD(a * b) for a, b >= 0 (fp32; NaN stays NaN, overflow gives the largest fp32)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "mul.rm.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        p = a.to(tl.float64) * b.to(tl.float64)  # exact: 24 x 24 bits
        c = p.to(tl.float32)
        down = (c.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)  # c > 0 here
        return tl.where(c.to(tl.float64) > p, down, c)


@triton.jit
def _rd_recip(a):
    """RD(1 / a) for a finite fp32 scalar a > 0 (the largest fp32 when 1/a overflows), once per program:
    RN(1/a) in float64 rounded to fp32 is RD or RU of 1/a, and the exact float64 product says which."""
    q = (1.0 / a.to(tl.float64)).to(tl.float32)
    down = (q.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)  # Inf -> the largest fp32
    return tl.where(q.to(tl.float64) * a.to(tl.float64) > 1.0, down, q)


@triton.jit
def pairs_prologue(gs, ASM: tl.constexpr):
    """(scale, rg, gs_k) once per program: scale = 2^64 when gs < 2^-64 else 1, rg = RD(1/(gs * scale)),
    gs_k = gs * scale (exact)."""
    scale = tl.where(gs < 5.421010862427522e-20, 18446744073709551616.0, 1.0)  # 2^-64, 2^64
    gs_k = gs * scale
    return scale, _rd_recip(gs_k), gs_k


@triton.jit
def _dup(t, ASM: tl.constexpr):
    """The top half of t (a bf16; the low half is ignored) in both halves."""
    if ASM:
        return tl.inline_asm_elementwise(
            "prmt.b32 $0, $1, $1, 0x3232;", "=r,r", [t], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        return (t & -65536) | ((t >> 16) & 0xFFFF)


@triton.jit
def _x_threshold(s, m: tl.constexpr, TIE_UP: tl.constexpr, scale, rg, gs_k, ASM: tl.constexpr):
    """T(u) for u = m * s (made strict where the tie rounds up) in the top half of an int32 [rows, blocks]."""
    u = s * (m * scale)  # exact: m has <= 3 significant bits, s <= 448, scale a power of two
    if TIE_UP:
        u = (u.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)
    x = _rd_mul(u, rg, ASM).to(tl.int32, bitcast=True) & -65536  # truncated to bf16: <= B
    nxt = x + 65536
    return tl.where(nxt.to(tl.float32, bitcast=True) * gs_k <= u, nxt, x)


@triton.jit
def _doubled(t, times: tl.constexpr, ASM: tl.constexpr):
    """T(times * u) = times * T(u) (times a power of two): exact while the T are normal bf16 (X = 2Y
    and fl(2Y gs) = 2 fl(Y gs) near u); RD saturates an overflow at the largest fp32, whose top half
    is the largest bf16."""
    return _rd_mul(t.to(tl.float32, bitcast=True), tl.full(t.shape, times, tl.float32), ASM).to(tl.int32, bitcast=True)


@triton.jit
def pair_thresholds(sf, scale, rg, gs_k, ASM: tl.constexpr, ROWS: tl.constexpr = False):
    """The seven T(u_j) of the block scales sf [rows, blocks] (fp32 E4M3 values) as bf16 pairs, and
    -T(u_0) as a pair (the sign test). NaN pairs where sf == 0. scale, rg, gs_k: `pairs_prologue`'s
    scalars, or with ROWS one per row ([rows, 1]: moe's gather, whose rows have their experts' scales).

    The midpoints 2.5, 3.5, 5 are 2, 2, 4 times 1.25, 1.75, 1.25 (and below(2t) = 2 below(t)), so
    while every T is a normal bf16 (gs <= 2^100: T ~ u / gs >= 2^-111) their T are the doubled
    ones (2 instructions instead of ~9); above that (bf16-subnormal thresholds, where X = 2Y fails for
    odd multiples of the smallest subnormal) all seven are computed. A uniform branch per program."""
    nan = tl.full(sf.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    s = tl.where(sf == 0, nan, sf)
    t0 = _x_threshold(s, 0.25, False, scale, rg, gs_k, ASM)
    t1 = _x_threshold(s, 0.75, True, scale, rg, gs_k, ASM)
    t2 = _x_threshold(s, 1.25, False, scale, rg, gs_k, ASM)
    t3 = _x_threshold(s, 1.75, True, scale, rg, gs_k, ASM)
    if ROWS:
        doubled = tl.max(tl.ravel(gs_k), axis=0) <= 1.2676506002282294e30  # every row's: still uniform
    else:
        doubled = gs_k <= 1.2676506002282294e30  # 2^100 (gs_k differs from gs only below 2^-64)
    if doubled:
        t4 = _doubled(t2, 2.0, ASM)
        t5 = _doubled(t3, 2.0, ASM)
        t6 = _doubled(t2, 4.0, ASM)
    else:
        t4 = _x_threshold(s, 2.5, False, scale, rg, gs_k, ASM)
        t5 = _x_threshold(s, 3.5, True, scale, rg, gs_k, ASM)
        t6 = _x_threshold(s, 5.0, False, scale, rg, gs_k, ASM)
    t0 = _dup(t0, ASM)
    t1, t2, t3 = _dup(t1, ASM), _dup(t2, ASM), _dup(t3, ASM)
    t4, t5, t6 = _dup(t4, ASM), _dup(t5, ASM), _dup(t6, ASM)
    return t0, t1, t2, t3, t4, t5, t6, t0 | -2147450880  # 0x80008000: both halves negated


@triton.jit
def _half_gt(a, t):
    """Mirror of `set.gt.u32.bf16x2` on non-negative bf16 pairs: all ones (0xFFFF) in each half where
    a > t, 0 where not or where either is NaN (magnitudes above 0x7F80)."""
    al, tl_ = a & 0x7FFF, t & 0x7FFF
    ah, th = (a >> 16) & 0x7FFF, (t >> 16) & 0x7FFF
    lo = tl.where((al > tl_) & (al <= 0x7F80) & (tl_ <= 0x7F80), 0xFFFF, 0)
    hi = tl.where((ah > th) & (ah <= 0x7F80) & (th <= 0x7F80), -65536, 0)  # 0xFFFF0000
    return lo | hi


@triton.jit
def _neg_mask(w, a, nt0):
    """Mirror of `set.lt.u32.bf16x2(w, nt0)`: all ones per half where the signed bf16 of w is below
    -T(u_0) (nt0 = -T(u_0) in both halves)."""
    sign = tl.where((w & 0x8000) != 0, 0xFFFF, 0) | tl.where(w < 0, -65536, 0)  # where negative
    return _half_gt(a, nt0 & 0x7FFF7FFF) & sign


@triton.jit
def pair_codes(w, th, ASM: tl.constexpr):
    """[rows, blocks, n] bf16-pair words -> the same words holding the code per half (0..15: the E2M1
    count, + 8 for a negative x with a non-zero count). th = `pair_thresholds`, [rows, blocks].

    Each comparison is a mask word (0xFFFF per true half); their 32-bit sum, the sign mask weighted
    8, is S = c_lo * 0xFFFF + c_hi * 0xFFFF0000 (mod 2^32) for the halves' codes c_lo, c_hi <= 15,
    and S * -65537 = c_lo + c_hi * 2^16 (mod 2^32), as 0xFFFF * -65537 = 1 - 2^32 and 0xFFFF0000 *
    -65537 = 2^16 - 2^48. So a pair costs 8 `set`, 3 three-input adds and 2 IMAD (was 8 `set` + 8
    `fma.rn.bf16x2` summing 1.0 per half)."""
    t0, t1, t2, t3, t4, t5, t6, nt0 = th
    a = w & 0x7FFF7FFF
    t0, t1, t2, t3 = t0[:, :, None], t1[:, :, None], t2[:, :, None], t3[:, :, None]
    t4, t5, t6, nt0 = t4[:, :, None], t5[:, :, None], t6[:, :, None], nt0[:, :, None]
    if ASM:
        # One asm block a word: LLVM cannot hoist every word's eight masks ahead of their sums (that
        # schedule held ~20 more registers in moe's nvfp4 gather: 119 against 97, Triton 3.9).
        return tl.inline_asm_elementwise(
            """{
            .reg .b32 m0, m1, m2, m3, m4, m5, m6, m7, s;
            set.gt.u32.bf16x2 m0, $1, $3;
            set.gt.u32.bf16x2 m1, $1, $4;
            set.gt.u32.bf16x2 m2, $1, $5;
            set.gt.u32.bf16x2 m3, $1, $6;
            set.gt.u32.bf16x2 m4, $1, $7;
            set.gt.u32.bf16x2 m5, $1, $8;
            set.gt.u32.bf16x2 m6, $1, $9;
            set.lt.u32.bf16x2 m7, $2, $10;
            add.u32 s, m0, m1;
            add.u32 s, s, m2;
            add.u32 s, s, m3;
            add.u32 s, s, m4;
            add.u32 s, s, m5;
            add.u32 s, s, m6;
            mad.lo.u32 s, m7, 8, s;
            mul.lo.u32 $0, s, -65537;
            }""",
            "=r,r,r,r,r,r,r,r,r,r,r",
            [a, w, t0, t1, t2, t3, t4, t5, t6, nt0],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        s = _half_gt(a, t0) + _half_gt(a, t1) + _half_gt(a, t2) + _half_gt(a, t3)
        s = s + _half_gt(a, t4) + _half_gt(a, t5) + _half_gt(a, t6)
        s = s + _neg_mask(w, a, nt0) * 8
        return s * -65537


@triton.jit
def _prmt_lo(a, b, ASM: tl.constexpr):
    """Bytes 0 and 2 of a, then bytes 0 and 2 of b (`prmt.b32 d, a, b, 0x6420`)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "prmt.b32 $0, $1, $2, 0x6420;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        return (a & 0xFF) | ((a >> 8) & 0xFF00) | ((b & 0xFF) << 16) | (((b >> 16) & 0xFF) << 24)


@triton.jit
def pack_pair_codes(c, ASM: tl.constexpr):
    """[rows, blocks, 4] words from `pair_codes` (elements 2j, 2j+1 in word j) -> [rows, blocks] uint32,
    code i in nibble i (little-endian: element 0 lowest)."""
    ev, od = tl.split(tl.reshape(c, (c.shape[0], c.shape[1], 2, 2)))  # words (0, 2) and (1, 3)
    b = _prmt_lo(ev, od, ASM)  # per byte one code: elements 4p .. 4p + 3
    b = b | (b >> 4)  # bytes 0 and 2 now hold two codes each (bit 31 of b is 0)
    lo, hi = tl.split(b)
    return _prmt_lo(lo, hi, ASM).to(tl.uint32, bitcast=True)


@triton.jit
def _max2(a, b, ASM: tl.constexpr):
    """`max.bf16x2` of non-negative pairs, NaN-ignoring; the mirror maps NaN halves to 0 first (the
    block amax only ever sees it through the NaN-to-0 rule of the caller)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        out = tl.zeros_like(a)
        for sh in tl.static_range(0, 32, 16):
            ah, bh = (a >> sh) & 0x7FFF, (b >> sh) & 0x7FFF
            ah = tl.where(ah > 0x7F80, 0, ah)
            bh = tl.where(bh > 0x7F80, 0, bh)
            out |= tl.maximum(ah, bh) << sh
        return out


@triton.jit
def pair_amax(wa, wb, ASM: tl.constexpr):
    """fp32 amax [rows, blocks] of the two half-blocks wa, wb [rows, blocks, 4] (bf16 pairs), NaN ignored
    (0 for an all-NaN block)."""
    a0, a1 = tl.split(tl.reshape(wa & 0x7FFF7FFF, (wa.shape[0], wa.shape[1], 2, 2)))
    b0, b1 = tl.split(tl.reshape(wb & 0x7FFF7FFF, (wb.shape[0], wb.shape[1], 2, 2)))
    m = _max2(_max2(a0, a1, ASM), _max2(b0, b1, ASM), ASM)  # [rows, blocks, 2]
    m0, m1 = tl.split(m)
    m = _max2(m0, m1, ASM)
    lo = (m << 16).to(tl.float32, bitcast=True)
    hi = (m & -65536).to(tl.float32, bitcast=True)
    amax = tl.maximum(lo, hi)
    return tl.where(amax == amax, amax, 0.0)


@triton.jit
def block_t(gs, amax, ASM: tl.constexpr):
    """t = min(div_rn(gs * amax, 6), 448) [rows, blocks], the value the block's E4M3 scale rounds, with
    `div_rn_by`'s division-free quotient: equal to the division wherever the quotient is normal; a
    subnormal one (p < 6 * 2^-126) may differ in its last bits, where every t rounds to the E4M3 scale
    0 anyway (t < 2^-10). p = +-Inf gives NaN, which `min.f32` (NaN-ignoring) turns into 448, as it
    caps the Inf of the division. ASM False divides: the interpreter, and moe's gather
    (`_kernel_pairs._encode_store_pairs` with ROWS, where the fma form cost registers)."""
    return tl.minimum(div_rn_by(gs * amax, 6.0, DIV6, ASM), 448.0)


# -------------------------------------------------------------------------------------------------
# Thresholds by lookup (`NvFp4Config.lut`, session 7): per block ~19 instructions instead of ~45.
# Every E4M3 scale is sf = M 2^E with M = 1 + k/8 (k = its 3 mantissa bits; subnormal scales too, as
# fp32 values). While LUT_LO <= gs <= LUT_HI, each T(u) for u = m_j sf (or the fp32 below it) is a
# normal bf16 and fl(X gs) near u a normal fp32 (u >= 2^-11, T in [2^-71, 2^64]), so scaling by 2^E
# is exact on both sides: T(m_j M 2^E) = 2^E T(m_j M), i.e. E added to T's exponent field. Lane l of
# every warp holds the seven T of M = 1 + (l % 8) / 8 (`lut_prologue`, once per program); a block
# fetches its seven with `shfl.sync.idx` from lane (sf bits >> 20) % 32 (whose l % 8 is k) and adds
# (E - 127) << 7 to both halves. test_nvfp4_s7.py checks the identity for every E4M3 scale over the
# range and shows it failing outside; sf == 0 blocks are zeroed by the caller.
# -------------------------------------------------------------------------------------------------
LUT_LO = tl.constexpr(8.673617379884035e-19)  # 2^-60
LUT_HI = tl.constexpr(1.152921504606847e18)  # 2^60


@triton.jit
def _lane_m(like, ASM: tl.constexpr):
    """1 + (laneid % 8) / 8 (fp32) in the shape of `like`; 1.0 under the interpreter (unused there)."""
    if ASM:
        lane = tl.inline_asm_elementwise("mov.u32 $0, %laneid;", "=r,r", [like], dtype=tl.int32, is_pure=True, pack=1)
        return 1.0 + (lane & 7).to(tl.float32) * 0.125
    else:
        return tl.full(like.shape, 1.0, tl.float32)


@triton.jit
def lut_prologue(like, scale, rg, gs_k, ASM: tl.constexpr):
    """This lane's seven T (pairs) of M = 1 + (laneid % 8) / 8, in the shape of `like` ([rows, blocks])."""
    t0, t1, t2, t3, t4, t5, t6, _nt0 = pair_thresholds(_lane_m(like, ASM), scale, rg, gs_k, ASM)
    return t0, t1, t2, t3, t4, t5, t6


@triton.jit
def _fetch(v, src, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(
        "shfl.sync.idx.b32 $0, $1, $2, 0x1f, -1;", "=r,r,r", [v, src], dtype=tl.int32, is_pure=True, pack=1
    )


@triton.jit
def pair_thresholds_lut(sf, lut, scale, rg, gs_k, ASM: tl.constexpr):
    """`pair_thresholds(sf)` for sf > 0 while LUT_LO <= gs_k <= LUT_HI (see above); garbage where
    sf == 0 (the caller zeroes those blocks' codes). Under the interpreter the lanes' table is
    recomputed from each block's M (the same values), so the identity is what it checks."""
    bits = sf.to(tl.int32, bitcast=True)
    e = ((bits >> 23) - 127) * 0x00800080  # (E - 127) << 7 in both halves (T + e stays in [0, 0x7F7F])
    if ASM:
        src = bits >> 20  # lane (src % 32): its laneid % 8 is sf's mantissa k
        t0, t1, t2, t3, t4, t5, t6 = lut
        t0, t1, t2 = _fetch(t0, src, ASM) + e, _fetch(t1, src, ASM) + e, _fetch(t2, src, ASM) + e
        t3, t4, t5 = _fetch(t3, src, ASM) + e, _fetch(t4, src, ASM) + e, _fetch(t5, src, ASM) + e
        t6 = _fetch(t6, src, ASM) + e
    else:
        m = ((bits & 0x007FFFFF) | 0x3F800000).to(tl.float32, bitcast=True)
        t0, t1, t2, t3, t4, t5, t6, _nt0 = pair_thresholds(m, scale, rg, gs_k, ASM)
        t0, t1, t2, t3, t4, t5, t6 = t0 + e, t1 + e, t2 + e, t3 + e, t4 + e, t5 + e, t6 + e
    return t0, t1, t2, t3, t4, t5, t6, t0 | -2147450880  # 0x80008000: both halves negated
