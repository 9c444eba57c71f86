"""Reference tier: the "pairs" E2M1 encode of the NVFP4 kernel (`nvfp4/_pairs.py`) equals the oracle's
`e2m1(clamp((x * gs) / sf))` on every bf16 input.

The rule, mirrored here in torch (fp32 ops; the directed roundings `mul.rm` and RD(1/gs) through float64,
where a product of two fp32 is exact): per block scale sf and global scale gs, seven bf16 thresholds
T(u_j) in the input's domain, u_j the strict thresholds of the "search" encode; the code counts the
T below |x| (+8 when x < -T(u_0)). Checked exhaustively: every bf16 x (NaN, Inf, subnormals and -0
included) against every E4M3 scale, under 30+ global scales from the smallest fp32 to 3e38; and each T
against a brute-force search over all finite bf16. The interpret tier runs the kernel's own mirror;
the gpu tier (test_gpu_nvfp4.py, test_gpu_candidates.py) runs the inline PTX.
"""

import math
import sys

import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import e2m1_encode

pytestmark = pytest.mark.reference

MIDPOINTS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
TIES_UP = [False, True, False, True, False, True, False]
SCALES = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # 0 and every positive
NEG_INF = torch.tensor(-math.inf)
TINY_GS = 2.0**-64  # below it u and gs are scaled by 2^64 (1/gs would overflow)
DOUBLING_GS = 2.0**100  # up to it every T is a normal bf16, so T(2u) = 2 T(u) exactly


def rd_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`mul.rm.f32` for a, b >= 0: the product rounded down (NaN stays NaN, overflow -> largest fp32)."""
    p = a.double() * b.double()  # exact
    c = p.float()
    return torch.where(c.double() > p, torch.nextafter(c, NEG_INF), c)


def rd_recip(a: torch.Tensor) -> torch.Tensor:
    """RD(1 / a) for a finite fp32 a > 0, as `_pairs._rd_recip` computes it."""
    q = (1.0 / a.double()).float()
    return torch.where(q.double() * a.double() > 1.0, torch.nextafter(q, NEG_INF), q)


def thresholds(
    sf: torch.Tensor, gs: float, fixup: bool = True, double: bool = True
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(T as bf16-in-the-top-half int32 bits, u unscaled) per midpoint: `_pairs.pair_thresholds`.
    T(2u) = 2 T(u) (RD: saturating) for 2.5 = 2 * 1.25, 5 = 4 * 1.25, 3.5 = 2 * 1.75 while gs <= 2^100."""
    s = torch.where(sf == 0, torch.full_like(sf, math.nan), sf)
    g = torch.tensor(gs, dtype=torch.float32)
    scale = torch.tensor(2.0**64 if float(g) < TINY_GS else 1.0)
    gs_k = g * scale
    rg = rd_recip(gs_k)
    out = []
    for mid, up in zip(MIDPOINTS, TIES_UP):
        u = s * (mid * scale)
        if up:
            u = (u.view(torch.int32) - 1).view(torch.float32)
        x = rd_mul(u, rg).view(torch.int32) & -65536
        nxt = x + 65536
        t = torch.where(nxt.view(torch.float32) * gs_k <= u, nxt, x) if fixup else x
        out.append((t, u / scale))
    if double and float(g) <= DOUBLING_GS:
        for j, (base, times) in {4: (2, 2.0), 5: (3, 2.0), 6: (2, 4.0)}.items():
            t = rd_mul(out[base][0].view(torch.float32), torch.tensor(times)).view(torch.int32) & -65536
            out[j] = (t, out[j][1])
    return out


def codes_pairs(x: torch.Tensor, sf: torch.Tensor, gs: float, fixup: bool = True) -> torch.Tensor:
    th = thresholds(sf, gs, fixup)
    a = x.abs()
    code = torch.zeros(torch.broadcast_shapes(x.shape, sf.shape), dtype=torch.uint8)
    for t, _ in th:
        code += (a > t.view(torch.float32)).to(torch.uint8)  # NaN compares false, as set.gt does
    neg = x < -th[0][0].view(torch.float32)
    return code | (neg.to(torch.uint8) << 3)


def codes_oracle(x: torch.Tensor, sf: torch.Tensor, gs: float) -> torch.Tensor:
    p = x * torch.tensor(gs, dtype=torch.float32)  # the oracle's fp32 product
    y = torch.where(sf == 0, torch.zeros_like(p), (p / sf).clamp(-6.0, 6.0))
    return e2m1_encode(y)


