"""The Triton GEMV of gemm.blockscaled (weight-only decode, M <= 16) on the CPU: its config predicate and
heuristic, its selection through plans, launch.py and B12X_GEMM_DECODE_KERNEL, its kernel under the
Triton interpreter (interpret_gemv.py, in a subprocess) and compiled for sm_90a / sm_120a (mma.sync,
never wgmma, no spills). The H200 numerics are in test_gpu.py (`gemv`)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _gemv_config as GC
from flashinfer.experimental.b12x.gemm.blockscaled import api as B
from flashinfer.experimental.b12x.gemm.blockscaled._gemv_config import GemvConfig
from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig

ROOT = Path(__file__).resolve().parents[4]
SHAPES = ((28672, 4096), (4096, 4096), (11264, 2048), (2048, 5632))  # the decode shapes


# ---- contract: predicate, heuristic, selection ------------------------------------------------
@pytest.mark.contract
@pytest.mark.parametrize(
    "config, message",
    [
        (GemvConfig(block_n=48), "block_n must be 16, 32, 64, 128 or 256, got 48"),
        (GemvConfig(block_k=64), "block_k must be 128, 256, 512 or 1024, got 64"),
        (GemvConfig(split_k=5), "split_k must be one of"),
        (GemvConfig(block_n=32, num_warps=4), "block_n = 32 leaves warps idle at num_warps = 4"),
        (GemvConfig(block_n=256, block_k=1024, num_stages=6, num_warps=8), "bytes of shared memory >"),
    ],
)
def test_config_reason_names_the_field(config, message):
    assert message in GC.config_reason(config, "nvfp4")


@pytest.mark.contract
def test_why_not_is_weight_only_and_m_at_most_16():
    cfg = GemvConfig()
    assert GC.why_not("bfloat16", "nvfp4", "bfloat16", cfg) is None
    assert "weight-only" in GC.why_not("nvfp4", "nvfp4", "bfloat16", cfg)
    assert "weight-only" in GC.why_not("bfloat16", "fp8_block", "bfloat16", cfg)
    assert "must be a GemvConfig" in GC.why_not("bfloat16", "nvfp4", "bfloat16", DecodeConfig())
    assert "M <= 16" in L.why_not("bfloat16", "nvfp4", "bfloat16", "decode32", cfg)
    assert L.why_not("float16", "mxfp8", "float32", "decode8", cfg) is None


@pytest.mark.contract
@pytest.mark.parametrize("b_fmt", GC.RECIPES)
@pytest.mark.parametrize("n, k", SHAPES + ((4096, 14336), (7168, 2048), (2048, 2048), (3072, 2176)))
def test_heuristic_is_valid_divides_k_and_fills_the_gpu(n, k, b_fmt):
    cfg = GC.default_config(n, k, b_fmt)
    assert GC.config_reason(cfg, b_fmt) is None
    assert k % cfg.block_k == 0
    assert cfg.block_n == 16 * cfg.num_warps
    programs = -(-n // cfg.block_n) * cfg.split_k
    assert programs >= 128 or cfg.split_k == 8 or k // cfg.block_k < 4 * cfg.split_k, (cfg, programs)
    assert (k // cfg.block_k) >= 2 * cfg.split_k  # every split keeps at least two steps
    cands = GC.candidate_configs(n, k, b_fmt)
    assert cands[0] == cfg and len(set(cands)) == len(cands) <= 8
    assert all(GC.config_reason(c, b_fmt) is None and k % c.block_k == 0 for c in cands)


@pytest.mark.contract
def test_env_selects_the_triton_gemv_for_weight_only_decode16(monkeypatch):
    monkeypatch.delenv(GC.ENV, raising=False)
    unset = L.default_config("decode16", 4096, 4096, "nvfp4", a_fmt="bfloat16")
    assert isinstance(unset, DecodeConfig) or (L.STREAM_DEFAULT and L.is_stream(unset))
    monkeypatch.setenv(GC.ENV, "triton")
    cfg = L.default_config("decode16", 4096, 4096, "nvfp4", a_fmt="bfloat16")
    assert cfg == GC.default_config(4096, 4096, "nvfp4")
    assert L.compile_fn("decode16", cfg).__name__ == "compile_gemv"
    # quantized activations, block-FP8 weights and M > 16 keep the CuTe kernels
    assert isinstance(L.default_config("decode16", 4096, 4096, "nvfp4", a_fmt="nvfp4"), DecodeConfig)
    assert isinstance(L.default_config("decode8", 4096, 4096, "fp8_block", a_fmt="bfloat16"), DecodeConfig)
    assert isinstance(L.default_config("decode32", 4096, 4096, "nvfp4", a_fmt="bfloat16"), DecodeConfig)
    fn, key = L.kernel_key("bfloat16", "mxfp4", "bfloat16", "decode8", "sm_90a")
    assert fn.__name__ == "compile_gemv" and key[3] == GC.default_config()


@pytest.mark.contract
def test_plan_override_takes_a_gemv_config_for_decode_buckets_only():
    q = B.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=16, m_values=(16,))
    cfg = GC.default_config(4096, 4096, "nvfp4")
    p = B.plan(q, override={"decode16": cfg})
    assert p.heuristic("sm_90a") == (("decode16", cfg),)
    assert hash(p) == hash(B.plan(q, override={"decode16": cfg}))
    fn, args = p.kernels(p.heuristic("sm_90a"), "sm_90a")[0]
    assert fn.__name__ == "compile_gemv" and args == ("bfloat16", "nvfp4", "bfloat16", cfg, "sm_90a")
    with pytest.raises(ValueError, match="override for decode32: the Triton GEMV serves M <= 16"):
        B.plan(B.GemmQuery("bfloat16", "nvfp4", 4096, 4096, max_m=32), override={"decode32": cfg})
    with pytest.raises(ValueError, match="override for decode8: the Triton GEMV is weight-only"):
        B.plan(B.GemmQuery("mxfp8", "mxfp8", 4096, 4096, max_m=8), override={"decode8": cfg})


# ---- interpret: the kernel against the reference ------------------------------------------------
@pytest.mark.interpret
def test_kernel_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    inner = Path(__file__).with_name("interpret_gemv.py")
    cmd = [sys.executable, "-m", "pytest", str(inner), "-q", "-p", "no:cacheprovider", "-m", "interpret"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout, out.stdout[-2000:]


# ---- compile: PTX / SASS facts on the CPU -------------------------------------------------------
def _compile(a_fmt, b_fmt, config, cc):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_gemv as KG

    act = "*bf16" if a_fmt == "bfloat16" else "*fp16"
    sig = dict(a_ptr=act, b_ptr="*u8", sf_ptr="*u8", c_ptr="*bf16", s0_ptr="*fp32", s1_ptr="*fp32", s2_ptr="*fp32")
    sig |= dict(ws_ptr="*fp32", cnt_ptr="*i32" if config.split_k > 1 else "*fp32", alpha="fp32")
    sig |= dict(M="i32", N="i32", K="i32", stride_am="i32")
    consts = KG.constexprs(a_fmt, b_fmt, config)
    fn = KG._gemv_kernel
    names = list(fn.arg_names)
    # operand pointers 16-byte aligned and N, K, the row stride multiples of 16, as the JIT
    # specializes them (the scalar / workspace pointers are not specialized on alignment)
    aligned = ["a_ptr", "b_ptr", "sf_ptr", "c_ptr", "N", "K", "stride_am"]
    attrs = {(names.index(k),): CUDABackend.parse_attr("D") for k in aligned}
    src = ASTSource(fn=fn, signature=sig | {k: "constexpr" for k in consts}, constexprs=consts, attrs=attrs)
    opts = {"num_warps": config.num_warps, "num_stages": config.num_stages, "enable_fp_fusion": True}
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options=opts)


def _compile_cases():
    for n, k in SHAPES[:2]:
        for cc in (90, 120):
            yield pytest.param("bfloat16", "nvfp4", GC.default_config(n, k, "nvfp4"), cc, id=f"nvfp4-{n}x{k}-sm{cc}")
    yield pytest.param("bfloat16", "mxfp4", GC.default_config(2048, 5632, "mxfp4"), 90, id="mxfp4-2048x5632-sm90")
    yield pytest.param("float16", "mxfp8", GC.default_config(11264, 2048, "mxfp8"), 90, id="mxfp8-f16-sm90")


@pytest.mark.compile
@pytest.mark.parametrize("a_fmt, b_fmt, config, cc", list(_compile_cases()))
def test_compiles_to_mma_sync_with_pipelined_loads_and_no_spills(
    a_fmt, b_fmt, config, cc, tmp_path, monkeypatch, cuda_binary
):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    compiled = _compile(a_fmt, b_fmt, config, cc)
    ptx = compiled.asm["ptx"]
    assert "wgmma" not in ptx and "tcgen05" not in ptx  # DESIGN.md section 5
    assert re.search(r"\bmma\.sync\.aligned\.m16n8k16\b", ptx), "the dot left the tensor cores"
    assert "cp.async" in ptx, "the weight stream is not pipelined (no cp.async)"
    usage = cuda_binary.resources(compiled.asm["cubin"])
    assert usage["LOCAL"] == 0, f"spills ({usage})"


@pytest.mark.contract
def test_bench_gemm_selects_and_sweeps_the_gemv():
    from benchmarks.experimental.b12x import bench_gemm as BG

    sweep = BG.sweep_configs("decode8", 1, 28672, 4096, "nvfp4", "gemv")
    assert isinstance(sweep[0], DecodeConfig) and sweep[1:] == GC.candidate_configs(28672, 4096, "nvfp4")
    assert BG.sweep_configs("decode32", 32, 4096, 4096, "nvfp4", "gemv") == ()
    assert BG.sweep_configs("decode8", 1, 4096, 4096, "fp8_block", "gemv") == ()
    gemv = {"decode8": GC.default_config(4096, 4096, "nvfp4")}
    assert BG._decode_override("triton", "bfloat16", "nvfp4", 1, 4096, 4096) == gemv
    assert BG._decode_override("cute", "bfloat16", "nvfp4", 1, 4096, 4096) is None
    assert BG._decode_override("triton", "nvfp4", "nvfp4", 1, 4096, 4096) is None  # quantized activations
    assert BG._decode_override("triton", "bfloat16", "nvfp4", 64, 4096, 4096) is None  # M > 16


@pytest.mark.contract
def test_bench_gemm_decode_kernel_triton_sets_up_on_cpu():
    """--decode-kernel triton plans the weight-only case with the GEMV override (on the CPU the
    prepared plan runs the reference)."""
    import torch

    from benchmarks.experimental.b12x import bench_gemm as BG

    ours = BG._setup("w4a16_mxfp4", 3, 64, 256, "cpu", torch.Generator().manual_seed(0), "triton")
    ours.out.fill_(float("nan"))
    ours.fn()
    err = (ours.out.float() - ours.ref).abs().max().item()
    assert err <= 2**-7 * ours.ref.abs().max().item()
