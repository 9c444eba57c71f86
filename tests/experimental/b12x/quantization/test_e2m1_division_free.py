"""Reference tier: the division-free E2M1 encode of the NVFP4 kernel (`encode="mul"`) equals the
oracle's `e2m1(clamp((x * gs) / sf))` on every input that can reach it.

The kernel's rule (`nvfp4/_encodes.py`, `_e2m1_codes_mul`, which carries the proof; `encode="search"`
finds the same count by binary search): with p = fl(x * gs),
the code is the index of the last midpoint m with |p| > m * sf (ties down) or |p| >= m * sf (ties up),
| 8 when p < -0.25 * sf, and 0 when sf == 0 (`encode="steps"` counts the same thresholds as saturating
FMAs, `nvfp4/_steps.py`; `codes_steps` mirrors its fp32 ops). Mirrored here in plain torch (fp32, IEEE divisions on the
CPU) and compared exhaustively: every bf16 and fp16 x, under several global scales, against every
E4M3 scale; every fp32 within 64 ulps of every +-m * sf; random fp32 bit patterns. The interpret tier
runs the kernel itself on the same kind of data.
The scale itself comes from `_e4m3_rn` in those encodes (fp32 -> E4M3 rounding by bits, no fp8
instruction): mirrored here too and compared with torch's conversion around every E4M3 value and tie.
"""

import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import E2M1_GRID, e2m1_encode

pytestmark = pytest.mark.reference

MIDPOINTS = [(lo + hi) / 2 for lo, hi in zip(E2M1_GRID[:-1], E2M1_GRID[1:])]
TIES_UP = [i % 2 == 1 for i in range(len(MIDPOINTS))]  # 0.75 -> 1.0 (code 2), 1.75 -> 2.0, 3.5 -> 4.0
NAN = float("nan")
# Every positive E4M3 scale the kernel can produce (0x01..0x7E; 0 is the underflow case).
SCALES = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


