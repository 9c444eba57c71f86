"""pack_weight: every checkpoint form -> the kernels' layout, bytes unchanged where the checkpoint defines
them, and the exact errors for what does not fit."""

import pytest
import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared.weight import Weight, pack_weight
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

pytestmark = pytest.mark.reference

N, K = 160, 256  # N not a multiple of the 128-row scale atom: padding is exercised


def _w(seed=0, n=N, k=K):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02


def test_modelopt_nvfp4_checkpoint():
    w = _w()
    ws2 = torch.tensor(Q.nvfp4_global_scale(w).item()).reciprocal()  # ModelOpt stores 1 / gs
    packed, sf = Q.quantize_nvfp4(w, 1.0 / ws2)
    got = pack_weight(packed, sf, global_scale=ws2, global_scale_kind="dequant")
    assert isinstance(got, Weight) and got.recipe == "nvfp4" and got.shape == (N, K)
    assert torch.equal(got.values, packed)
    assert torch.equal(got.scales.view(torch.uint8), Q.swizzle_scales(sf, 0).view(torch.uint8))
    assert got.scales.dtype == torch.float8_e4m3fn
    assert torch.equal(got.alpha, ws2.reshape(1))
    # the multiplier spelling of the same scale gives the same alpha
    gs = torch.ones(()) / ws2
    assert torch.allclose(pack_weight(packed, sf, global_scale=gs).alpha, ws2.reshape(1), rtol=1e-7)
    # already swizzled storage passes through; float4_e2m1fn_x2 values are accepted as bytes
    again = pack_weight(packed, got.scales, global_scale=ws2, global_scale_kind="dequant")
    assert torch.equal(again.scales.view(torch.uint8), got.scales.view(torch.uint8))
    fp4x2 = getattr(torch, "float4_e2m1fn_x2", None)
    if fp4x2 is not None:
        assert torch.equal(pack_weight(packed.view(fp4x2), sf).values, packed)
    deq = R.weight_dequantized(got)
    assert torch.allclose(deq, Q.dequantize_nvfp4(packed, sf, 1.0 / ws2), rtol=1e-6, atol=1e-9)


