"""DecodeConfig.ksplit: the decode kernel's K split over a thread-block cluster of C CTAs.

Rank r of a row block's cluster runs the chunks a plain kernel with kwarps x C warps along K gives its warps
r kwarps .. (r + 1) kwarps - 1, and the finish sums every rank's partials (distributed shared memory) in that
kernel's warp order: fp32 outputs are bitwise those of the wider plain kernel, and within the tolerance of the
reference. CPU: the kernel's logic on the emulator (each rank its own shared memory, read by the peers after
the cluster barrier), the config predicate, the sweep's variants, and the sm_90a / sm_120a builds. GPU (-m gpu):
the variants `bench_gemm --sweep-subset ksplit` times, at the issue's shapes, through prepared plans.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

from . import emulated as E
from .helpers import check_tolerance, make_operands
from .test_decode_stream import _args

CFG = KD.DecodeConfig
# (a_fmt, b_fmt, m, n, k, the ksplit config, the plain config with kwarps x C warps along K)
CASES = [
    ("bfloat16", "nvfp4", 1, 96, 1024, CFG(2, 2, 1, 1, ksplit=2), CFG(4, 2, 1, 1)),
    ("bfloat16", "nvfp4", 5, 80, 1152, CFG(2, 2, 1, 2, ksplit=4), CFG(8, 2, 1, 2)),  # 9 chunks: idle warps; N tail
    ("bfloat16", "nvfp4", 16, 64, 768, CFG(4, 1, 2, 1, wn=2, ksplit=2), CFG(8, 1, 2, 1, wn=2)),
    (
        "bfloat16",
        "nvfp4",
        13,
        128,
        1024,
        CFG(4, 2, 2, 1, wn=2, ashare=True, ksplit=2),
        CFG(8, 2, 2, 1, wn=2, ashare=True),
    ),
    ("float16", "mxfp4", 3, 64, 1536, CFG(2, 2, 1, 1, prefetch=1, ksplit=2), CFG(4, 2, 1, 1, prefetch=1)),
    ("bfloat16", "mxfp8", 9, 48, 1024, CFG(2, 1, 2, 1, upfront=2, ksplit=2), CFG(4, 1, 2, 1, upfront=2)),
    ("nvfp4", "nvfp4", 4, 64, 2048, CFG(2, 2, 1, 1, kgroup=2, ksplit=2), CFG(4, 2, 1, 1, kgroup=2)),
    ("fp8_block", "fp8_block", 2, 128, 1024, CFG(2, 2, 1, 1, ksplit=2), CFG(4, 2, 1, 1)),
]


@pytest.mark.interpret
@pytest.mark.parametrize("case", range(len(CASES)))
def test_ksplit_is_the_wider_plain_kernel_bitwise(case):
    a_fmt, b_fmt, m, n, k, split, plain = CASES[case]
    assert split.kwarps * split.ksplit == plain.kwarps and split.wn == plain.wn
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=80 + case)
    outs = []
    for cfg in (split, plain):
        args, alpha = _args(ops, "float32")  # a fresh NaN-poisoned output each
        outs.append(E.run_decode(a_fmt, b_fmt, "float32", cfg, args, alpha))
    check_tolerance(outs[0], ops, "float32")
    assert torch.equal(outs[0], outs[1])


@pytest.mark.interpret
def test_ksplit_bf16_output_against_the_reference():
    ops = make_operands("bfloat16", "nvfp4", 11, 112, 1024, seed=5)
    args, alpha = _args(ops, "bfloat16")
    out = E.run_decode("bfloat16", "nvfp4", "bfloat16", CFG(2, 2, 2, 1, ksplit=4), args, alpha)
    check_tolerance(out, ops, "bfloat16")


def test_ksplit_predicate():
    ok = CFG(8, 2, 2, 1, wn=4, ashare=True, ksplit=4)
    assert KD.why_not("bfloat16", "nvfp4", "bfloat16", ok) is None
    for bad in (3, 8, 0, "2"):
        reason = KD.why_not("bfloat16", "nvfp4", "bfloat16", dataclasses.replace(ok, ksplit=bad))
        assert "ksplit must be one of (1, 2, 4)" in reason, bad
    # the fused decode kernel and moe's expert kernels have no cluster reduction: they refuse it
    fused = F.FusedConfig(CFG(8, 2, 1, 2, ksplit=2), "none", "wait")
    assert "ksplit 1" in F.why_not("bfloat16", "nvfp4", "bfloat16", fused)
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    assert "ksplit" in X.why_not(2, "bfloat16", "nvfp4", None, CFG(4, 2, 1, 1, ksplit=2))
    # and the option string of the stack-wide override takes it
    assert L.with_decode_opts(CFG(8, 2, 2, 1), "ksplit=2").ksplit == 2


@pytest.mark.parametrize("m, n, k", [(16, 4096, 14336), (16, 28672, 4096), (16, 4096, 4096), (1, 7168, 2048)])
def test_ksplit_variants_are_valid_and_cut_activation_reads(m, n, k):
    base = L.default_config(L.bucket_for(m), n, k, "nvfp4", a_fmt="bfloat16")
    variants = DS.ksplit_variants(base, k)
    assert base not in variants and len(set(variants)) == len(variants) >= 2
    assert all(k // KD.CHUNK >= c.kwarps * c.ksplit for c in variants)  # no rank without chunks
    for cfg in variants:
        assert KD.why_not("bfloat16", "nvfp4", "bfloat16", cfg) is None, cfg
        # the activation bytes a row block reads, per output row: never more than the base's
        assert 1 / (cfg.ksplit * cfg.rows * cfg.wn) <= 1 / (base.rows * base.wn) + 1e-12


@pytest.mark.interpret
@pytest.mark.parametrize("m, n, k", [(16, 4096, 14336), (16, 28672, 4096), (1, 4096, 4096)])
def test_the_staged_variants_on_the_emulator(m, n, k):
    """Every config `--sweep-subset ksplit` times at these shapes (s38_c), emulated at a smaller N x K with
    live M below the bucket's (tokens past M in a partial token tile), against the reference."""
    base = L.default_config(L.bucket_for(m), n, k, "nvfp4", a_fmt="bfloat16")
    live = 11 if m == 16 else 1
    for cfg in DS.ksplit_variants(base, k):
        small_n = 2 * cfg.rows * cfg.wn + 16  # two row blocks and a partial third
        ops = make_operands("bfloat16", "nvfp4", live, small_n, 128 * cfg.kwarps * cfg.ksplit + 256, seed=cfg.ksplit)
        args, alpha = _args(ops, "bfloat16")
        check_tolerance(E.run_decode("bfloat16", "nvfp4", "bfloat16", cfg, args, alpha), ops, "bfloat16")


