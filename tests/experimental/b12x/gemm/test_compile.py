"""gemm.blockscaled kernels compile on this CPU machine for sm_90a and sm_120a (fake tensors, symbolic M,
N, K): the default tier builds each kernel class at its default config; `slow` builds every variant."""

import pytest

from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm._shared.formats import OUT_DTYPES

from .helpers import PAIRS

pytestmark = pytest.mark.compile

ARCHS = ("sm_90a", "sm_120a")
ALL_ARCHS = ARCHS + ("sm_121a",)  # DGX Spark: the slow sweep and one default build


@pytest.fixture(autouse=True)
def _toolchain():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")


def _targets(ptx: str) -> list[str]:
    return [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")]


def _check_built(fn, arch: str, mma: bool = True) -> None:
    ptx = fn.artifacts.PTX
    assert _targets(ptx) == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    assert ("mma.sync.aligned.m16n8k" in ptx) == mma
    assert ".local" not in ptx, "the kernel spills to local memory"
    assert "wgmma" not in ptx and "tcgen05" not in ptx  # DESIGN.md section 5


def _built_variant(a_fmt, b_fmt, out_dtype, bucket, arch):
    """Compile every kernel of the bucket's default variant (the two-pass path has two) and check
    each; returns the first one built (the variant's GEMM for single-kernel variants)."""
    cfg = L.default_config(bucket, b_fmt=b_fmt, a_fmt=a_fmt, arch=arch)
    built = []
    for fn, key in L.kernel_keys(a_fmt, b_fmt, out_dtype, bucket, arch, cfg):
        built.append(fn(*key))
        _check_built(built[-1], arch, mma="dequant_rows" not in fn.op)
    return built[-1]


@pytest.mark.parametrize("bucket", ["decode8", "decode32", "decode64", "tiled128"])
@pytest.mark.parametrize("a_fmt, b_fmt", [("bfloat16", "nvfp4"), ("mxfp8", "mxfp8")])
def test_default_configs_compile_for_both_archs(bucket, a_fmt, b_fmt):
    built = {}
    for arch in ARCHS:
        built[arch] = _built_variant(a_fmt, b_fmt, "bfloat16", bucket, arch)
    assert built["sm_90a"].artifacts.CUBIN != built["sm_120a"].artifacts.CUBIN


@pytest.mark.parametrize("fmt", ["fp8_tensor", "fp8_block", "mxfp8"])
def test_fp8_mma_tiled_variant_compiles_for_both_archs(fmt):
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

    for arch in ARCHS:
        fn = KT.compile_tiled(fmt, fmt, "bfloat16", KT.TiledConfig(128, 128, 2, 4, fp8_mma=True), arch=arch)
        _check_built(fn, arch)
        assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in fn.artifacts.PTX


def test_live_m_is_not_a_compile_key():
    keys = {L.kernel_key("bfloat16", "nvfp4", "bfloat16", L.bucket_for(m), "sm_90a") for m in (1, 2, 5, 8)}
    assert len(keys) == 1
    assert L.bucket_for(9) == L.bucket_for(16) == "decode16"
    assert L.bucket_for(17) == L.bucket_for(32) == "decode32"
    assert L.bucket_for(33) == L.bucket_for(64) == "decode64"
    assert L.bucket_for(65) == L.bucket_for(256) == "tiled64"
    keys = {L.kernel_key("bfloat16", "nvfp4", "bfloat16", L.bucket_for(m), "sm_90a") for m in (33, 40, 64)}
    assert len(keys) == 1
    assert L.bucket_for(257) == L.bucket_for(10**6) == "tiled128"


def test_sm121a_builds_too():
    fn, key = L.kernel_key("bfloat16", "nvfp4", "bfloat16", "decode8", "sm_121a")
    _check_built(fn(*key), "sm_121a")


def _ptxas_usage(ptx: str, arch: str, tmp_path) -> tuple[int, int]:
    """(registers, spill-store bytes) of the PTX's one kernel per the installed ptxas (the PTX's ISA
    version lowered to what that ptxas reads; the kernels use nothing newer)."""
    import re
    import shutil
    import subprocess

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas on PATH")
    found = re.search(
        r"release (\d+)\.(\d+)", subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    )
    if found is None or int(found.group(1)) < 12:
        pytest.skip("ptxas older than CUDA 12")
    src = tmp_path / "k.ptx"
    isa = f"{int(found.group(1)) - 4}.{found.group(2)}"  # CUDA 13.0 reads PTX ISA 9.0, 12.8 reads 8.8
    src.write_text(re.sub(r"^\.version \d+\.\d+", f".version {isa}", ptx, flags=re.M))
    res = subprocess.run(
        [ptxas, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True
    )
    if res.returncode:
        pytest.skip(f"ptxas could not read the PTX: {res.stderr.strip()[:200]}")
    regs = int(re.search(r"Used (\d+) registers", res.stderr).group(1))
    return regs, int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1))


