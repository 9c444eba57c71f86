"""GPU tier: every candidate kernel config of both quantizers (what `bench_quantization --all-configs`
times and the autotuner may select), the GPU-validated ones and the unvalidated ones alike
(`candidate_configs(k, unvalidated=True)`, as B12X_QUANT_UNVALIDATED_CANDIDATES=1 gives),
bitwise equal to the oracles on the device. A config moves to its kernel's `_VALIDATED` only
after it passes here.

Per config: random rows over many decades and extreme blocks (zero, NaN, Inf, max, subnormal), a
device-tensor global scale (NVFP4), outputs poisoned with 0xFF first; NVFP4 also block scales on and
next to every E4M3 value and rounding tie (`_interpret_run.make_input("scale_ties")`: the division-free
encodes round the scale by bits, `_e4m3_rn`). Shapes hit the paths the
variants differ on: M = 1 and 33 (dead padding programs of `skip_dead`), 130 x 160 (K/16 and K/32
not multiples of 4: scale padding columns, word stores), 4097 x 4096 (many atoms, a tail row).
"""

import functools
import importlib.util
from pathlib import Path

import pytest
import torch

import b12x
from flashinfer.experimental.b12x._lib.quant import nvfp4_global_scale
from flashinfer.experimental.b12x.quantization.mxfp8 import _kernel as mx_kernel
from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv_kernel

_spec = importlib.util.spec_from_file_location("_b12x_quant_gpu_helpers", Path(__file__).with_name("test_gpu.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)  # the gpu tier's input makers and bitwise checks
_check_mxfp8, _check_nvfp4, _extreme = _helpers._check_mxfp8, _helpers._check_nvfp4, _helpers._extreme
_mx_outputs, _poison_nvfp4, _random = _helpers._mx_outputs, _helpers._poison_nvfp4, _helpers._random
_spec = importlib.util.spec_from_file_location(
    "_b12x_quant_interpret_inputs", Path(__file__).with_name("_interpret_run.py")
)
_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inputs)  # the interpret tier's input makers (CPU generators)


@functools.cache
def _scale_ties(m, k):
    """bf16 [m, k] on the GPU whose block scales at global scale 1 are E4M3 values and ties (CPU-made)."""
    return _inputs.make_input("scale_ties", m, k, torch.bfloat16, 16, m * k + 1).cuda()


pytestmark = pytest.mark.gpu

nvfp4 = b12x.quantization.nvfp4
mxfp8 = b12x.quantization.mxfp8
SHAPES = [(1, 7168), (33, 7168), (130, 160), (4097, 4096)]


def _device_arch():
    """The local GPU's target (MXFP8's hw_nan tiles exist for sm_90a only), or None without one."""
    if not torch.cuda.is_available():
        return None
    from flashinfer.experimental.b12x._lib.arch import target_arch

    return target_arch()


def _cases(candidates, **kw):
    return [
        pytest.param(m, k, cfg, id=f"{m}x{k}-" + "-".join(str(v) for v in vars(cfg).values()))
        for m, k in SHAPES
        for cfg in candidates(k, unvalidated=True, **kw)
    ]


@pytest.mark.parametrize("m, k, cfg", _cases(nv_kernel.candidate_configs))
def test_nvfp4_candidate_bitwise(session, m, k, cfg):
    p = nvfp4.plan(m, k, override=cfg)
    session.prepare([p])
    assert p.selection == cfg
    out = nvfp4.allocate_outputs(p)
    rnd, ext = _random(m, k, torch.bfloat16, m + k), _extreme(m, k, torch.bfloat16, m * k, 16)
    one = torch.ones((), device="cuda")
    for x, gs in ((rnd, nvfp4_global_scale(rnd)), (ext, nvfp4_global_scale(ext)), (_scale_ties(m, k), one)):
        _poison_nvfp4(out)
        nvfp4.run(plan=p, x=x, global_scale=gs.reshape(1), outputs=out)
        _check_nvfp4(out, x, gs)
    session.release([p])


@pytest.mark.parametrize("m, k, cfg", _cases(mx_kernel.candidate_configs, arch=_device_arch()))
def test_mxfp8_candidate_bitwise(session, m, k, cfg):
    p = mxfp8.plan((k, "bfloat16", m), override=cfg)
    session.prepare([p])
    assert p.selection == cfg
    for x in (_random(m, k, torch.bfloat16, m + k), _extreme(m, k, torch.bfloat16, m * k, 32)):
        values, rows, mma = _mx_outputs(m, k)
        mxfp8.quantize_rows(x, values, rows, mma, plan=p)
        _check_mxfp8(x, values, rows, mma)
    session.release([p])