def test_ocp_mxfp4_blocks_flat_and_3d():
    w = _w(1)
    packed, sc = Q.quantize_mxfp4(w)
    flat = pack_weight(packed, sc)
    assert flat.recipe == "mxfp4" and torch.equal(flat.values, packed)
    assert torch.equal(flat.scales, Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE))
    blocks = pack_weight(packed.reshape(N, K // 32, 16), sc.view(getattr(torch, "float8_e8m0fnu", torch.uint8)))
    assert torch.equal(blocks.values, packed) and torch.equal(blocks.scales.view(torch.uint8), flat.scales)
    assert float(flat.alpha) == 1.0


def test_mxfp8_and_block_fp8_forms():
    w = _w(2)
    vals, sc = Q.quantize_mxfp8(w)
    mx = pack_weight(vals, sc)
    assert mx.recipe == "mxfp8" and torch.equal(mx.values.view(torch.uint8), vals.view(torch.uint8))
    assert torch.equal(mx.scales, Q.swizzle_scales(sc, Q.UE8M0_ONE_BYTE))

    bvals, binv = Q.quantize_block_fp8_weight(w)
    blk = pack_weight(bvals, binv)
    assert blk.recipe == "fp8_block" and torch.equal(blk.scales, binv)
    lowered = pack_weight(bvals, binv, recipe="mxfp8")
    want = Q.deepseek_block_fp8_linear_to_mx(bvals, binv)
    assert lowered.recipe == "mxfp8" and torch.equal(lowered.scales, want.scales)
    assert torch.equal(lowered.values.view(torch.uint8), want.weight.view(torch.uint8))


def test_tensor_fp8_and_input_scale():
    w = _w(3)
    s = w.abs().max() / 448
    q = Q.e4m3_encode(w / s)
    t = pack_weight(q, s.reshape(1), input_scale=0.5)
    assert t.recipe == "fp8_tensor" and torch.equal(t.scales, s.reshape(1))
    assert float(t.input_scale) == 0.5
    assert torch.allclose(R.weight_dequantized(t), Q.e4m3_decode(q) * s)


@pytest.mark.parametrize("recipe", ["nvfp4", "mxfp4", "mxfp8", "fp8_block", "fp8_tensor"])
def test_high_precision_weights_quantize_with_the_oracles(recipe):
    w = _w(4)
    got = pack_weight(w, recipe=recipe)
    deq = R.weight_dequantized(got)
    rel = ((deq - w).norm() / w.norm()).item()
    assert rel < {"nvfp4": 0.12, "mxfp4": 0.2, "mxfp8": 0.04, "fp8_block": 0.04, "fp8_tensor": 0.04}[recipe]
    if recipe == "mxfp8":
        vals, sc = Q.quantize_mxfp8(w)
        assert torch.equal(got.values.view(torch.uint8), vals.view(torch.uint8))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pack_weight(_w()), r"weight is float32 \[160, 256\] \(high precision\): pass recipe="),
        (lambda: pack_weight(_w(), recipe="int4"), r"recipe must be one of"),
        (
            lambda: pack_weight(torch.zeros(N, K // 2, dtype=torch.uint8), torch.zeros(N, 3, dtype=torch.uint8)),
            r"scale must be \[160, 8\] row-major or flat swizzled \[2048\] for weight \[N=160, K=256\], got uint8 \[160, 3\]",
        ),
        (
            lambda: pack_weight(
                torch.zeros(N, K // 2, dtype=torch.uint8), torch.zeros(N, 8, dtype=torch.uint8), global_scale=2.0
            ),
            r"global_scale is an NVFP4 argument; recipe mxfp4 has none",
        ),
        (
            lambda: pack_weight(_w(), recipe="mxfp8", global_scale=2.0),
            r"global_scale is an NVFP4 argument; recipe mxfp8",
        ),
        (
            lambda: pack_weight(torch.zeros(N, K // 2, dtype=torch.uint8), None),
            r"scale is required for a packed FP4 weight",
        ),
        (
            lambda: pack_weight(torch.zeros(N, K, dtype=torch.int32)),
            r"weight must be uint8/float4_e2m1fn_x2 \(packed FP4\), float8_e4m3fn, or bf16/fp16/fp32 with recipe=",
        ),
        (
            lambda: pack_weight(_w(), recipe="nvfp4", global_scale_kind="inverse"),
            r"global_scale_kind must be one of \('multiplier', 'dequant'\), got 'inverse'",
        ),
        (
            lambda: pack_weight(torch.zeros(N, K, dtype=torch.float8_e4m3fn), torch.ones(3, 3)),
            r"weight_scale_inv must be float32 \[2, 2\] for weight \[160, 256\], got torch.float32 \[3, 3\]",
        ),
    ],
)
def test_errors_name_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("recipe,n,k", [("nvfp4", 256, 160), ("mxfp8", 100, 256)])
def test_a_cpu_weight_packs_shapes_no_kernel_takes(recipe, n, k):
    """K % 128 != 0 or N % 16 != 0: packed on the CPU all the same (the reference runs it); on CUDA pack_weight
    rejects it (test_gpu.py::test_pack_weight_rejects_shapes_no_kernel_takes)."""
    w = pack_weight(_w(n=n, k=k), recipe=recipe)
    assert (w.n, w.k, w.recipe) == (n, k, recipe)


def test_logical_nk_reads_every_checkpoint_form():
    """pack_weight checks a CUDA weight's N and K from its shape before quantizing (`logical_nk`)."""
    from flashinfer.experimental.b12x.gemm._shared.weight import logical_nk

    n, k = 48, 384
    assert logical_nk(torch.zeros(n, k, dtype=torch.bfloat16)) == (n, k)
    assert logical_nk(torch.zeros(n, k).to(torch.float8_e4m3fn)) == (n, k)
    assert logical_nk(torch.zeros(n, k // 2, dtype=torch.uint8)) == (n, k)
    assert logical_nk(torch.zeros(n, k // 32, 16, dtype=torch.uint8)) == (n, k)
    assert logical_nk(torch.zeros(n * k)) is None and logical_nk(torch.zeros(n, 3, 8, dtype=torch.uint8)) is None
