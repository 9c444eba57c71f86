"""The decode and tiled kernels' own logic, run on the CPU PTX emulator against the fp32 reference.

This is the `interpret` tier for the CuTe kernels: the kernels' helpers (dequantization, fragment
assembly, addressing, reduction, epilogue) execute unchanged on `EmuOps`; the drivers in emulated.py
mirror the kernel bodies' loops and barriers. Odd shapes on purpose: N not a multiple of the CTA
tile, K chunks that do not divide evenly among warps, idle warps, M in both token tiles and across
M tiles. Out-of-bounds or misaligned accesses fail inside the emulator.
"""

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

from . import emulated as E
from .emulated import poisoned_launch_args as _args
from .helpers import PAIRS, check_tolerance, make_operands

pytestmark = pytest.mark.interpret


@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
@pytest.mark.parametrize("m", [1, 3, 9, 16])
def test_decode_every_pair(a_fmt, b_fmt, m):
    ops = make_operands(a_fmt, b_fmt, m, 48, 384, seed=m)
    cfg = KD.DecodeConfig(warps=2, tiles=2, ntiles=1 if m <= 8 else 2, unroll=1)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("a_fmt, b_fmt", [("nvfp4", "nvfp4"), ("bfloat16", "mxfp8"), ("fp8_block", "fp8_block")])
def test_decode_default_config_and_output_dtypes(a_fmt, b_fmt, out_dtype):
    ops = make_operands(a_fmt, b_fmt, 8, 64, 256, seed=7)
    args, alpha = _args(ops, out_dtype)
    out = E.run_decode(a_fmt, b_fmt, out_dtype, KD.default_config(8), args, alpha)  # 8 warps, 2 chunks: idle warps
    check_tolerance(out, ops, out_dtype)


@pytest.mark.parametrize("cfg", [KD.DecodeConfig(4, 1, 2, 1), KD.DecodeConfig(1, 4, 1, 1)])
def test_decode_other_tilings(cfg):
    ops = make_operands("bfloat16", "nvfp4", 11 if cfg.ntiles == 2 else 5, 80, 512, seed=3)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode("bfloat16", "nvfp4", "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
@pytest.mark.parametrize("m", [17, 24, 32, 33, 48, 64])
def test_decode32_decode64_every_pair(a_fmt, b_fmt, m):
    """The decode32 / decode64 buckets' shape-blind configs (what mm runs without a plan): 4 and 8
    token tiles, tokens past M in partly and wholly idle token tiles, N = 48 not a multiple of BN."""
    bucket = L.bucket_for(m)
    assert bucket == ("decode32" if m <= 32 else "decode64")
    cfg = L.default_config(bucket)
    assert cfg.max_m == L.BUCKET_MAX_M[bucket]
    ops = make_operands(a_fmt, b_fmt, m, 48, 384, seed=m)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.parametrize(
    "cfg, m",
    [
        (KD.DecodeConfig(16, 1, 4, 2), 30),  # 16 warps over 5 chunks: 11 idle; unrolled
        (KD.DecodeConfig(4, 4, 4, 1), 25),  # 64 rows per CTA against N = 80: a partial CTA
        (KD.DecodeConfig(8, 1, 8, 2), 57),
        (KD.DecodeConfig(2, 2, 8, 1), 64),
    ],
)
@pytest.mark.parametrize("a_fmt, b_fmt", [("bfloat16", "nvfp4"), ("mxfp8", "mxfp8"), ("float16", "mxfp8")])
def test_decode32_decode64_other_tilings(cfg, m, a_fmt, b_fmt):
    ops = make_operands(a_fmt, b_fmt, m, 80, 640, seed=m + cfg.warps)
    args, alpha = _args(ops, "float16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "float16", cfg, args, alpha), ops, "float16")


@pytest.mark.parametrize("m", [33, 64])
def test_decode64_heuristic_config_fp32_out_is_exact_to_summation_order(m):
    """fp32 output of exactly representable operands: only the summation order may differ from the
    reference, so this pins every token tile's accumulation (a dropped or doubled pass fails)."""
    ops = make_operands("nvfp4", "nvfp4", m, 96, 1024, seed=21)
    cfg = L.default_config(L.bucket_for(m), 2048, 1024, "nvfp4")
    args, alpha = _args(ops, "float32")
    out = E.run_decode("nvfp4", "nvfp4", "float32", cfg, args, alpha)
    check_tolerance(out, ops, "float32")
    ref = ops.reference("float32")
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())


@pytest.mark.parametrize("prefetch", [1, 2, 4])
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_decode_weight_prefetch_every_pair(a_fmt, b_fmt, prefetch):
    """The prefetch pipeline: 7 chunks over 2 warps (3 and 4 each) with 1..4 chunks of weight loads
    ahead, so the pipeline runs past every warp's last chunk (those loads must touch no memory: the
    emulator faults on any access outside the tensors) and its stages rotate in order."""
    m = 5 if prefetch != 2 else 13
    ops = make_operands(a_fmt, b_fmt, m, 48, 896, seed=prefetch)
    cfg = KD.DecodeConfig(warps=2, tiles=2, ntiles=1 if m <= 8 else 2, unroll=1, prefetch=prefetch)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.parametrize(
    "cfg, m",
    [
        (KD.DecodeConfig(4, 1, 1, 2, 1), 1),  # unrolled pipeline
        (KD.DecodeConfig(16, 4, 2, 1, 2), 16),  # more warps than chunks: idle warps load nothing
        (KD.DecodeConfig(4, 2, 4, 1, 1), 30),
        (KD.DecodeConfig(4, 2, 8, 1, 2), 64),
    ],
)
def test_decode_weight_prefetch_tilings_fp32_out(cfg, m):
    ops = make_operands("nvfp4", "nvfp4", m, 80, 1280, seed=m)
    args, alpha = _args(ops, "float32")
    out = E.run_decode("nvfp4", "nvfp4", "float32", cfg, args, alpha)
    check_tolerance(out, ops, "float32")
    plain = E.run_decode("nvfp4", "nvfp4", "float32", KD.DecodeConfig(cfg.warps, cfg.tiles, cfg.ntiles, 1), args, alpha)
    assert torch.equal(out, plain)  # same chunks per warp, same MMA order: bitwise the same sums


@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_tiled_every_pair(a_fmt, b_fmt):
    ops = make_operands(a_fmt, b_fmt, 70, 144, 256, seed=11)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_tiled(a_fmt, b_fmt, "bfloat16", KT.TiledConfig(64, 128, 2, 2), args, alpha), ops, "bfloat16")


