"""NVFP4 reference: hand-computed blocks, an element-by-element numpy-fp32 oracle, error bounds."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import (
    dequantize_nvfp4,
    e2m1_decode,
    nvfp4_global_scale,
    quantize_nvfp4,
    swizzle_scales,
    unpack_e2m1,
    unswizzle_scales,
)

from .oracles import e2m1_oracle, e4m3_byte_value, e4m3_oracle, f32, to_list

pytestmark = pytest.mark.reference


def _codes(packed):
    return to_list(unpack_e2m1(packed))


def _sf_bytes(sf):
    return to_list(sf.view(torch.uint8))


def nvfp4_oracle(x: torch.Tensor, gs: float) -> tuple[list[int], list[int]]:
    """FORMATS.md formula one element at a time in numpy fp32 scalars: (codes, scale bytes)."""
    gs = f32(gs)
    codes, sf_bytes = [], []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for block in x.float().reshape(-1, 16).tolist():
            vals = [f32(v) for v in block]
            amax = max([abs(v) for v in vals if not math.isnan(v)], default=f32(0))
            t = min((gs * f32(amax)) / f32(6), f32(448))
            b = e4m3_oracle(float(t))
            sf = f32(e4m3_byte_value(b))
            sf_bytes.append(b)
            for v in vals:
                y = f32(0) if sf == 0 else (v * gs) / sf
                codes.append(e2m1_oracle(float(y)))
    return codes, sf_bytes


BLOCK_A = [6, -6, 3, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.1, 0, 1, -1, 0.5, 4]


def test_hand_block_unit_scale():
    # gs = 1, amax = 6 -> sf = e4m3(1.0) = 0x38 and the codes are plain E2M1 of x.
    packed, sf = quantize_nvfp4(torch.tensor([BLOCK_A]), 1.0)
    assert _sf_bytes(sf) == [0x38]
    assert _codes(packed) == [7, 15, 5, 0, 2, 2, 4, 4, 6, 6, 0, 0, 2, 10, 1, 6]
    assert to_list(packed) == [0xF7, 0x05, 0x22, 0x44, 0x66, 0x00, 0xA2, 0x61]
    deq = dequantize_nvfp4(packed, sf, 1.0)
    assert to_list(deq) == [6, -6, 3, 0, 1, 1, 2, 2, 4, 4, 0, 0, 1, -1, 0.5, 4]


def test_hand_block_global_scale_multiplies():
    # gs = 2, amax = 3: t = 2*3/6 = 1 -> sf = 1; y = 2x.
    x = torch.tensor([[3.0, 1.25, -0.375, 0.625] + [0.0] * 12])
    packed, sf = quantize_nvfp4(x, 2.0)
    assert _sf_bytes(sf) == [0x38]
    assert _codes(packed)[:4] == [7, 4, 10, 2]  # y = 6, 2.5 -> 2 (tie), -0.75 -> -1 (tie), 1.25 -> 1 (tie)
    assert to_list(dequantize_nvfp4(packed, sf, 2.0))[:4] == [3.0, 1.0, -0.5, 0.5]


def test_hand_block_rounded_scale():
    # gs = 1, amax = 6.6: t = 1.1 -> e4m3 1.125 (0x39); values are divided by 1.125, ties after scaling.
    x = torch.tensor([[6.6, 2.0, 1.0, 0.5, 0.28125, 1.96875, -0.84375] + [0.0] * 9])
    packed, sf = quantize_nvfp4(x, 1.0)
    assert _sf_bytes(sf) == [0x39]
    # y = 5.87 -> 6, 1.78 -> 2, 0.89 -> 1, 0.44 -> 0.5, 0.25 -> 0 (tie), 1.75 -> 2 (tie), -0.75 -> -1 (tie)
    assert _codes(packed)[:7] == [7, 4, 2, 1, 0, 4, 10]
    assert to_list(dequantize_nvfp4(packed, sf, 1.0))[:7] == [6.75, 2.25, 1.125, 0.5625, 0.0, 2.25, -1.125]


def test_scale_saturates_at_448():
    x = torch.tensor([[3000.0, 448.0 * 3] + [0.0] * 14])
    packed, sf = quantize_nvfp4(x, 1.0)
    assert _sf_bytes(sf) == [0x7E]
    assert _codes(packed)[:2] == [7, 5]  # 3000/448 = 6.7 saturates to 6; 1344/448 = 3 exactly


@pytest.mark.parametrize(
    "amax,byte,codes",
    [
        (0.0, 0x00, None),
        (6 * 2.0**-11, 0x00, None),
        (6 * 2.0**-10, 0x00, None),
        (6 * 1.5 * 2.0**-10, 0x01, [6, 12]),  # sf = 2^-9 > t: y = 4.5 -> 4 (tie), -2.25 -> -2
        (6 * 2.0**-9, 0x01, [7, 13]),  # sf = t = 2^-9: y = 6, -3
    ],
)
def test_tiny_and_zero_blocks(amax, byte, codes):
    # t = amax / 6; below 2^-10 (and at the 2^-10 tie, to even) the scale is 0 and the block all zero.
    x = torch.tensor([[amax, -amax / 2] + [0.0] * 14])
    packed, sf = quantize_nvfp4(x, 1.0)
    assert _sf_bytes(sf) == [byte]
    if byte == 0:
        assert to_list(packed) == [0] * 8
        assert to_list(dequantize_nvfp4(packed, sf, 1.0)) == [0.0] * 16
    else:
        assert _codes(packed)[:2] == codes


def test_nan_and_inf():
    x = torch.tensor([[math.inf, math.nan, 1.0, -math.inf] + [0.5] * 12, [math.nan] * 16])
    packed, sf = quantize_nvfp4(x, 1.0)
    # Row 0: amax Inf -> sf saturates to 448; +-Inf -> +-6, NaN -> +0, finite values underflow to 0.
    # Row 1: all NaN -> amax 0 -> sf 0 -> all +0.
    assert _sf_bytes(sf) == [0x7E, 0x00]
    codes = _codes(packed)
    assert codes[:4] == [7, 0, 0, 15] and codes[4:16] == [0] * 12 and codes[16:] == [0] * 16
    assert (codes, _sf_bytes(sf)) == nvfp4_oracle(x, 1.0)


def test_matches_oracle_random_bf16():
    torch.manual_seed(0)
    x = (torch.randn(7, 96) * torch.logspace(-3, 3, 96)).to(torch.bfloat16)
    gs = float(nvfp4_global_scale(x))
    packed, sf = quantize_nvfp4(x, gs)
    assert (_codes(packed), _sf_bytes(sf)) == nvfp4_oracle(x, gs)


def _check_round_trip(x: torch.Tensor, gs: float):
    packed, sf = quantize_nvfp4(x, gs)
    q = e2m1_decode(unpack_e2m1(packed)).double().reshape(-1, 16)
    sf64 = sf.float().double().reshape(-1, 1)
    y = x.double().reshape(-1, 16) * gs / sf64  # the scaled value the code approximates
    y = torch.where(sf64 == 0, torch.zeros_like(y), y)
    mag = y.abs()
    half = torch.where(mag < 2, 0.25, torch.where(mag < 4, 0.5, 1.0))
    inside = mag <= 6
    # Half a quantization step for every element on the grid's range (plus fp32 rounding of y) ...
    assert bool(((q - y).abs() <= half + 1e-6 * mag)[inside].all())
    # ... and saturation to exactly +-6 beyond it, which a normal scale keeps within 6 * (1 + 2^-4).
    assert bool((q[~inside] == 6 * torch.sign(y[~inside])).all())
    normal = (sf64 >= 2.0**-6).expand_as(y)
    assert bool((mag[normal] <= 6 * (1 + 2.0**-4) * (1 + 1e-6)).all())
    # Dequantize agrees with the decoded codes.
    deq = dequantize_nvfp4(packed, sf, gs).double().reshape(-1, 16)
    assert torch.allclose(deq, q * sf64 / gs, rtol=1e-6, atol=0)


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(0, 5),
    kb=st.integers(1, 6),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    exp=st.integers(-12, 12),
    seed=st.integers(0, 2**16),
    use_tensor_amax=st.booleans(),
)
def test_hypothesis_shapes(m, kb, dtype, exp, seed, use_tensor_amax):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, kb * 16, generator=gen) * 2.0**exp).to(dtype)
    gs = float(nvfp4_global_scale(x)) if use_tensor_amax else 2.0 ** (-exp)
    packed, sf = quantize_nvfp4(x, gs)
    assert packed.shape == (m, kb * 8) and packed.dtype == torch.uint8
    assert sf.shape == (m, kb) and sf.dtype == torch.float8_e4m3fn
    assert (_codes(packed), _sf_bytes(sf)) == nvfp4_oracle(x, gs)
    _check_round_trip(x.float(), gs)


def test_global_scale_helper_and_tensor_argument():
    x = torch.tensor([[1.0, -4.0] + [0.0] * 14])
    gs = nvfp4_global_scale(x)
    assert gs.dtype == torch.float32 and float(gs) == float(f32(2688) / f32(4))
    assert float(nvfp4_global_scale(torch.zeros(2, 16))) == 1.0
    a = quantize_nvfp4(x, gs)
    b = quantize_nvfp4(x, float(gs))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))
    # The top of the tensor maps to the top of both grids: amax * gs / 6 = 448 -> sf 448, code 6.
    assert _sf_bytes(a[1]) == [0x7E] and _codes(a[0])[1] == 15


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_global_scale_ignores_non_finite(dtype):
    # amax over the finite values only (3.0 here): NaN and +-Inf are skipped, not folded into a 0 scale.
    x = torch.tensor([[math.inf, -math.inf, math.nan, 3.0] + [0.5] * 12, [1.0, -2.0] + [math.nan] * 14]).to(dtype)
    gs = nvfp4_global_scale(x)
    assert gs.dtype == torch.float32 and gs.shape == () and float(gs) == float(f32(2688) / f32(3))
    assert float(gs) == float(nvfp4_global_scale(x.float().nan_to_num(0.0, 0.0, 0.0)))
    # Quantizing with it follows the per-block Inf rule: sf saturates to 448 and +-Inf encode +-6.
    packed, sf = quantize_nvfp4(x, gs)
    assert (_codes(packed), _sf_bytes(sf)) == nvfp4_oracle(x, float(gs))
    assert _sf_bytes(sf)[0] == 0x7E and _codes(packed)[:3] == [7, 15, 0]
    # Nothing finite and nonzero: 1.0, like an all-zero or empty tensor.
    for nothing in ([math.inf] * 16, [-math.inf, math.nan] * 8, [0.0] * 16, []):
        assert float(nvfp4_global_scale(torch.tensor(nothing).reshape(-1, 16).to(dtype))) == 1.0


def test_global_scale_clamped_to_fp32_max():
    # 2688 / 2^-120 = 2^131.4 overflows fp32: the helper returns the largest finite fp32 instead of Inf.
    tiny = 2.0**-120
    with np.errstate(over="ignore"):
        assert math.isinf(float(f32(2688) / f32(tiny)))
    x = torch.tensor([[tiny, -tiny / 2] + [0.0] * 14])
    gs = nvfp4_global_scale(x)
    assert float(gs) == torch.finfo(torch.float32).max
    packed, sf = quantize_nvfp4(x, gs)  # a valid global_scale: accepted
    assert (_codes(packed), _sf_bytes(sf)) == nvfp4_oracle(x, float(gs))
    assert _sf_bytes(sf) == [0x63] and _codes(packed)[:2] == [7, 13]  # t = 256/6 -> sf 44; y 5.8 -> 6, -2.9 -> -3


def test_device_global_scale_is_never_read_on_the_host():
    # A meta tensor has no values: any host read (float(), .item()) raises. The whole oracle path,
    # global scale included, must go through on one, a negative "value" included (a device scale is
    # trusted; only CPU tensors and Python numbers are checked).
    x = torch.empty(3, 32, device="meta")
    gs = nvfp4_global_scale(x)
    assert gs.device.type == "meta" and gs.shape == () and gs.dtype == torch.float32
    packed, sf = quantize_nvfp4(x, gs)
    assert packed.shape == (3, 16) and packed.device.type == "meta" and sf.shape == (3, 2)
    assert dequantize_nvfp4(packed, sf, torch.tensor([-1.0], device="meta")).shape == (3, 32)
    with pytest.raises(ValueError, match="global_scale must be a scalar"):
        quantize_nvfp4(x, torch.ones(2, device="meta"))  # the size is metadata: still checked


def test_batch_dims_and_swizzle():
    x = torch.randn(2, 3, 64)
    packed, sf = quantize_nvfp4(x, 100.0)
    flat_p, flat_sf = quantize_nvfp4(x.reshape(6, 64), 100.0)
    assert torch.equal(packed.reshape(6, 32), flat_p)
    assert torch.equal(sf.reshape(6, 4).view(torch.uint8), flat_sf.view(torch.uint8))
    sw = swizzle_scales(flat_sf, 0)
    assert torch.equal(unswizzle_scales(sw, 6, 4).view(torch.uint8), flat_sf.view(torch.uint8))


def test_errors():
    with pytest.raises(ValueError, match=r"K % 16 == 0, got shape \(2, 24\)"):
        quantize_nvfp4(torch.zeros(2, 24), 1.0)
    for bad in (0.0, -1.0, math.inf, math.nan, 1e39):
        for arg in (bad, torch.tensor([bad], dtype=torch.float64)):  # a CPU tensor is checked too
            with pytest.raises(ValueError, match="global_scale must be finite and > 0"):
                quantize_nvfp4(torch.zeros(2, 16), arg)
    with pytest.raises(ValueError, match="global_scale must be a scalar"):
        quantize_nvfp4(torch.zeros(2, 16), torch.ones(2))
    packed, sf = quantize_nvfp4(torch.zeros(2, 32), 1.0)
    with pytest.raises(ValueError, match=r"scales must be \[\.\.\., 2\]"):
        dequantize_nvfp4(packed, sf[:, :1], 1.0)
