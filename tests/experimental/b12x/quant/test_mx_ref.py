"""MXFP8 / MXFP4 references: hand-computed blocks, scale rules against math, per-element oracles."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import (
    dequantize_mxfp4,
    dequantize_mxfp8,
    e2m1_decode,
    mxfp4_scale_floor,
    quantize_mxfp4,
    quantize_mxfp8,
    unpack_e2m1,
)

from .oracles import e2m1_oracle, e4m3_oracle, f32, to_list

pytestmark = pytest.mark.reference


def _block(*head):
    return list(head) + [0.0] * (32 - len(head))


def _bytes(t):
    return to_list(t.view(torch.uint8))


def _mx_oracle(x: torch.Tensor, fmt: str) -> tuple[list[int], list[int]]:
    """Scale byte from amax by math (frexp), then each element through the format's oracle."""
    codes, scales = [], []
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for block in x.float().reshape(-1, 32).tolist():
            amax = max([abs(v) for v in block if not math.isnan(v)], default=0.0)
            if amax == 0:
                byte = 127
            elif math.isinf(amax):
                byte = 255
            elif fmt == "mxfp8":
                s = float(f32(amax) / f32(448))
                m, e = math.frexp(s)  # smallest power of two >= s
                byte = (e - 1 if m == 0.5 else e) + 127
            else:
                _, e = math.frexp(amax)  # floor(log2(amax)) = e - 1; minus emax(E2M1) = 2
                byte = max(e - 1 - 2 + 127, 0)
            scales.append(byte)
            scale = f32(math.nan) if byte == 255 else f32(2.0 ** (byte - 127))
            for v in block:
                y = float(f32(v) / scale)
                codes.append(e4m3_oracle(y) if fmt == "mxfp8" else e2m1_oracle(y))
    return codes, scales


def test_mxfp8_hand_blocks():
    x = torch.tensor(
        [
            _block(448.0, -448.0, 1.0, 0.5, 300.0),  # s = 1 exactly -> byte 127
            _block(449.0, 2.0),  # s just above 1 -> 2 (byte 128); 224.5 -> 224
            _block(1.0, 0.3, -(2.0**-17)),  # s = 1/448 -> 2^-8 (byte 119); x * 256
            _block(),  # all zero -> byte 127
        ]
    )
    values, scales = quantize_mxfp8(x)
    assert scales.dtype == torch.uint8 and to_list(scales) == [127, 128, 119, 127]
    v = _bytes(values)
    assert v[0:5] == [0x7E, 0xFE, 0x38, 0x30, 0x79]  # 300 -> 288 (nearest)
    assert v[32:34] == [0x76, 0x38]  # 224.5 -> 224; 2 / 2 = 1
    assert v[64:67] == [0x78, 0x6A, 0x81]  # 256; 76.8 -> 80; -2^-9 (smallest subnormal, sign kept)
    assert v[96:] == [0] * 32
    deq = to_list(dequantize_mxfp8(values, scales))
    assert deq[0:5] == [448.0, -448.0, 1.0, 0.5, 288.0]
    assert deq[32:34] == [448.0, 2.0] and deq[64:67] == [1.0, 0.3125, -(2.0**-17)]


def test_mxfp4_hand_blocks():
    x = torch.tensor(
        [
            _block(6.0, -1.5, 0.25),  # floor(log2 6) = 2 -> byte 127: plain E2M1
            _block(7.0, 5.0),  # still byte 127: 7 saturates to 6 (the OCP floor rule's clipping)
            _block(8.0, 1.0, 0.5, -0.75),  # floor(log2 8) = 3 -> byte 128: x / 2
            _block(0.75, 0.1),  # floor(log2 0.75) = -1 -> byte 124: x * 8
            _block(),
        ]
    )
    packed, scales = quantize_mxfp4(x)
    assert to_list(scales) == [127, 127, 128, 124, 127]
    codes = to_list(unpack_e2m1(packed))
    assert codes[0:3] == [7, 11, 0]  # 0.25 -> 0 (tie to even)
    assert codes[32:34] == [7, 6]  # 5 -> 4 (tie)
    assert codes[64:68] == [6, 1, 0, 9]  # 4, 0.5, 0.25 -> 0 (tie), -0.375 -> -0.5
    assert codes[96:98] == [7, 2]  # 6, 0.8 -> 1
    assert codes[128:] == [0] * 32
    deq = to_list(dequantize_mxfp4(packed, scales))
    assert deq[0:3] == [6.0, -1.5, 0.0] and deq[32] == 6.0 and deq[64:68] == [8.0, 1.0, 0.0, -1.0]
    assert deq[96:98] == [0.75, 0.125]


def test_mxfp4_scale_floor_rule():
    amax = torch.tensor([6.0, 7.99, 8.0, 1.0, 0.0, math.inf, 2.0**-126, 2.0**-140, 3e38])
    # byte = exponent field - 2, clamped at 0; zero -> 127; Inf -> 255.
    assert to_list(mxfp4_scale_floor(amax)) == [127, 127, 128, 125, 127, 255, 0, 0, 252]