ALL_BF16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
FINITE_NONNEG = torch.arange(0, 0x7F80, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
_g = torch.Generator().manual_seed(3)
GLOBAL_SCALES = [
    1.0,
    1 - 2.0**-20,
    1 + 2.0**-20,
    1 / 3,
    2688 / 7.3,
    2.0**-20,
    2.0**-64,
    2.0**-65,
    1.5 * 2.0**-64,
    2.0**-100,
    2.0**-126,
    3e-39,
    1e-40,
    1e-45,  # the smallest fp32: 1/gs overflows
    7.9e-36,
    2.0**100,
    1.0000001 * 2.0**100,
    1e30,
    2.688e33,
    3e38,
] + (10 ** (torch.rand(12, generator=_g) * 80 - 40)).tolist()


@pytest.mark.parametrize("gs", GLOBAL_SCALES, ids=lambda g: f"{g:.4g}")
def test_every_bf16_every_scale(gs):
    want = codes_oracle(ALL_BF16[:, None], SCALES[None, :], gs)
    got = codes_pairs(ALL_BF16[:, None], SCALES[None, :], gs)
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} codes differ, first x={ALL_BF16[bad[0, 0]]} sf={SCALES[bad[0, 1]]}"


@pytest.mark.parametrize("gs", GLOBAL_SCALES[::3], ids=lambda g: f"{g:.4g}")
def test_thresholds_are_the_largest_bf16_at_or_below_u(gs):
    # T(u) = the largest finite bf16 X >= 0 with fl(X * gs) <= u, by brute force (fl(X * gs) is monotone).
    f = FINITE_NONNEG * torch.tensor(gs, dtype=torch.float32)
    for t, u in thresholds(SCALES[1:], gs):
        idx = torch.searchsorted(f, u, right=True) - 1
        want = torch.where(idx >= 0, FINITE_NONNEG[idx.clamp(min=0)], torch.full_like(u, -1.0))
        assert torch.equal(t.view(torch.float32), want)


def test_the_fixup_is_needed():
    # Without the one-step correction the rounded-down quotient truncates one bf16 below T where
    # u / gs is (just) a bf16 itself: at gs = fl(1/3), 1008 codes of this grid break; the check can fail.
    x, sf, gs = ALL_BF16[:, None], SCALES[None, :], 1 / 3
    assert torch.equal(codes_pairs(x, sf, gs), codes_oracle(x, sf, gs))
    assert not torch.equal(codes_pairs(x, sf, gs, fixup=False), codes_oracle(x, sf, gs))


def test_directed_rounding_mirrors():
    a = torch.tensor([1.0, 3.0, 3e38, 1e-45, math.nan], dtype=torch.float32)
    b = torch.tensor([1 / 3, 1 / 3, 10.0, 0.5, 1.0], dtype=torch.float32)
    c, exact = rd_mul(a, b), a.double() * b.double()
    up = torch.nextafter(c, torch.tensor(math.inf)).double()
    assert (c.double()[:2] <= exact[:2]).all() and (exact[:2] < up[:2]).all() and c[1] == 1.0  # 3 * fl(1/3) > 1
    assert c[2] == torch.finfo(torch.float32).max and c[3] == 0 and c[4].isnan()
    r = rd_recip(torch.tensor([3.0, 1e-45, 1.0]))
    assert r[0].double() * 3 < 1 and r[1] == torch.finfo(torch.float32).max and r[2] == 1


def test_doubling_needs_its_range(monkeypatch):
    # T(2u) = 2 T(u) only while the T are normal bf16: at gs = 3e38 they are subnormal and doubling
    # them breaks codes, which is why the kernel computes all seven above gs = 2^100.
    monkeypatch.setattr(sys.modules[__name__], "DOUBLING_GS", 1e39)
    x, sf = ALL_BF16[:, None], SCALES[None, :]
    assert not torch.equal(codes_pairs(x, sf, 3e38), codes_oracle(x, sf, 3e38))


def test_mask_sums_give_the_codes():
    # `_pairs.pair_codes`: each comparison a 0xFFFF mask per true half, the sign's weighted 8, summed as
    # 32-bit integers; times -65537 that is c_lo + 2^16 c_hi for every pair of codes (mod 2^32).
    lo_mask, hi_mask = 0xFFFF, 0xFFFF0000
    for lo in range(16):
        for hi in range(16):
            steps_lo, sign_lo = lo % 8, lo // 8
            steps_hi, sign_hi = hi % 8, hi // 8
            if (sign_lo and not steps_lo) or (sign_hi and not steps_hi):
                continue  # the sign needs |x| > T(u_0): no code 8
            s = 0
            for j in range(7):
                s += (lo_mask if j < steps_lo else 0) + (hi_mask if j < steps_hi else 0)
            s += 8 * ((lo_mask if sign_lo else 0) + (hi_mask if sign_hi else 0))
            assert (s * -65537) % 2**32 == lo + (hi << 16), (lo, hi)
