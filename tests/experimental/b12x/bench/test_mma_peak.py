"""bench_ceilings --mma's register-only mma.sync kernel: it compiles for both archs with its MMAs in
the loop and nothing spilled, and its FLOP count is the shapes' 2 M N K per MMA."""

import pytest


def test_flops_and_bad_arguments():
    pytest.importorskip("cutlass")
    from benchmarks.experimental.b12x import _mma_peak as MP

    assert MP.flops("bf16", 2, 3, chains=4) == 2 * 8 * 3 * 4 * (2 * 16 * 8 * 16)
    assert MP.flops("e4m3", 1, 1, chains=1) == 8 * 2 * 16 * 8 * 32
    with pytest.raises(ValueError, match="kind"):
        MP.MmaPeak("fp4")
    with pytest.raises(ValueError, match="chains"):
        MP.MmaPeak("bf16", chains=0)


@pytest.mark.compile
@pytest.mark.parametrize("kind", ["bf16", "e4m3"])
def test_compiles_for_both_archs(kind):
    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from benchmarks.experimental.b12x import _mma_peak as MP

    shape = {"bf16": "m16n8k16.row.col.f32.bf16.bf16.f32", "e4m3": "m16n8k32.row.col.f32.e4m3.e4m3.f32"}[kind]
    for arch in ("sm_90a", "sm_120a"):
        ptx = MP.compile_peak(kind, arch).artifacts.PTX
        assert f".target {arch}" in ptx and f"mma.sync.aligned.{shape}" in ptx
        assert ".local" not in ptx and "wgmma" not in ptx
