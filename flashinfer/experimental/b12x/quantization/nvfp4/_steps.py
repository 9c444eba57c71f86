"""The "steps" E2M1 encode of the NVFP4 quantizer: the codes of `_encodes._e2m1_codes_mul`, bit for bit,
with (almost) no ALU-pipe instruction per element.

Why. On SM90 the comparison encodes ("mul", "search") are bound by the ALU pipe: FSETP, FSEL, SEL,
LOP3, PRMT, IADD3, FMNMX all issue there at 16 lanes per cycle per SM sub-partition, half the rate of
the FP32 pipe (FMUL, FADD, FFMA at 32 lanes). The SASS of the 16x256x4 "search" tile has ~23 ALU
instructions per element, which predicts 2.7 elements per SM cycle: the H200 measured 2.9.

How. With p = fl(x * gs) (the oracle's product), a = |p| (= fl(|x| * gs), one FMUL with an abs
modifier) and u_j the seven strict thresholds of `_e2m1_codes_search` (u_j = m_j * sf, or the fp32
just below it where a tie rounds up), the code is the number of u_j below a. Each comparison is one
saturating FMA on the FP32 pipe:

    [a > u]  ==  fma.rn.sat.f32(a, 2^35, -2^35 * u)          (0.0 or 1.0, exactly)

Proof. u >= 0.25 * 2^-9 = 2^-11 (the smallest positive E4M3 scale times the smallest midpoint) is a
normal fp32 number, so ulp(u) >= 2^-34 and a > u implies a - u >= 2^-34: the exact value
2^35 * (a - u) (2^35 * a and 2^35 * u are exact; FMA rounds once) is >= 2 and saturates to 1.
a <= u gives an exact value <= 0, saturated to 0. a = +Inf gives +Inf -> 1. a = NaN gives NaN,
which `.sat` flushes to +0: NaN counts no threshold (code 0, as the oracle wants). sf == 0 makes
every u NaN: every step is 0, the block's codes are 0. An overflow of 2^35 * a before the subtraction
cannot happen inside an FMA (one rounding of the exact result: +Inf -> 1, right since a > u).
The steps' bits (0 or 0x3F800000) are summed as integers and scaled so that the count lands in the
top nibble, where the sign bit joins it (`e2m1_steps_top`).

Per element: 1 FMUL (a), 7 FFMA.SAT, 3 IADD3 + 1 IMAD (the count), 1 IMAD + 1 LOP3 (the sign), no
compare, no select; per block: seven thresholds (7 FMUL, 3 integer decrements). `test_e2m1_division_free.test_steps_*` mirrors the
rule in torch (fp32 ops, the FMA's one rounding reproduced exactly since 2^35 * a is exact) and checks
it exhaustively against the oracle; under TRITON_INTERPRET (no inline asm there) the kernel runs the
same mirror (`ASM` False), and the GPU tier checks the asm.
"""

from __future__ import annotations

import triton
import triton.language as tl

BIG = 2.0**35  # the step scale: 2^35 * (a - u) >= 2 whenever a > u >= 2^-11
MAGIC = 2.0**23  # counts summed onto 2^23: the float's mantissa is the integer
MAGIC_BITS = 0x4B000000  # the bits of 2^23


