"""Independent oracles for the quant tests: brute-force nearest-value searches over tables built from
the format definitions, written without the code under test (no shared thresholds or bit tricks)."""

from __future__ import annotations

import math

import numpy as np
import torch

E2M1_MAGS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e4m3_byte_value(b: int) -> float:
    """Value of an E4M3 (fn) byte from its fields: bias 7, subnormals M * 2^-9, S.1111.111 is NaN."""
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return sign * m * 2.0**-9
    return sign * (1 + m / 8) * 2.0 ** (e - 7)


def nearest_even(mag: float, table: list[float]) -> int:
    """Index of the nearest table entry to mag (table ascending); a tie picks the even index."""
    dists = [abs(mag - v) for v in table]
    best = min(dists)
    hits = [i for i, d in enumerate(dists) if d == best]
    return next(i for i in hits if i % 2 == 0) if len(hits) > 1 else hits[0]


def e2m1_oracle(x: float) -> int:
    """E2M1 code of one value: nearest/ties-even, saturate at 6, +0 for zero and NaN."""
    if math.isnan(x):
        return 0
    code = nearest_even(min(abs(x), 6.0), E2M1_MAGS)
    return code | 8 if (x < 0 and code) else code


_E4M3_POS = [e4m3_byte_value(b) for b in range(0x7F)]  # 0x00..0x7E: every finite non-negative value


def e4m3_oracle(x: float) -> int:
    """E4M3 byte of one value as cvt.rn.satfinite does it: sign kept (also for zero), NaN -> 0x7F."""
    if math.isnan(x):
        return 0x7F
    code = nearest_even(min(abs(x), 448.0), _E4M3_POS)
    return code | 0x80 if math.copysign(1.0, x) < 0 else code


def f32(v) -> np.float32:
    return np.float32(v)


def to_list(t: torch.Tensor) -> list:
    return t.detach().cpu().reshape(-1).tolist()
