"""The 128x4 swizzled scale-factor layout consumed by block-scaled MMA (FORMATS.md).

A [rows, cols] grid of one-byte scales (cols = K / block) is padded to rows % 128 == 0 and
cols % 4 == 0 and stored so that each 512-byte atom holds 128 rows x 4 scale columns:

    offset(r, c) = (r // 128) * (cols_pad // 4) * 512 + (c // 4) * 512
                   + (r % 32) * 16 + ((r // 32) % 4) * 4 + (c % 4)

Inside an atom the 16 bytes at (r % 32) are rows r, r+32, r+64, r+96, 4 columns each: one 16-byte
load gives a thread the scales of the four rows its MMA fragment spans. Padding bytes are the caller's
`pad_value`: 0 for NVFP4 weight scales, 127 (1.0) for MX scales.

Leading dims are batch dims (e.g. experts): [..., rows, cols] <-> [..., swizzled_size(rows, cols)].
"""

from __future__ import annotations

import torch

from .scales import as_bytes

ATOM_ROWS = 128
ATOM_COLS = 4
ATOM_BYTES = ATOM_ROWS * ATOM_COLS


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def swizzled_size(rows: int, cols: int) -> int:
    """Bytes of the swizzled storage of a [rows, cols] scale grid (padding included)."""
    return _round_up(rows, ATOM_ROWS) * _round_up(cols, ATOM_COLS)


def swizzle_scales(scales: torch.Tensor, pad_value: int) -> torch.Tensor:
    """[..., rows, cols] one-byte scales -> flat [..., swizzled_size(rows, cols)], same dtype.

    Works on the uint8 view, so uint8, float8_e4m3fn and float8_e8m0fnu all pass through bit-exact;
    `pad_value` is the byte written into the padding (0..255).
    """
    if scales.dim() < 2:
        raise ValueError(f"swizzle_scales: scales must be [..., rows, cols], got shape {tuple(scales.shape)}")
    if not 0 <= int(pad_value) <= 255:
        raise ValueError(f"swizzle_scales: pad_value must be a byte 0..255, got {pad_value}")
    src = as_bytes(scales)
    *batch, rows, cols = src.shape
    rows_pad, cols_pad = _round_up(rows, ATOM_ROWS), _round_up(cols, ATOM_COLS)
    padded = torch.full((*batch, rows_pad, cols_pad), int(pad_value), dtype=torch.uint8, device=src.device)
    padded[..., :rows, :cols] = src
    # r = rb*128 + r4*32 + r32 and c = cb*4 + c4; the offset formula orders them (rb, cb, r32, r4, c4).
    nb = len(batch)
    atoms = padded.view(*batch, rows_pad // 128, 4, 32, cols_pad // 4, 4)
    order = (*range(nb), nb, nb + 3, nb + 2, nb + 1, nb + 4)
    flat = atoms.permute(order).reshape(*batch, rows_pad * cols_pad)
    return flat.view(scales.dtype)


def unswizzle_scales(storage: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Flat swizzled [..., swizzled_size(rows, cols)] -> [..., rows, cols], same dtype; drops padding."""
    src = as_bytes(storage)
    size = swizzled_size(rows, cols)
    if src.dim() < 1 or src.shape[-1] != size:
        raise ValueError(
            f"unswizzle_scales: storage must be [..., {size}] for rows={rows}, cols={cols}, "
            f"got shape {tuple(storage.shape)}"
        )
    *batch, _ = src.shape
    rows_pad, cols_pad = _round_up(rows, ATOM_ROWS), _round_up(cols, ATOM_COLS)
    nb = len(batch)
    atoms = src.reshape(*batch, rows_pad // 128, cols_pad // 4, 32, 4, 4)  # (rb, cb, r32, r4, c4)
    order = (*range(nb), nb, nb + 3, nb + 2, nb + 1, nb + 4)  # -> (rb, r4, r32, cb, c4)
    grid = atoms.permute(order).reshape(*batch, rows_pad, cols_pad)
    return grid[..., :rows, :cols].contiguous().view(storage.dtype)
