"""The decode kernel's streaming options (issue #6: DecodeConfig.wcache / acache / kgroup / wn) on the
CPU: the emulator against the fp32 reference (NaN-poisoned outputs), bitwise identities where the
option must not change the sums, the validity checks, and sm_90a / sm_120a builds with their SASS.
"""

import dataclasses
import re

import pytest
import torch

from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled import _decode_sweeps as DS
from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

from . import emulated as E
from .helpers import PAIRS, check_tolerance, make_operands
from .test_emulated_kernels import _args

CFG = KD.DecodeConfig


def _cid(c) -> str:
    return (
        f"w{c.warps}t{c.tiles}n{c.ntiles}u{c.unroll}-{c.wcache}-{c.acache}-kg{c.kgroup}-wn{c.wn}-c{int(c.clamp)}"
        f"-{c.fp4}-s{int(c.ashare)}"
    )


# ---- emulated: every option against the reference ------------------------------------------------
@pytest.mark.interpret
@pytest.mark.parametrize(
    "cfg",
    [
        CFG(2, 2, 1, 1, wcache="na", acache="el"),
        CFG(2, 1, 1, 2, wcache="na256", acache="el", kgroup=2),
        CFG(2, 2, 1, 1, wcache="ef", kgroup=4),  # 7 chunks: one group of 4, then 3 single chunks
        CFG(4, 1, 1, 2, wcache="na", acache="el", wn=2),
        CFG(8, 2, 1, 1, wn=4, kgroup=2),  # 2 warps per group over 7 chunks
        CFG(2, 2, 1, 2, clamp=True),  # rows 72..95 of the last CTA and tokens 3..7 load clamped
        CFG(2, 2, 1, 1, fp4="left", acache="el"),
    ],
    ids=lambda c: (
        f"w{c.warps}t{c.tiles}u{c.unroll}-{c.wcache}-{c.acache}-kg{c.kgroup}-wn{c.wn}-c{int(c.clamp)}-{c.fp4}"
    ),
)
@pytest.mark.parametrize("a_fmt, b_fmt", [p for p in PAIRS if p[0] in ("bfloat16", "nvfp4", "mxfp8")])
def test_stream_options_every_pair(cfg, a_fmt, b_fmt):
    """N = 72 (a partial CTA at every BN), K = 896 (7 chunks: groups and the rest, idle warps)."""
    m = 3
    ops = make_operands(a_fmt, b_fmt, m, 72, 896, seed=cfg.warps + 3 * cfg.kgroup + cfg.wn)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize("m", [1, 9, 16])
