"""GPU tier: the session-7 NVFP4 "pairs" variants (`_kernel._UNVALIDATED_PAIRS_S7`) where
test_gpu_candidates does not reach: the lane table's fallback (global scales outside [2^-60, 2^60],
and at its edges) and persistent grids at the benchmark's shapes (1188 resident programs over ranges
that cross row blocks; M not a multiple of 128), bitwise against the oracle with poisoned outputs."""

import importlib.util
from pathlib import Path

import pytest

import b12x
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

_spec = importlib.util.spec_from_file_location("_b12x_quant_gpu_helpers_s7", Path(__file__).with_name("test_gpu.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
S7 = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_PAIRS_S7]
LUT = [c for c in S7 if c.lut]
PERSISTENT = [c for c in S7 if c.persistent]


def _ids(cfgs):
    return ["-".join(str(v) for v in vars(c).values()) for c in cfgs]


_run = _helpers.run_nvfp4_config


# inside the table's range (edges included) and outside it (the computed thresholds)
LUT_SCALES = [2.0**-60, 2.0**-59.5, 1.0, 2.0**60, 2.0**-61, 2.0**61, 2.0**-100, 1e30]


@pytest.mark.parametrize("cfg", LUT, ids=_ids(LUT))
def test_lut_in_and_out_of_range(session, cfg):
    _run(session, cfg, 300, 4096, LUT_SCALES, 7)


@pytest.mark.parametrize("cfg", PERSISTENT, ids=_ids(PERSISTENT))
def test_persistent_at_bench_shapes(session, cfg):
    _run(session, cfg, 16384 + 40, 7168, [1.0], 11)  # 129 atoms: ranges cross row blocks, a tail atom
