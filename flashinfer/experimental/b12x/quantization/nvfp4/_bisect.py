"""The "bisect" code step of the NVFP4 quantizer's bf16-pair program (`NvFp4Config(encode="bisect")`):
the codes of "pairs" (`_pairs.py`), bit for bit, with about a third fewer instructions per pair.

Why. "pairs" spends 17 instructions per 32-bit word of two bf16 values on the code: one LOP3 for
|w|, seven `set.gt.bf16x2` (1.0 or 0.0 per half), the sign's `set.lt`, and eight `fma.rn.bf16x2` that
add the 1.0s up; then ~1.75 per word to pack nibbles. The sum is the expensive part: a count of seven
sorted thresholds needs only three compares when it is a bisection, and a count's bits can be put in
place by bitwise selects on all-ones masks instead of floating-point adds.

How. The seven thresholds of a block are sorted: T_0 <= T_1 <= ... <= T_6 (T(u) is monotone in u;
equal neighbours are allowed), so the count c = #{j : |x| > T_j} is found by bisection:

    b2 = [|x| > T_3];   b1 = [|x| > (b2 ? T_5 : T_1)];   b0 = [|x| > T_(4 b2 + 2 b1)]

(c >= 4 iff T_3 is passed, since the T_j are sorted; then the same argument on the half that is
left). Each decision is `set.gt.u32.bf16x2` (0xFFFF per half where true, 0 otherwise; NaN on either
side compares false, as in "pairs": a NaN x or an sf == 0 block, whose T are NaN, gets c = 0). The
thresholds of the next level are picked per half by bitwise selects on those masks, `(m & p) | (~m
& q)` (one LOP3): one for level 2, three for level 3. The sign is "pairs"' own test, `set.lt.u32` of
the signed x against -T_0 (x < -T_0 iff x is negative with a non-zero code: no -0 codes).

Nibble placement. A mask is all ones over its 16-bit half, so a select against a constant C takes
bit i from a where C has bit i and from b elsewhere: three selects put b0, b1, b2 and the sign at
any four consecutive bits of each half (`_place`). The four pair words of 8 consecutive values are
placed so that two more selects and two `prmt` build the packed word with no shift (`_pack8`):

    word j (values 2j, 2j+1) | low-half code at | high-half code at | its nibbles' final place
    0 and 2 ("A")            | bits 0-3         | bits 20-23        | 0-3 | 4-7  (16-19 | 20-23 for 2)
    1 and 3 ("B")            | bits 8-11        | bits 28-31        | 8-11 | 12-15 (24-27 | 28-31 for 3)

X = word 0's A bits + word 1's B bits, Y = the same of words 2 and 3 (one select each, bits outside
the fields are garbage and never read); P = [X.lo, Y.lo] and Q = [X.hi, Y.hi] (two `prmt`); the packed
word is P's nibbles 0, 2, 4, 6 and Q's 1, 3, 5, 7 (one select).

Per pair word: 1 LOP3 (|w|, shared with the amax), 4 HSET2, 4 LOP3 (thresholds), 3 LOP3 (placement),
~1.25 for packing: ~13 instead of ~19. Exactness rests on "pairs"' thresholds (proved and checked
there) and on bisection of a sorted list; `test_nvfp4_bisect.py` mirrors these word operations in
torch and checks them on every bf16 pair pattern against the oracle's codes under every E4M3 scale
and 30+ global scales, and the packing on random words. Under TRITON_INTERPRET (`ASM` False) the
compares and `prmt` run as integer mirrors; the selects are the same plain Triton on both paths.
"""

from __future__ import annotations

import triton
import triton.language as tl


def _s32(v: int) -> int:
    """A 32-bit pattern as the int32 Triton holds it."""
    return v - (1 << 32) if v >= 1 << 31 else v


# Placement constants (module docstring): C_B0 takes b0, C_B2 b2 (and, for now, the sign's bit), C_S
# the sign; each for the two fields of layout A or B.
C_B0_A = tl.constexpr(_s32(0x00100001))
C_B2_A = tl.constexpr(_s32(0x00C0000C))
C_S_A = tl.constexpr(_s32(0x00800008))
C_B0_B = tl.constexpr(_s32(0x10000100))
C_B2_B = tl.constexpr(_s32(0xC0000C00))
C_S_B = tl.constexpr(_s32(0x80000800))
C_X = tl.constexpr(_s32(0x00F0000F))  # layout A's fields (the rest of X comes from the B word)
C_EVEN = tl.constexpr(_s32(0x0F0F0F0F))  # nibbles 0, 2, 4, 6 (from P)