@triton.jit
def _step(a, nu, ASM: tl.constexpr):
    """fma.rn.sat.f32(a, 2^35, nu): 1.0 where a > -nu / 2^35, else 0.0 (NaN a or nu -> 0.0). Under the
    interpreter (ASM False) the same in plain Triton."""
    if ASM:
        return tl.inline_asm_elementwise(
            "fma.rn.sat.f32 $0, $1, 0f51000000, $2;", "=f,f,f", [a, nu], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        r = a * 34359738368.0 + nu  # 2^35 * a is exact (or +-Inf, as in the FMA): one rounding
        return tl.where(r > 0.0, tl.minimum(r, 1.0), 0.0)


@triton.jit
def _neg_threshold(sf, m: tl.constexpr, TIE_UP: tl.constexpr):
    """-2^35 * u for the midpoint m: u = m * sf (exact), or the fp32 just below it when a tie
    rounds up (`>=` made strict); NaN where sf == 0 (the caller passes NaN for it)."""
    t = sf * (-34359738368.0 * m)  # exact: m has <= 3 significant bits, sf <= 4
    if TIE_UP:
        t = (t.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)  # one ulp smaller magnitude
    return t


@triton.jit
def e2m1_steps_top(mag, sign_bits, gs, sf, ASM: tl.constexpr):
    """The E2M1 code of each x in the top nibble of a uint32 (the other 28 bits 0) under global
    scale gs and block scales sf [rows, blocks] (fp32 E4M3 values): the codes of `_encodes._e2m1_codes_mul`,
    sign in bit 31. mag = |x| (fp32 [rows, blocks, E]); sign_bits: int32 whose bit 31 is x's sign
    (its other bits are ignored).

    The steps are summed as integers: a step's bits are 0 or 0x3F800000 (1.0f), and
    -32 * 0x3F800000 = 0x10000000 (mod 2^32), so -32 * (sum of the step bits) = count << 28 (count <= 7:
    bit 31 stays clear). The sign bit: sign_bits & (bits of step 0) << 8 (0x3F800000 << 8 = 0x80000000
    mod 2^32): x negative and the code non-zero (|p| > u_0), i.e. p < -u_0."""
    nan = tl.full(sf.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    s = tl.where(sf == 0, nan, sf)
    a = mag * gs  # == |fl(x * gs)|: rounding is symmetric
    s0 = _step(a, _neg_threshold(s, 0.25, False)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t = s0 + _step(a, _neg_threshold(s, 0.75, True)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t += _step(a, _neg_threshold(s, 1.25, False)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t += _step(a, _neg_threshold(s, 1.75, True)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t += _step(a, _neg_threshold(s, 2.5, False)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t += _step(a, _neg_threshold(s, 3.5, True)[:, :, None], ASM).to(tl.int32, bitcast=True)
    t += _step(a, _neg_threshold(s, 5.0, False)[:, :, None], ASM).to(tl.int32, bitcast=True)
    top = t * -32  # count << 28 (int32 wraps as the hardware does; the interpreter's numpy too)
    top |= sign_bits & (s0 << 8)
    return top.to(tl.uint32, bitcast=True)


@triton.jit
def as_f32(bits, ASM: tl.constexpr):
    """int32 bits as fp32 through an opaque move (compiled), so that LLVM keeps a later |x| as a float
    abs (a free operand modifier of FMUL/FMNMX in SASS) instead of folding it into an integer AND."""
    if ASM:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=f,r", [bits], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return bits.to(tl.float32, bitcast=True)


@triton.jit
def e2m1_codes_steps(xb, gs, sf, ASM: tl.constexpr):
    """`e2m1_steps_top` as int32 codes 0..15 (sign in bit 3), for the "rows" layout's packing."""
    return (e2m1_steps_top(tl.abs(xb), xb.to(tl.int32, bitcast=True), gs, sf, ASM) >> 28).to(tl.int32)


@triton.jit
def pack_steps_top(top):
    """[rows, blocks, 8] uint32 from `e2m1_steps_top` -> [rows, blocks] uint32 words, code i in nibble i
    (little-endian: element 0 lowest): top >> (28 - 4 i) puts it there, the rest is 0, so the sum is an OR."""
    shifts = (28 - 4 * tl.arange(0, 8)).to(tl.uint32)
    return tl.sum(top >> shifts[None, None, :], axis=2)


@triton.jit
def pack_steps_pairs(lo, hi):
    """`pack_steps_top` for a half block held as bf16 pairs: lo [rows, blocks, 4] has elements 0, 2, 4, 6
    (nibbles 0, 2, 4, 6: shifts 28 - 8 j), hi elements 1, 3, 5, 7 (shifts 24 - 8 j)."""
    shifts = (28 - 8 * tl.arange(0, 4)).to(tl.uint32)
    return tl.sum((lo >> shifts[None, None, :]) + (hi >> (shifts - 4)[None, None, :]), axis=2)  # disjoint
