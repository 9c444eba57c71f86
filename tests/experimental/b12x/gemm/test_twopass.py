"""The two-pass large-M path (`blockscaled/_twopass.py`): its dequantize pass bit for bit against the
reference dequantization, the whole path on the CPU emulator against the fp32 reference (odd M, N
not a multiple of the tile or the panel, several panels), its selection, checks and CPU compiles."""

import dataclasses
import itertools

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm._shared.formats import DEQUANT_SHIFT, compute_dtype
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_dequant as KDQ
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_mma16 as KM
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT
from flashinfer.experimental.b12x.gemm.blockscaled import _twopass as TP
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R

from . import emulated as E
from .emulated import poisoned_launch_args as _args
from .helpers import PAIRS, TORCH, check_tolerance, make_operands

TWOPASS_PAIRS = tuple((a, b) for a, b in PAIRS if TP.eligible(a, b))


@pytest.mark.interpret
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("fmt", KDQ.FORMATS)
@pytest.mark.parametrize("compute", ["bfloat16", "float16"])
def test_dequantize_pass_is_the_reference_dequantization(fmt, compute, staged):
    """Rows r0 .. r0 + rows of the weight, natural K order, times 2^-C, exactly; rows past `rows` of
    the output are left as they were (plain and staged stores)."""
    if compute == "float16" and fmt in ("mxfp4", "mxfp8"):  # fp16 windows: formats.EXACT_RANGES
        pytest.skip("MX scales of random data fall outside fp16's exact window")
    ops = make_operands("bfloat16", fmt, 1, 272, 256, seed=5)
    b, sb = ops.b_values.view(torch.uint8), TP._bytes(ops.b_scales)
    r0, rows = 128, 130
    out = torch.full((192, 256), float("nan"), dtype=TORCH[compute])
    got = E.run_dequant(fmt, compute, KDQ.DequantConfig(128, staged), b, sb, out, r0, rows)
    want = R.dequantize(fmt, ops.b_values, ops.b_scales, ops.n, ops.k, "b")[r0 : r0 + rows]
    if fmt == "fp8_tensor":
        want = want / ops.b_scales.float().reshape(())  # the per-tensor scale travels to the epilogue
    want = want * 2.0 ** -DEQUANT_SHIFT[(fmt, compute)]
    assert torch.equal(got[:rows].float(), want.to(TORCH[compute]).float())
    assert got[rows:].isnan().all()


