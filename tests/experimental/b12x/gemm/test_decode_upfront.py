"""DecodeConfig.upfront: every held chunk's weight loads issue before any of their math.

The decode kernels' unrolled K loop issues the second chunk's weight loads after the first chunk's
MMAs (SASS of the T = 1 gate_up, docs/predictions/gemm_decode.md, session 9): two DRAM round trips a
warp where one would do. `upfront` holds the loads of the warp's first chunks in registers, then does
their math in the same order, then the rest one by one, so the sums are bitwise those of the plain
loop (same chunks, same order per accumulator). CPU: both kernels' logic on the emulator (bitwise
against upfront = 0 and within the fused epilogues' tolerance of the reference), the config
predicate, and the sm_90a / sm_120a builds, whose SASS must hold every held chunk's scale loads
before the first MMA. Not timed on a GPU yet.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

from . import emulated as E
from .helpers import make_operands, on_cpu
from .test_decode_fused import check_fused, fused_args, run_fused
from .test_decode_stream import _args

# (a_fmt, b_fmt, m, n, k, DecodeConfig): chunks a warp = k / 128 / warps against upfront
CASES = [
    ("bfloat16", "nvfp4", 1, 96, 512, KD.DecodeConfig(2, 2, 1, 1, upfront=2)),  # 2 a warp: all held
    ("bfloat16", "nvfp4", 3, 64, 768, KD.DecodeConfig(2, 2, 1, 1, upfront=2)),  # 3 a warp: one left over
    ("bfloat16", "nvfp4", 1, 64, 256, KD.DecodeConfig(4, 2, 1, 1, upfront=2)),  # 2 chunks, 4 warps: some hold none
    ("bfloat16", "mxfp8", 5, 64, 1024, KD.DecodeConfig(2, 2, 1, 1, upfront=4)),  # 4 a warp
    ("float16", "nvfp4", 9, 32, 640, KD.DecodeConfig(1, 2, 2, 1, upfront=4)),  # 5 chunks, one warp
]


@pytest.mark.interpret
@pytest.mark.parametrize("epilogue", ["silu_mul", "none"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fused_upfront_is_the_plain_loop_bitwise(epilogue, case):
    a_fmt, b_fmt, m, n, k, cfg = CASES[case]
    out_dtype = "float16" if a_fmt == "float16" else "bfloat16"
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=40 + case)
    outs = []
    for c in (cfg, dataclasses.replace(cfg, upfront=0)):
        args, alpha, residual = fused_args(ops, epilogue, out_dtype, seed=case)  # a fresh NaN-poisoned output
        out, _, _ = run_fused(a_fmt, b_fmt, out_dtype, F.FusedConfig(c, epilogue, "prefetch"), args, alpha)
        outs.append(out)
    check_fused(outs[0], ops, epilogue, out_dtype, residual)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.interpret
@pytest.mark.parametrize("case", range(len(CASES)))
def test_plain_decode_upfront_is_the_plain_loop_bitwise(case):
    a_fmt, b_fmt, m, n, k, cfg = CASES[case]
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=60 + case)
    outs = []
    for c in (cfg, dataclasses.replace(cfg, upfront=0)):
        args, alpha = _args(ops, "float32")
        outs.append(E.run_decode(a_fmt, b_fmt, "float32", c, args, alpha))
    assert not torch.isnan(outs[0]).any()
    assert torch.equal(outs[0], outs[1])


def test_upfront_predicate():
    ok = KD.DecodeConfig(8, 2, 1, 2, upfront=2)
    assert KD.why_not("bfloat16", "nvfp4", "bfloat16", ok) is None
    for bad in (dataclasses.replace(ok, upfront=3), dataclasses.replace(ok, upfront=2, prefetch=1),
                dataclasses.replace(ok, kgroup=2), dataclasses.replace(ok, wn=2, ashare=True)):  # fmt: skip
        assert "upfront must be one of (0, 2, 4)" in KD.why_not("bfloat16", "nvfp4", "bfloat16", bad), bad
    # the demo's gate_up at T = 1 takes it as a plan override's option string
    cfg = L.fused_config(L.bucket_for(1), 11264, 2048, "nvfp4", "bfloat16", "silu_mul", "prefetch", "upfront=2")
    assert cfg.decode.upfront == 2 and L.why_not("bfloat16", "nvfp4", "bfloat16", L.bucket_for(1), cfg) is None


def _scale_loads_before_first_mma(fn, cuda_binary) -> int:
    sass = cuda_binary.sass(fn.artifacts.CUBIN)
    head = sass[: sass.index("HMMA")]
    return len(re.findall(r"LDG\.E\.U16", head))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_gate_up_upfront_issues_both_chunks_before_the_first_mma(arch, cuda_binary):
    """The T = 1 gate_up (8 warps, 2 chunks a warp, 2 tiles: 4 NVFP4 scale loads a chunk): with
    upfront = 2 all 8 scale loads precede the first HMMA, and no register spills; the plain loop
    issues only the first chunk's there."""
    pytest.importorskip("cutlass")
    bucket = L.bucket_for(1)
    plain = L.fused_config(bucket, 11264, 2048, "nvfp4", "bfloat16", "silu_mul", "prefetch")
    held = L.fused_config(bucket, 11264, 2048, "nvfp4", "bfloat16", "silu_mul", "prefetch", "upfront=2")
    fn = F.compile_decode_fused("bfloat16", "nvfp4", "bfloat16", held, arch)
    assert ".local" not in fn.artifacts.PTX
    assert _scale_loads_before_first_mma(fn, cuda_binary) == 8
    base = F.compile_decode_fused("bfloat16", "nvfp4", "bfloat16", plain, arch)
    assert _scale_loads_before_first_mma(base, cuda_binary) < 8


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue, n, k", [("silu_mul", 11264, 2048), ("none", 3072, 2048)])
def test_upfront_plan_on_the_gpu_equals_the_plain_plan(epilogue, n, k):
    """The demo's gate_up / qkv shapes through a plan override with upfront = 2 (pdl prefetch), M = 1,
    3, 16, outputs NaN-poisoned: within the fused tolerance of the reference and bitwise the plain
    plan's output."""
    import b12x

    from .test_decode_fused_gpu import MS, _weight

    B = b12x.gemm.blockscaled
    q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=max(MS), m_values=MS, epilogue=epilogue, pdl="prefetch")
    held = {b: L.fused_config(b, n, k, "nvfp4", "bfloat16", epilogue, "prefetch", "upfront=2") for b in q.buckets}
    plans = [B.plan(q, override=held), B.plan(q)]
    with b12x.PreparationSession("cuda") as s:
        s.prepare(plans)
    assert all(cfg.decode.upfront == 2 for _, cfg in plans[0].state.selection)
    width = n // 2 if epilogue == "silu_mul" else n
    for m in MS:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + 7, device="cuda", weight=_weight(n, k))
        outs = []
        for plan in plans:
            out = torch.full((m, width), float("nan"), dtype=torch.bfloat16, device="cuda")
            B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue)
            outs.append(out)
        torch.cuda.synchronize()
        check_fused(outs[0].cpu(), on_cpu(ops), epilogue, "bfloat16", None)
        assert torch.equal(outs[0], outs[1]), f"M = {m}: upfront differs from the plain loop"