def test_nan_inf_blocks():
    x = torch.tensor([_block(1.0, math.nan, -2.0), _block(math.inf, 1.0), _block(math.nan, math.nan)])
    v8, s8 = quantize_mxfp8(x)
    assert to_list(s8) == [120, 255, 127]  # 2/448 -> 2^-7; Inf -> NaN scale; NaN-only -> amax 0 -> 127
    b = _bytes(v8)
    assert b[0:3] == [0x70, 0x7F, 0xF8]  # 128, NaN, -256
    assert b[32:64] == [0x7F] * 32  # everything over a NaN scale is NaN
    assert b[64:66] == [0x7F, 0x7F]
    d8 = dequantize_mxfp8(v8, s8)
    assert bool(torch.isnan(d8[1]).all()) and float(d8[0, 2]) == -2.0
    p4, s4 = quantize_mxfp4(x)
    assert to_list(s4) == [126, 255, 127]
    c4 = to_list(unpack_e2m1(p4))
    # floor(log2 2) - 2 -> scale 2^-1: 1 -> 2, NaN -> +0, -2 -> -4.
    assert c4[0:3] == [4, 0, 14] and c4[32:64] == [0] * 32 and c4[64:66] == [0, 0]
    d4 = dequantize_mxfp4(p4, s4)
    assert bool(torch.isnan(d4[1]).all()) and to_list(d4[0])[:3] == [1.0, 0.0, -2.0]
    assert (c4, to_list(s4)) == _mx_oracle(x, "mxfp4")
    assert (b, to_list(s8)) == _mx_oracle(x, "mxfp8")


def _check_bounds(x: torch.Tensor):
    v8, s8 = quantize_mxfp8(x)
    scale = (2.0 ** (s8.double() - 127)).repeat_interleave(32, -1)
    err = (dequantize_mxfp8(v8, s8).double() - x.double()).abs()
    # Half an E4M3 step: 2^-4 relative in the normal range, 2^-10 * scale among subnormals; no clipping.
    assert bool((err <= torch.maximum(x.double().abs() * 2.0**-4, scale * 2.0**-10)).all())
    assert bool((v8.float().abs() <= 448).all())
    p4, s4 = quantize_mxfp4(x)
    scale = (2.0 ** (s4.double() - 127)).repeat_interleave(32, -1)
    y = x.double() / scale
    q = e2m1_decode(unpack_e2m1(p4)).double()
    mag = y.abs()
    half = torch.where(mag < 2, 0.25, torch.where(mag < 4, 0.5, 1.0))
    assert bool(((q - y).abs() <= half)[mag <= 6].all())
    assert bool((q[mag > 6] == 6 * torch.sign(y[mag > 6])).all()) and bool((mag < 8).all())


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(0, 5),
    kb=st.integers(1, 4),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    exp=st.integers(-20, 20),
    seed=st.integers(0, 2**16),
)
def test_hypothesis_shapes(m, kb, dtype, exp, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, kb * 32, generator=gen) * 2.0**exp).to(dtype)
    if dtype == torch.float16:
        x = x.clamp(-60000, 60000)
    v8, s8 = quantize_mxfp8(x)
    p4, s4 = quantize_mxfp4(x)
    assert v8.shape == (m, kb * 32) and v8.dtype == torch.float8_e4m3fn and s8.shape == (m, kb)
    assert p4.shape == (m, kb * 16) and p4.dtype == torch.uint8 and s4.shape == (m, kb)
    assert (_bytes(v8), to_list(s8)) == _mx_oracle(x, "mxfp8")
    assert (to_list(unpack_e2m1(p4)), to_list(s4)) == _mx_oracle(x, "mxfp4")
    _check_bounds(x.float())


def test_batch_dims():
    x = torch.randn(2, 3, 64)
    v, s = quantize_mxfp8(x)
    v2, s2 = quantize_mxfp8(x.reshape(6, 64))
    assert torch.equal(v.reshape(6, 64).view(torch.uint8), v2.view(torch.uint8))
    assert torch.equal(s.reshape(6, 2), s2)
    assert torch.equal(dequantize_mxfp8(v, s).reshape(6, 64), dequantize_mxfp8(v2, s2))


def test_errors():
    with pytest.raises(ValueError, match=r"quantize_mxfp8: x must be \[\.\.\., K\] with K % 32 == 0"):
        quantize_mxfp8(torch.zeros(2, 48))
    with pytest.raises(ValueError, match=r"quantize_mxfp4: .*got shape \(16,\)"):
        quantize_mxfp4(torch.zeros(16))
    v, s = quantize_mxfp8(torch.zeros(2, 64))
    with pytest.raises(
        ValueError, match=r"dequantize_mxfp8: scales must be UE8M0 bytes \[2, 2\], got torch.uint8 \[2, 1\]"
    ):
        dequantize_mxfp8(v, s[:, :1])
