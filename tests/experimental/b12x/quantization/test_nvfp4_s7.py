"""Session-7 NVFP4 "pairs" variants (issue #4): unrolled column loop, persistent grids, streaming hints.

CPU checks of what the interpreter tier cannot show: the persistent grid's size and tile ranges (a
plain-Python mirror of `_kernel_pairs.persistent_range` proves every tile is quantized exactly once),
the config rules, and that each variant compiles for sm_90a and sm_120a without local-memory spills;
session 27's preload tiles with every load of a group ahead of its first store.
Bits: test_interpret (`_interpret_run.NVFP4_VARIANTS`, session-7 rows) and, on the H200,
test_gpu_candidates (`-k "nvfp4 and pairs and not False-0-False"`).
"""

import re

import pytest
import triton

from flashinfer.experimental.b12x.quantization.nvfp4 import _kernel as nv
from flashinfer.experimental.b12x.quantization.nvfp4 import _occupancy as occ

S7 = [nv.NvFp4Config(*c) for c in nv._UNVALIDATED_PAIRS_S7]


def _ranges(m, k, cfg, resident):
    """Mirror of `persistent_range` for every program of `grid`: [(start, end)] over the units (tiles, or
    groups of k_iters tiles of one row block)."""
    programs = nv.grid(m, k, cfg, resident)[0]
    units_k = triton.cdiv(triton.cdiv((k + 63) // 64 * 64, cfg.block_k), cfg.k_iters)
    n = (m + 127) // 128 * (128 // cfg.block_m) * units_k
    return [(p * n // programs, (p + 1) * n // programs) for p in range(programs)], n


@pytest.mark.parametrize("m, k", [(1, 7168), (33, 7168), (130, 160), (4097, 4096), (16384, 7168), (5, 48)])
@pytest.mark.parametrize("sms", [3, 132, 188])
def test_persistent_ranges_cover_every_tile_once(m, k, sms):
    for cfg in [c for c in S7 if c.persistent] + [nv.NvFp4Config(4, 16, 1, "pairs", layout="halves", persistent=2)]:
        resident = cfg.persistent * sms
        cfg = nv.capped_config(k, cfg)
        if not nv.can_implement(k, cfg):
            continue
        ranges, n = _ranges(m, k, cfg, resident)
        assert len(ranges) == min(n, resident)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no overlap
        lengths = {e - s for s, e in ranges}
        assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1  # balanced, no idle program


def test_grid_shapes():
    cfg = nv.NvFp4Config(8, 256, 4, "pairs", layout="halves", prefetch=True, persistent=16)
    assert nv.grid(16384, 7168, cfg, 9 * 132) == (9 * 132, 1, 1)
    assert nv.grid(16384, 7168, cfg) == (16, 1, 1)  # no device: one SM's worth
    assert nv.grid(1, 7168, cfg, 9 * 132) == (16 * 28, 1, 1)  # 16 row blocks x 28 tiles < 1188
    groups = nv.NvFp4Config(8, 256, 4, "pairs", layout="halves", k_iters=4, prefetch=True, unroll=True, persistent=16)
    assert nv.grid(1, 7168, groups, 9 * 132) == (16 * 7, 1, 1)  # 16 row blocks x 7 groups of 4 tiles
    plain = nv.NvFp4Config(8, 256, 4, "pairs", layout="halves", k_iters=4, prefetch=True, unroll=True)
    assert nv.grid(16384, 7168, plain, 132) == nv.grid(16384, 7168, nv.NvFp4Config(*nv.LARGE_M_PAIRS)) == (2048, 7, 1)
    with pytest.raises(ValueError, match="persistent grid"):
        nv.grid(2**31 - 128, 2**20, cfg, 132)


def test_programs_per_sm():
    # sm_90: 65536 registers, 2048 threads, 32 blocks per SM; registers allocated in multiples of 8
    assert occ.programs_per_sm(16, 4, 56) == 9  # the LARGE_M_PAIRS tile: 36 warps
    assert occ.programs_per_sm(16, 4, 55) == 9
    assert occ.programs_per_sm(16, 4, 64) == 8
    assert occ.programs_per_sm(16, 4, 48) == 10
    assert occ.programs_per_sm(16, 4, 32) == 16
    assert occ.programs_per_sm(16, 4, 24) == 16  # threads: 2048 / 128
    assert occ.programs_per_sm(4, 4, 24) == 4  # the request
    assert occ.programs_per_sm(16, 8, 64) == 4
    assert occ.programs_per_sm(16, 1, 16) == 16 and occ.programs_per_sm(32, 1, 16) == 32  # block limit
    assert occ.programs_per_sm(16, 4, 32, 100 * 1024) == 2  # shared memory
    assert occ.programs_per_sm(16, 4, 32, max_threads=1536) == 12  # sm_120: 1536 threads
    assert occ.programs_per_sm(16, 16, 255) == 1  # never 0
    with pytest.raises(ValueError, match="requested"):
        occ.programs_per_sm(0, 4, 32)


def test_resident_programs_reads_the_kernel_and_device():
    class Props:
        multi_processor_count = 132
        max_threads_per_multi_processor = 2048
        regs_per_multiprocessor = 65536
        shared_memory_per_multiprocessor = 233472

    class Meta:
        shared = 0

    class Fn:
        n_regs, metadata = 56, Meta()

    cfg = nv.NvFp4Config(*nv._UNVALIDATED_PAIRS_S7[4])
    assert cfg.persistent == 16
    assert occ.resident_programs(cfg, Fn(), Props()) == 9 * 132
    assert occ.resident_programs(cfg, Fn(), Props(), sms=3) == 27
    Fn.n_regs = 0  # unknown: capped by threads and the request only
    assert occ.resident_programs(cfg, Fn(), Props()) == 16 * 132


def test_config_rules():
    ok = lambda **kw: nv.can_implement(7168, nv.NvFp4Config(8, 256, 4, "pairs", layout="halves", **kw))
    assert all(nv.can_implement(7168, c) for c in S7)
    assert ok(k_iters=4, unroll=True) and ok(k_iters=4, prefetch=True, unroll=True, stream=True)
    assert not ok(k_iters=1, unroll=True)  # nothing to unroll
    assert ok(persistent=16) and ok(persistent=16, prefetch=True) and ok(persistent=8, stream=True)
    assert not ok(persistent=16, k_iters=4)  # groups of tiles run through the unrolled loop only
    assert ok(persistent=16, k_iters=4, unroll=True) and ok(persistent=16, k_iters=4, unroll=True, max_regs=56)
    assert not ok(persistent=16, skip_dead=True)  # padding tiles are quantized (zeros) in range
    assert not ok(max_regs=20) and not ok(max_regs=50) and not ok(max_regs=True) and ok(max_regs=64)
    assert not ok(persistent=True) and not ok(persistent=-1) and not ok(persistent=33)
    assert not ok(stream=True) and not ok(k_iters=4, stream=True)  # stream needs unroll or persistent
    assert not nv.can_implement(7168, nv.NvFp4Config(8, 256, 4, "steps", layout="halves", persistent=16))
    assert not nv.can_implement(7168, nv.NvFp4Config(8, 256, 4, "steps", layout="halves", k_iters=4, unroll=True))
    # preload (session 27): all of an unrolled group of 2 or 4 tiles loaded first; prefetch then means nothing
    assert ok(k_iters=4, unroll=True, preload=True) and ok(k_iters=2, unroll=True, preload=True, lut=True)
    assert ok(k_iters=4, unroll=True, preload=True, persistent=16)
    assert not ok(k_iters=4, preload=True) and not ok(k_iters=8, unroll=True, preload=True)
    assert not ok(k_iters=4, unroll=True, prefetch=True, preload=True) and not ok(k_iters=4, unroll=True, preload=1)
    assert all(nv.can_implement(k, nv.NvFp4Config(*c)) for c in nv._UNVALIDATED_PRELOAD for k in (4096, 7168))


def test_s7_offered_only_unvalidated(monkeypatch):
    monkeypatch.delenv(nv.UNVALIDATED_ENV, raising=False)
    if not nv.S7_PAIRS_GPU_VALIDATED:
        assert not set(S7) & set(nv.candidate_configs(7168))
    assert set(S7) <= set(nv.candidate_configs(7168, unvalidated=True))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
# unrolled, + stream, persistent tiles, persistent groups (56 regs), lane table unrolled / persistent tiles
@pytest.mark.parametrize("idx", [0, 3, 4, 6, 12, 17])
def test_s7_compiles_without_spills(arch, idx, cuda_binary):
    cfg = S7[idx]
    compiled = nv.compile_for_target("bfloat16", 7168, cfg, arch)
    ptx = compiled.asm["ptx"]
    vpt = cfg.block_m * cfg.block_k // (32 * cfg.num_warps) * (cfg.k_iters if cfg.unroll else 1)
    assert ptx.count("set.gt.u32.bf16x2") == 7 * vpt // 2, cfg
    assert ptx.count("shfl.sync.idx.b32") == (7 * vpt // 16 if cfg.lut else 0), cfg  # 7 a block
    if cfg.stream:
        assert "ld.global.L1::evict_first" in ptx and "st.global.cs" in ptx, cfg
    else:
        assert "evict_first" not in ptx and ".cs." not in ptx, cfg
    sass = cuda_binary.run("cuobjdump", compiled.asm["cubin"], "-sass")
    spills = len(re.findall(r"\b(STL|LDL)\b", sass))
    # The one exception: the tiles capped at 56 registers (9 programs an SM) keep one word of
    # thread-index arithmetic on the stack on this machine's Triton 3.9 (one store, one load: 8 bytes;
    # session 26's mask-sum encode added ~2 registers of pressure). The device's Triton 3.6 builds
    # every S7 tile without a spill (checked with scripts/with_device_triton.sh, session 26).
    triton_37 = tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 7)
    allowed = 2 if (cfg.max_regs == 56 and triton_37) else 0
    assert spills <= allowed, f"{cfg} spills on {arch} ({spills} local loads / stores)"
    if cfg.max_regs:
        regs = cuda_binary.resources(compiled.asm["cubin"])["REG"]
        assert regs <= cfg.max_regs, (cfg, regs)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("idx", range(len(nv._UNVALIDATED_PRELOAD)))
def test_preload_issues_every_load_before_a_store(arch, idx, cuda_binary):
    """Session 27's preload tiles: the group's 2 x k_iters 16-byte loads all precede its first store in
    the SASS (what the variant is for: ptxas may not sink a load below a store it cannot disambiguate,
    so the source order is the machine order), and nothing spills."""
    cfg = nv.NvFp4Config(*nv._UNVALIDATED_PRELOAD[idx])
    sass = cuda_binary.run("cuobjdump", nv.compile_for_target("bfloat16", 7168, cfg, arch).asm["cubin"], "-sass")
    ops = re.findall(r"\b(LDG\.E\.128|STG)\b", sass)
    assert ops.count("LDG.E.128") == 2 * cfg.k_iters, (cfg, ops)
    assert "STG" not in ops[: ops.index("LDG.E.128") + 2 * cfg.k_iters], (cfg, arch, ops)
    assert not re.search(r"\b(STL|LDL)\b", sass), f"{cfg} spills on {arch}"


# The lane table (`_pairs.pair_thresholds_lut`): T(m_j M 2^E) = 2^E T(m_j M) inside [LUT_LO, LUT_HI],
# checked with test_nvfp4_pairs's torch mirror of `pair_thresholds` (itself checked exhaustively there
# against the oracle's codes and a brute-force T) for every positive E4M3 scale.
def _pairs_mirror():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_b12x_pairs_mirror", Path(__file__).with_name("test_nvfp4_pairs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lut_thresholds(mirror, sf, gs):
    """The seven T (bf16 in the top half of an int32) the table path gives for scales sf > 0."""
    import torch

    bits = sf.view(torch.int32)
    m = ((bits & 0x007FFFFF) | 0x3F800000).view(torch.float32)
    e = (bits >> 23) - 127
    return [t + (e << 23) for t, _u in mirror.thresholds(m, gs)]


LUT_GS = [2.0**-60, 1.5 * 2.0**-60, 2.0**-40, 1e-6, 0.1, 1 / 3, 1.0, 1 + 2.0**-20, 448.0 * 6 / 7.5, 2.0**23, 1e12]
LUT_GS += [2.0**59, 2.0**60, 3.0e17, 8.7e-19]


@pytest.mark.reference
@pytest.mark.parametrize("gs", LUT_GS, ids=lambda g: f"{g:.4g}")
def test_lut_thresholds_are_the_computed_ones(gs):
    from flashinfer.experimental.b12x.quantization.nvfp4 import _pairs

    mirror = _pairs_mirror()
    assert _pairs.LUT_LO.value <= gs <= _pairs.LUT_HI.value
    sf = mirror.SCALES[1:]  # every positive E4M3 scale, subnormal ones included
    want = [t for t, _u in mirror.thresholds(sf, gs)]
    got = _lut_thresholds(mirror, sf, gs)
    for j, (w, g) in enumerate(zip(want, got)):
        assert torch_equal(w, g), (gs, j, int((w != g).sum()))


@pytest.mark.reference
@pytest.mark.parametrize("gs", [1e-45, 3e38])
def test_lut_range_is_needed(gs):
    # Outside the range a T leaves the normal bf16 (or fp32) range and 2^E scaling breaks: the kernel
    # takes the computed thresholds there (a uniform branch on gs).
    mirror = _pairs_mirror()
    sf = mirror.SCALES[1:]
    want = [t for t, _u in mirror.thresholds(sf, gs)]
    got = _lut_thresholds(mirror, sf, gs)
    assert any(not torch_equal(w, g) for w, g in zip(want, got))


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)
