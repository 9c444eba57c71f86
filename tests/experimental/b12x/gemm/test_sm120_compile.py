"""The SM120 block-scaled kernel (`_kernel_sm120`) on this CPU machine: it compiles for sm_120a (and
sm_121a) in every recipe and output dtype it accepts, `why_not` rejects sm_90a and every pair it does
not implement with the reason, and its scale-tile address arithmetic agrees with the swizzle oracle
(`_lib.quant.swizzle_scales`) and with the shared layout the DSL's SM120 MMA partitions read.

No SM120 GPU exists in this project's sessions: nothing here runs the kernel (see its docstring)."""

from __future__ import annotations

import re

import pytest
import torch

from flashinfer.experimental.b12x._lib import quant as Q
from flashinfer.experimental.b12x.gemm._shared.formats import FORMAT, OUT_DTYPES
from flashinfer.experimental.b12x.gemm.blockscaled import reference as R
from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import (
    ARCHS,
    RECIPES,
    SMEM_LIMIT,
    Sm120Config,
    default_config,
    sf_tile_bytes,
    sf_tile_offset,
    smem_sf_index,
    stage_bytes,
    why_not,
)

from .helpers import PAIRS, make_operands

MMA = {
    "nvfp4": "mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3",
    "mxfp4": "mma.sync.aligned.kind::mxf4.block_scale.scale_vec::2X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0",
    "mxfp8": "mma.sync.aligned.kind::mxf8f6f4.block_scale.scale_vec::1X.m16n8k32.row.col.f32.e4m3.e4m3.f32.ue8m0",
}


def _toolchain():
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")


# ---- compile gate -------------------------------------------------------------------------------
def _check_built(fn, arch: str, fmt: str) -> None:
    ptx = fn.artifacts.PTX
    assert [line.split()[1] for line in ptx.splitlines() if line.startswith(".target")] == [arch]
    assert fn.artifacts.CUBIN[:4] == b"\x7fELF"
    # only the recipe's block-scaled MMA, 16 (FP8: 32) per warp and K-tile of 128: 2 x 8 atoms per K step
    found = set(re.findall(r"mma\.sync\S*", ptx))
    assert found == {MMA[fmt]}, found
    assert "cp.async.cg.shared.global" in ptx and "ldmatrix.sync.aligned" in ptx
    assert ".local" not in ptx, "the kernel spills to local memory"
    assert "wgmma" not in ptx and "tcgen05" not in ptx


@pytest.mark.compile
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("fmt", RECIPES)
def test_compiles_for_sm120a(fmt, out_dtype):
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import compile_sm120

    _check_built(compile_sm120(fmt, fmt, out_dtype, default_config(fmt), arch="sm_120a"), "sm_120a", fmt)


@pytest.mark.compile
@pytest.mark.parametrize("fmt", RECIPES)
def test_compiles_for_sm121a(fmt):
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import compile_sm120

    _check_built(compile_sm120(fmt, fmt, "bfloat16", default_config(fmt), arch="sm_121a"), "sm_121a", fmt)


@pytest.mark.compile
@pytest.mark.slow
def test_every_stage_count_that_fits_compiles():
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import compile_sm120

    for fmt in ("nvfp4", "mxfp8"):
        for stages in range(2, 6):
            cfg = Sm120Config(stages=stages)
            if why_not(fmt, fmt, "float32", cfg, "sm_120a") is None:
                _check_built(compile_sm120(fmt, fmt, "float32", cfg, arch="sm_120a"), "sm_120a", fmt)


