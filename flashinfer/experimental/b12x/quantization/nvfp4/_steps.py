"""The "steps" E2M1 encode of the NVFP4 quantizer: the codes of `_kernel._e2m1_codes_mul`, bit for bit,
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
The sign bit: p < -u_0 (a negative value with a non-zero code) is fma.rn.sat.f32(p, -2^35, -2^35 * u_0).
The count is summed in fp32 onto 2^23 (all sums exact integers below 2^24), so the float's low bits
are the code: bits - 0x4B000000 = code + 8 * sign.

Per element: 2 FMUL (a, p), 8 FFMA.SAT, 8 FADD/FFMA (the sum), no compare, no select; per block:
seven thresholds (7 FMUL, 3 integer decrements). `test_e2m1_division_free.test_steps_*` mirrors the
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
    """fma.rn.sat.f32(a, 2^35, nu): 1.0 where a > -nu / 2^35, else 0.0 (NaN a or nu -> 0.0)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "fma.rn.sat.f32 $0, $1, 0f51000000, $2;", "=f,f,f", [a, nu], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        r = a * 34359738368.0 + nu  # 2^35 * a is exact (or +-Inf, as in the FMA): one rounding
        return tl.where(r > 0.0, tl.minimum(r, 1.0), 0.0)


@triton.jit
def _step_neg(p, nu, ASM: tl.constexpr):
    """fma.rn.sat.f32(p, -2^35, nu): 1.0 where p < nu / 2^35, else 0.0 (NaN -> 0.0)."""
    if ASM:
        return tl.inline_asm_elementwise(
            "fma.rn.sat.f32 $0, $1, 0fD1000000, $2;", "=f,f,f", [p, nu], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        r = p * -34359738368.0 + nu
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
def e2m1_codes_steps(xb, gs, sf, ASM: tl.constexpr):
    """E2M1 codes (int32 0..15, sign in bit 3) of x = xb [rows, blocks, E] (fp32) under global scale
    gs and block scales sf [rows, blocks] (fp32 E4M3 values): the codes of `_e2m1_codes_mul`."""
    nan = tl.full(sf.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    s = tl.where(sf == 0, nan, sf)
    n0 = _neg_threshold(s, 0.25, False)[:, :, None]
    n1 = _neg_threshold(s, 0.75, True)[:, :, None]
    n2 = _neg_threshold(s, 1.25, False)[:, :, None]
    n3 = _neg_threshold(s, 1.75, True)[:, :, None]
    n4 = _neg_threshold(s, 2.5, False)[:, :, None]
    n5 = _neg_threshold(s, 3.5, True)[:, :, None]
    n6 = _neg_threshold(s, 5.0, False)[:, :, None]
    a = tl.abs(xb) * gs  # == |fl(x * gs)|: rounding is symmetric
    p = xb * gs
    acc = _step(a, n0, ASM) + 8388608.0
    acc += _step(a, n1, ASM)
    acc += _step(a, n2, ASM)
    acc += _step(a, n3, ASM)
    acc += _step(a, n4, ASM)
    acc += _step(a, n5, ASM)
    acc += _step(a, n6, ASM)
    acc = tl.math.fma(_step_neg(p, n0, ASM), 8.0, acc)
    return acc.to(tl.int32, bitcast=True) - 0x4B000000