BLOCK_SHAPES = ((3072, 2048), (2048, 2048), (11264, 2048), (2048, 5632))  # the demo block's linears


@pytest.mark.parametrize("m", [32, 64])
@pytest.mark.parametrize("n, k", BLOCK_SHAPES + ((4096, 4096),))
def test_decode32_decode64_heuristic_configs_do_not_spill(m, n, k, tmp_path):
    """The configs the plan heuristic picks for 17 <= M <= 64 keep their accumulators and a pass's
    operands in registers (the `.local` check above sees only PTX-level locals, not ptxas spills)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    cfg = L.default_config(L.bucket_for(m), n, k, "nvfp4")
    fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch="sm_90a")
    _check_built(fn, "sm_90a")
    regs, spills = _ptxas_usage(fn.artifacts.PTX, "sm_90a", tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (cfg, regs, spills)


@pytest.mark.parametrize(
    "a_fmt, b_fmt, cfg",
    [
        ("bfloat16", "nvfp4", (16, 2, 2, 1, 2)),  # the M <= 16 heuristic's tiling, 2 chunks ahead
        ("bfloat16", "nvfp4", (4, 1, 1, 1, 1)),
        ("mxfp8", "mxfp8", (16, 1, 1, 1, 2)),
        ("fp8_block", "fp8_block", (8, 2, 4, 1, 1)),  # fp8 words + the carried block scale, 32 tokens
    ],
)
def test_weight_prefetch_compiles_for_both_archs_without_spills(a_fmt, b_fmt, cfg, tmp_path):
    """The prefetch pipeline (weight words carried through the K loop) builds for both archs, issues
    its loads ahead (more 16-byte loads in the PTX than one chunk holds: the prologue's), and keeps
    the carried stages in registers."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    config = KD.DecodeConfig(*cfg)
    plain = KD.compile_decode(a_fmt, b_fmt, "bfloat16", KD.DecodeConfig(*cfg[:4]), arch="sm_90a")
    for arch in ARCHS:
        fn = KD.compile_decode(a_fmt, b_fmt, "bfloat16", config, arch=arch)
        _check_built(fn, arch)
        assert fn.artifacts.PTX.count("ld.global.nc.v4") > plain.artifacts.PTX.count("ld.global.nc.v4")
    regs, spills = _ptxas_usage(fn.artifacts.PTX, "sm_120a", tmp_path)
    assert spills == 0 and regs * 32 * config.warps <= 65536, (config, regs, spills)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ALL_ARCHS)
@pytest.mark.parametrize("bucket", L.BUCKETS)
@pytest.mark.parametrize("a_fmt, b_fmt", PAIRS + (("float16", "mxfp4"), ("float16", "fp8_block")))
def test_every_variant_compiles(a_fmt, b_fmt, bucket, arch):
    for out_dtype in OUT_DTYPES:
        _built_variant(a_fmt, b_fmt, out_dtype, bucket, arch)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_candidate_configs_compile(arch):
    from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_tiled as KT

    for cfg in DS.candidate_configs(8) + DS.candidate_configs(16) + DS.candidate_configs(32) + DS.candidate_configs(64):
        if KD.can_implement("bfloat16", "nvfp4", "bfloat16", cfg):
            _check_built(KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch), arch)
    for cfg in KT.candidate_configs(4096):
        for fmt in ("nvfp4", "fp8_block"):
            if KT.can_implement(fmt, fmt, "bfloat16", cfg):
                _check_built(KT.compile_tiled(fmt, fmt, "bfloat16", cfg, arch=arch), arch)


ISSUE_SHAPES = ((28672, 4096), (4096, 14336), (4096, 4096), (7168, 2048))  # issue #6's (N, K)