@pytest.mark.parametrize(
    "cfg",
    [
        CFG(4, 2, 2, 2, wcache="na256", acache="el", kgroup=2),
        CFG(8, 2, 2, 1, wcache="na", acache="el", wn=2),
        CFG(8, 1, 2, 2, wn=8),  # one warp per group: no K split at all
        CFG(4, 2, 2, 2, wcache="na", acache="el", clamp=True, wn=2),
    ],
    ids=lambda c: _cid(c),
)
def test_stream_options_two_token_tiles(cfg, m):
    ops = make_operands("bfloat16", "nvfp4", m, 80, 1280, seed=m)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode("bfloat16", "nvfp4", "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
@pytest.mark.parametrize(
    "cfg, a_fmt, b_fmt, m",
    [
        (CFG(4, 2, 1, 1, prefetch=2, wn=2, wcache="na256"), "bfloat16", "nvfp4", 7),  # pipeline per group
        (CFG(8, 1, 2, 2, wn=2, kgroup=2, clamp=True, fp4="left", wcache="ef", acache="el"), "float16", "mxfp4", 11),
        (CFG(4, 2, 1, 1, fp4="left", clamp=True), "nvfp4", "nvfp4", 2),  # FP4 activations keep their placement
        (CFG(2, 4, 1, 1, wn=2, kgroup=4, clamp=True), "bfloat16", "mxfp8", 8),  # fp4 option ignored by FP8
        (CFG(16, 1, 2, 2, wn=4, ashare=True, clamp=True, fp4="left", acache="el"), "bfloat16", "nvfp4", 13),
        (CFG(8, 2, 1, 1, wn=4, ashare=True), "float16", "mxfp4", 1),  # 4 units over 4 groups
        (CFG(4, 1, 4, 1, wn=2, ashare=True), "bfloat16", "mxfp8", 27),  # 16 units: 8 per group
    ],
    ids=lambda x: _cid(x) if isinstance(x, CFG) else str(x),
)
def test_stream_options_combined(cfg, a_fmt, b_fmt, m):
    ops = make_operands(a_fmt, b_fmt, m, 104, 1408, seed=m + cfg.warps)
    args, alpha = _args(ops, "bfloat16")
    check_tolerance(E.run_decode(a_fmt, b_fmt, "bfloat16", cfg, args, alpha), ops, "bfloat16")


@pytest.mark.interpret
def test_cache_hints_and_warp_groups_keep_the_sums_bitwise():
    """Hints change caching only; wn groups of w warps split K exactly as a w-warp CTA does and
    reduce in the same warp order; clamped loads feed only rows / tokens that are never stored (MMA
    outputs do not mix rows or tokens): fp32 outputs are bitwise those of the plain kernel."""
    ops = make_operands("bfloat16", "nvfp4", 5, 96, 1152, seed=21)
    args, alpha = _args(ops, "float32")
    plain = E.run_decode("bfloat16", "nvfp4", "float32", CFG(4, 2, 1, 1), args, alpha)
    check_tolerance(plain, ops, "float32")
    for cfg in (
        CFG(4, 2, 1, 1, wcache="na256", acache="el"),
        CFG(4, 2, 1, 1, wcache="ef"),
        CFG(8, 2, 1, 1, wn=2),
        CFG(4, 2, 1, 1, clamp=True),  # N = 96 = 3 CTAs of 32 rows: the clamp acts on tokens 5..7
        CFG(4, 4, 1, 1, clamp=True),  # BN = 64: rows 96..127 of the second CTA clamp too
        CFG(4, 2, 1, 1, fp4="left"),  # the same bits by other shifts
        CFG(4, 2, 1, 1, fp4="mul"),  # the same bits by a multiply
        CFG(8, 2, 1, 2, wn=2, ashare=True),  # activations through smem: the same registers
    ):
        args, alpha = _args(ops, "float32")  # a fresh NaN-poisoned output
        assert torch.equal(E.run_decode("bfloat16", "nvfp4", "float32", cfg, args, alpha), plain), cfg


def _fp4_words(rng, ops):
    """Words for the FP4 placement tests: at each pair i (nibbles i and i + 4), all 256 codes of the pair under random
    other nibbles (32 lanes a word: nibble i = the low 4 bits of the lane's code, i + 4 the high), then 64 random
    words."""
    import numpy as np

    for i in range(4):
        for codes in range(0, 256, 32):
            lane = np.arange(codes, codes + 32, dtype=np.uint32)
            other = rng.integers(0, 2**32, size=32, dtype=np.uint64).astype(np.uint32)
            keep = np.uint32(~((0xF << (4 * i)) * 0x10001) & 0xFFFFFFFF)
            yield ops.u32((other & keep) | ((lane & 0xF) << (4 * i)) | ((lane >> 4) << (4 * i + 16)))
    for _ in range(64):
        yield ops.u32(rng.integers(0, 2**32, size=32, dtype=np.uint64).astype(np.uint32))


@pytest.mark.parametrize(
    "placement, compute", [("left", "bfloat16"), ("left", "float16"), ("mul", "bfloat16")]
)  # float16 compute takes "left" for "mul" in span_group
def test_fp4_pair_left_and_mul_place_the_same_bits(placement, compute):
    """Every code of every pair under random other nibbles, then random words: fp4_pair_left(q, q >> 8) and
    fp4_pair_mul(q, q >> 8) == fp4_pair(q)."""
    import numpy as np

    from flashinfer.experimental.b12x.gemm._shared import dequant as DQ

    from .emulator import EmuOps, GlobalMemory

    ops = EmuOps(GlobalMemory())
    if placement == "left":
        place = lambda q, q8, i: DQ.fp4_pair_left(ops, q, q8, i, compute)  # noqa: E731
    else:
        place = lambda q, q8, i: DQ.fp4_pair_mul(ops, q, q8, i)  # noqa: E731
    for q in _fp4_words(np.random.default_rng(7), ops):
        q8 = ops.prmt(q, ops.u32(0), 0x4321)
        assert np.array_equal(q8, q >> np.uint32(8))
        for i in range(4):
            assert np.array_equal(place(q, q8, i), DQ.fp4_pair(ops, q, i, compute)), i


def test_invalid_stream_options_are_rejected():
    logic = lambda cfg: KD.DecodeLogic("bfloat16", "nvfp4", "bfloat16", cfg)  # noqa: E731
    with pytest.raises(ValueError, match=r"wcache must be one of \('nc', 'na', 'na256', 'ef'\).*got 'l2'"):
        logic(CFG(wcache="l2"))
    with pytest.raises(ValueError, match=r"acache must be one of \('nc', 'el'\).*got 'na'"):
        logic(CFG(acache="na"))
    with pytest.raises(ValueError, match=r"kgroup must be one of \(1, 2, 4\).*got 3"):
        logic(CFG(kgroup=3))
    with pytest.raises(ValueError, match=r"wn must be one of \(1, 2, 4, 8\) and divide warps \(4\), got 8"):
        logic(CFG(warps=4, wn=8))
    with pytest.raises(ValueError, match="kgroup > 1 and prefetch > 0 do not combine"):
        logic(CFG(kgroup=2, prefetch=1))
    with pytest.raises(ValueError, match=r"fp4 must be one of \('shift', 'left', 'mul'\).*got 'lut'"):
        logic(CFG(fp4="lut"))
    with pytest.raises(ValueError, match="ashare needs wn > 1 dividing 4 x ntiles"):
        logic(CFG(ashare=True))
    with pytest.raises(ValueError, match="ashare needs wn > 1 dividing 4 x ntiles"):
        logic(CFG(warps=8, wn=8, ntiles=1, ashare=True))
    with pytest.raises(ValueError, match=r"the reduction and ashare buffers \(65536 \+ 131072 bytes\) exceed 98304"):
        logic(CFG(16, 2, 4, 1, wn=2, ashare=True))
    with pytest.raises(ValueError, match="ashare shares 16-bit activations"):
        KD.DecodeLogic("mxfp8", "mxfp8", "bfloat16", CFG(8, 2, 1, 1, wn=2, ashare=True))
    with pytest.raises(ValueError, match="clamp and prefetch > 0 do not combine"):
        logic(CFG(clamp=True, prefetch=1))


@pytest.mark.parametrize("m, n, k", [(1, 28672, 4096), (16, 28672, 4096), (16, 11264, 2048), (1, 2048, 5632)])
def test_stream_variants_are_valid_and_distinct(m, n, k):
    base = L.default_config(L.bucket_for(m), n, k, "nvfp4")
    variants = DS.stream_variants(base)
    assert 6 <= len(variants) <= 13 and base not in variants and len(set(variants)) == len(variants)
    assert dataclasses.replace(base, unroll=1) in variants or base.unroll == 1
    for cfg in variants:
        assert KD.why_not("bfloat16", "nvfp4", "bfloat16", cfg) is None
        assert (
            (cfg.warps, cfg.tiles, cfg.ntiles) == (base.warps, base.tiles, base.ntiles)
            or cfg.wn in (2, 4)
            or cfg.tiles == 2 * base.tiles
        )
    assert any(c.wcache == "na" and c.acache == "el" and c.wn == 1 and c.kgroup == 1 for c in variants)


# ---- builds: both archs, no spills; the hints are in the SASS ------------------------------------
STREAM_BUILDS = [
    (CFG(4, 1, 1, 2, wcache="na", acache="el"), ("LDG.E.NA.128.CONSTANT", "LDG.E.EL.128.CONSTANT")),
    (CFG(4, 2, 2, 2, wcache="na256", acache="el"), ("LDG.E.NA.LTC256B.128.CONSTANT", "LDG.E.EL.128.CONSTANT")),
    (CFG(4, 2, 2, 1, wcache="na256", acache="el", kgroup=2), ("LDG.E.NA.LTC256B.128.CONSTANT",)),
    (CFG(8, 2, 2, 2, wcache="na", acache="el", wn=2), ("LDG.E.NA.128.CONSTANT",)),
    (CFG(4, 1, 1, 2, wcache="ef", acache="el"), ("LDG.E.NA.128.CONSTANT",)),
    (CFG(4, 1, 1, 2, wcache="na", acache="el", clamp=True), ("LDG.E.NA.128.CONSTANT",)),
    (CFG(4, 2, 2, 2, wcache="na", acache="el", fp4="left"), ("LDG.E.NA.128.CONSTANT",)),
    (CFG(4, 2, 2, 2, wcache="na", acache="el", fp4="mul"), ("LDG.E.NA.128.CONSTANT",)),
    (CFG(8, 2, 2, 2, wcache="na", acache="el", wn=2, ashare=True), ("LDS.128", "STS.128")),
]


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_120a"])
@pytest.mark.parametrize("cfg, opcodes", STREAM_BUILDS, ids=lambda x: _cid(x) if isinstance(x, CFG) else "")
def test_stream_variants_build_without_spills(cfg, opcodes, arch, cuda_binary):
    pytest.importorskip("cutlass")
    fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch=arch)
    ptx = fn.artifacts.PTX
    assert ".local" not in ptx, "the kernel spills to local memory"
    assert ptx.count("mma.sync.aligned.m16n8k16") > 0
    if cfg.wcache != "nc":
        assert "L1::no_allocate" in ptx
    if cfg.acache == "el":
        assert "L1::evict_last" in ptx
    if cfg.wcache == "ef":
        assert "createpolicy.fractional.L2::evict_first" in ptx
    if arch == "sm_90a":
        sass = cuda_binary.sass(fn.artifacts.CUBIN)
        for op in opcodes:
            assert re.search(rf"\b{re.escape(op)}\b", sass), op
        assert "STL" not in sass and "LDL" not in sass
        if cfg.ashare:  # one named barrier per chunk (two in the unrolled loop), not CTA-wide ones
            assert len(re.findall(r"BAR\.SYNC\.DEFER_BLOCKING R\d+, 0x", sass)) >= 2, "no named barrier"
        twin = lambda fp4: cuda_binary.sass(  # noqa: E731
            KD.compile_decode(
                "bfloat16", "nvfp4", "bfloat16", dataclasses.replace(cfg, fp4=fp4), arch=arch
            ).artifacts.CUBIN
        )
        if cfg.fp4 == "left":  # the dequant's right shifts are gone (left: address math only)
            plain = twin("shift")
            shifts = lambda text: _k_loop(text).count("SHF.R.U32.HI")  # noqa: E731
            assert shifts(sass) + 16 <= shifts(plain), (shifts(sass), shifts(plain))
        if cfg.fp4 == "mul":  # a multiply a pair for two shifts: fewer instructions a chunk than "left"
            left = twin("left")
            count = lambda text: len(re.findall(r"/\*[0-9a-f]{4,}\*/", _k_loop(text)))  # noqa: E731
            assert count(sass) + 32 <= count(left), (count(sass), count(left))
        if cfg.clamp:  # unpredicated loads: no zeroing of their destinations, no predicated LDG
            assert "CS2R" not in _k_loop(sass) and not re.search(r"@!?P\d+ LDG", _k_loop(sass))


