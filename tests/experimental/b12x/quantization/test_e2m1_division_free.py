"""Reference tier: the division-free E2M1 encode of the NVFP4 kernel (`encode="mul"`) equals the
oracle's `e2m1(clamp((x * gs) / sf))` on every input that can reach it.

The kernel's rule (`nvfp4/_kernel.py`, `_e2m1_codes_mul`, which carries the proof; `encode="search"`
finds the same count by binary search): with p = fl(x * gs),
the code is the index of the last midpoint m with |p| > m * sf (ties down) or |p| >= m * sf (ties up),
| 8 when p < -0.25 * sf, and 0 when sf == 0. Mirrored here in plain torch (fp32, IEEE divisions on the
CPU) and compared exhaustively: every bf16 and fp16 x, under several global scales, against every
E4M3 scale; every fp32 within 64 ulps of every +-m * sf; random fp32 bit patterns. The interpret tier
runs the kernel itself on the same kind of data.
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


def codes_oracle(p: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """`_lib/quant/nvfp4.py`: y = clamp(p / sf, -6, 6), e2m1(y); 0 where sf == 0."""
    y = torch.where(sf == 0, torch.zeros_like(p), (p / sf).clamp(-6.0, 6.0))
    return e2m1_encode(y)


def _check(p: torch.Tensor, sf: torch.Tensor) -> None:
    want = codes_oracle(p, sf)
    for encode in (codes_division_free, codes_search):
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


def test_e4m3_decode_by_bits_is_exact():
    # The division-free encodes decode the scale byte b as fp32_bits(b << 20) * 2^120 (`_e4m3_value`,
    # avoiding the cvt.rn.f16x2.e4m3x2 that Triton 3.6's ptxas miscompiled): equal to the E4M3 value
    # for every byte the kernel can produce (0..126: never negative, never NaN), subnormals included,
    # with IEEE (no flush-to-zero) fp32 arithmetic as the PTX has it.
    b = torch.arange(0, 127, dtype=torch.int32)
    decoded = (b << 20).view(torch.float32) * torch.tensor(2.0**120, dtype=torch.float32)
    assert torch.equal(decoded, SCALES) and torch.equal(decoded.view(torch.int32), SCALES.view(torch.int32))
    assert SCALES[1] == 2.0**-9 and SCALES[126] == 448.0  # the subnormal and the top of the range
