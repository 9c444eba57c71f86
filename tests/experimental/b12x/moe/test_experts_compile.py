"""moe.fused_moe expert GEMMs compile on this CPU machine for sm_90a and sm_120a (fake tensors: E, N,
K, R_cap symbolic). The default tier builds a representative set; `slow` builds FC1 x {silu, relu2,
swiglu_oai} and FC2 for every (A format, weight format) pair on both archs."""

import itertools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig

from .moe_cases import EXPERT_PAIRS as PAIRS

pytestmark = pytest.mark.compile

ARCHS = ("sm_90a", "sm_120a")


@pytest.fixture(autouse=True)
def _toolchain():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")


def _X():
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_experts as X

    return X


def _check_built(fn, arch: str, activation=None) -> None:
    ptx = fn.artifacts.PTX
    assert [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")] == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert ".local" not in ptx, "the kernel spills to local memory"
    assert "wgmma" not in ptx and "tcgen05" not in ptx  # DESIGN.md section 5
    assert ("ex2.approx.f32" in ptx) == (activation in ("silu", "swiglu_oai"))


@pytest.mark.parametrize(
    "fc, a_fmt, b_fmt, activation",
    [
        (1, "bfloat16", "nvfp4", "silu"),
        (1, "mxfp8", "mxfp4", "swiglu_oai"),
        (1, "nvfp4", "nvfp4", "relu2"),
        (2, "nvfp4", "nvfp4", None),
        (2, "bfloat16", "mxfp4", None),
    ],
)
def test_representative_variants_compile_for_both_archs(fc, a_fmt, b_fmt, activation):
    X = _X()
    cfg = X.default_config(64)
    for grid in X.GRIDS:
        built = {}
        for arch in ARCHS:
            if fc == 1:
                built[arch] = X.compile_fc1(a_fmt, b_fmt, activation, cfg, arch, grid)
            else:
                built[arch] = X.compile_fc2(a_fmt, b_fmt, cfg, arch, grid)
            _check_built(built[arch], arch, activation)
            _check_active_reads(built[arch], grid)
        assert built["sm_90a"].artifacts.CUBIN != built["sm_120a"].artifacts.CUBIN


def _check_active_reads(fn, grid: str) -> None:
    """The `active` tensor is the kernel's last parameter: the identity grid never touches it (no
    dependent load before start[e]), the list grid reads it."""
    ptx = fn.artifacts.PTX
    entry = ptx[ptx.index(".entry") : ptx.index(")", ptx.index(".entry"))]
    last = re.findall(r"(\S+_param_\d+)\[", entry)[-1]
    uses = ptx.count(last) - 1  # the declaration itself
    assert (uses == 0) == (grid == "identity"), f"grid {grid}: {uses} uses of the active parameter"


def test_live_sizes_are_not_compile_keys():
    # E, N, K, R_cap and the routing come from the tensors at launch: the key is formats, activation,
    # config, arch and the grid variant only, and a second resolve of one key is the same launcher.
    import inspect

    X = _X()
    fc1_key = ["a_fmt", "b_fmt", "activation", "config", "arch", "grid", "span"]
    assert list(inspect.signature(X.compile_fc1).parameters) == fc1_key
    assert list(inspect.signature(X.compile_fc2).parameters) == ["a_fmt", "b_fmt", "config", "arch", "grid", "span"]
    fn = X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(8), arch="sm_90a")
    assert fn is X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(8), arch="sm_90a")
    assert fn is X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(8), "sm_90a", "list")  # the default
    ident = X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(8), "sm_90a", "identity")
    assert ident is not fn and "grid=identity" in X.compile_fc1.key_summary(
        "bfloat16", "nvfp4", "silu", X.default_config(8), "sm_90a", "identity"
    )
    assert fn is X.compile_fc1("bfloat16", "nvfp4", "silu", X.default_config(8), "sm_90a", "list", 1)  # span 1
    assert "span=2" in X.compile_fc2.key_summary("nvfp4", "nvfp4", X.default_config(8), "sm_90a", "list", 2)


