"""Checkpoint -> kernel layout converters: bytes pass through, scales swizzle, alpha and gs_a."""

import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import (
    BlockFp8Linear,
    MxFp4Experts,
    MxFp8Linear,
    NvFp4Linear,
    deepseek_block_fp8_linear,
    deepseek_block_fp8_linear_to_mx,
    dequantize_mxfp4,
    dequantize_nvfp4,
    modelopt_nvfp4_linear,
    nvfp4_global_scale,
    ocp_mxfp4_experts,
    quantize_block_fp8_weight,
    quantize_mxfp4,
    quantize_nvfp4,
    requantize_block_fp8_to_mx,
    swizzle_scales,
    swizzled_size,
    unswizzle_scales,
)

from .oracles import f32

pytestmark = pytest.mark.reference


def _modelopt_checkpoint(n=200, k=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    gs_w = nvfp4_global_scale(w)
    packed, sf = quantize_nvfp4(w, gs_w)
    return w, packed, sf, (1 / gs_w).float(), torch.tensor(0.05)


def test_modelopt_nvfp4_linear():
    w, packed, sf, ws2, in_s = _modelopt_checkpoint()
    out = modelopt_nvfp4_linear(packed, sf, ws2, in_s)
    assert isinstance(out, NvFp4Linear) and (out.n, out.k) == (200, 96)
    assert torch.equal(out.weight, packed)
    assert out.weight_scale.dtype == torch.float8_e4m3fn
    assert out.weight_scale.shape == (swizzled_size(200, 6),) == (256 * 8,)
    assert torch.equal(unswizzle_scales(out.weight_scale, 200, 6).view(torch.uint8), sf.view(torch.uint8))
    # NVFP4 weight-scale padding is 0 (rows 200..255, columns 6..7).
    pad = torch.ones(256, 8, dtype=torch.bool)
    pad[:200, :6] = False
    pad_bytes = swizzle_scales(pad.to(torch.uint8), 0).bool()
    assert bool((out.weight_scale.view(torch.uint8)[pad_bytes] == 0).all())
    assert float(out.alpha) == float(f32(float(ws2)) * f32(0.05))
    assert float(out.input_global_scale) == float(f32(1) / f32(float(in_s)))
    assert float(out.weight_scale_2) == float(ws2)
    # The layout moves only: dequantizing with gs_w = 1 / weight_scale_2 reproduces the checkpoint.
    deq = dequantize_nvfp4(out.weight, unswizzle_scales(out.weight_scale, 200, 6), 1 / ws2)
    assert torch.equal(deq, dequantize_nvfp4(packed, sf, 1 / ws2))
    # Half the top E2M1 step (1 of 6) of each block's range, scale rounding included.
    amax16 = w.abs().view(200, 6, 16).amax(-1, keepdim=True)
    assert bool(((deq - w).abs().view(200, 6, 16) <= amax16 / 6 * (1 + 2.0**-4)).all())


def test_modelopt_accepts_uint8_scales_and_shaped_scalars_and_no_input_scale():
    _, packed, sf, ws2, in_s = _modelopt_checkpoint(n=64, k=32)
    a = modelopt_nvfp4_linear(packed, sf.view(torch.uint8), ws2.reshape(1), in_s.reshape(1))
    b = modelopt_nvfp4_linear(packed, sf, float(ws2), float(in_s))
    assert torch.equal(a.weight_scale.view(torch.uint8), b.weight_scale.view(torch.uint8))
    assert float(a.alpha) == float(b.alpha) and a.alpha.shape == ()
    weight_only = modelopt_nvfp4_linear(packed, sf, ws2)
    assert weight_only.input_global_scale is None and float(weight_only.alpha) == float(ws2)


def test_modelopt_errors():
    _, packed, sf, ws2, in_s = _modelopt_checkpoint(n=64, k=32)
    with pytest.raises(ValueError, match=r"weight must be uint8 \[N, K/2\], got torch.int8"):
        modelopt_nvfp4_linear(packed.view(torch.int8), sf, ws2, in_s)
    with pytest.raises(ValueError, match=r"weight_scale must be float8_e4m3fn \[64, 2\], got .* \[64, 1\]"):
        modelopt_nvfp4_linear(packed, sf[:, :1], ws2, in_s)
    with pytest.raises(ValueError, match=r"weight must have K % 16 == 0, got K = 24"):
        modelopt_nvfp4_linear(packed[:, :12], sf, ws2, in_s)
    with pytest.raises(ValueError, match="weight_scale_2 must be a float32 scalar"):
        modelopt_nvfp4_linear(packed, sf, torch.ones(2), in_s)
    with pytest.raises(ValueError, match="input_scale must be finite and > 0, got 0.0"):
        modelopt_nvfp4_linear(packed, sf, ws2, 0.0)


def _mxfp4_experts(e=3, rows=70, k=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(e, rows, k, generator=gen)
    return w, *quantize_mxfp4(w)


@pytest.mark.parametrize("four_d", [False, True])
def test_ocp_mxfp4_experts(four_d):
    w, packed, scales = _mxfp4_experts()
    blocks = packed.view(3, 70, 3, 16) if four_d else packed
    out = ocp_mxfp4_experts(blocks, scales)
    assert isinstance(out, MxFp4Experts) and (out.rows, out.k) == (70, 96)
    assert torch.equal(out.weight, packed)
    assert out.scales.dtype == torch.uint8 and out.scales.shape == (3, swizzled_size(70, 3))
    for i in range(3):
        assert torch.equal(out.scales[i], swizzle_scales(scales[i], 127))
    assert torch.equal(unswizzle_scales(out.scales, 70, 3), scales)
    # Padding is 127 (scale 1.0): 128 * 4 slots per expert, 70 * 3 of them real.
    assert int((out.scales == 127).sum(dim=1).min()) >= 128 * 4 - 70 * 3
    deq = dequantize_mxfp4(out.weight, unswizzle_scales(out.scales, 70, 3))
    assert torch.equal(deq, dequantize_mxfp4(packed, scales))


def test_ocp_mxfp4_errors():
    _, packed, scales = _mxfp4_experts(e=2, rows=8, k=64)
    with pytest.raises(ValueError, match=r"blocks must be uint8 \[E, rows, K/2\]"):
        ocp_mxfp4_experts(packed[0], scales)
    with pytest.raises(ValueError, match=r"must end in 16 bytes"):
        ocp_mxfp4_experts(packed.view(2, 8, 4, 8), scales)
    with pytest.raises(ValueError, match=r"scales must be uint8 \[2, 8, 2\], got torch.uint8 \[2, 8, 1\]"):
        ocp_mxfp4_experts(packed, scales[..., :1])
    with pytest.raises(ValueError, match="K % 32 == 0, got K = 48"):
        ocp_mxfp4_experts(packed[..., :24], scales)


def test_deepseek_block_fp8_pass_through_and_to_mx():
    torch.manual_seed(0)
    w = torch.randn(200, 256) * 0.05
    q, s = quantize_block_fp8_weight(w)
    out = deepseek_block_fp8_linear(q.t().contiguous().t(), s)
    assert isinstance(out, BlockFp8Linear) and (out.n, out.k) == (200, 256)
    assert out.weight.is_contiguous() and torch.equal(out.weight.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(out.weight_scale_inv, s)
    mx = deepseek_block_fp8_linear_to_mx(q, s)
    assert isinstance(mx, MxFp8Linear) and (mx.n, mx.k) == (200, 256)
    values, scales = requantize_block_fp8_to_mx(q, s)
    assert torch.equal(mx.weight.view(torch.uint8), values.view(torch.uint8))
    assert mx.scales.shape == (swizzled_size(200, 8),)
    assert torch.equal(mx.scales, swizzle_scales(scales, 127))
    assert torch.equal(unswizzle_scales(mx.scales, 200, 8), scales)


def test_deepseek_errors():
    q, s = quantize_block_fp8_weight(torch.randn(128, 256))
    with pytest.raises(ValueError, match=r"deepseek_block_fp8_linear: weight_scale_inv must be float32 \[1, 2\]"):
        deepseek_block_fp8_linear(q, s.double())
    with pytest.raises(ValueError, match=r"deepseek_block_fp8_linear_to_mx: weight must be e4m3 \[N, K\]"):
        deepseek_block_fp8_linear_to_mx(q.float(), s)