def _k_loop(sass: str) -> str:
    """SASS from the first LDG to the first branch after it: one chunk's loads and math (the plain
    kernel's has CS2R zeroing and predicated LDGs there)."""
    lines = sass.splitlines()
    first = next(i for i, line in enumerate(lines) if "LDG" in line)
    end = next(i for i in range(first, len(lines)) if re.search(r"BRA `\(\.L_x_\d+\)", lines[i]))
    return "\n".join(lines[first : end + 1])


@pytest.mark.compile
def test_default_config_build_is_unchanged_by_the_options():
    """The defaults (nc, nc, kgroup 1, wn 1) must emit the kernel as before the options: plain
    ld.global.nc loads only."""
    pytest.importorskip("cutlass")
    ptx = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", CFG(4, 2, 2, 2), arch="sm_90a").artifacts.PTX
    assert "L1::" not in ptx and "L2::" not in ptx and "createpolicy" not in ptx
    assert "ld.global.nc.v4.u32" in ptx


def test_replace_keeps_the_dataclass_frozen():
    cfg = dataclasses.replace(CFG(), wn=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.wn = 1


# ---- timing probes (garbage by design; only their gating, memory footprint and SASS are checked) ----
def test_probes_are_gated_and_limited(monkeypatch):
    monkeypatch.delenv(KD.PROBE_ENV, raising=False)
    reason = KD.why_not("bfloat16", "nvfp4", "bfloat16", CFG(probe="loads"))
    assert reason is not None and "B12X_GEMM_DECODE_PROBE=1" in reason
    monkeypatch.setenv(KD.PROBE_ENV, "1")
    assert KD.why_not("bfloat16", "nvfp4", "bfloat16", CFG(probe="nomma")) is None
    assert "FP4 weights and 16-bit activations" in KD.why_not("mxfp8", "mxfp8", "bfloat16", CFG(probe="loads"))
    assert "probe must be one of" in KD.why_not("bfloat16", "nvfp4", "bfloat16", CFG(probe="all"))
    base = L.default_config("decode16", 28672, 4096, "nvfp4")
    probes = DS.probe_variants(base)
    assert [p.probe for p in probes] == ["loads", "nomma", "", "loads", "wloads", "l1act"]
    assert all(p not in DS.stream_variants(base) or not p.probe for p in probes)


@pytest.mark.interpret
@pytest.mark.parametrize("probe", ["loads", "nomma", "wloads", "l1act"])
def test_probes_touch_only_the_operands(probe, monkeypatch):
    """The emulator faults on any access outside the tensors: the probes load what the kernel loads."""
    monkeypatch.setenv(KD.PROBE_ENV, "1")
    ops = make_operands("bfloat16", "nvfp4", 3, 72, 896, seed=2)
    args, alpha = _args(ops, "float32")
    out = E.run_decode("bfloat16", "nvfp4", "float32", CFG(2, 2, 1, 1, probe=probe), args, alpha)
    assert out.shape == (3, 72)


@pytest.mark.compile
@pytest.mark.parametrize("probe", ["loads", "nomma", "wloads", "l1act"])
def test_probe_builds_keep_the_loads_and_drop_the_mmas(probe, monkeypatch, cuda_binary):
    """Every probe drops the MMAs and keeps the weights' loads; all but "wloads" keep every activation load too
    ("l1act" at chunk c & 1's addresses, as many instructions). The weights and the activations take different
    cache hints here, so their loads are told apart in the SASS; 2 token tiles."""
    pytest.importorskip("cutlass")
    monkeypatch.setenv(KD.PROBE_ENV, "1")
    cfg = CFG(4, 1, 2, 2, wcache="na256", acache="el")
    base = cuda_binary.sass(KD.compile_decode("bfloat16", "nvfp4", "bfloat16", cfg, arch="sm_90a").artifacts.CUBIN)
    probed = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", dataclasses.replace(cfg, probe=probe), arch="sm_90a")
    sass = cuda_binary.sass(probed.artifacts.CUBIN)
    for op in ("LDG.E.NA.LTC256B.128.CONSTANT", "LDG.E.U16.CONSTANT"):  # the weights' values and scales
        assert sass.count(op) == base.count(op) > 0, op
    activations = "LDG.E.EL.128.CONSTANT"
    assert sass.count(activations) == (0 if probe == "wloads" else base.count(activations)) and base.count(activations)
    assert "HMMA" not in sass and "HMMA" in base
    if probe == "nomma":  # the dequant stays: as many scale multiplies (some fused into HFMA2)
        assert sass.count("HMUL2") + sass.count("HFMA2") >= base.count("HMUL2")


def test_decode_opts_env_applies_swept_options_to_the_heuristic(monkeypatch):
    monkeypatch.delenv(L.DECODE_OPTS_ENV, raising=False)
    base = L.default_config("decode16", 28672, 4096, "nvfp4")
    assert (base.wcache, base.wn, base.ashare) == ("nc", 1, False)
    monkeypatch.setenv(L.DECODE_OPTS_ENV, "wcache=na, acache=el, wn=2, warps=x2, ashare=true")
    cfg = L.default_config("decode16", 28672, 4096, "nvfp4")
    assert cfg == dataclasses.replace(base, wcache="na", acache="el", wn=2, warps=2 * base.warps, ashare=True)
    assert L.default_config("decode64", 28672, 4096, "nvfp4").wn == 1  # M <= 16 buckets only
    monkeypatch.setenv(L.DECODE_OPTS_ENV, "wcache=l2")
    with pytest.raises(ValueError, match="B12X_GEMM_DECODE_OPTS='wcache=l2' gives .*wcache must be one of"):
        L.default_config("decode8", 4096, 4096, "nvfp4")
    monkeypatch.setenv(L.DECODE_OPTS_ENV, "speed=11")
    with pytest.raises(ValueError, match="'speed=11' is not field=value of a DecodeConfig field"):
        L.default_config("decode8", 4096, 4096, "nvfp4")
