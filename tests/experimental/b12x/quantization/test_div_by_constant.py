"""Reference tier: the quantizers' divisions by a constant without `div.rn.f32`
(`_lib.triton_quant.div_rn_by`; NVFP4 "pairs": t = gs amax / 6, `nvfp4._pairs.block_t`) equal the
correctly rounded quotient. 448 (MXFP8's amax / 448) is checked too: session 26 measured an MXFP8
variant with it (slower for other reasons, not kept), so the helper is known good for it.

The kernels compute q0 = RN(p R), r = fma(-q0, D, p) (exact), q = fma(r, R, q0) with R = RN(1/D). The
three steps scale by powers of two exactly, so one binade of p decides every p whose quotient is a
normal fp32; this checks all 2^23 mantissas of [1, 2). The fma steps are emulated in float64: a
product of two fp32 is exact there, the residual p - D q0 is exact, and the last sum is redone in
exact rationals wherever its float64 value lands on an fp32 midpoint (double rounding could only
go wrong there). The subnormal-quotient range, where the steps may differ in the last bits, is
argued in the caller's docstring (the result is rounded to a scale that cannot tell).
"""

from fractions import Fraction

import numpy as np
import pytest

from flashinfer.experimental.b12x._lib.triton_quant import div_ptx

pytestmark = pytest.mark.reference


def _binade() -> np.ndarray:
    """Every fp32 in [1, 2)."""
    return (1.0 + np.arange(1 << 23, dtype=np.float64) * 2.0**-23).astype(np.float32)


@pytest.mark.parametrize("d, r_bits", [(6.0, 0x3E2AAAAB), (448.0, 0x3B124925)])
def test_division_by_constant_is_rn(d, r_bits):
    p32 = _binade()
    big_r = np.float64(np.float32(1.0) / np.float32(d))
    assert np.float32(big_r).view(np.uint32) == r_bits
    assert div_ptx(d).count(f"0f{r_bits:08X}") == 2  # the kernels' inline PTX multiplies by this R
    p = p32.astype(np.float64)
    q0 = (p * big_r).astype(np.float32)
    r = (p - d * q0.astype(np.float64)).astype(np.float32)
    assert np.array_equal(r.astype(np.float64), p - d * q0.astype(np.float64))  # the residual is exact
    s64 = q0.astype(np.float64) + r.astype(np.float64) * big_r
    q = s64.astype(np.float32)
    at_midpoint = np.nonzero((s64.view(np.int64) & ((1 << 29) - 1)) == (1 << 28))[0]
    for k in at_midpoint:
        exact = Fraction(float(q0[k])) + Fraction(float(r[k])) * Fraction(float(big_r))
        near = np.float32(float(exact))
        cands = (np.nextafter(near, np.float32(0)), near, np.nextafter(near, np.float32(4)))
        q[k] = min(cands, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1))
    expect = p32 / np.float32(d)  # IEEE division: correctly rounded
    bad = np.nonzero(q.view(np.uint32) != expect.view(np.uint32))[0]
    assert bad.size == 0, (d, bad[:5], p32[bad[:5]])


def test_the_correction_is_needed():
    # RN(p R) alone is not RN(p / D): without the fma step the check above would fail.
    p32 = _binade()
    for d in (6.0, 448.0):
        q0 = (p32.astype(np.float64) * np.float64(np.float32(1.0) / np.float32(d))).astype(np.float32)
        assert np.count_nonzero(q0 != p32 / np.float32(d)) > 1000, d
