"""E2M1 codec: grid, round-to-nearest ties-to-even-code, saturation, +0, NaN, nibble packing."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import (
    E2M1_GRID,
    e2m1_decode,
    e2m1_encode,
    e2m1_values,
    pack_e2m1,
    unpack_e2m1,
)

from .oracles import E2M1_MAGS, e2m1_oracle, to_list

pytestmark = pytest.mark.reference


def test_grid_and_decode_table():
    assert list(E2M1_GRID) == E2M1_MAGS
    vals = e2m1_values()
    assert to_list(vals) == E2M1_MAGS + [-v for v in E2M1_MAGS]
    assert math.copysign(1.0, float(vals[8])) == -1.0  # code 8 is -0.0
    assert torch.equal(e2m1_decode(torch.arange(16, dtype=torch.uint8)), vals)


# (input, expected code): every midpoint is a tie and goes to the even code.
HAND = [
    (0.25, 0),
    (0.75, 2),
    (1.25, 2),
    (1.75, 4),
    (2.5, 4),
    (3.5, 6),
    (5.0, 6),
    (7.0, 7),
    (0.2500001, 1),
    (0.7499999, 1),
    (2.5000002, 5),
    (4.9999995, 6),
    (5.0000005, 7),
    (-0.25, 0),
    (-0.75, 10),
    (-1.25, 10),
    (-1.75, 12),
    (-2.5, 12),
    (-3.5, 14),
    (-5.0, 14),
    (-7.0, 15),
    (0.5, 1),
    (6.0, 7),
    (-6.0, 15),
    (1e30, 7),
    (-1e30, 15),
]


@pytest.mark.parametrize("value,code", HAND)
def test_hand_vectors_ties_to_even(value, code):
    got = int(e2m1_encode(torch.tensor([value], dtype=torch.float32))[0])
    assert got == code
    assert got == e2m1_oracle(float(torch.tensor(value, dtype=torch.float32)))


def test_decoded_hand_values():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0])
    assert to_list(e2m1_decode(e2m1_encode(x))) == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0]


def test_zero_is_positive_and_no_negative_zero_code():
    x = torch.tensor([0.0, -0.0, -1e-30, -0.25, -0.1, -(2.0**-149)])
    codes = e2m1_encode(x)
    assert to_list(codes) == [0] * 6
    rand = torch.randn(4096) * 3
    assert not (e2m1_encode(rand) == 8).any()


def test_nan_inf_rules():
    x = torch.tensor([math.nan, -math.nan, math.inf, -math.inf])
    assert to_list(e2m1_encode(x)) == [0, 0, 7, 15]


def test_matches_oracle_on_every_midpoint_and_neighbours():
    mids = [(a + b) / 2 for a, b in zip(E2M1_MAGS[:-1], E2M1_MAGS[1:])]
    pts = torch.tensor(mids + E2M1_MAGS, dtype=torch.float32)
    pts = torch.cat([pts, torch.nextafter(pts, torch.full_like(pts, math.inf))])
    pts = torch.cat([pts, torch.nextafter(pts, torch.full_like(pts, -math.inf))])
    pts = torch.cat([pts, -pts])
    assert to_list(e2m1_encode(pts)) == [e2m1_oracle(v) for v in to_list(pts)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=64))
def test_matches_oracle_hypothesis(values):
    x = torch.tensor(values, dtype=torch.float32)
    assert to_list(e2m1_encode(x)) == [e2m1_oracle(v) for v in to_list(x)]


def test_error_at_most_half_step():
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    x = torch.cat([torch.linspace(-6, 6, 20001), ties, -ties])
    err = (e2m1_decode(e2m1_encode(x)) - x).abs()
    # Half the gap of the grid interval holding |x|: 0.25 below 2, 0.5 in [2, 4], 1.0 in [4, 6].
    mag = x.abs()
    half = torch.where(mag < 2, 0.25, torch.where(mag < 4, 0.5, 1.0))
    assert bool((err <= half).all())
    assert float(err.max()) == 1.0  # reached at the 5.0 tie


def test_grid_points_round_trip_exactly():
    vals = e2m1_values()
    codes = e2m1_encode(vals)
    assert to_list(codes) == list(range(8)) + [0] + list(range(9, 16))  # -0 -> +0


def test_pack_low_nibble_first_hand():
    codes = torch.tensor([[1, 2, 15, 8, 0, 7]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert to_list(packed) == [0x21, 0x8F, 0x70]
    assert torch.equal(unpack_e2m1(packed), codes)


def test_pack_round_trip_batched():
    codes = torch.randint(0, 16, (3, 5, 64), dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.shape == (3, 5, 32) and packed.dtype == torch.uint8
    assert torch.equal(unpack_e2m1(packed), codes)
    assert torch.equal(pack_e2m1(unpack_e2m1(packed)), packed)


def test_pack_errors():
    with pytest.raises(ValueError, match="last dim must be even"):
        pack_e2m1(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="packed must be uint8"):
        unpack_e2m1(torch.zeros(3, dtype=torch.int32))


def test_empty():
    assert e2m1_encode(torch.empty(0)).shape == (0,)
    assert pack_e2m1(torch.empty(2, 0, dtype=torch.uint8)).shape == (2, 0)
