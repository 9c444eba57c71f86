"""The fused decode kernel with shared activations (`DecodeConfig.ashare`, session 53): the wn warps of a set take
the same chunk, each loads its share of the chunk's activation units into shared memory, and after the set's
barrier every warp runs its math on all of them (`DecodeLogic.ashare_loop`, the plain kernel's loop). The products
and their order are those of the same warp groups loading their own activations, so the outputs are bitwise those
of that kernel on the emulator, for the silu_mul / residual / no epilogues; norm and rope_append do not take it.
Not a default: `bench_gemm --epilogue E --sweep --sweep-subset ksplit` times it beside the groups without it. Its
compile and gpu tests are test_decode_fused_groups.py's grouped ones, parametrized with ashare."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F
from flashinfer.experimental.b12x.gemm.blockscaled._epilogue import RopeLayout

from .helpers import make_operands
from .test_decode_fused import check_fused, fused_args, run_fused

CFG = KD.DecodeConfig
# (a_fmt, b_fmt, m, n, k, an ashare config): N tails, idle warps, both token tilings, 2 and 4 groups
CASES = [
    ("bfloat16", "nvfp4", 13, 192, 768, CFG(8, 2, 2, 1, wn=2, ashare=True, wcache="na", acache="el")),
    ("bfloat16", "mxfp4", 5, 208, 1024, CFG(8, 2, 1, 2, wn=4, ashare=True)),
    ("float16", "mxfp8", 16, 160, 512, CFG(4, 2, 2, 2, wn=2, ashare=True, fp4="shift")),
]


@pytest.mark.interpret
@pytest.mark.parametrize("epilogue", ["none", "silu_mul", "residual"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_ashare_is_the_grouped_kernel_bitwise(case, epilogue):
    a_fmt, b_fmt, m, n, k, cfg = CASES[case]
    out_dtype = "float32" if epilogue == "none" else a_fmt
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=90 + case)
    pdl = ("off", "wait", "prefetch")[case % 3]
    outs = []
    for c in (cfg, dataclasses.replace(cfg, ashare=False)):
        args, alpha, residual = fused_args(ops, epilogue, out_dtype, seed=case)  # fresh NaNs
        out, _, _ = run_fused(a_fmt, b_fmt, out_dtype, F.FusedConfig(c, epilogue, pdl), args, alpha)
        outs.append(out)
    check_fused(outs[0], ops, epilogue, out_dtype, residual)
    assert torch.equal(outs[0], outs[1])


def test_ashare_takes_no_norm_and_no_rope():
    cfg = CFG(8, 2, 2, 1, wn=2, ashare=True)
    assert F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(cfg, "silu_mul")) is None
    assert "norm" in F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(cfg, "silu_mul", norm=True))
    rope = F.FusedConfig(cfg, "rope_append", rope=RopeLayout(4, 2, 32, 16))
    assert "rope_append" in F.why_not("bfloat16", "nvfp4", "bfloat16", rope)
    assert "ashare" in F.why_not("nvfp4", "nvfp4", "bfloat16", F.FusedConfig(cfg, "silu_mul"))  # 16-bit A only