@pytest.mark.parametrize("cfg", [KT.TiledConfig(128, 128, 2, 4), KT.TiledConfig(64, 64, 2, 2)])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_tiled_other_tiles_and_outputs(cfg, out_dtype):
    ops = make_operands("mxfp8", "mxfp8", 130, 80, 128, seed=5)
    args, alpha = _args(ops, out_dtype)
    check_tolerance(E.run_tiled("mxfp8", "mxfp8", out_dtype, cfg, args, alpha), ops, out_dtype)


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_block", "mxfp8"])
@pytest.mark.parametrize("cfg", [KT.TiledConfig(64, 128, 2, 2, True), KT.TiledConfig(128, 128, 2, 4, True)])
def test_tiled_fp8_mma_variant(fmt, cfg):
    ops = make_operands(fmt, fmt, 70, 144, 384, seed=13)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_tiled(fmt, fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


def test_invalid_tilings_are_rejected_before_compiling():
    with pytest.raises(ValueError, match="every thread must own the same number of A and B spans"):
        KT.TiledLogic("mxfp8", "mxfp8", "bfloat16", KT.TiledConfig(128, 64, 4, 2))
    with pytest.raises(
        ValueError, match="fp8_mma needs tensor-, block-FP8 or MXFP8 on both sides, got bfloat16 x fp8_block"
    ):
        KT.TiledLogic("bfloat16", "fp8_block", "bfloat16", KT.TiledConfig(fp8_mma=True))
    with pytest.raises(ValueError, match="tiles 1/2/4"):
        KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", KD.DecodeConfig(8, 3, 1, 1))
    with pytest.raises(
        ValueError, match=r"prefetch must be one of \(0, 1, 2, 4\) \(chunks of weight loads in flight ahead\), got 3"
    ):
        KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", KD.DecodeConfig(8, 2, 1, 1, 3))
    with pytest.raises(ValueError, match="ntiles 1/2/4/8"):
        KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", KD.DecodeConfig(8, 2, 3, 1))
    with pytest.raises(ValueError, match=r"4 x 8 needs 128 fp32 accumulator registers per lane, more than 64"):
        KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", KD.DecodeConfig(4, 4, 8, 1))
    with pytest.raises(ValueError, match=r"16 x 64 x 32 x 4 = 131072 bytes\) exceeds 65536 bytes"):
        KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", KD.DecodeConfig(16, 2, 8, 1))


def test_alpha_tensor_and_weight_alpha_reach_the_epilogue():
    ops = make_operands("nvfp4", "nvfp4", 4, 32, 128, seed=9)
    alpha_t = torch.tensor([ops.alpha * 0.5], dtype=torch.float32)
    args, alpha = _args(ops, "float32", alpha=alpha_t)
    out = E.run_decode("nvfp4", "nvfp4", "float32", KD.default_config(8), args, alpha)
    ref = ops.reference("float32") * 0.5
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