@pytest.mark.parametrize(
    "m, n, k",
    [
        pytest.param(m, n, k, marks=() if (m, n) in ((1, 28672), (1, 4096)) and k == 4096 else pytest.mark.slow)
        for m in (1, 16)
        for n, k in ISSUE_SHAPES
    ],
)
def test_w4a16_decode_defaults_compile_for_both_archs_without_spills(m, n, k, tmp_path):
    """The W4A16 NVFP4 decode configs the shape-aware heuristic picks with 16-bit activations (cache
    hints, clamped loads, FP4 placement by left shifts, two weight tiles a warp: session 24's cold sweep)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    cfg = L.default_config(L.bucket_for(m), n, k, "nvfp4", a_fmt="bfloat16")
    assert cfg.wcache != "nc" or cfg.wn == 2  # hinted (or the shared-activation wide case)
    for arch in ARCHS:
        fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
        _check_built(fn, arch)
    regs, spills = _ptxas_usage(
        KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch="sm_90a").artifacts.PTX, "sm_90a", tmp_path
    )
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (cfg, regs, spills)


@pytest.mark.parametrize("arch", ARCHS)
def test_mxfp4_wide_one_wave_builds_for_four_ctas(arch, cuda_binary, monkeypatch):
    """`decode_rules.MXFP4_WIDE_ONE_WAVE` (on): W4A16 MXFP4's shared-activation tiling at unroll 1 fits 4 CTAs of
    128 threads an SM (<= 128 registers) without local memory, where unroll 2 does not (ptxas 13.0 sm_90a: 150)."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    monkeypatch.setattr(R, "MXFP4_WIDE_ONE_WAVE", True)
    cfg = L.default_config("decode16", 28672, 4096, "mxfp4", a_fmt="bfloat16")
    assert (cfg.warps, cfg.wn, cfg.ashare, cfg.unroll) == (4, 2, True, 1)
    use = cuda_binary.resources(KD.compile_decode("bfloat16", "mxfp4", "bfloat16", cfg, arch=arch).artifacts.CUBIN)
    assert use["LOCAL"] == 0 and use["STACK"] == 0 and use["REG"] * 128 * 4 <= 65536, use


@pytest.mark.parametrize("arch", ARCHS)
def test_wave_rules_build_within_their_register_bounds(arch, cuda_binary, monkeypatch):
    """`decode_rules.FOUR_CTA_WAVE` / `DECODE16_ONE_WAVE`: the configs they give (plain NVFP4 and MXFP4, and fused
    silu_mul NVFP4 and, with `FUSED_MXFP4_HINTS`, MXFP4 at M <= 8; MXFP4 with its FP4 codes placed by a multiply,
    `MXFP4_FP4_MUL`; both on since session 53) build for `arch` within the register bound of their CTAs an SM
    (minctas), spilling a few words to the stack at most, never to local arrays."""
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode_fused as F

    monkeypatch.setattr(R, "MXFP4_FP4_MUL", True)  # whatever its state
    for bucket, n, k, minctas in (("decode8", 14336, 4096, 4), ("decode16", 11264, 2048, 3)):
        fns = []
        for b_fmt in ("nvfp4", "mxfp4"):  # W4A16 MXFP4 takes the rules too (decode_rules.MXFP4_HINTS)
            plain = L.default_config(bucket, n, k, b_fmt, a_fmt="bfloat16")
            assert (plain.unroll, plain.minctas) == (1, minctas)
            fns.append(KD.compile_decode("bfloat16", b_fmt, "bfloat16", plain, arch=arch))
        if bucket == "decode8":
            monkeypatch.setattr(R, "FUSED_MXFP4_HINTS", True)  # whatever its state
            monkeypatch.setattr(R, "FUSED_MXFP4_SILU_MUL", True)  # on: MXFP4's "mul" builds in the bound too
            for b_fmt in ("nvfp4", "mxfp4"):
                fused = L.fused_config(bucket, n, k, b_fmt, "bfloat16", "silu_mul", "off")
                assert (fused.decode.unroll, fused.decode.minctas) == (1, minctas)
                fns.append(F.compile_decode_fused("bfloat16", b_fmt, "bfloat16", fused, arch=arch))
        for fn in fns:
            use = cuda_binary.resources(fn.artifacts.CUBIN)
            assert use["LOCAL"] == 0 and use["STACK"] <= 64, (bucket, use)
            assert use["REG"] * 256 * minctas <= 65536, (bucket, use)
