"""The fused decode kernel with warp groups (`DecodeConfig.wn` > 1; session 38, GPU-tested in session 39): each group
owns BN / wn rows (gcols output columns or rope pairs, their gate / up or first / second rows inside the group) and
splits K over its kstep warps, so every output is the sum a one-group kernel of kstep warps makes: the outputs
(fp32, or the rope caches) are bitwise those of that kernel on the emulator, for every epilogue, the norm, the
prefetch pipeline, upfront loads and pdl "prefetch" (the L2 prefetch covers the same rows). `launch.fused_config`
gives the residual epilogue the plain heuristic's groups under pdl off / wait (timed with an epilogue in session 40:
-7% at M = 16 28672 x 4096) and every other fused plan wn 1 (silu_mul was even there)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F
from flashinfer.experimental.b12x.gemm.blockscaled._epilogue import RopeLayout

from .helpers import make_operands, on_cpu
from .test_decode_fused import _norm_weight, check_fused, fused_args, run_fused
from .test_rope_epilogue import check_outputs, emulate

pytestmark = pytest.mark.interpret
CFG = KD.DecodeConfig
# (a_fmt, b_fmt, m, n, k, the grouped config): N tails and idle warps on purpose
CASES = [
    ("bfloat16", "nvfp4", 5, 208, 1024, CFG(8, 2, 1, 2, wn=2)),
    ("bfloat16", "nvfp4", 13, 192, 768, CFG(8, 2, 2, 1, wn=4)),
    ("float16", "mxfp8", 3, 160, 512, CFG(4, 2, 1, 1, prefetch=1, wn=2)),
    ("bfloat16", "nvfp4", 1, 128, 1024, CFG(8, 2, 1, 2, upfront=2, wn=2)),
]


def _one_group(cfg: KD.DecodeConfig) -> KD.DecodeConfig:
    return dataclasses.replace(cfg, warps=cfg.kwarps, wn=1)


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("epilogue", ["none", "silu_mul", "residual"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_groups_are_the_one_group_kernel_bitwise(case, epilogue, norm):
    a_fmt, b_fmt, m, n, k, cfg = CASES[case]
    out_dtype = "float32" if epilogue == "none" and not norm else a_fmt
    ops = make_operands(a_fmt, b_fmt, m, n, k, seed=70 + case)
    g = _norm_weight(k, a_fmt, case) if norm else None
    pdl = ("off", "prefetch", "wait")[case % 3]
    outs = []
    for c in (cfg, _one_group(cfg)):
        args, alpha, residual = fused_args(ops, epilogue, out_dtype, seed=case, norm_weight=g)  # fresh NaNs
        out, _, _ = run_fused(a_fmt, b_fmt, out_dtype, F.FusedConfig(c, epilogue, pdl, norm), args, alpha, 1e-5)
        outs.append(out)
    check_fused(outs[0], ops, epilogue, out_dtype, residual, norm=None if g is None else (g, 1e-5))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("norm", [False, True])
def test_rope_groups_are_the_one_group_kernel_bitwise(norm):
    lay, t, k = RopeLayout(4, 2, 32, 16), 3, 512  # 128 pairs: two CTAs of 2 x 32 pairs at BN 128
    cfg = CFG(8, 2, 1, 1, wn=2)
    q, k_rows, v_rows, ops, rope, nargs = got = emulate(lay, t, k, cfg, "prefetch", norm, seed=5)
    check_outputs(q, k_rows, v_rows, ops, lay, rope, "bfloat16", nargs)
    one = emulate(lay, t, k, _one_group(cfg), "prefetch", norm, seed=5)
    for ours, theirs in zip(got[:3], one[:3]):
        assert torch.equal(ours, theirs)


def test_the_heuristic_groups_only_the_timed_epilogue(monkeypatch):
    """fused_config keeps the plain heuristic's warp groups (without ashare) for residual under pdl off / wait (-7%
    at M = 16 28672 x 4096, session 40); with `decode_rules.FUSED_SILU_GROUPS` off, silu_mul (even there in session
    40), no epilogue, rope and pdl "prefetch" keep one."""
    from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    monkeypatch.setattr(R, "FUSED_SILU_GROUPS", False)
    monkeypatch.setattr(R, "FUSED_SILU_GROUPS4", False)
    plain = L.default_config("decode16", 28672, 4096, "nvfp4", a_fmt="bfloat16")
    assert plain.wn == 2 and plain.ashare and L.GROUPED_EPILOGUES == ("residual",)
    for pdl in ("off", "wait"):
        grouped = L.fused_config("decode16", 28672, 4096, "nvfp4", "bfloat16", "residual", pdl).decode
        # FP4 placement follows the plain kernel's while `decode_rules.FUSED_FP4_MUL` is on (K = 4096 >= its MIN_K).
        want = plain.fp4 if R.FUSED_FP4_MUL else "shift"
        assert grouped == dataclasses.replace(plain, ashare=False, fp4=want) and grouped.wn == 2, pdl
        assert grouped == L.fused_config("decode16", 28672, 4096, "nvfp4", "bfloat16", "none", pdl, "wn=2").decode
    for epilogue, pdl in (("none", "wait"), ("silu_mul", "off"), ("silu_mul", "wait"), ("residual", "prefetch")):
        assert L.fused_config("decode16", 28672, 4096, "nvfp4", "bfloat16", epilogue, pdl).decode.wn == 1
    for shape in ((4096, 4096), (4096, 14336), (7168, 2048)):  # the heuristic has no groups there
        assert L.fused_config("decode16", *shape, "nvfp4", "bfloat16", "residual", "wait").decode.wn == 1
    assert F.why_not("bfloat16", "nvfp4", "bfloat16", F.FusedConfig(CFG(8, 2, 2, 1, wn=2), "silu_mul")) is None


# switch: which plain configs it covers (the plain heuristic's, at N = n)
SILU_GROUP_SWITCHES = {
    "FUSED_SILU_GROUPS": lambda b_fmt, n, plain: plain.warps == 8,
    "FUSED_SILU_GROUPS4": lambda b_fmt, n, plain: plain.warps == 4 and b_fmt == "nvfp4" and n <= 33792,
}


@pytest.mark.parametrize("switch", sorted(SILU_GROUP_SWITCHES))
@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4"])
def test_fused_silu_groups(monkeypatch, b_fmt, switch):
    """`decode_rules.FUSED_SILU_GROUPS` (on since session 55): silu_mul keeps the plain heuristic's 8-warp groups
    (without ashare) under pdl off / wait where `one_wave` reaches it and they fit one wave, MXFP4 unrolled once;
    `FUSED_SILU_GROUPS4` (on since session 55) NVFP4's 4-warp groups up to 528 CTAs (N 33792). Off, on sm_120a, with the norm, under
    pdl "prefetch", past one wave (36864), on MXFP4's 4-warp groups (unrolled once they lost in session 55) and where
    the heuristic has no groups, nothing changes; residual is as before either way."""
    from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    def fused(bucket, n, k, epilogue="silu_mul", pdl="off", arch=None, norm=False):
        return L.fused_config(bucket, n, k, b_fmt, "bfloat16", epilogue, pdl, norm=norm, arch=arch).decode

    keys = [
        (bucket, n, k, epilogue, pdl, arch, norm)
        for bucket, n, k in (
            ("decode16", 28672, 4096),
            ("decode16", 16384, 2048),
            ("decode16", 16384, 4096),
            ("decode16", 36864, 4096),
            ("decode16", 33792, 2048),
            ("decode16", 20480, 2048),
            ("decode16", 4096, 4096),
            ("decode8", 28672, 4096),
        )
        for epilogue in ("silu_mul", "residual")
        for pdl in ("off", "wait", "prefetch")
        for arch in (None, "sm_120a")
        for norm in (False, True)
    ]
    for name in SILU_GROUP_SWITCHES:
        monkeypatch.setattr(R, name, False)
    before = {key: fused(*key) for key in keys}
    monkeypatch.setattr(R, switch, True)
    moved = 0
    for key, old in before.items():
        bucket, n, k, epilogue, pdl, arch, norm = key
        new = fused(*key)
        plain = L.default_config(bucket, n, k, b_fmt, a_fmt="bfloat16", arch=arch)
        covered = SILU_GROUP_SWITCHES[switch](b_fmt, n, plain) and plain.wn == 2
        if epilogue == "silu_mul" and pdl != "prefetch" and arch is None and not norm and covered:
            assert old.wn == 1 and new.wn == plain.wn == 2 and not new.ashare, key
            mx = b_fmt == "mxfp4"  # unrolled once, FP4 placed by a multiply (FUSED_MXFP4_GROUPS_MUL)
            fp4 = "mul" if mx and R.FUSED_MXFP4_GROUPS_MUL else old.fp4
            assert new == dataclasses.replace(old, wn=2, unroll=1 if mx else old.unroll, fp4=fp4), key
            moved += 1
        else:
            assert new == old, key
    # 9..16 tokens, pdl off / wait: 16384 x 2048 / 4096 (8 warps); NVFP4's 28672 x 4096, 33792 and 20480 x 2048
    want = {"FUSED_SILU_GROUPS": 4, "FUSED_SILU_GROUPS4": 6 if b_fmt == "nvfp4" else 0}[switch]
    assert moved == want


@pytest.mark.compile
@pytest.mark.parametrize(
    "decode, epilogues, b_fmt",
    [
        (CFG(8, 2, 2, 1, wn=2, wcache="na", acache="el"), ("silu_mul", "none"), "nvfp4"),
        # M = 16 28672 x 4096's grouped tiling with its activations shared (ashare, session 53)
        (CFG(4, 2, 2, 2, wn=2, ashare=True, wcache="na", acache="el", fp4="mul"), ("silu_mul", "residual"), "nvfp4"),
        # FUSED_SILU_GROUPS' silu_mul at 16384 x 2048: NVFP4 unroll 2 (114 registers on sm_90a), MXFP4 unroll 1 (100)
        (CFG(8, 2, 2, 2, wn=2, wcache="na", acache="el"), ("silu_mul",), "nvfp4"),
        (CFG(8, 2, 2, 1, wn=2, wcache="na", acache="el"), ("silu_mul",), "mxfp4"),
    ],
)
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_groups_build_without_local_memory(arch, decode, epilogues, b_fmt):
    pytest.importorskip("cutlass")
    for epilogue in epilogues:
        cfg = F.FusedConfig(decode, epilogue, "wait")
        assert ".local" not in F.compile_decode_fused("bfloat16", b_fmt, "bfloat16", cfg, arch).artifacts.PTX


@pytest.mark.gpu
@pytest.mark.parametrize("opts", ["wn=2", "wn=2,ashare=true"])
@pytest.mark.parametrize("epilogue", ["silu_mul", "residual", "none"])
def test_grouped_plans_on_the_gpu(epilogue, opts):
    """Plans whose fused configs have 2 warp groups (a plan override: the heuristic's config with "wn=2"; with
    "ashare=true" the groups share their activations, session 53), pdl "wait", N = 28672 (28672 x 4096: the shape
    where the plain kernel's groups won), M = 3 / 9 / 16, outputs NaN-poisoned, against the fp32 reference."""
    import b12x
    from flashinfer.experimental.b12x.gemm._shared import launch as L

    from .test_decode_fused_gpu import _residual, _weight

    B = b12x.gemm.blockscaled
    n, k, ms = 28672, 4096, (3, 9, 16)
    cfg = L.fused_config("decode16", n, k, "nvfp4", "bfloat16", epilogue, "wait", opts)
    assert cfg.decode.wn == 2 and cfg.decode.ashare == ("ashare" in opts)
    q = B.GemmQuery("bfloat16", "nvfp4", n, k, max_m=16, m_values=(16,), epilogue=epilogue, pdl="wait")
    plan = B.plan(q, override={"decode16": cfg})
    with b12x.PreparationSession("cuda") as s:
        s.prepare([plan])
    assert plan.state.selection == (("decode16", cfg),)
    for m in ms:
        ops = make_operands("bfloat16", "nvfp4", m, n, k, seed=m + n, device="cuda", weight=_weight(n, k))
        res = _residual(m, n, m) if epilogue == "residual" else None
        cols = n // 2 if epilogue == "silu_mul" else n
        out = torch.full((m, cols), float("nan"), dtype=torch.bfloat16, device="cuda")
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue=epilogue, residual=res)
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), epilogue, "bfloat16", None if res is None else res.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "b_fmt, n, k", [("nvfp4", 16384, 4096), ("mxfp4", 16384, 2048), ("mxfp4", 16384, 4096), ("nvfp4", 28672, 4096)]
)
def test_fused_silu_groups_on_the_gpu(monkeypatch, b_fmt, n, k):
    """`decode_rules.FUSED_SILU_GROUPS` / `FUSED_SILU_GROUPS4` (on since session 55; forced here; MXFP4 under
    FUSED_MXFP4_GROUPS_MUL's multiply whatever its state): the heuristic's silu_mul plan with its warp groups
    (MXFP4 unrolled once), planned for the device, M = 9 / 16, NaN-poisoned, against the fp32 reference."""
    import b12x
    from flashinfer.experimental.b12x.gemm._shared import decode_rules as R

    from .test_decode_fused_gpu import _poisoned, _prepared

    monkeypatch.setattr(R, "FUSED_SILU_GROUPS", True)
    monkeypatch.setattr(R, "FUSED_SILU_GROUPS4", True)
    monkeypatch.setattr(R, "FUSED_MXFP4_GROUPS_MUL", True)
    B = b12x.gemm.blockscaled
    plan = _prepared(B.GemmQuery("bfloat16", b_fmt, n, k, max_m=16, m_values=(16,), epilogue="silu_mul"))
    ((_, cfg),) = plan.state.selection
    assert cfg.decode.wn == 2 and cfg.decode.unroll == (1 if b_fmt == "mxfp4" else 2)
    assert cfg.decode.fp4 == "mul"  # NVFP4's DECODE16_FP4_MUL under FUSED_FP4_MUL; MXFP4's FUSED_MXFP4_GROUPS_MUL
    weight = make_operands("bfloat16", b_fmt, 1, n, k, seed=n + k, device="cuda").weight
    for m in (9, 16):
        ops = make_operands("bfloat16", b_fmt, m, n, k, seed=m + n, device="cuda", weight=weight)
        out = _poisoned(m, n, "silu_mul")
        B.mm(ops.a_values, ops.weight, out, plan=plan, epilogue="silu_mul")
        torch.cuda.synchronize()
        check_fused(out.cpu(), on_cpu(ops), "silu_mul", "bfloat16", None)