@pytest.mark.compile
def test_sm120a_build_round_trips_through_the_disk_cache():
    """What a CPU-side prepare ships to an SM120 machine: the exported object loads back (JITLink,
    no CUDA needed) instead of compiling again."""
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import compile_sm120

    key = ("mxfp4", "mxfp4", "float16", default_config("mxfp4"))
    compile_sm120.cache_clear()  # an earlier test may hold this key in memory (its disk dir is gone)
    compile_sm120(*key, arch="sm_120a")
    assert compile_sm120.disk_path(*key, arch="sm_120a").is_file()
    compile_sm120.cache_clear()
    compiles, loads = compile_sm120.compile_count, compile_sm120.load_count
    assert not compile_sm120.needs_compile(*key, arch="sm_120a")
    assert callable(compile_sm120(*key, arch="sm_120a"))
    assert (compile_sm120.compile_count, compile_sm120.load_count) == (compiles, loads + 1)


@pytest.mark.compile
def test_sm90a_is_refused_before_tracing():
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import compile_sm120

    with pytest.raises(ValueError, match=r"arch sm_90a: the block-scaled mma.sync .* needs one of"):
        compile_sm120("nvfp4", "nvfp4", "bfloat16", default_config("nvfp4"), arch="sm_90a")
    with pytest.raises(ValueError, match="implements only"):
        compile_sm120("bfloat16", "nvfp4", "bfloat16", default_config("nvfp4"), arch="sm_120a")


# ---- why_not --------------------------------------------------------------------------------------
@pytest.mark.contract
def test_why_not_accepts_exactly_the_three_recipes_on_sm120():
    for a_fmt, b_fmt in PAIRS + (("nvfp4", "mxfp4"), ("mxfp8", "nvfp4"), ("mxfp4", "mxfp8")):
        for arch in ARCHS:
            reason = why_not(a_fmt, b_fmt, "bfloat16", default_config(b_fmt), arch)
            if a_fmt == b_fmt and b_fmt in RECIPES:
                assert reason is None, (a_fmt, b_fmt, arch, reason)
            else:
                assert reason == (
                    f"A format {a_fmt} x B format {b_fmt}: the SM120 kernel implements only {RECIPES} on both sides"
                )


@pytest.mark.contract
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_89"])
def test_why_not_rejects_other_archs(arch):
    for fmt in RECIPES:
        reason = why_not(fmt, fmt, "bfloat16", default_config(fmt), arch)
        assert reason is not None and reason.startswith(f"arch {arch}:") and "sm_120a" in reason
    # without an arch the predicate answers for the combination alone (the dispatch's signature)
    assert why_not("nvfp4", "nvfp4", "bfloat16", default_config("nvfp4")) is None


@pytest.mark.contract
def test_why_not_names_the_config_constraints():
    assert "tile must be 128 x 128 x 128" in why_not("nvfp4", "nvfp4", "bfloat16", Sm120Config(bm=64))
    assert "tile must be 128 x 128 x 128" in why_not("mxfp8", "mxfp8", "bfloat16", Sm120Config(bk=64))
    assert "at least 2 stages" in why_not("nvfp4", "nvfp4", "bfloat16", Sm120Config(stages=1))
    assert "out dtype must be one of" in why_not("nvfp4", "nvfp4", "int8", Sm120Config())
    assert "config must be a Sm120Config" in why_not("nvfp4", "nvfp4", "bfloat16", object())
    # shared memory: MXFP8 stages are 2 x 16 KB values + 2 x 512 B scales: 3 fill the 99 KB exactly
    assert stage_bytes("mxfp8", Sm120Config()) == 2 * 128 * 128 + 2 * 512
    assert stage_bytes("nvfp4", Sm120Config()) == 2 * 128 * 64 + 2 * 1024
    assert why_not("mxfp8", "mxfp8", "bfloat16", Sm120Config(stages=3)) is None
    assert "exceed the" in why_not("mxfp8", "mxfp8", "bfloat16", Sm120Config(stages=4))
    assert why_not("nvfp4", "nvfp4", "bfloat16", Sm120Config(stages=5)) is None
    assert "exceed the" in why_not("nvfp4", "nvfp4", "bfloat16", Sm120Config(stages=6))
    for fmt in RECIPES:
        cfg = default_config(fmt)
        assert cfg.stages * stage_bytes(fmt, cfg) <= SMEM_LIMIT
        assert why_not(fmt, fmt, "float32", cfg, "sm_120a") is None


