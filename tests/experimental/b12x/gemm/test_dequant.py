"""The kernels' register-level dequantization (`_shared/dequant.py`) on the PTX emulator, exhaustively.

Every E2M1 code and E4M3 byte, every scale the exactness ranges promise, both compute dtypes: the
half2 registers must hold exactly value * scale * 2^-C in the documented K order.
"""

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import e2m1_values, e4m3_decode, ue8m0_decode
from flashinfer.experimental.b12x.gemm._shared import dequant as D
from flashinfer.experimental.b12x.gemm._shared.formats import DEQUANT_SHIFT, EXACT_RANGES

from .emulator import EmuOps, GlobalMemory, half_to_f32

pytestmark = pytest.mark.reference

COMPUTES = ("bfloat16", "float16")


def _regs_to_values(regs, compute):
    """4 half2 registers (arrays over lanes) -> [lanes, 8] float values in register order."""
    cols = []
    for r in regs:
        r = np.asarray(r).astype(np.uint32)
        cols += [half_to_f32(compute, r & 0xFFFF), half_to_f32(compute, r >> 16)]
    return np.stack(cols, axis=1).astype(np.float64)


def _expected_order(values8, family):
    """[lanes, 8] values in natural K order -> the family's register order."""
    return values8[:, list(D.K_ORDER[family])]


def _ops():
    return EmuOps(GlobalMemory())


@pytest.mark.parametrize("compute", COMPUTES)
def test_fp4_groups_every_code_every_nvfp4_scale(compute):
    ops = _ops()
    rng = np.random.default_rng(0)
    table = e2m1_values().double().numpy()
    shift = DEQUANT_SHIFT[("nvfp4", compute)]
    for sf0 in range(0, 0x7F):  # every finite non-negative E4M3 scale (scales are never negative)
        sf = np.array([sf0, (sf0 * 7 + 3) % 0x7F], dtype=np.uint32)
        codes = rng.integers(0, 16, size=(32, 32))  # 32 lanes x one span of 32 codes
        codes[0, :16] = np.arange(16)
        words = [ops.u32(sum(codes[:, 8 * j + i].astype(np.int64) << (4 * i) for i in range(8))) for j in range(4)]
        factors = D.span_factors(ops, "nvfp4", compute, ops.u32(int(sf[0]) | (int(sf[1]) << 8)))
        sfv = e4m3_decode(torch.tensor(sf, dtype=torch.uint8)).double().numpy()
        for j in range(4):
            got = _regs_to_values(D.span_group(ops, "nvfp4", "fp4", compute, words, factors, j), compute)
            want = table[codes[:, 8 * j : 8 * j + 8]] * sfv[j >> 1] * 2.0**-shift
            np.testing.assert_array_equal(got, _expected_order(want, "fp4"), err_msg=f"sf={sf} group {j}")


@pytest.mark.parametrize("compute", COMPUTES)
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8"])
def test_mx_groups_exact_over_the_documented_scale_range(fmt, compute):
    ops = _ops()
    rng = np.random.default_rng(1)
    lo, hi = EXACT_RANGES[(fmt, compute)]
    shift = DEQUANT_SHIFT[(fmt, compute)]
    family = "fp4" if fmt == "mxfp4" else "fp8"
    for e in range(lo, hi + 1):
        if family == "fp4":
            codes = rng.integers(0, 16, size=(32, 32))
            vals = e2m1_values().double().numpy()[codes]
            words = [ops.u32(sum(codes[:, 8 * j + i].astype(np.int64) << (4 * i) for i in range(8))) for j in range(4)]
        else:
            raw = rng.integers(0, 256, size=(32, 32)).astype(np.uint8)
            raw[(raw & 0x7F) == 0x7F] = 0x3C  # NaN bytes are not propagated (documented)
            vals = e4m3_decode(torch.from_numpy(raw)).double().numpy()
            words = [ops.u32(raw[:, 4 * w : 4 * w + 4].copy().view(np.uint32)[:, 0]) for w in range(8)]
        factors = D.span_factors(ops, fmt, compute, ops.u32(e))
        scale = float(ue8m0_decode(torch.tensor([e], dtype=torch.uint8))[0])
        for j in range(4):
            got = _regs_to_values(D.span_group(ops, fmt, family, compute, words, factors, j), compute)
            want = vals[:, 8 * j : 8 * j + 8] * scale * 2.0**-shift
            np.testing.assert_array_equal(got, _expected_order(want, family), err_msg=f"e={e} group {j}")