def test_bad_variants_fail_before_compiling():
    X = _X()
    with pytest.raises(ValueError, match="A format mxfp8 x weight format fp8_block is not one of"):
        X.compile_fc2("mxfp8", "fp8_block", X.default_config(8), arch="sm_90a")
    with pytest.raises(ValueError, match="a gated FC1 needs tiles >= 2"):
        X.compile_fc1("bfloat16", "nvfp4", "swiglu_oai", DecodeConfig(8, 1, 2, 1), arch="sm_90a")
    with pytest.raises(ValueError, match="grid must be one of"):
        X.compile_fc2("nvfp4", "nvfp4", X.default_config(8), "sm_90a", "full")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS)
def test_every_variant_compiles(a_fmt, b_fmt, arch):
    X = _X()
    assert X.PAIRS == PAIRS
    for cfg in (X.default_config(8), X.default_config(64)):
        for grid in X.GRIDS:
            for activation in X.ACTIVATIONS:
                _check_built(X.compile_fc1(a_fmt, b_fmt, activation, cfg, arch, grid), arch, activation)
            _check_built(X.compile_fc2(a_fmt, b_fmt, cfg, arch, grid), arch)


def _spills(fn, arch: str) -> str:
    """ptxas -v's resource line for the kernel's PTX ('' when no ptxas is on PATH). The DSL writes
    PTX ISA 9.4; CUDA 13.0's ptxas reads up to 9.0 and the kernels use nothing newer."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return ""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(re.sub(r"^\.version 9\.\d+", ".version 9.0", fn.artifacts.PTX, flags=re.M))
        out = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", str(src), "-o", str(Path(d) / "k.cubin")], capture_output=True, text=True
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return " ".join(line for line in out.stderr.splitlines() if "spill" in line)


def _check_no_spills(fn, arch: str) -> None:
    info = _spills(fn, arch)
    assert " 0 bytes spill stores" in info or not info, f"ptxas spills: {info}"


@pytest.mark.parametrize("grid", ["identity", "list"])
@pytest.mark.parametrize("max_rows", [8, 512])
def test_default_configs_do_not_spill(max_rows, grid):
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas on PATH: the spill check needs the CUDA toolkit's assembler")
    X = _X()
    cfg = X.default_config(max_rows)
    for arch in ARCHS:
        _check_no_spills(X.compile_fc1("mxfp8", "mxfp4", "swiglu_oai", cfg, arch, grid), arch)
        _check_no_spills(X.compile_fc2("nvfp4", "nvfp4", cfg, arch, grid), arch)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_candidate_configs_compile(arch):
    X = _X()
    for max_rows in (8, 64):
        for cfg in X.candidate_configs(max_rows):
            for (a_fmt, b_fmt), grid in itertools.product(PAIRS, X.GRIDS):
                for activation in X.ACTIVATIONS:
                    fn = X.compile_fc1(a_fmt, b_fmt, activation, cfg, arch, grid)
                    _check_built(fn, arch, activation)
                    _check_no_spills(fn, arch)
                fn = X.compile_fc2(a_fmt, b_fmt, cfg, arch, grid)
                _check_built(fn, arch)
                _check_no_spills(fn, arch)


SWEEP_RECIPES = (("bfloat16", "nvfp4"), ("nvfp4", "nvfp4"), ("bfloat16", "mxfp4"), ("mxfp8", "mxfp4"))


def _build_sweep(arch: str, ntiles: int, recipes, spans=None) -> int:
    """Builds FC1 (silu) and FC2 of `sweep_pairs(ntiles)` (only the tilings whose span is in `spans`
    when given) for `recipes`, each checked for its instructions and (with a ptxas) for spills."""
    built = 0
    for _, fc1, fc2, span in _X().sweep_pairs(ntiles):
        if spans is not None and span not in spans:
            continue
        for a_fmt, b_fmt in recipes:
            built += _build_pair(arch, a_fmt, b_fmt, fc1, fc2, span)
    return built


def _build_pair(arch: str, a_fmt: str, b_fmt: str, fc1, fc2, span: int = 1) -> int:
    """Builds FC1 (silu, identity grid) of config fc1 and FC2 (list grid) of fc2, each checked for its instructions and
    (with a ptxas) for spills; returns the 2 kernels built."""
    X = _X()
    fn = X.compile_fc1(a_fmt, b_fmt, "silu", fc1, arch, "identity", span)
    _check_built(fn, arch, "silu")
    _check_no_spills(fn, arch)
    fn = X.compile_fc2(a_fmt, b_fmt, fc2, arch, "list", span)
    _check_built(fn, arch)
    _check_no_spills(fn, arch)
    return 2


@pytest.mark.slow
@pytest.mark.parametrize("ntiles", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_sweep_tilings_compile_without_spills(arch, ntiles):
    """Every tiling bench_moe --expert-sweep times (`sweep_pairs`), FC1 (silu) and FC2, for the
    recipes the H200 sweep runs (bf16 and NVFP4 A on NVFP4 weights) and MXFP4 weights (~11 min on 2
    CPU cores: the slow tier)."""
    assert _build_sweep(arch, ntiles, SWEEP_RECIPES) > 0


@pytest.mark.parametrize("ntiles", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_fp4_mul_decode_tilings_compile_without_spills(arch, ntiles):
    """The decode tilings `_buckets.with_fp4_mul` gives (FP4 placed by a multiply) for the pairs it serves: bf16 A
    (w4a16, nvfp4's dequantized buckets) and packed NVFP4 A, on NVFP4 weights."""
    from flashinfer.experimental.b12x.moe.fused_moe import _buckets
    from flashinfer.experimental.b12x.moe.fused_moe.api import ExpertBucket

    X = _X()
    label = "w4p1h256" if ntiles == 1 else "w4p1"  # the heuristic's 8- (w4a16) and 16-token buckets
    (bucket,) = _buckets.with_fp4_mul((ExpertBucket(64, *X.sweep_tiling(ntiles, label)),))
    assert bucket.fc1.fp4 == bucket.fc2.fp4 == "mul"
    for a_fmt in ("bfloat16", "nvfp4"):
        _build_pair(arch, a_fmt, "nvfp4", bucket.fc1, bucket.fc2)


@pytest.mark.parametrize("arch", ARCHS)
def test_multi_tile_spans_compile(arch):
    """The default tier's share of the sweep: the tilings whose CTAs own more than one column tile
    (span > 1, the path the representative variants above do not build), for NVFP4 x NVFP4."""
    X = _X()
    found = next(((n, span) for n in (1, 2) for *_, span in X.sweep_pairs(n) if span > 1), None)
    assert found, "the sweep has no span > 1 tiling"
    ntiles, span = found
    assert _build_sweep(arch, ntiles, SWEEP_RECIPES[1:2], {span}) > 0


# ---- the grouped (large-T) expert GEMMs: gemm's tiled kernel over windows of sorted rows -----------
@pytest.mark.parametrize("arch", ARCHS)
def test_grouped_w4a8_mx_fp8_mma_builds_without_spills(arch, tmp_path):
    """w4a8_mx's e4m3-MMA tile (`_kernel_grouped.fp8_config`): m16n8k32 e4m3 mma.sync, no bf16 MMA, the E2M1 -> E4M3
    table's prmt with a register selector, and no stack frame (the larger warp tiles spill 104-144 bytes)."""
    from flashinfer.experimental.b12x._lib import cuda_binary as CB
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    for fn in (G.compile_grouped_fc1("mxfp8", "mxfp4", "silu", G.fp8_config(), arch, 128),
               G.compile_grouped_fc2("mxfp8", "mxfp4", G.fp8_config(), arch, 128)):  # fmt: skip
        ptx = fn.artifacts.PTX
        assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in ptx and "bf16.bf16.f32" not in ptx
        assert ".local" not in ptx and CB.resources(fn.artifacts.CUBIN)["STACK"] == 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "fc, a_fmt, b_fmt, activation",
    [
        (1, "bfloat16", "nvfp4", "silu"),
        (1, "nvfp4", "nvfp4", "swiglu_oai"),
        (2, "bfloat16", "nvfp4", None),
        (1, "mxfp8", "mxfp4", "silu"),
        (2, "mxfp8", "nvfp4", None),
    ],  # fmt: skip
)
def test_grouped_kernels_build(fc, a_fmt, b_fmt, activation, arch):
    from flashinfer.experimental.b12x.moe.fused_moe import _kernel_grouped as G

    for per_expert, num_e in ((True, 128), (False, 512)):
        cfg = G.GroupedConfig(per_expert=per_expert)
        if fc == 1:
            fn = G.compile_grouped_fc1(a_fmt, b_fmt, activation, cfg, arch, num_e)
        else:
            fn = G.compile_grouped_fc2(a_fmt, b_fmt, cfg, arch, num_e)
        _check_built(fn, arch, activation)