@triton.jit
def _sel(m, p, q, ASM: tl.constexpr):
    """Bitwise select: p where m has a 1, q elsewhere: one `lop3.b32` (0xCA = m ? p : q). Written as
    and/or, LLVM splits the constant-mask selects into ANDs and ORs that ptxas does not re-fuse (12
    more LOP3 a tile-thread on sm_90a)."""
    if ASM:
        m = m + tl.zeros_like(p)  # a constant mask: broadcast to the operands' shape
        return tl.inline_asm_elementwise(
            "lop3.b32 $0, $1, $2, $3, 0xCA;", "=r,r,r,r", [m, p, q], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        return (p & m) | (q & ~m)


@triton.jit
def _gt(a, t, ASM: tl.constexpr):
    """`set.gt.u32.bf16x2` of non-negative pairs a and t: 0xFFFF per half where a > t, 0 where not or
    where either is NaN."""
    if ASM:
        return tl.inline_asm_elementwise(
            "set.gt.u32.bf16x2 $0, $1, $2;", "=r,r,r", [a, t], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        lo_a, lo_t = a & 0x7FFF, t & 0x7FFF
        hi_a, hi_t = (a >> 16) & 0x7FFF, (t >> 16) & 0x7FFF
        lo = (lo_a > lo_t) & (lo_a <= 0x7F80) & (lo_t <= 0x7F80)
        hi = (hi_a > hi_t) & (hi_a <= 0x7F80) & (hi_t <= 0x7F80)
        return tl.where(lo, 0xFFFF, 0) | tl.where(hi, -65536, 0)


@triton.jit
def _neg(w, a, t0, nt0, ASM: tl.constexpr):
    """`set.lt.u32.bf16x2` of the signed pair w against nt0 = -T_0: 0xFFFF per half where x < -T_0,
    i.e. x negative and |x| > T_0 (a = |w|)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "set.lt.u32.bf16x2 $0, $1, $2;", "=r,r,r", [w, nt0], dtype=tl.int32, is_pure=True, pack=1
        )
    else:
        sign = tl.where((w & 0x8000) != 0, 0xFFFF, 0) | tl.where(w < 0, -65536, 0)
        return _gt(a, t0, ASM) & sign


@triton.jit
def _place(w, th, C_B0: tl.constexpr, C_B2: tl.constexpr, C_S: tl.constexpr, ASM: tl.constexpr):
    """Pair words w [..., n] -> words with each half's code (b0, b1, b2, sign) at the fields of C_B0."""
    t0, t1, t2, t3, t4, t5, t6, nt0 = th
    a = w & 0x7FFF7FFF
    m2 = _gt(a, t3, ASM)  # b2
    m1 = _gt(a, _sel(m2, t5, t1, ASM), ASM)  # b1
    m0 = _gt(a, _sel(m1, _sel(m2, t6, t2, ASM), _sel(m2, t4, t0, ASM), ASM), ASM)  # b0
    r = _sel(C_B0, m0, m1, ASM)  # b0 at the field's bit 0, b1 everywhere else
    r = _sel(C_B2, m2, r, ASM)  # b2 at bits 2 and 3
    return _sel(C_S, _neg(w, a, t0, nt0, ASM), r, ASM)  # the sign at bit 3


@triton.jit
def _prmt(a, b, SEL: tl.constexpr, ASM: tl.constexpr):
    """`prmt.b32 d, a, b, SEL` for SEL 0x5410 ([a.lo, b.lo]) or 0x7632 ([a.hi, b.hi])."""
    if ASM:
        return tl.inline_asm_elementwise(
            f"prmt.b32 $0, $1, $2, {SEL:#x};", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1
        )
    elif SEL == 0x5410:
        return (a & 0xFFFF) | (b << 16)
    else:
        return ((a >> 16) & 0xFFFF) | (b & -65536)


@triton.jit
def bisect_codes(w, th, ASM: tl.constexpr):
    """[rows, blocks, 4] bf16-pair words (8 consecutive values) -> [rows, blocks] uint32 packed codes
    (value i in nibble i); th = `_pairs.pair_thresholds` (or its lookup form), [rows, blocks] each."""
    t0, t1, t2, t3, t4, t5, t6, nt0 = th
    th = (
        t0[:, :, None], t1[:, :, None], t2[:, :, None], t3[:, :, None],
        t4[:, :, None], t5[:, :, None], t6[:, :, None], nt0[:, :, None],
    )  # fmt: skip
    ev, od = tl.split(tl.reshape(w, (w.shape[0], w.shape[1], 2, 2)))  # words (0, 2) and (1, 3)
    ra = _place(ev, th, C_B0_A, C_B2_A, C_S_A, ASM)
    rb = _place(od, th, C_B0_B, C_B2_B, C_S_B, ASM)
    x, y = tl.split(_sel(C_X, ra, rb, ASM))  # X from words 0 and 1, Y from words 2 and 3
    p = _prmt(x, y, 0x5410, ASM)
    q = _prmt(x, y, 0x7632, ASM)
    return _sel(C_EVEN, p, q, ASM).to(tl.uint32, bitcast=True)
