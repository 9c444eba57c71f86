"""GPU tier: the CuTe MXFP8 quantizer (`mxfp8/_kernel_cute.py`, `override=CuteMxTile(...)`) bit for bit against the
oracle, values, row-major scales and swizzled scales (the caller's padding kept): M 1..4097, K 32..16384 (K / 32
not a multiple of 4, several CTA columns), bf16 and fp16, random and extreme blocks (zero, NaN, Inf, max,
subnormal), every tile shape, PDL."""

import importlib.util
from pathlib import Path

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.quantization.mxfp8._kernel_cute import CuteMxTile

_spec = importlib.util.spec_from_file_location(
    "_b12x_quant_gpu_helpers_cute_mx", Path(__file__).with_name("test_gpu.py")
)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
_check, _extreme, _outputs, _random = _helpers._check_mxfp8, _helpers._extreme, _helpers._mx_outputs, _helpers._random

pytestmark = pytest.mark.gpu
mxfp8 = b12x.quantization.mxfp8


def _run(session, m, k, dtype, tile, x, pdl=False):
    p = mxfp8.plan(mxfp8.MxFp8Query(k, dtype, m, pdl=pdl), override=tile)
    session.prepare([p])
    values, rows, mma = _outputs(m, k)
    mxfp8.quantize_rows(x, values, rows, mma, plan=p)
    _check(x, values, rows, mma)


@pytest.mark.parametrize("k", [32, 96, 4096, 7168, 16384])
@pytest.mark.parametrize("m", [1, 7, 128, 4097])
def test_cute_mxfp8_bitwise(session, m, k):
    _run(session, m, k, torch.bfloat16, CuteMxTile(), _random(m, k, torch.bfloat16, m * 13 + k))
    _run(session, m, k, torch.bfloat16, CuteMxTile(), _extreme(m, k, torch.bfloat16, m + k, 32))


@pytest.mark.parametrize("tile", [CuteMxTile(4, 4), CuteMxTile(16, 1), CuteMxTile(1, 1)], ids=repr)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cute_mxfp8_tiles_and_float16(session, tile, dtype):
    m, k = 300, 4096
    _run(session, m, k, dtype, tile, _extreme(m, k, dtype, 6, 32))
    _run(session, m, k, dtype, tile, _random(m, k, dtype, 7))


def test_cute_mxfp8_pdl(session):
    _run(session, 129, 7168, torch.bfloat16, CuteMxTile(), _extreme(129, 7168, torch.bfloat16, 9, 32), pdl=True)
