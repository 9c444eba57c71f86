"""The CuTe MXFP8 quantizer (`mxfp8/_kernel_cute.py`) on the CPU: its whole launch on the PTX emulator bit for bit
against the oracle (values, row-major and swizzled scales, the caller's padding left alone), and its compile for
both archs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x._lib.quant import swizzled_size
from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel_cute as KM
from flashinfer.experimental.b12x.quantization.mxfp8 import reference

_spec = importlib.util.spec_from_file_location(
    "_b12x_gemm_emulator", Path(__file__).parents[1] / "gemm" / "emulator.py"
)
EMU = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EMU)
LANE = np.arange(32, dtype=np.int32)


def run_emulated(x: torch.Tensor, tile: KM.CuteMxTile):
    m, k = x.shape
    nb = k // 32
    logic = KM.CuteMxLogic(str(x.dtype).removeprefix("torch."), k, tile)
    g = EMU.GlobalMemory()
    xb = g.put(x)
    vb = g.put(torch.full((m, k), 0xAB, dtype=torch.uint8))
    rb = g.put(torch.full((m, nb), 0xAB, dtype=torch.uint8))
    sb = g.put(torch.full((swizzled_size(m, nb),), 0xCD, dtype=torch.uint8))
    with np.errstate(all="ignore"):
        for by in range((m + logic.rows_per_cta - 1) // logic.rows_per_cta):
            for bx in range((nb + 31) // 32):
                ops = EMU.EmuOps(g)
                for warp in range(tile.warps):
                    loaded = logic.loads(ops, xb, m, warp, LANE, bx, by)
                    logic.encode_rows(ops, loaded, vb, rb, sb, m, warp, LANE, bx, by)
    got = [torch.from_numpy(g.get(b)[:n].copy()) for b, n in ((vb, m * k), (rb, m * nb), (sb, swizzled_size(m, nb)))]
    return got[0].reshape(m, k), got[1].reshape(m, nb), got[2]


def _inputs(m, k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-30, 30, (m, k // 32, 1), generator=gen).float()).repeat(1, 1, 32).reshape(m, k)
    x = (torch.randn(m, k, generator=gen) * mag).to(dtype)
    flat = x.view(-1)
    flat[1] = float("nan")
    flat[min(70, flat.numel() - 1)] = -0.0
    x[0, 32:64] = 0  # scale byte 127
    if m > 1:
        x[1, :32] = float("nan")  # all NaN: byte 127, values 0x7F
        x[1, 40] = float("inf")  # an Inf element: byte 255, every value of its block 0x7F
    if m > 2:
        x[2, :32] = torch.finfo(dtype).tiny / 8  # subnormal halves
        x[2, 32:64] = torch.finfo(dtype).max  # saturating scale
    return x


@pytest.mark.interpret
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "m, k, tile",
    [
        (3, 64, KM.CuteMxTile(1, 1)),
        (5, 96, KM.CuteMxTile()),
        (9, 1088, KM.CuteMxTile(2, 4)),
        (1, 32, KM.CuteMxTile(4, 2)),
    ],
)
def test_cute_mxfp8_is_bit_exact_on_the_emulator(dtype, m, k, tile):
    x = _inputs(m, k, dtype, seed=m * k)
    values, rows, mma = run_emulated(x, tile)
    want_v = torch.empty(m, k, dtype=torch.uint8)
    want_r = torch.empty(m, k // 32, dtype=torch.uint8)
    want_s = torch.full((swizzled_size(m, k // 32),), 0xCD, dtype=torch.uint8)
    reference.quantize_rows_into(x, want_v, want_r, want_s)
    assert torch.equal(values, want_v), (values != want_v).nonzero()[:5]
    assert torch.equal(rows, want_r), (rows != want_r).nonzero()[:5]
    assert torch.equal(mma, want_s), (mma != want_s).nonzero()[:5]  # padding positions still 0xCD


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cute_mxfp8_compiles_for_both_archs(arch, dtype):
    ptx = KM.compile_cute(dtype, 7168, KM.CuteMxTile(), arch).artifacts.PTX
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "div.rn.f32" in ptx and "mul.rn.f32" in ptx


def test_why_not_names_what_is_wrong():
    assert KM.why_not(64, KM.CuteMxTile()) is None
    assert "rows" in KM.why_not(64, KM.CuteMxTile(rows=8))
    assert "multiple of 32" in KM.why_not(48, KM.CuteMxTile())
