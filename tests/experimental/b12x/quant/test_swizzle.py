"""128x4 swizzled scale layout: the exact offset formula, padding bytes, round trips, batch dims."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import swizzle_scales, swizzled_size, unswizzle_scales

pytestmark = pytest.mark.reference


def _hand_swizzle(scales: torch.Tensor, pad: int) -> list[int]:
    """FORMATS.md offset formula, one element at a time."""
    rows, cols = scales.shape
    rows_pad, cols_pad = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = [pad] * (rows_pad * cols_pad)
    for r in range(rows):
        for c in range(cols):
            off = (r // 128) * (cols_pad // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + (c % 4)
            out[off] = int(scales[r, c])
    return out


@pytest.mark.parametrize("rows,cols", [(1, 1), (5, 3), (32, 4), (33, 5), (128, 4), (130, 9), (257, 2)])
@pytest.mark.parametrize("pad", [0, 127])
def test_offset_formula_vs_hand_loop(rows, cols, pad):
    scales = torch.randint(0, 255, (rows, cols), dtype=torch.uint8)
    flat = swizzle_scales(scales, pad)
    assert flat.shape == (swizzled_size(rows, cols),) and flat.dtype == torch.uint8
    assert flat.tolist() == _hand_swizzle(scales, pad)
    assert torch.equal(unswizzle_scales(flat, rows, cols), scales)


def test_known_offsets():
    # One atom: row r, col c lands at (r % 32) * 16 + (r // 32) * 4 + c.
    scales = torch.zeros(128, 4, dtype=torch.uint8)
    scales[0, 0], scales[1, 0], scales[32, 0], scales[0, 1], scales[127, 3] = 1, 2, 3, 4, 5
    flat = swizzle_scales(scales, 0)
    assert [int(flat[i]) for i in (0, 16, 4, 1, 31 * 16 + 12 + 3)] == [1, 2, 3, 4, 5]
    # Second column atom starts at 512, second row atom after all (cols_pad / 4) column atoms.
    grid = torch.zeros(256, 8, dtype=torch.uint8)
    grid[0, 4], grid[128, 0], grid[128, 4] = 7, 8, 9
    flat = swizzle_scales(grid, 0)
    assert (int(flat[512]), int(flat[1024]), int(flat[1536])) == (7, 8, 9)


@pytest.mark.parametrize("pad", [0, 127])
def test_padding_bytes(pad):
    scales = torch.full((5, 3), 200, dtype=torch.uint8)
    flat = swizzle_scales(scales, pad)
    assert swizzled_size(5, 3) == 512
    real = set(_offsets(5, 3))
    assert all(int(flat[i]) == (200 if i in real else pad) for i in range(512))
    assert int((flat == pad).sum()) == 512 - 15


def _offsets(rows, cols):
    cols_pad = -(-cols // 4) * 4
    return [
        (r // 128) * (cols_pad // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + (c % 4)
        for r in range(rows)
        for c in range(cols)
    ]


def test_sizes():
    assert [swizzled_size(r, c) for r, c in [(0, 0), (1, 1), (128, 4), (129, 4), (128, 5), (300, 17)]] == [
        0,
        512,
        512,
        1024,
        1024,
        384 * 20,
    ]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn, torch.float8_e8m0fnu])
def test_dtype_preserved_bit_exact(dtype):
    raw = torch.randint(0, 255, (40, 6), dtype=torch.uint8)
    scales = raw.view(dtype)
    flat = swizzle_scales(scales, 127)
    assert flat.dtype == dtype
    assert torch.equal(flat.view(torch.uint8), swizzle_scales(raw, 127))
    back = unswizzle_scales(flat, 40, 6)
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), raw)


def test_batched_equals_per_item():
    scales = torch.randint(0, 255, (3, 2, 70, 5), dtype=torch.uint8)
    flat = swizzle_scales(scales, 127)
    assert flat.shape == (3, 2, swizzled_size(70, 5))
    for i in range(3):
        for j in range(2):
            assert torch.equal(flat[i, j], swizzle_scales(scales[i, j], 127))
    assert torch.equal(unswizzle_scales(flat, 70, 5), scales)


def test_non_contiguous_input():
    base = torch.randint(0, 255, (9, 40), dtype=torch.uint8)
    view = base.t()  # [40, 9], strided
    assert torch.equal(swizzle_scales(view, 0), swizzle_scales(view.contiguous(), 0))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 300), st.integers(1, 12), st.integers(0, 255))
def test_round_trip_hypothesis(rows, cols, pad):
    scales = torch.randint(0, 256, (rows, cols), dtype=torch.uint8)
    flat = swizzle_scales(scales, pad)
    assert torch.equal(unswizzle_scales(flat, rows, cols), scales)
    assert int((flat == pad).sum()) >= swizzled_size(rows, cols) - rows * cols


def test_errors():
    with pytest.raises(ValueError, match=r"scales must be \[\.\.\., rows, cols\]"):
        swizzle_scales(torch.zeros(4, dtype=torch.uint8), 0)
    with pytest.raises(ValueError, match="pad_value must be a byte"):
        swizzle_scales(torch.zeros(4, 4, dtype=torch.uint8), 256)
    with pytest.raises(ValueError, match="one-byte dtype"):
        swizzle_scales(torch.zeros(4, 4), 0)
    with pytest.raises(ValueError, match=r"storage must be \[\.\.\., 512\] for rows=4, cols=4"):
        unswizzle_scales(torch.zeros(100, dtype=torch.uint8), 4, 4)
