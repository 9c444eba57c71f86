"""FP4 E2M1: the one code grid, encode (fp32 -> 4-bit codes), decode, and nibble packing.

Codes 0..7 are the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign (codes 8..15 negate them).

Encode rules (the bits a kernel must reproduce):
- Round to nearest on the grid; a value exactly between two neighbours goes to the EVEN code. Because
  the code's low bit is the E2M1 mantissa bit, this is IEEE round-to-nearest-even, i.e. what
  `cvt.rn.satfinite.e2m1x2.f32` rounds to.
- Saturate: |v| > 5 (above the 4|6 midpoint) -> 6, including +-Inf -> +-6 (codes 7 / 15).
- A result of magnitude zero is always code 0 (+0): -0.0 and small negatives never produce code 8. A
  kernel using `cvt` must clear the sign of a zero result (hardware keeps it).
- NaN -> code 0 (+0). E2M1 has no NaN; we choose +0 so a poisoned element adds nothing to a dot
  product instead of a full-scale +-6. A kernel must select NaN away before `cvt` (`v == v ? v : 0`).

Packing: element 2i goes in the LOW nibble of byte i, element 2i+1 in the high nibble.
"""

from __future__ import annotations

import torch

# Magnitudes of codes 0..7. Everything else (thresholds, decode table) derives from this one grid.
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = E2M1_GRID[-1]

# Midpoints between neighbouring codes i and i+1 (all exact in fp32). A tie at midpoint i rounds up
# exactly when code i+1 is even, so that comparison is inclusive (>=); the others are strict (>).
_MIDPOINTS = tuple((lo + hi) / 2 for lo, hi in zip(E2M1_GRID[:-1], E2M1_GRID[1:]))
_TIE_ROUNDS_UP = tuple((i + 1) % 2 == 0 for i in range(len(_MIDPOINTS)))


def e2m1_values(device=None) -> torch.Tensor:
    """fp32 [16]: the value of each code 0..15 (code 8 is -0.0)."""
    mags = torch.tensor(E2M1_GRID, dtype=torch.float32, device=device)
    return torch.cat([mags, -mags])


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Codes (uint8 in 0..15, same shape) of `x` read as fp32; rules in the module docstring."""
    x = x.float()
    mag = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    # Counting the midpoints below |x| gives the magnitude code. NaN fails every comparison -> 0;
    # +Inf passes all of them -> 7, which is the saturation.
    for mid, inclusive in zip(_MIDPOINTS, _TIE_ROUNDS_UP):
        code += (mag >= mid) if inclusive else (mag > mid)
    negative = (x < 0) & (code != 0)
    return code | (negative.to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of codes (any integer dtype, values 0..15), same shape."""
    return e2m1_values(codes.device)[codes.long()]


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> uint8 [..., K/2]; element 2i in the low nibble. K must be even."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_e2m1: last dim must be even, got shape {tuple(codes.shape)}")
    codes = codes.to(torch.uint8)
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/2] -> codes uint8 [..., K]; inverse of `pack_e2m1`."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack_e2m1: packed must be uint8, got {packed.dtype}")
    lo = packed & 0xF
    hi = packed >> 4
    return torch.stack([lo, hi], dim=-1).flatten(-2)
