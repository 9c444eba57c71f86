"""GPU tier: the session-15 NVFP4 "lanes" layout (`_kernel._UNVALIDATED_LANES`) where
test_gpu_candidates does not reach: the benchmark's shapes (M not a multiple of 128, K 7168 and
4096), global scales across the thresholds' range, extreme inputs, and fp16 input (which runs
"steps" on halves), bitwise against the oracle with poisoned outputs."""

import importlib.util
from pathlib import Path

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import nvfp4_global_scale
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

_spec = importlib.util.spec_from_file_location("_b12x_quant_gpu_helpers_lanes", Path(__file__).with_name("test_gpu.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
LANES = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_LANES]
_IDS = ["-".join(str(v) for v in vars(c).values()) for c in LANES]


@pytest.fixture(scope="module")
def session():
    return b12x.PreparationSession("cuda")


@pytest.mark.parametrize("cfg", LANES, ids=_IDS)
@pytest.mark.parametrize("m, k", [(16384 + 40, 7168), (4097, 4096), (300, 1040)])
def test_lanes_bitwise(session, cfg, m, k):
    _helpers.run_nvfp4_config(session, cfg, m, k, [1.0, 2.0**-70, 448.0 * 6 / 3.0e4, 1e30], m + k)


@pytest.mark.parametrize("cfg", LANES[:2], ids=_IDS[:2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lanes_extreme_and_fp16(session, cfg, dtype):
    m, k = 257, 7168
    p = nvfp4.plan(m, k, invocation=dtype, override=cfg)
    session.prepare([p])
    out = nvfp4.allocate_outputs(p)
    for x in (_helpers._extreme(m, k, dtype, 5, 16), _helpers._random(m, k, dtype, 6)):
        gs = nvfp4_global_scale(x)
        _helpers._poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1), outputs=out)
        _helpers._check_nvfp4(out, x, gs)
    session.release([p])
