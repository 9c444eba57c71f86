"""GPU tier: the NVFP4 "bisect" candidates (`_kernel._UNVALIDATED_BISECT`, `_bisect.py`) where
test_gpu_candidates (`-k bisect`: M in {1, 33, 130, 4097}, random / extreme / scale-tie inputs) does not
reach: the benchmark's shapes (many atoms, a tail atom, persistent ranges across row blocks) and global
scales across and outside the lane table's range (the computed-threshold fallback, bf16-subnormal
thresholds above gs = 2^100), bitwise against the oracle with poisoned outputs."""

import importlib.util
from pathlib import Path

import pytest

import b12x
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv

_spec = importlib.util.spec_from_file_location(
    "_b12x_quant_gpu_helpers_bisect", Path(__file__).with_name("test_gpu.py")
)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)

pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
BISECT = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_BISECT]
IDS = ["-".join(str(v) for v in vars(c).values()) for c in BISECT]
SCALES = [2.0**-60, 1.0, 1 / 3, 2.0**60, 2.0**-61, 2.0**61, 2.0**-100, 1e30, 2.0**101, 1e-45]


@pytest.fixture(scope="module")
def session():
    return b12x.PreparationSession("cuda")


_run = _helpers.run_nvfp4_config


@pytest.mark.parametrize("cfg", BISECT, ids=IDS)
def test_bisect_global_scales(session, cfg):
    _run(session, cfg, 300, 4096, SCALES, 7)


@pytest.mark.parametrize("cfg", BISECT, ids=IDS)
def test_bisect_at_bench_shapes(session, cfg):
    _run(session, cfg, 16384 + 40, 7168, [1.0], 11)  # 129 atoms: a tail atom, ranges across row blocks