# ---- scale-tile address arithmetic ---------------------------------------------------------------
@pytest.mark.reference
@pytest.mark.parametrize("fmt", RECIPES)
@pytest.mark.parametrize("rows, k", [(200, 384), (128, 128), (37, 1024)])
def test_scale_tiles_are_contiguous_runs_of_the_swizzled_storage(fmt, rows, k):
    """Copying sf_tile_bytes verbatim from sf_tile_offset and reading byte smem_sf_index(r, c) gives
    scale (row0 + r, k0 / vec + c) of a random grid swizzled by the oracle, for every tile."""
    vec = FORMAT[fmt].sf_vec
    cols = k // vec
    g = torch.Generator().manual_seed(rows * 7 + k)
    grid = torch.randint(0, 256, (rows, cols), generator=g, dtype=torch.uint8)
    storage = Q.swizzle_scales(grid, 0)
    padded = torch.zeros((-(-rows // 128) * 128, cols), dtype=torch.uint8)
    padded[:rows] = grid
    bk, per_tile = 128, 128 // vec
    r, c = torch.meshgrid(torch.arange(128), torch.arange(per_tile), indexing="ij")
    index = torch.tensor([[smem_sf_index(fmt, 128, bk, i, j) for j in range(per_tile)] for i in range(128)])
    assert sorted(index.flatten().tolist()) == list(range(sf_tile_bytes(fmt, 128, bk)))  # a bijection
    for row0 in range(0, rows, 128):
        for k0 in range(0, k, bk):
            off = sf_tile_offset(fmt, row0, k0, k)
            assert off % 16 == 0 and off + sf_tile_bytes(fmt, 128, bk) <= storage.numel()
            tile = storage[off : off + sf_tile_bytes(fmt, 128, bk)]
            expect = padded[row0 + r, k0 // vec + c]
            assert torch.equal(tile[index], expect), (row0, k0)


@pytest.mark.compile
@pytest.mark.parametrize("fmt", RECIPES)
def test_smem_index_is_the_layout_the_sm120_mma_partitions(fmt):
    """`smem_sf_index` (+ stage * tile bytes) equals the DSL's sm120_make_smem_layout_sfa / _sfb at
    every (row, K, stage) of a 128 x 128 x 128 tile: the verbatim copy lands where the MMA reads."""
    _toolchain()
    from flashinfer.experimental.b12x.gemm.blockscaled._kernel_sm120 import Sm120Gemm

    from .sm120_probe import scale_layouts

    stages, vec = 2, FORMAT[fmt].sf_vec
    found = scale_layouts(Sm120Gemm(fmt, "bfloat16", Sm120Config(stages=stages)), stages)
    tile = sf_tile_bytes(fmt, 128, 128)
    for name in ("a", "b"):
        for (r, kk, s), offset in found[name].items():
            assert offset == s * tile + smem_sf_index(fmt, 128, 128, r, kk // vec), (name, r, kk, s)


@pytest.mark.reference
@pytest.mark.parametrize("fmt", RECIPES)
def test_tile_walk_reproduces_the_reference(fmt):
    """The kernel's data flow in plain torch on odd M and N: per 128 x 128 tile and 128-wide K-tile,
    values from the row slices (rows past M / N skipped), scales from the verbatim scale tile read
    through smem_sf_index, products summed in fp32, masked store. Equals reference.mm."""
    m, n, k = 131, 144, 384
    ops = make_operands(fmt, fmt, m, n, k, seed=5)
    vec = FORMAT[fmt].sf_vec
    deq_a = _values(fmt, ops.a_values, k)
    deq_b = _values(fmt, ops.b_values, k)
    sfa = ops.a_scales.view(torch.uint8).reshape(-1)
    sfb = ops.b_scales.view(torch.uint8).reshape(-1)
    out = torch.full((m, n), float("nan"))
    index = torch.tensor([[smem_sf_index(fmt, 128, 128, r, c) for c in range(128 // vec)] for r in range(128)])
    for m0 in range(0, m, 128):
        for n0 in range(0, n, 128):
            acc = torch.zeros(128, 128)
            for k0 in range(0, k, 128):
                sa = _scale_tile(fmt, sfa, m0, k0, k, index)
                sb = _scale_tile(fmt, sfb, n0, k0, k, index)
                ta = torch.zeros(128, 128)
                tb = torch.zeros(128, 128)
                ta[: min(128, m - m0)] = deq_a[m0 : m0 + 128, k0 : k0 + 128]
                tb[: min(128, n - n0)] = deq_b[n0 : n0 + 128, k0 : k0 + 128]
                acc += (ta * sa.repeat_interleave(vec, 1)) @ (tb * sb.repeat_interleave(vec, 1)).t()
            rows, cols = min(128, m - m0), min(128, n - n0)
            out[m0 : m0 + rows, n0 : n0 + cols] = acc[:rows, :cols] * ops.alpha
    ref = R.mm(fmt, ops.a_values, ops.a_scales, fmt, ops.b_values, ops.b_scales, ops.alpha, "float32")
    assert not torch.isnan(out).any()
    bound = (deq_a.abs() @ deq_b.abs().t()).max().item() * 2.0**-20  # fp32 summation order only
    assert (out - ref).abs().max().item() <= bound


def _values(fmt: str, values: torch.Tensor, k: int) -> torch.Tensor:
    """fp32 codes (no scales) of a packed operand."""
    if FORMAT[fmt].family == "fp4":
        return Q.e2m1_decode(Q.unpack_e2m1(values.view(torch.uint8))).float()
    return Q.e4m3_decode(values).float()


def _scale_tile(fmt: str, storage: torch.Tensor, row0: int, k0: int, k: int, index: torch.Tensor) -> torch.Tensor:
    """fp32 [128, 128 / vec] scales of one stage, read as the kernel reads them."""
    off = sf_tile_offset(fmt, row0, k0, k)
    raw = storage[off : off + sf_tile_bytes(fmt, 128, 128)][index]
    if fmt == "nvfp4":
        return Q.e4m3_decode(raw.view(torch.float8_e4m3fn)).float()
    return Q.ue8m0_decode(raw).float()


# ---- selection: only SM120 / SM121, only block-scaled pairs, only the tiled buckets, only opted in --
@pytest.mark.parametrize("flag", [None, "0", "1"])
def test_selected_only_on_sm120_for_tiled_block_scaled_pairs_when_opted_in(flag, monkeypatch):
    from flashinfer.experimental.b12x.gemm._shared import launch as L
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_sm120 as KS
    from flashinfer.experimental.b12x.gemm.blockscaled import api as A

    if flag is None:
        monkeypatch.delenv(L.SM120_MMA_ENV, raising=False)
    else:
        monkeypatch.setenv(L.SM120_MMA_ENV, flag)
    on = flag == "1"
    for a_fmt, b_fmt in (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("mxfp8", "mxfp8"), ("bfloat16", "nvfp4")):
        p = A.plan(A.GemmQuery(a_fmt, b_fmt, 4096, 4096, m_values=(1, 40, 200, 4096)))
        for arch in ("sm_90a", "sm_120a", "sm_121a"):
            chosen = dict(p.heuristic(arch))
            native = on and arch in KS.ARCHS and a_fmt == b_fmt
            for bucket, cfg in chosen.items():
                want_native = native and bucket.startswith("tiled")
                assert isinstance(cfg, Sm120Config) == want_native, (a_fmt, arch, bucket, cfg)
                fns = [fn for fn, _ in L.kernel_keys(a_fmt, b_fmt, "bfloat16", bucket, arch, cfg)]
                assert (fns == [KS.compile_sm120]) == want_native
                assert L.why_not(a_fmt, b_fmt, "bfloat16", bucket, cfg) is None
            assert not any(isinstance(c, Sm120Config) for b, c in chosen.items() if b.startswith("decode"))
