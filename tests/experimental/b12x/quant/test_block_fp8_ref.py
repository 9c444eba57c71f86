"""DeepSeek block-FP8 reference: 128x128 weights, per-token-per-group activations, MXFP8 lowering."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashinfer.experimental.b12x._lib.quant import (
    dequantize_block_fp8_act,
    dequantize_block_fp8_weight,
    dequantize_mxfp8,
    quantize_block_fp8_act,
    quantize_block_fp8_weight,
    quantize_mxfp8,
    requantize_block_fp8_to_mx,
)

from .oracles import e4m3_oracle, f32, to_list

pytestmark = pytest.mark.reference


def _bytes(t):
    return to_list(t.view(torch.uint8))


def _block_oracle(vals: list[float]) -> tuple[float, list[int]]:
    """(scale, codes) of one block: s = amax / 448 in fp32 (1.0 when 0), codes e4m3(x / s)."""
    amax = max([abs(v) for v in vals if not math.isnan(v)], default=0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        s = f32(amax) / f32(448)
        s = f32(1) if s == 0 else s
        return float(s), [e4m3_oracle(float(f32(v) / s)) for v in vals]


def _weight_oracle(w: torch.Tensor):
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    scales = torch.zeros(nb, kb)
    codes = torch.zeros(n, k, dtype=torch.int64)
    for i in range(nb):
        for j in range(kb):
            tile = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]
            s, c = _block_oracle(to_list(tile.float()))
            scales[i, j] = s
            codes[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = torch.tensor(c).view(tile.shape)
    return scales, codes


def test_weight_hand_blocks():
    w = torch.zeros(256, 128)
    w[0, 0], w[5, 7], w[127, 127] = 448.0, -1.0, 300.0  # amax 448 -> scale 1
    w[128, 0], w[200, 100] = 896.0, 3.0  # amax 896 -> scale 2
    q, s = quantize_block_fp8_weight(w)
    assert s.dtype == torch.float32 and to_list(s) == [1.0, 2.0]
    b = q.view(torch.uint8)
    assert [int(b[0, 0]), int(b[5, 7]), int(b[127, 127])] == [0x7E, 0xB8, 0x79]  # 300 -> 288
    assert [int(b[128, 0]), int(b[200, 100])] == [0x7E, 0x3C]  # 896 / 2 = 448; 3 / 2 = 1.5
    deq = dequantize_block_fp8_weight(q, s)
    assert [float(deq[0, 0]), float(deq[5, 7]), float(deq[127, 127])] == [448.0, -1.0, 288.0]
    assert [float(deq[128, 0]), float(deq[200, 100])] == [896.0, 3.0]


def test_zero_block_has_unit_scale():
    q, s = quantize_block_fp8_weight(torch.zeros(128, 256))
    assert to_list(s) == [1.0, 1.0] and _bytes(q) == [0] * (128 * 256)
    qa, sa = quantize_block_fp8_act(torch.zeros(3, 128))
    assert to_list(sa) == [1.0] * 3


def test_partial_edge_blocks():
    torch.manual_seed(1)
    w = torch.randn(130, 200) * 10
    q, s = quantize_block_fp8_weight(w)
    assert s.shape == (2, 2) and q.shape == (130, 200)
    ref_s, ref_codes = _weight_oracle(w)
    assert torch.equal(s, ref_s)
    assert torch.equal(q.view(torch.uint8).long(), ref_codes)
    # The bottom-right block holds only w[128:, 128:]; its amax is theirs alone.
    assert float(s[1, 1]) == float(f32(float(w[128:, 128:].abs().max())) / f32(448))


def test_nan_and_inf_blocks():
    x = torch.zeros(2, 128)
    x[0, 0], x[0, 1], x[0, 2] = math.nan, 2.24, -1.0
    x[1, 0], x[1, 1] = math.inf, 1.0
    q, s = quantize_block_fp8_act(x)
    assert float(s[0]) == float(f32(2.24) / f32(448)) and math.isinf(float(s[1]))
    b = _bytes(q)
    assert b[0] == 0x7F and b[1] == 0x7E  # NaN stays NaN; amax element -> 448
    assert b[128] == 0x7F and b[129] == 0x00  # Inf / Inf -> NaN, finite / Inf -> +0
    deq = dequantize_block_fp8_act(q, s)
    assert bool(torch.isnan(deq[1]).all())  # 0 * Inf: the whole block is poisoned
    assert float(deq[0, 1]) == pytest.approx(2.24, rel=2**-4)


def test_act_hand_and_group_size():
    x = torch.tensor([[224.0, 1.0, -0.5] + [0.0] * 125 + [7.0] + [0.0] * 127])
    q, s = quantize_block_fp8_act(x)
    assert to_list(s) == [0.5, 7.0 / 448.0]
    assert _bytes(q)[:3] == [0x7E, 0x40, 0xB8]  # 448, 2, -1
    q32, s32 = quantize_block_fp8_act(x, group=32)
    assert s32.shape == (1, 8) and float(s32[0, 0]) == 0.5 and float(s32[0, 1]) == 1.0
    assert torch.equal(dequantize_block_fp8_act(q32, s32, group=32)[0, :3], torch.tensor([224.0, 1.0, -0.5]))


@settings(max_examples=15, deadline=None)
@given(
    m=st.integers(0, 4),
    groups=st.integers(1, 3),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    exp=st.integers(-15, 15),
    seed=st.integers(0, 2**16),
)
def test_act_hypothesis(m, groups, dtype, exp, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, groups * 128, generator=gen) * 2.0**exp).to(dtype)
    q, s = quantize_block_fp8_act(x)
    assert q.shape == x.shape and s.shape == (m, groups) and s.dtype == torch.float32
    for r in range(m):
        for g in range(groups):
            ref_s, ref_c = _block_oracle(to_list(x[r, g * 128 : (g + 1) * 128].float()))
            assert float(s[r, g]) == ref_s
            assert _bytes(q[r, g * 128 : (g + 1) * 128].contiguous()) == ref_c
    # Half an E4M3 step: 2^-4 relative for normals, 2^-10 * s among subnormals.
    err = (dequantize_block_fp8_act(q, s).double() - x.double()).abs()
    bound = torch.maximum(x.double().abs() * 2.0**-4, s.double().repeat_interleave(128, -1) * 2.0**-10)
    assert bool((err <= bound).all())


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 260), kb=st.integers(1, 5), exp=st.integers(-6, 6), seed=st.integers(0, 2**16))
def test_weight_hypothesis(n, kb, exp, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, kb * 32, generator=gen) * 2.0**exp
    q, s = quantize_block_fp8_weight(w)
    ref_s, ref_codes = _weight_oracle(w)
    assert torch.equal(s, ref_s) and torch.equal(q.view(torch.uint8).long(), ref_codes)


def test_requantize_to_mx_is_a_fresh_quantization():
    # One 128x128 block with scale 0.75 (not a power of two). Group 0 holds the block amax, group 1
    # only small values: each 32-group gets the scale of its own amax.
    w = torch.zeros(128, 128)
    w[0, 0] = 336.0  # 448 * 0.75
    w[0, 32:64] = 0.75 * torch.linspace(-1, 1, 32)
    q, s = quantize_block_fp8_weight(w)
    assert to_list(s) == [0.75]
    values, scales = requantize_block_fp8_to_mx(q, s)
    assert values.dtype == torch.float8_e4m3fn and scales.dtype == torch.uint8 and scales.shape == (128, 4)
    # Group 0: 336 / 448 = 0.75 -> rounded up to 1 (127). Group 1: 0.75 / 448 -> 2^-9 (118).
    # Zero groups: 127. Rounding the block scale up and keeping the codes would give 127 everywhere.
    assert to_list(scales[0]) == [127, 118, 127, 127]
    deq_block = dequantize_block_fp8_weight(q, s)
    v_ref, s_ref = quantize_mxfp8(deq_block)
    assert torch.equal(values.view(torch.uint8), v_ref.view(torch.uint8)) and torch.equal(scales, s_ref)
    err = (dequantize_mxfp8(values, scales) - deq_block).abs()
    assert bool((err <= deq_block.abs() * 2.0**-4).all())


def test_requantize_random_matches_composition():
    torch.manual_seed(3)
    w = torch.randn(200, 256) * 0.02
    q, s = quantize_block_fp8_weight(w)
    values, scales = requantize_block_fp8_to_mx(q, s)
    v_ref, s_ref = quantize_mxfp8(dequantize_block_fp8_weight(q, s))
    assert torch.equal(values.view(torch.uint8), v_ref.view(torch.uint8)) and torch.equal(scales, s_ref)


def test_errors():
    with pytest.raises(ValueError, match=r"weight must be \[N, K\]"):
        quantize_block_fp8_weight(torch.zeros(128))
    with pytest.raises(ValueError, match="K % 128 == 0"):
        quantize_block_fp8_act(torch.zeros(2, 100))
    q, s = quantize_block_fp8_weight(torch.zeros(128, 256))
    with pytest.raises(ValueError, match=r"weight_scale_inv must be float32 \[1, 2\] for weight \[128, 256\]"):
        dequantize_block_fp8_weight(q, s[:, :1])
    with pytest.raises(ValueError, match="K % 32 == 0"):
        requantize_block_fp8_to_mx(torch.zeros(4, 48, dtype=torch.float8_e4m3fn), torch.ones(1, 1))
    with pytest.raises(ValueError, match=r"scales must be \[2, 1\]"):
        dequantize_block_fp8_act(torch.zeros(2, 128, dtype=torch.float8_e4m3fn), torch.ones(2, 2))