@pytest.mark.interpret
@pytest.mark.parametrize("a_fmt, b_fmt", TWOPASS_PAIRS)
def test_twopass_every_pair_on_the_emulator(a_fmt, b_fmt):
    """M = 70 (a partial M tile), N = 272 (not a multiple of 128), three B panels of 128 rows."""
    ops = make_operands(a_fmt, b_fmt, 70, 272, 256, seed=11)
    gemm = KM.Mma16Config(64, 64, 2, 2, 3, group_m=2)
    cfg = TP.TwoPassConfig(gemm=gemm, dequant=KDQ.DequantConfig(staged=True), panel_elems=128 * 256, min_m=0)
    assert TP.panel_rows(272, 256, cfg.panel_elems) == 128
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_twopass(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize("pipe", [True, False])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_e4m3_gemm_on_the_raw_operands_on_the_emulator(pipe, out_dtype):
    """Mma16Config.e4m3: tensor-FP8 x tensor-FP8 with no dequantize pass, the GEMM on the raw E4M3
    bytes (K-tiles of 128 values, m16n8k32); M = 70 and N = 200 tails, K = 384 (three K-tiles)."""
    ops = make_operands("fp8_tensor", "fp8_tensor", 70, 200, 384, seed=21)
    gemm = KM.Mma16Config(64, 64, 2, 2, 2, group_m=2, pipe=pipe, e4m3=True)
    cfg = TP.TwoPassConfig(gemm=gemm, min_m=0)
    assert TP.why_not("fp8_tensor", "fp8_tensor", out_dtype, cfg) is None
    args, alpha = _args(ops, out_dtype)
    check_tolerance(E.run_twopass("fp8_tensor", "fp8_tensor", out_dtype, cfg, args, alpha), ops, out_dtype)


def test_e4m3_gemm_needs_tensor_fp8_and_launches_one_kernel():
    cfg = TP.TwoPassConfig(gemm=KM.Mma16Config(e4m3=True), min_m=0)
    assert "e4m3 (raw E4M3 operands) needs tensor-FP8 on both sides, got mxfp8 x mxfp8" in TP.why_not(
        "mxfp8", "mxfp8", "bfloat16", cfg
    )
    keys = TP.kernel_keys("fp8_tensor", "fp8_tensor", "bfloat16", cfg, "sm_90a")
    assert [fn for fn, _ in keys] == [KM.compile_mma16]
    keys = TP.kernel_keys("fp8_tensor", "fp8_tensor", "bfloat16", TP.TwoPassConfig(gemm=cfg.gemm), "sm_90a")
    assert [fn for fn, _ in keys] == [KM.compile_mma16, KT.compile_tiled]


@pytest.mark.interpret
@pytest.mark.parametrize("stages, pipe", [(2, True), (3, True), (3, False)])
def test_pipelined_k_loop_on_the_emulator(stages, pipe):
    """Mma16Config.pipe (the default): fragments one k-step ahead across K-tiles, and the plain K loop;
    K = 384 (six K-tiles through a ring of 2 or 3), M and N tails."""
    ops = make_operands("bfloat16", "nvfp4", 40, 208, 384, seed=9)
    gemm = KM.Mma16Config(64, 64, 2, 2, stages, group_m=0, pipe=pipe)
    cfg = TP.TwoPassConfig(gemm=gemm, panel_elems=128 * 384, min_m=0)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_twopass("bfloat16", "nvfp4", "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_twopass_default_tiles_and_output_dtypes(out_dtype):
    """The default 128 x 128 tile over two warps in M and N, stages 3, one panel, K = 128 (two K-tiles:
    the prologue's copies cover the whole K loop)."""
    ops = make_operands("nvfp4", "nvfp4", 130, 144, 128, seed=2)
    args, alpha = _args(ops, out_dtype)
    cfg = TP.TwoPassConfig(min_m=0)
    check_tolerance(E.run_twopass("nvfp4", "nvfp4", out_dtype, cfg, args, alpha), ops, out_dtype)


@pytest.mark.interpret
def test_below_min_m_the_tiled_kernel_runs():
    """The default config sends a live M below min_m (512) to its tiled config, the same product."""
    cfg = TP.TwoPassConfig(tiled=KT.TiledConfig(64, 64, 2, 2))
    assert TP.runs_tiled(cfg, 511) and not TP.runs_tiled(cfg, 512) and not TP.runs_tiled(TP.TwoPassConfig(min_m=0), 1)
    ops = make_operands("mxfp8", "mxfp8", 33, 80, 256, seed=8)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_twopass("mxfp8", "mxfp8", "bfloat16", cfg, args, alpha), ops, "bfloat16")


def test_panel_rows():
    assert TP.panel_rows(28672, 4096, 1 << 25) == 7168  # four equal panels, not 3 x 8192 + 4096
    assert TP.panel_rows(28672, 4096, 1 << 26) == 14336
    assert TP.panel_rows(4096, 14336, 1 << 25) == 2048  # not 2304 + 1792
    assert TP.panel_rows(4096, 4096, 1 << 25) == 4096
    assert TP.panel_rows(144, 4096, 1 << 25) == 256  # N rounded up to 128
    assert TP.panel_rows(28672, 1 << 20, 1 << 25) == 128  # at least one 128-row atom
    assert TP.panel_rows(400, 256, 128 * 256) == 128  # 4 panels (the last one 16 rows: N = 400)
    for n, k, elems in itertools.product((1, 130, 400, 7168, 28672), (256, 4096, 14336), (1 << 14, 1 << 25, 1 << 26)):
        rows = TP.panel_rows(n, k, elems)
        assert rows % 128 == 0 and (rows == 128 or rows * k <= elems), (n, k, elems)
        assert -(-n // rows) == -(-n // max(128, elems // k // 128 * 128)), (n, k, elems)  # the fewest panels
        panels = -(-n // rows)
        assert n - (panels - 1) * rows > rows - 128 * panels, (n, k, elems)  # equal up to the 128-row rounding


def test_selection_and_the_switch(monkeypatch):
    monkeypatch.delenv(L.TWOPASS_ENV, raising=False)
    for a_fmt, b_fmt in PAIRS:
        cfg = L.default_config("tiled128", 28672, 4096, b_fmt, a_fmt=a_fmt, arch="sm_90a")
        assert L.is_twopass(cfg) == (b_fmt != "fp8_block"), (a_fmt, b_fmt, cfg)
        assert not L.is_twopass(L.default_config("tiled64", 28672, 4096, b_fmt, a_fmt=a_fmt, arch="sm_90a"))
    assert len(L.kernel_keys("nvfp4", "nvfp4", "bfloat16", "tiled128", "sm_90a", TP.TwoPassConfig())) == 3
    assert len(L.kernel_keys("nvfp4", "nvfp4", "bfloat16", "tiled128", "sm_90a", TP.TwoPassConfig(min_m=0))) == 2
    wide = L.default_config("tiled128", 28672, 4096, "nvfp4", a_fmt="nvfp4", arch="sm_90a")
    assert wide.tiled == L.default_config("tiled128", 28672, 4096, "nvfp4", arch="sm_90a")  # the tiled heuristic
    with pytest.raises(ValueError, match="kernel_keys"):
        L.kernel_key("nvfp4", "nvfp4", "bfloat16", "tiled128", "sm_90a", TP.TwoPassConfig())
    monkeypatch.setenv(L.TWOPASS_ENV, "0")
    assert not L.is_twopass(L.default_config("tiled128", 28672, 4096, "nvfp4", a_fmt="nvfp4", arch="sm_90a"))


def test_prime_runs_both_sides_of_a_twopass_bucket():
    cfg = TP.TwoPassConfig()
    assert L.prime_ms(cfg, 4096) == (4096, 511)  # two-pass at 4096, the tiled side at 511
    assert L.prime_ms(cfg, 400) == (400,)  # a capacity below min_m: the tiled side only
    assert L.prime_ms(TP.TwoPassConfig(min_m=0), 4096) == (4096,)
    assert L.prime_ms(L.default_config("tiled64", 4096, 4096, "nvfp4"), 256) == (256,)


def test_why_not_names_the_problem():
    good = TP.TwoPassConfig()
    assert TP.why_not("nvfp4", "nvfp4", "bfloat16", good) is None
    assert "fp8_block" in TP.why_not("fp8_block", "fp8_block", "bfloat16", good)
    assert "panel_elems" in TP.why_not("nvfp4", "nvfp4", "bfloat16", dataclasses.replace(good, panel_elems=64))
    assert "min_m" in TP.why_not("nvfp4", "nvfp4", "bfloat16", dataclasses.replace(good, min_m=-1))
    bad_tiled = dataclasses.replace(good, tiled=KT.TiledConfig(128, 128, 2, 4, mix=9))
    assert "mix" in TP.why_not("nvfp4", "nvfp4", "bfloat16", bad_tiled)
    assert TP.why_not("nvfp4", "nvfp4", "bfloat16", dataclasses.replace(bad_tiled, min_m=0)) is None
    big = dataclasses.replace(good, gemm=KM.Mma16Config(128, 256, 2, 4, 3))
    assert "99 KB" in TP.why_not("nvfp4", "nvfp4", "bfloat16", big)
    # an explicit sm_90a build may take up to 227 KB (probes); plans and candidates stay portable
    assert KM.why_not("nvfp4", "nvfp4", "bfloat16", big.gemm, "sm_90a") is None
    assert "99 KB" in KM.why_not("nvfp4", "nvfp4", "bfloat16", big.gemm, "sm_120a")
    huge = KM.Mma16Config(256, 256, 4, 4, 4)
    assert "227 KB a sm_90a block" in KM.why_not("nvfp4", "nvfp4", "bfloat16", huge, "sm_90a")
    assert all(KM.why_not("nvfp4", "nvfp4", "bfloat16", g) is None for g in KM.CANDIDATES if not g.e4m3)
    assert "minctas" in KM.why_not("nvfp4", "nvfp4", "bfloat16", KM.Mma16Config(minctas=5))
    assert "minctas" in KM.why_not("nvfp4", "nvfp4", "bfloat16", KM.Mma16Config(minctas=True))
    bounded = KM.Mma16Logic("nvfp4", "nvfp4", "bfloat16", KM.Mma16Config(128, 128, 2, 4, 3, minctas=2))
    assert bounded.occupancy_hints()["min_blocks_per_mp"] == 2
    assert bounded.occupancy_hints()["max_number_threads"] == [256, 1, 1]
    assert KM.Mma16Logic("nvfp4", "nvfp4", "bfloat16", KM.Mma16Config()).occupancy_hints() == {}
    assert "tiled buckets" in L.why_not("nvfp4", "nvfp4", "bfloat16", "decode8", good)
    with pytest.raises(ValueError, match="16-bit GEMM"):
        KM.Mma16Logic("nvfp4", "nvfp4", "bfloat16", KM.Mma16Config(stages=1))
    with pytest.raises(ValueError, match="dequantize pass"):
        KDQ.DequantLogic("bfloat16", "bfloat16", KDQ.DequantConfig())


@pytest.mark.compile
@pytest.mark.parametrize("a_fmt, b_fmt", [("bfloat16", "nvfp4"), ("mxfp8", "mxfp8"), ("float16", "nvfp4")])
def test_default_twopass_kernels_compile_for_both_archs(a_fmt, b_fmt):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    for arch in ("sm_90a", "sm_120a"):
        cfg = L.default_config("tiled128", 4096, 4096, b_fmt, a_fmt=a_fmt, arch=arch)
        for fn, key in L.kernel_keys(a_fmt, b_fmt, "bfloat16", "tiled128", arch, cfg):
            built = fn(*key)
            ptx = built.artifacts.PTX
            assert [ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")] == [arch]
            assert built.artifacts.CUBIN[:4] == b"\x7fELF"
            assert ".local" not in ptx and "wgmma" not in ptx and "tcgen05" not in ptx
            if fn is KM.compile_mma16:
                t = {"bfloat16": "bf16", "float16": "f16"}[compute_dtype(a_fmt)]
                assert "cp.async.cg.shared.global" in ptx and f"m16n8k16.row.col.f32.{t}.{t}.f32" in ptx


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
def test_every_mma16_candidate_and_dequant_format_compiles(arch):
    pytest.importorskip("cutlass")
    for cfg in KM.CANDIDATES:
        fmt = "fp8_tensor" if cfg.e4m3 else "nvfp4"
        ptx = KM.compile_mma16(fmt, fmt, "bfloat16", cfg, arch=arch).artifacts.PTX
        assert ".local" not in ptx
        assert ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in ptx) == cfg.e4m3
    for fmt in KDQ.FORMATS:
        for compute in ("bfloat16", "float16"):
            for cfg in (KDQ.DequantConfig(staged=False), KDQ.DequantConfig(), KDQ.DequantConfig(pdl=True)):
                assert ".local" not in KDQ.compile_dequant(fmt, compute, cfg, arch=arch).artifacts.PTX


def test_launcher_dispatch_and_panels_with_recording_kernels():
    """TwoPassLauncher's host logic with stand-in kernels: below min_m one call of the tiled kernel with
    the launch's own arguments; from min_m on A's dequantize (quantized A only), then per B panel its
    dequantize (r0, rows) and the GEMM (c0, p), in order, on workspaces of the right shape."""
    calls = []

    def rec(name):
        return lambda *args: calls.append((name, args))

    def launcher(a_fmt, b_fmt, config):
        lt = object.__new__(TP.TwoPassLauncher)
        lt.a_fmt, lt.b_fmt, lt.config, lt.compute = a_fmt, b_fmt, config, compute_dtype(a_fmt)
        lt.kernels = [rec("deq"), rec("gemm"), rec("tiled")]
        return lt

    n, k = 400, 256
    b = torch.zeros(n, k // 2, dtype=torch.uint8)
    sfb, ones = torch.zeros(512 * 2, dtype=torch.uint8), torch.ones(1)
    cfg = TP.TwoPassConfig(panel_elems=128 * k)
    for m, a_fmt in ((511, "nvfp4"), (512, "nvfp4"), (1100, "bfloat16")):
        calls.clear()
        a = torch.zeros(m, k // 2, dtype=torch.uint8) if a_fmt == "nvfp4" else torch.zeros(m, k, dtype=torch.bfloat16)
        c = torch.empty(m, n, dtype=torch.bfloat16)
        args = (a, sfb, b, sfb, c, ones, ones, ones, 1.5)
        launcher(a_fmt, "nvfp4", cfg)(*args)
        if m < cfg.min_m:
            assert calls == [("tiled", args)]
            continue
        names = [name for name, _ in calls]
        first = 1 if a_fmt == "nvfp4" else 0
        assert names == ["deq"] * first + ["deq", "gemm"] * 4  # panels of 128 rows: 128, 128, 128, 16
        if first:
            assert calls[0][1][2].shape == (m, k) and calls[0][1][3:] == (0, m)
        panels = [(d[1][3:], g[1][7:]) for d, g in zip(calls[first::2], calls[first + 1 :: 2])]
        assert panels == [
            ((0, 128), (0, 128)),
            ((128, 128), (128, 128)),
            ((256, 128), (256, 128)),
            ((384, 16), (384, 16)),
        ]
        gemm_args = calls[first + 1][1]
        assert gemm_args[2] is c and gemm_args[1].shape == (128, k) and gemm_args[6] == 1.5
        assert (gemm_args[0] is a) == (a_fmt == "bfloat16")