ARCH_CFGS = [CFG(2, 2, 1, 2, ksplit=2), CFG(8, 2, 2, 1, wn=4, ashare=True, wcache="na256", acache="el", ksplit=4)]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("cfg", ARCH_CFGS, ids=["k2", "wn4-ashare-k4"])
def test_ksplit_builds_with_cluster_barriers_and_no_spills(arch, cfg):
    pytest.importorskip("cutlass")
    fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
    ptx = fn.artifacts.PTX
    assert ".local" not in ptx
    assert ptx.count("barrier.cluster.arrive") == 2 and ptx.count("barrier.cluster.wait") == 2
    assert "mapa.shared::cluster" in ptx and "ld.shared::cluster.f32" in ptx
    plain = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", dataclasses.replace(cfg, ksplit=1), arch=arch)
    assert "barrier.cluster" not in plain.artifacts.PTX and "mapa" not in plain.artifacts.PTX


# ---- GPU: the swept variants through prepared plans (-m gpu) -------------------------------------------
GPU_SHAPES = ((4096, 14336), (28672, 4096), (4096, 4096), (7168, 2048))  # issue #6's decode shapes


def _gpu_cases():
    """(m, n, k, config) of every config the ksplit sweep times at issue #6's shapes (`ksplit_sweep`: the K splits,
    plainly and as programmatic dependents). One test a config, so the shards share the ~200 compiles."""
    cases = []
    for m in (1, 16):
        for n, k in GPU_SHAPES:
            base = L.default_config(L.bucket_for(m), n, k, "nvfp4", a_fmt="bfloat16")
            cases += [pytest.param(m, n, k, c, id=f"m{m}-{n}x{k}-{i}") for i, c in enumerate(DS.ksplit_sweep(base, k))]
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, cfg", _gpu_cases())
def test_ksplit_variants_on_the_gpu(m, n, k, cfg):
    """A config `--sweep-subset ksplit` times (`_gpu_cases`), W4A16 NVFP4, through a prepared plan, outputs
    NaN-poisoned, against the reference; at M = 16 also M = 3 and 9 through the same plan (live M below the
    bucket's)."""
    import b12x

    from .test_gpu import _weight

    B = b12x.gemm.blockscaled
    bucket = L.bucket_for(m)
    weight = _weight("nvfp4", n, k)
    lives = (m,) if m == 1 else (3, 9, 16)
    plan = B.plan(B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=m, m_values=lives), override={bucket: cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert plan.state.selection == ((bucket, cfg),)
    for live in lives:
        ops = make_operands("bfloat16", "nvfp4", live, n, k, seed=live + n, device="cuda", weight=weight)
        out = torch.full((live, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan)
        torch.cuda.synchronize()
        check_tolerance(out, ops, "bfloat16")