@pytest.mark.parametrize("compute", COMPUTES)
@pytest.mark.parametrize("fmt", ["fp8_block", "fp8_tensor"])
def test_raw_fp8_groups_are_the_e4m3_values(fmt, compute):
    ops = _ops()
    raw = np.arange(256, dtype=np.uint8).reshape(8, 32).repeat(4, axis=0)  # every byte, 32 lanes
    raw[(raw & 0x7F) == 0x7F] = 0
    vals = e4m3_decode(torch.from_numpy(raw)).double().numpy()
    words = [ops.u32(raw[:, 4 * w : 4 * w + 4].copy().view(np.uint32)[:, 0]) for w in range(8)]
    factors = D.span_factors(ops, fmt, compute, None)
    for j in range(4):
        got = _regs_to_values(D.span_group(ops, fmt, "fp8", compute, words, factors, j), compute)
        np.testing.assert_array_equal(got, _expected_order(vals[:, 8 * j : 8 * j + 8], "fp8"))


def test_fp8_block_activation_fold_rounds_once_to_bf16():
    ops = _ops()
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 256, size=(32, 32)).astype(np.uint8)
    raw[(raw & 0x7F) == 0x7F] = 0x3C
    vals = e4m3_decode(torch.from_numpy(raw)).double().numpy()
    words = [ops.u32(raw[:, 4 * w : 4 * w + 4].copy().view(np.uint32)[:, 0]) for w in range(8)]
    s = ops.f32(rng.uniform(1e-4, 1e-2, size=32).astype(np.float32))
    factors = D.span_factors(ops, "fp8_block", "bfloat16", s)
    for j in range(4):
        got = _regs_to_values(D.span_group(ops, "fp8_block", "fp8", "bfloat16", words, factors, j), "bfloat16")
        prod = (vals[:, 8 * j : 8 * j + 8].astype(np.float32) * s[:, None]).astype(np.float32)
        want = torch.from_numpy(prod).to(torch.bfloat16).double().numpy()
        np.testing.assert_array_equal(got, _expected_order(want, "fp8"))


@pytest.mark.parametrize("compute", COMPUTES)
@pytest.mark.parametrize("family", ["fp4", "fp8", "natural"])
@pytest.mark.parametrize("scaled", [False, True])
def test_raw16_groups_follow_the_weight_order(family, compute, scaled):
    ops = _ops()
    rng = np.random.default_rng(3)
    dt = torch.bfloat16 if compute == "bfloat16" else torch.float16
    x = torch.randn(32, 32).to(dt)
    bits = x.view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    words = [ops.u32(bits[:, 2 * r] | (bits[:, 2 * r + 1] << 16)) for r in range(16)]
    s = ops.f32(rng.uniform(0.5, 2.0, size=32).astype(np.float32)) if scaled else None
    fmt = compute
    factors = D.span_factors(ops, fmt, compute, s)
    for j in range(4):
        got = _regs_to_values(D.span_group(ops, fmt, family, compute, words, factors, j), compute)
        want = x[:, 8 * j : 8 * j + 8].double().numpy()
        if scaled:
            prod = (want.astype(np.float32) * s[:, None]).astype(np.float32)
            want = torch.from_numpy(prod).to(dt).double().numpy()
        np.testing.assert_array_equal(got, _expected_order(want, family))