def codes_division_free(p: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    s = torch.where(sf == 0, torch.full_like(sf, NAN), sf)
    a = p.abs()
    code = torch.zeros(p.shape, dtype=torch.uint8)
    for j, (mid, up) in enumerate(zip(MIDPOINTS, TIES_UP)):
        t = mid * s
        code = torch.where(a >= t if up else a > t, j + 1, code).to(torch.uint8)
    return torch.where(p < -0.25 * s, code | 8, code)


def codes_search(p: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """The kernel's `encode="search"`: thresholds made strict (`>=` t becomes `>` the fp32 below t),
    then three comparisons of a binary search over the sorted thresholds."""
    s = torch.where(sf == 0, torch.full_like(sf, NAN), sf)
    below = lambda t: (t.view(torch.int32) - 1).view(torch.float32)  # noqa: E731
    u = [mid * s if not up else below(mid * s) for mid, up in zip(MIDPOINTS, TIES_UP)]
    a = p.abs()
    b2 = a > u[3]
    b1 = a > torch.where(b2, u[5], u[1])
    b0 = a > torch.where(b2, torch.where(b1, u[6], u[4]), torch.where(b1, u[2], u[0]))
    code = (b2.to(torch.uint8) << 2) | (b1.to(torch.uint8) << 1) | b0.to(torch.uint8)
    return torch.where(p < -u[0], code | 8, code)


def codes_steps(p: torch.Tensor, sf: torch.Tensor, big: float = 2.0**35) -> torch.Tensor:
    """The kernel's `encode="steps"` (`nvfp4/_steps.py`, `e2m1_steps_top`): each strict threshold u is
    one saturating FMA, sat(a * 2^35 - 2^35 * u) in {0, 1} (2^35 * a is exact, so the fp32 add below
    rounds once, as the FMA does; NaN -> 0); the steps' bits (0 or 0x3F800000) summed as int32 and
    times -32 put the count in the top nibble; bit 31 = sign bit & (step 0's bits << 8)."""
    s = torch.where(sf == 0, torch.full_like(sf, NAN), sf)

    def neg_threshold(mid, up):  # -2^35 * u, u made strict (one ulp less magnitude) where ties go up
        t = s * (-big * mid)
        return (t.view(torch.int32) - 1).view(torch.float32) if up else t

    def step_bits(nu):
        r = a * big + nu
        return torch.where(r > 0, r.clamp(max=1.0), torch.zeros_like(r)).view(torch.int32)

    a = p.abs()
    steps = [step_bits(neg_threshold(mid, up)) for mid, up in zip(MIDPOINTS, TIES_UP)]
    top = sum(steps[1:], steps[0]) * -32  # int32 arithmetic wraps, as on the GPU
    top = top | (p.view(torch.int32) & (steps[0] << 8))
    return ((top.to(torch.int64) & 0xFFFFFFFF) >> 28).to(torch.uint8)


def codes_oracle(p: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """`_lib/quant/nvfp4.py`: y = clamp(p / sf, -6, 6), e2m1(y); 0 where sf == 0."""
    y = torch.where(sf == 0, torch.zeros_like(p), (p / sf).clamp(-6.0, 6.0))
    return e2m1_encode(y)


def _check(p: torch.Tensor, sf: torch.Tensor) -> None:
    want = codes_oracle(p, sf)
    for encode in (codes_division_free, codes_search, codes_steps):
        _check_one(encode(p, sf), want, p, sf)


def _check_one(got, want, p, sf) -> None:
    bad = (got != want).nonzero()
    if bad.numel():
        i = tuple(bad[0].tolist())
        pb, sb = p.broadcast_to(got.shape)[i], sf.broadcast_to(got.shape)[i]
        raise AssertionError(f"{bad.shape[0]} codes differ; p={pb.item()!r} sf={sb.item()!r}: {got[i]} vs {want[i]}")


def test_the_mirror_is_the_kernel_rule():
    # Guard against a mirror that agrees with the oracle by construction: the midpoints and tie
    # directions are the ones the kernel source spells out.
    assert MIDPOINTS == [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] and TIES_UP == [False, True] * 3 + [False]
    assert SCALES.shape == (127,) and SCALES[0] == 0 and SCALES[-1] == 448 and SCALES[1] == 2.0**-9


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_input_value_every_scale(dtype):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    g = torch.Generator().manual_seed(1)
    gs_values = [1.0, 2.0**-20, 1 / 3, 2688.0 / 7.3] + (torch.rand(2, generator=g) * 1e4).tolist()
    for gs in gs_values:
        p = (x * torch.tensor(gs, dtype=torch.float32))[:, None]  # the kernel's fp32 product
        _check(p, SCALES[None, :])


def test_every_midpoint_neighbourhood():
    # fp32 numbers within 64 ulps of +-m * sf for every midpoint and scale: every tie and its
    # nearest neighbours, where a division-free rule could round differently.
    mids = torch.tensor(MIDPOINTS, dtype=torch.float32)[:, None] * SCALES[None, 1:]  # exact
    bits = mids.reshape(-1).view(torch.int32)[:, None] + torch.arange(-64, 65, dtype=torch.int32)[None, :]
    near = bits.view(torch.float32)
    sf = SCALES[1:].repeat(len(MIDPOINTS))[:, None]
    _check(near, sf)
    _check(-near, sf)
    _check(near, sf * 2)  # the same p against the next binade's scales (where those exist)


def test_random_fp32_patterns_and_specials():
    g = torch.Generator().manual_seed(2)
    p = torch.randint(-(2**31), 2**31 - 1, (1 << 16,), generator=g, dtype=torch.int64).to(torch.int32)
    p = p.view(torch.float32)
    specials = torch.tensor([0.0, -0.0, NAN, float("inf"), float("-inf"), 3.4e38, -1e-45, 1e-45])
    _check(torch.cat([p, specials])[:, None], SCALES[None, :])


def test_a_wrong_tie_direction_is_caught():
    # The checks can fail: flipping one tie direction (1.25 rounding up) breaks equality.
    global TIES_UP
    saved = TIES_UP
    TIES_UP = [False, True, True, True, False, True, False]
    try:
        with pytest.raises(AssertionError, match="codes differ"):
            test_every_midpoint_neighbourhood()
    finally:
        TIES_UP = saved


def test_a_too_small_step_scale_is_caught():
    # The steps encode needs 2^35 * (a - u) >= 1 for every a > u (u >= 2^-11, so a - u >= 2^-34):
    # with 2^20 the steps next to a threshold are fractions and the codes break.
    mids = torch.tensor(MIDPOINTS, dtype=torch.float32)[:, None] * SCALES[None, 1:]
    near = (mids.reshape(-1).view(torch.int32)[:, None] + torch.arange(-4, 5, dtype=torch.int32)).view(torch.float32)
    sf = SCALES[1:].repeat(len(MIDPOINTS))[:, None]
    assert torch.equal(codes_steps(near, sf), codes_oracle(near, sf))
    assert not torch.equal(codes_steps(near, sf, big=2.0**20), codes_oracle(near, sf))


def e4m3_rn_by_bits(t: torch.Tensor, tie_to_even: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's `_e4m3_rn` in torch int32/fp32 ops: (E4M3 byte, its fp32 value) of t in [0, 448].
    Normal t (>= 2^-6): the fp32 bits rounded to 3 mantissa bits (+0x7FFFF + lsb, ties to even);
    subnormal t: t + 2^14 rounds to a multiple of 2^-9 in one fp32 add, k = its mantissa."""
    bits = t.view(torch.int32)
    lsb = (bits >> 20) & 1 if tie_to_even else 1
    r = (bits + 0x7FFFF + lsb) >> 20
    k = (t + torch.tensor(16384.0)).view(torch.int32) - 0x46800000
    normal = bits >= 0x3C800000
    byte = torch.where(normal, r - 960, k)
    value = torch.where(normal, (r << 20).view(torch.float32), k.float() * 2.0**-9)
    return byte, value


def _rounding_inputs() -> torch.Tensor:
    """Every fp32 within 300 ulps of every E4M3 value and of every midpoint between two (ties both
    ways, normal and subnormal), random t over [0, 448] and below 2^-6, fp32 subnormals, 0, 448."""
    mids = (SCALES[:-1] + SCALES[1:]) / 2  # exact in fp32
    bits = torch.cat([SCALES, mids]).view(torch.int32)[:, None] + torch.arange(-300, 301, dtype=torch.int32)
    t = bits.reshape(-1).view(torch.float32)
    g = torch.Generator().manual_seed(3)
    extra = [torch.rand(1 << 18, generator=g) * 448, torch.rand(1 << 14, generator=g) * 2.0**-6]
    special = torch.tensor([0.0, 1e-45, 2.0**-126, 2.0**-10, 3 * 2.0**-10, 15 * 2.0**-10, 2.0**-6, 448.0])
    t = torch.cat([t, *extra, special])
    return t[(t >= 0) & (t <= 448) & ~torch.signbit(t)]  # the kernel's t: +0 .. 448, never NaN


def test_e4m3_rounding_by_bits_is_exact():
    # The division-free encodes never emit an fp8 instruction (`_e4m3_rn`: Triton 3.6's ptxas
    # mishandled the 16-bit result of cvt.rn.satfinite.e4m3x2.f32, the 03:45 and 05:55 H200
    # failures); the byte and the value must be what the conversion gives, for every t it can see.
    t = _rounding_inputs()
    byte, value = e4m3_rn_by_bits(t)
    want = t.to(torch.float8_e4m3fn)
    bad = (byte != want.view(torch.uint8).to(torch.int32)).nonzero()
    assert not bad.numel(), f"{bad.shape[0]} bytes differ, first t={t[bad[0, 0]].item()!r}"
    assert torch.equal(value.view(torch.int32), want.float().view(torch.int32))
    assert set(byte.tolist()) == set(range(127))  # every byte, subnormals and 448 included
    # Ties really are among the inputs: t exactly halfway rounds to the even neighbour both ways.
    half = torch.tensor([2.0**-10, 3 * 2.0**-10, 1.0625, 1.1875, 432.0])
    assert e4m3_rn_by_bits(half)[0].tolist() == [0, 2, 56, 58, 126]


def test_a_wrong_e4m3_tie_rule_is_caught():
    # Rounding ties away from zero instead of to even must fail the comparison above.
    t = _rounding_inputs()
    byte, _ = e4m3_rn_by_bits(t, tie_to_even=False)
    assert (byte != t.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)).any()
