"""E4M3 (saturating), UE8M0 codecs, the power-of-two round-up rule and the NaN-ignoring block amax."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import (
    block_amax,
    e4m3_decode,
    e4m3_encode,
    mx_scale_round_up,
    ue8m0_decode,
    ue8m0_round_up,
)

from .oracles import e4m3_byte_value, e4m3_oracle, to_list

pytestmark = pytest.mark.reference


def _bytes(q: torch.Tensor) -> list[int]:
    return to_list(q.view(torch.uint8))


def test_e4m3_decode_every_byte():
    got = to_list(e4m3_decode(torch.arange(256, dtype=torch.uint8)))
    for b, v in enumerate(got):
        want = e4m3_byte_value(b)
        assert (math.isnan(v) and math.isnan(want)) or v == want, b


E4M3_HAND = [
    (448.0, 0x7E),
    (464.0, 0x7E),
    (480.0, 0x7E),
    (1e9, 0x7E),
    (math.inf, 0x7E),
    (-math.inf, 0xFE),
    (-500.0, 0xFE),
    (math.nan, 0x7F),
    (-math.nan, 0x7F),
    (1.0, 0x38),
    (1.1, 0x39),
    (1.0625, 0x38),
    (1.1875, 0x3A),
    (2.0**-9, 0x01),
    (2.0**-10, 0x00),
    (3 * 2.0**-11, 0x01),
    (-0.0, 0x80),
    (-(2.0**-11), 0x80),
    (0.0, 0x00),
    (240.0, 0x77),
    (0.875 * 2.0**-6, 0x07),
]


@pytest.mark.parametrize("value,byte", E4M3_HAND)
def test_e4m3_hand_vectors(value, byte):
    x = torch.tensor([value], dtype=torch.float32)
    assert _bytes(e4m3_encode(x)) == [byte]
    assert e4m3_oracle(float(x[0])) == byte


def test_e4m3_every_midpoint_and_neighbour():
    finite = torch.tensor([e4m3_byte_value(b) for b in range(0x7F)], dtype=torch.float32)
    mids = (finite[1:] + finite[:-1]) / 2  # exact in fp32
    pts = torch.cat([finite, mids])
    pts = torch.cat([pts, torch.nextafter(pts, pts + 1), torch.nextafter(pts, pts - 1)])
    pts = torch.cat([pts, -pts])
    assert _bytes(e4m3_encode(pts)) == [e4m3_oracle(v) for v in to_list(pts)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=64))
def test_e4m3_matches_oracle_hypothesis(values):
    x = torch.tensor(values, dtype=torch.float32)
    assert _bytes(e4m3_encode(x)) == [e4m3_oracle(v) for v in to_list(x)]


def test_e4m3_accepts_low_precision_inputs():
    x = torch.randn(256).to(torch.bfloat16)
    assert torch.equal(e4m3_encode(x).view(torch.uint8), e4m3_encode(x.float()).view(torch.uint8))


def test_ue8m0_decode_every_byte():
    got = ue8m0_decode(torch.arange(256, dtype=torch.uint8))
    assert got.dtype == torch.float32
    for e in range(255):
        assert float(got[e]) == 2.0 ** (e - 127), e
    assert math.isnan(float(got[255]))
    assert float(got[0]) == 2.0**-127  # fp32 subnormal, not flushed
    e8 = torch.tensor([127, 130], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    assert to_list(ue8m0_decode(e8)) == [1.0, 8.0]


def _round_up_oracle(s: float) -> int:
    """Smallest e with 2^(e-127) >= s for a normal fp32 s (math, not bits)."""
    m, e = math.frexp(s)  # s = m * 2^e, m in [0.5, 1)
    return e - 1 + 127 if m == 0.5 else e + 127


def test_ue8m0_round_up_hand():
    s = torch.tensor([1.0, 1.0000001, 1.5, 2.0, 0.75, 2.0**-126, 2.0**127, 0.0, math.inf, math.nan])
    assert to_list(ue8m0_round_up(s)) == [127, 128, 128, 128, 127, 1, 254, 127, 255, 255]


def test_ue8m0_round_up_literal_bit_rule_edges():
    # Above 2^127 no finite power of two covers s; a subnormal s bumps exponent field 0 -> 1.
    s = torch.tensor([2.0**127 * 1.5, 2.0**-130, 2.0**-149])
    assert to_list(ue8m0_round_up(s)) == [255, 1, 1]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=2.0**-126, max_value=2.0**127, width=32), min_size=1, max_size=32))
def test_ue8m0_round_up_is_smallest_power_of_two_at_least_s(values):
    s = torch.tensor(values, dtype=torch.float32)
    got = to_list(ue8m0_round_up(s))
    assert got == [_round_up_oracle(v) for v in to_list(s)]
    dec = ue8m0_decode(torch.tensor(got, dtype=torch.uint8))
    assert bool((dec >= s).all()) and bool((dec / 2 < s).all())


def test_mx_scale_round_up_hand():
    amax = torch.tensor([448.0, 449.0, 1.0, 0.0, 896.0, 224.0, 300.0, math.inf])
    # 448 -> s = 1 exactly -> 127; 449 -> s just above 1 -> 2; 1.0 -> 1/448 in (2^-9, 2^-8] -> 2^-8.
    assert to_list(mx_scale_round_up(amax)) == [127, 128, 119, 127, 128, 126, 127, 255]
    # Another element type: amax 6 over E2M1's 6 is exactly 1.
    assert to_list(mx_scale_round_up(torch.tensor([6.0, 7.0]), 6.0)) == [127, 128]


def test_block_amax_ignores_nan_and_keeps_inf():
    x = torch.tensor([[1.0, -3.0, math.nan, 2.0], [math.nan] * 4, [0.5, -math.inf, 1.0, math.nan], [0.0] * 4])
    assert to_list(block_amax(x)) == [3.0, 0.0, math.inf, 0.0]
    assert block_amax(torch.empty(0, 16)).shape == (0,)


def test_as_bytes_error_names_dtype():
    with pytest.raises(ValueError, match="one-byte dtype.*float32"):
        ue8m0_decode(torch.zeros(2))
