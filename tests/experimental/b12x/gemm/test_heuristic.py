"""The decode heuristic against the H200 sweep it was fitted to (bench_gemm --sweep, 2026-11-30).

Each row: (weight format, M, N, K) -> the config the sweep measured fastest (or within 3% of it);
nvfp4 M = 1 4096 x 14336 from session 20's sweep (2026-12-02), nvfp4 M = 1 4096 x 4096 and 7168 x 2048 from
session 24's with cold weights (2026-12-03, bench_gemm --cold-weights).
A change to `decode_config_for` that moves one of these must come with a new sweep.
"""

import pytest

from flashinfer.experimental.b12x.gemm._shared import decode_rules as R
from flashinfer.experimental.b12x.gemm._shared import launch as L
from flashinfer.experimental.b12x.gemm.blockscaled._kernel_decode import DecodeConfig, why_not

MEASURED = [
    # fmt, M, N, K, (warps, tiles, ntiles, unroll)
    ("mxfp8", 1, 4096, 4096, (16, 1, 1, 1)),
    ("nvfp4", 16, 4096, 4096, (16, 2, 2, 2)),
    ("mxfp8", 16, 4096, 4096, (16, 2, 2, 1)),
    ("nvfp4", 1, 28672, 4096, (4, 1, 1, 2)),
    ("mxfp8", 16, 28672, 4096, (4, 2, 2, 1)),
    ("nvfp4", 1, 4096, 14336, (16, 2, 1, 2)),  # session 20's probe-step sweep: 12.63 vs 13.78 us (tiles 1)
    ("nvfp4", 1, 4096, 4096, (16, 2, 1, 2), "bfloat16"),  # session 24, cold weights: 5.72 vs 6.28 us (tiles 1)
    ("nvfp4", 1, 7168, 2048, (8, 2, 1, 2), "bfloat16"),  # session 24, cold weights: 5.68 vs 5.91 us (tiles 1)
    ("mxfp4", 1, 7168, 2048, (8, 2, 1, 2), "bfloat16"),  # session 24, cold: 5.50 vs 5.74 us (tiles 1)
    ("nvfp4", 1, 4096, 4096, (16, 1, 1, 2), "nvfp4"),  # session 24, cold: FP4 activations, two tiles 6.91 vs 6.61
    ("mxfp4", 1, 11264, 2048, (8, 1, 1, 2), "mxfp4"),  # session 24, cold: two tiles 9.15 vs 8.45
    ("nvfp4", 1, 11264, 2048, (8, 2, 1, 1), "bfloat16"),  # session 28, cold: unroll 1 7.15 vs 8.31 us (one wave)
    ("nvfp4", 8, 11264, 2048, (8, 2, 1, 1), "bfloat16"),  # session 28, cold: 7.27 vs 8.96 us
    ("mxfp8", 1, 4096, 14336, (16, 1, 1, 1)),
    ("nvfp4", 16, 4096, 14336, (16, 2, 2, 2)),
    ("mxfp8", 16, 4096, 14336, (16, 2, 2, 1)),
    ("mxfp8", 1, 7168, 2048, (8, 1, 1, 1)),
    ("nvfp4", 16, 7168, 2048, (8, 2, 2, 2)),
    ("mxfp8", 16, 7168, 2048, (8, 2, 2, 1)),
]


@pytest.mark.parametrize("row", MEASURED)
def test_decode_heuristic_matches_sweep(row):
    """(fmt, M, N, K, tiling[, activation format]): the tiling the sweep measured fastest (the cache
    hints and other options on top are pinned by test_activation_sharing_only_where_swept)."""
    fmt, m, n, k, want = row[:5]
    cfg = L.default_config(L.bucket_for(m), n, k, fmt, a_fmt=row[5] if len(row) > 5 else None)
    assert (cfg.warps, cfg.tiles, cfg.ntiles, cfg.unroll) == want
    if len(row) == 5:  # the rows swept before activation-aware options: the plain config
        assert cfg == DecodeConfig(*want)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8", "fp8_block"])
@pytest.mark.parametrize("n,k", [(16, 128), (32, 256), (128, 128), (4096, 4096), (151936, 4096), (2048, 5632)])
@pytest.mark.parametrize("m", [1, 16, 17, 32, 64])
def test_decode_heuristic_is_always_implementable(fmt, n, k, m):
    cfg = L.default_config(L.bucket_for(m), n, k, fmt)
    assert why_not("bfloat16", fmt, "bfloat16", cfg) is None
    assert cfg.warps >= 1 and cfg.max_m >= m


@pytest.mark.parametrize("a_fmt", ["bfloat16", "float16", "nvfp4", "mxfp8", "fp8_block"])
@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4", "mxfp8", "fp8_block"])
@pytest.mark.parametrize("m,n", [(16, 28672), (16, 16384), (16, 11264), (9, 151936), (8, 28672)])
def test_activation_sharing_only_where_swept(a_fmt, b_fmt, m, n):
    """9..16 tokens x 16-bit activations x FP4 weights with N >= WIDE_DECODE_N take the shared-
    activation warp groups (H200 sweep 10:48); every other case keeps the plain config; all implementable."""
    cfg = L.default_config(L.bucket_for(m), n, 4096, b_fmt, a_fmt=a_fmt)
    if L.stream_selected(a_fmt, b_fmt, L.bucket_for(m)):  # the stream-layout kernel (launch.STREAM_DEFAULT)
        assert L.is_stream(cfg)
        return
    wide = m > 8 and n >= R.WIDE_DECODE_N and b_fmt in ("nvfp4", "mxfp4") and a_fmt in R.SHARED_A
    hinted_fmt = b_fmt == "nvfp4" or (b_fmt == "mxfp4" and R.MXFP4_HINTS)  # session 24's cold sweep; MXFP4 session 52
    hinted = not wide and hinted_fmt and a_fmt in R.SHARED_A and n >= 4096
    want = (2, True, "na", "el") if wide else (1, False, "na256", "el") if hinted else (1, False, "nc", "nc")
    assert (cfg.wn, cfg.ashare, cfg.wcache, cfg.acache) == want
    clamp = hinted and b_fmt == "nvfp4" and m <= 8 and n >= R.WIDE_DECODE_N
    mul_on = R.DECODE8_FP4_MUL if m <= 8 else R.DECODE16_FP4_MUL  # FP4 by a multiply (sessions 49, 50; K < LONG_K)
    mul_fmt = b_fmt == "nvfp4" or (hinted_fmt and R.MXFP4_FP4_MUL)  # MXFP4 session 53, shared activations too
    mul = mul_on and mul_fmt and a_fmt == "bfloat16" and n >= 4096
    assert (cfg.clamp, cfg.fp4) == (clamp, "mul" if mul else "left" if clamp else "shift")
    assert (
        why_not(a_fmt, b_fmt, "bfloat16", cfg) is None
        or why_not(a_fmt, b_fmt, "bfloat16", DecodeConfig(cfg.warps, cfg.tiles, cfg.ntiles, cfg.unroll)) is not None
    )


@pytest.mark.parametrize("on8,on16", [(False, False), (True, False), (False, True), (True, True)])
def test_fp4_mul_switches(monkeypatch, on8, on16):
    """`decode_rules.DECODE8_FP4_MUL` / `DECODE16_FP4_MUL` give "mul" to the plain decode kernel of W4A16 NVFP4 with
    bf16 compute at N >= 4096, M <= 8 / 9..16 (the latter only at K < LONG_K): not to f16 compute (it would fall back to
    "left"), FP4 activations, MXFP4 weights, or the fused kernel, and each switch only to its own bucket."""
    monkeypatch.setattr(R, "DECODE8_FP4_MUL", on8)
    monkeypatch.setattr(R, "DECODE16_FP4_MUL", on16)
    monkeypatch.setattr(R, "FUSED_FP4_MUL", False)  # the fused kernel's own switch (test_fused_fp4_mul_switch)
    monkeypatch.setattr(R, "MXFP4_FP4_MUL", False)  # MXFP4's own (test_mxfp4_fp4_mul)
    shapes = ((28672, 4096), (4096, 14336), (4096, 4096), (7168, 2048), (11264, 2048), (4096, R.LONG_K - 128))
    for n, k in shapes:
        want8 = "mul" if on8 else ("left" if n >= R.WIDE_DECODE_N else "shift")
        assert L.default_config("decode8", n, k, "nvfp4", a_fmt="bfloat16").fp4 == want8
        want16 = "mul" if on16 and k < R.LONG_K else "shift"
        assert L.default_config("decode16", n, k, "nvfp4", a_fmt="bfloat16").fp4 == want16
        for bucket in ("decode8", "decode16"):
            assert L.default_config(bucket, n, k, "nvfp4", a_fmt="float16").fp4 != "mul"
            assert L.default_config(bucket, n, k, "nvfp4", a_fmt="nvfp4").fp4 == "shift"
            assert L.default_config(bucket, n, k, "mxfp4", a_fmt="bfloat16").fp4 != "mul"
            assert L.fused_config(bucket, n, k, "nvfp4", a_fmt="bfloat16").decode.fp4 != "mul"
    for bucket in ("decode8", "decode16"):  # N < 4096: unhinted
        assert L.default_config(bucket, 2048, 4096, "nvfp4", a_fmt="bfloat16").fp4 == "shift"
    assert L.default_config("decode32", 4096, 4096, "nvfp4", a_fmt="bfloat16").fp4 == "shift"


def test_fused_fp4_mul_switch(monkeypatch):
    """`decode_rules.FUSED_FP4_MUL` hands the plain kernel's FP4-multiply rules to `fused_config` (every epilogue and
    launch mode), and nothing else of its config changes; off, the fused kernel takes no "mul"."""
    import dataclasses

    def fused(on, *args):
        monkeypatch.setattr(R, "FUSED_FP4_MUL", on)
        return L.fused_config(*args)

    cases = (
        ("decode8", 4096, 4096, "mul"),
        ("decode16", 28672, 4096, "mul"),
        ("decode16", 7168, 2048, "mul"),
        ("decode8", 16384, 2048, "mul"),
        ("decode16", 11264, 2048, "mul"),
        ("decode8", 11264, 2048, "mul"),  # 352 CTAs of 8 warps x 2 tiles: the one-wave grid, at unroll 1
        ("decode16", 4096, 14336, "shift"),  # K >= LONG_K: the plain rule's own bound
    )
    for bucket, n, k, want in cases:
        assert L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16").fp4 == "mul" or k >= R.LONG_K
        for epilogue, pdl in (("none", "wait"), ("silu_mul", "off"), ("residual", "wait")):
            off = fused(False, bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl)
            on = fused(True, bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl)
            assert off.decode.fp4 != "mul" and on.decode.fp4 == want, (bucket, n, k, epilogue)
            assert dataclasses.replace(on, decode=dataclasses.replace(on.decode, fp4=off.decode.fp4)) == off


def test_fused_one_wave_rule():
    """`fused_config` takes the plain kernel's one-wave rule (unroll 1 at M <= 8 on 8 warps x 2 tiles over a grid in
    ONE_WAVE_CTAS's range) for ONE_WAVE_ARCHS and ONE_WAVE_EPILOGUES: not on sm_120a (another SM count), not for
    rope_append (the norm form has its own unroll 1 pipeline), not past four CTAs an SM (`FOUR_CTA_WAVE`) or at 9..16
    tokens (`DECODE16_ONE_WAVE` is the plain kernel's)."""
    assert R.ONE_WAVE_EPILOGUES == ("silu_mul", "residual", "none")

    def unroll(bucket, n, k, epilogue, pdl="off", arch=None, **kw):
        return L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, pdl, arch=arch, **kw).decode.unroll

    for n, k in ((11264, 2048), (12288, 2048), (9216, 4096)):  # 352 / 384 / 288 CTAs
        assert L.default_config("decode8", n, k, "nvfp4", a_fmt="bfloat16").unroll == 1
        for arch in (None, "sm_90a"):
            assert unroll("decode8", n, k, "silu_mul", arch=arch) == 1
            assert unroll("decode8", n, k, "residual", "wait", arch=arch) == 1
            assert unroll("decode8", n, k, "none", "wait", arch=arch) == 1
        assert unroll("decode8", n, k, "silu_mul", arch="sm_120a") == 2
        assert unroll("decode16", n, k, "silu_mul") == 2
    assert unroll("decode8", 16384, 2048, "silu_mul") == 1  # 512 CTAs: one wave of four an SM (FOUR_CTA_WAVE)
    assert unroll("decode8", 17408, 2048, "silu_mul") == 2  # 544: past four an SM
    assert unroll("decode8", 7168, 2048, "residual") == 2  # 224: one wave either way
    assert L.fused_config("decode8", 11264, 2048, "nvfp4", "bfloat16", "silu_mul", "off").decode.fp4 == "mul"
    from flashinfer.experimental.b12x.gemm.blockscaled.api import RopeLayout

    lay = RopeLayout(64, 8, 128, 16)  # qkv N = 80 x 128 = 10240: 320 CTAs
    assert unroll("decode8", 10240, 4096, "rope_append", "wait", rope=lay) == 2
    assert unroll("decode8", 10240, 4096, "none", "wait") == 1


def test_wave_rules_on():
    assert R.FOUR_CTA_WAVE and R.DECODE16_ONE_WAVE  # session 52's H100 A/B (decode_rules.py has the figures)
    assert R.DECODE16_WAVE_CTAS == (297, 396)


@pytest.mark.parametrize("four,d16", [(False, False), (True, False), (False, True), (True, True)])
def test_wave_rules(monkeypatch, four, d16):
    """`decode_rules.FOUR_CTA_WAVE` (M <= 8 over 397-528 CTAs of 8 warps x 2 tiles: unroll 1, 4 CTAs an SM; the plain
    and the fused kernel, ONE_WAVE_EPILOGUES) and `DECODE16_ONE_WAVE` (9..16 tokens over 298-396: unroll 1, 3 CTAs an
    SM; the plain kernel only) each reach their own grids only, never on sm_120a; off, nothing changes."""
    monkeypatch.setattr(R, "FOUR_CTA_WAVE", four)
    monkeypatch.setattr(R, "DECODE16_ONE_WAVE", d16)

    def knobs(bucket, n, k, arch=None, epilogue=None):
        if epilogue is None:
            cfg = L.default_config(bucket, n, k, "nvfp4", a_fmt="bfloat16", arch=arch)
        else:
            cfg = L.fused_config(bucket, n, k, "nvfp4", "bfloat16", epilogue, "off", arch=arch).decode
        return cfg.unroll, cfg.minctas

    for epilogue in (None, "silu_mul", "residual"):
        for n, k in ((13312, 2048), (14336, 4096), (16384, 2048)):  # 416 / 448 / 512 CTAs
            assert knobs("decode8", n, k, epilogue=epilogue) == ((1, 4) if four else (2, 0))
            assert knobs("decode8", n, k, "sm_120a", epilogue) == (2, 0)
        assert knobs("decode8", 11264, 2048, epilogue=epilogue) == (1, 0)  # the one-wave rule
        assert knobs("decode8", 17408, 2048, epilogue=epilogue) == (2, 0)  # 544 CTAs: past four an SM
        for n, k in ((9536, 2048), (10240, 2048), (11264, 2048), (12288, 4096), (12672, 2048)):  # 298 320 352 384 396
            assert knobs("decode16", n, k, epilogue=epilogue) == ((1, 3) if d16 and epilogue is None else (2, 0))
            assert knobs("decode16", n, k, "sm_120a", epilogue) == (2, 0)
        for n, k in ((9216, 4096), (9504, 2048), (12704, 2048), (16384, 2048), (7168, 2048)):  # 288 297 397 512 224
            assert knobs("decode16", n, k, epilogue=epilogue) == (2, 0)


EIGHT_WARP_SWITCHES = {  # switch: (buckets, epilogues) it covers ("plain": default_config)
    "EIGHT_WARP_WAVE": (("decode8",), ("plain",)),
    "EIGHT_WARP_WAVE16": (("decode16",), ("plain",)),
    "FUSED_EIGHT_WARP_WAVE": (("decode8", "decode16"), ("silu_mul", "residual")),
}


@pytest.mark.parametrize("switch", sorted(EIGHT_WARP_SWITCHES))
@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4"])
def test_eight_warp_wave(monkeypatch, b_fmt, switch):
    """`decode_rules.EIGHT_WARP_WAVE` (on: plain, M <= 8), `EIGHT_WARP_WAVE16` (on: plain, 9..16 tokens) and
    `FUSED_EIGHT_WARP_WAVE` (on: the fused silu_mul / residual kernel, M <= 16): a 16-warp x 2-tile grid over
    133-264 CTAs of N / 32 rows at 4096 <= K < LONG_K halves its warps, exactly the config their jobs time (today's
    under B12X_GEMM_DECODE_OPTS=warps=8 / B12X_DECODE_RULES); each switch reaches its own kernel and buckets only,
    never sm_120a, the norm form or another grid."""
    covered = ((4608, 4096), (5120, 4096), (6144, 4096), (8192, 4096), (6144, 6144))
    others = ((4096, 4096), (6144, 8192), (6144, 2048), (8448, 4096), (14336, 4096))
    buckets, epilogues = EIGHT_WARP_SWITCHES[switch]

    def cfg(bucket, n, k, arch, epilogue, norm=False):
        if epilogue == "plain":
            return L.default_config(bucket, n, k, b_fmt, a_fmt="bfloat16", arch=arch)
        return L.fused_config(bucket, n, k, b_fmt, "bfloat16", epilogue, "off", norm=norm, arch=arch).decode

    keys = [
        (b, n, k, a, e, norm)
        for b in ("decode8", "decode16")
        for n, k in covered + others
        for a in (None, "sm_120a")
        for e, norm in (("plain", False), ("silu_mul", False), ("residual", False), ("silu_mul", True))
    ]
    for name in EIGHT_WARP_SWITCHES:
        monkeypatch.setattr(R, name, False)
    before = {key: cfg(*key) for key in keys}
    monkeypatch.setattr(R, switch, True)
    moved = 0
    for (bucket, n, k, arch, epilogue, norm), old in before.items():
        new = cfg(bucket, n, k, arch, epilogue, norm)
        if bucket in buckets and epilogue in epilogues and (n, k) in covered and arch is None and not norm:
            assert (old.warps, old.tiles) == (16, 2), (bucket, n, k, epilogue)
            assert new == R.with_decode_opts(old, "warps=8"), (bucket, n, k, epilogue)
            moved += 1
        else:
            assert new == old, (bucket, n, k, arch, epilogue, norm)
    assert moved == len(covered) * len(buckets) * len(epilogues)


@pytest.mark.parametrize("b_fmt", ["nvfp4", "mxfp4"])
def test_decode16_shared_activations(monkeypatch, b_fmt):
    """`decode_rules.DECODE16_SHARED_A` (staged): DECODE16_ONE_WAVE's grids (9..16 tokens over 298-396 CTAs, the
    plain kernel) take two warp groups with shared activations, exactly the config `s53_a.sh d16s` times (today's
    under B12X_GEMM_DECODE_OPTS=ashare=true,wn=2); the fused kernel, sm_120a and every other grid keep theirs."""
    shapes = ((9536, 2048), (10240, 2048), (11264, 2048), (12288, 4096), (12672, 2048))  # 298 .. 396 CTAs
    others = ((9216, 4096), (12704, 2048), (7168, 2048))  # 288 / 397 / 224 CTAs

    def cfg(n, k, arch=None):
        return L.default_config("decode16", n, k, b_fmt, a_fmt="bfloat16", arch=arch)

    monkeypatch.setattr(R, "DECODE16_SHARED_A", False)
    before = {(n, k, arch): cfg(n, k, arch) for n, k in shapes + others for arch in (None, "sm_120a")}
    monkeypatch.setattr(R, "DECODE16_SHARED_A", True)
    for (n, k, arch), old in before.items():
        new = cfg(n, k, arch)
        if (n, k) in shapes and arch is None:
            assert (old.unroll, old.minctas, old.wn, old.ashare) == (1, 3, 1, False), (n, k)
            assert new == R.with_decode_opts(old, "ashare=true,wn=2"), (n, k)
            assert (new.wn, new.ashare) == (2, True)
        else:
            assert new == old, (n, k, arch)
        fused = L.fused_config("decode16", n, k, b_fmt, "bfloat16", "silu_mul", "off", arch=arch).decode
        assert not fused.ashare, (n, k, arch)


@pytest.mark.parametrize("on, fused_on", [(True, False), (True, True), (False, False)])
def test_mxfp4_hints(monkeypatch, on, fused_on):
    """`decode_rules.MXFP4_HINTS`: W4A16 MXFP4 in the plain kernel takes NVFP4's cache hints and wave rules, never the
    clamped loads / left shifts ("mul" under its own switch); `FUSED_MXFP4_HINTS` (on since session 53) gives the
    fused silu_mul / residual kernel the same but the 9..16-token wave rule (the plain kernel's only), and leaves
    rope_append and the norm form their plain loads; off, nothing."""
    monkeypatch.setattr(R, "MXFP4_HINTS", on)
    monkeypatch.setattr(R, "FUSED_MXFP4_HINTS", fused_on)
    monkeypatch.setattr(R, "MXFP4_FP4_MUL", False)  # the placement's own switch (test_mxfp4_fp4_mul)
    for bucket, n, k, knobs in (
        ("decode8", 11264, 2048, (1, 0)),
        ("decode8", 14336, 4096, (1, 4)),
        ("decode8", 16384, 2048, (1, 4)),
        ("decode8", 28672, 4096, (2, 0)),
        ("decode8", 4096, 4096, (2, 0)),
        ("decode16", 11264, 2048, (1, 3)),
        ("decode16", 9216, 4096, (2, 0)),
    ):
        cfg = L.default_config(bucket, n, k, "mxfp4", a_fmt="bfloat16")
        hinted = ("na256", "el", *knobs) if on else ("nc", "nc", 2, 0)
        assert (cfg.wcache, cfg.acache, cfg.unroll, cfg.minctas) == hinted, (bucket, n, k)
        assert (cfg.clamp, cfg.fp4) == (False, "shift")
        fused_knobs = knobs if bucket == "decode8" else (2, 0)  # 9..16 tokens: the plain kernel's wave rule only
        for epilogue in ("silu_mul", "residual"):
            fused = L.fused_config(bucket, n, k, "mxfp4", "bfloat16", epilogue, "off").decode
            want = ("na256", "el", *fused_knobs) if on and fused_on else ("nc", "nc", 2, 0)
            assert (fused.wcache, fused.acache, fused.unroll, fused.minctas) == want, (bucket, n, k, epilogue)
            assert (fused.clamp, fused.fp4) == (False, "shift")
        normed = L.fused_config(bucket, n, k, "mxfp4", "bfloat16", "silu_mul", "off", norm=True).decode
        assert (normed.wcache, normed.acache) == ("nc", "nc")
    assert L.default_config("decode8", 2048, 4096, "mxfp4", a_fmt="bfloat16").wcache == "nc"  # N < 4096
    assert L.default_config("decode8", 11264, 2048, "mxfp4", a_fmt="float8_e4m3fn").wcache == "nc"


def test_mxfp4_fp4_mul(monkeypatch):
    """`decode_rules.MXFP4_FP4_MUL` (on since session 53): W4A16 MXFP4 in the plain kernel takes the FP4-multiply rules
    where NVFP4 does (bf16 compute, N >= 4096), at 9..16 tokens past LONG_K too; the fused kernel's MXFP4 keeps shift
    (it lost 17.6% at M = 16 28672 x 4096 under "mul")."""
    assert R.MXFP4_FP4_MUL
    monkeypatch.setattr(R, "MXFP4_FP4_MUL", False)

    def fp4(bucket, n, k, a_fmt="bfloat16", epilogue=None):
        if epilogue is None:
            return L.default_config(bucket, n, k, "mxfp4", a_fmt=a_fmt).fp4
        return L.fused_config(bucket, n, k, "mxfp4", a_fmt, epilogue, "off").decode.fp4

    assert fp4("decode8", 4096, 4096) == "shift"
    monkeypatch.setattr(R, "MXFP4_FP4_MUL", True)
    assert fp4("decode8", 4096, 4096) == fp4("decode8", 11264, 2048) == fp4("decode16", 4096, 4096) == "mul"
    assert fp4("decode16", 4096, 14336) == "mul"  # K >= LONG_K too, unlike NVFP4 (-3.6 / -4.1% on an H100)
    assert fp4("decode8", 2048, 4096) == fp4("decode8", 4096, 4096, "float16") == "shift"
    monkeypatch.setattr(R, "FUSED_MXFP4_HINTS", False)
    assert fp4("decode8", 4096, 4096, epilogue="silu_mul") == "shift"
    monkeypatch.setattr(R, "FUSED_MXFP4_HINTS", True)
    assert R.FUSED_MXFP4_SILU_MUL  # on: silu_mul below the wide 9..16-token grids
    monkeypatch.setattr(R, "FUSED_MXFP4_SILU_MUL", False)
    assert (
        fp4("decode8", 4096, 4096, epilogue="silu_mul") == fp4("decode16", 28672, 4096, epilogue="silu_mul") == "shift"
    )
    assert fp4("decode8", 4096, 4096, epilogue="residual") == "shift"
    monkeypatch.setattr(R, "FUSED_MXFP4_SILU_MUL", True)
    for bucket, n, k in (("decode8", 4096, 4096), ("decode8", 28672, 4096), ("decode16", 11264, 2048)):
        assert fp4(bucket, n, k, epilogue="silu_mul") == "mul", (bucket, n, k)
    assert fp4("decode16", 28672, 4096, epilogue="silu_mul") == "shift"  # 130 registers: 3 CTAs an SM, not 4
    assert fp4("decode16", 4096, 14336, epilogue="silu_mul") == "shift"  # K >= LONG_K: the plain kernel's exception
    assert (
        fp4("decode8", 4096, 4096, epilogue="residual") == fp4("decode16", 4096, 4096, epilogue="residual") == "shift"
    )


def test_heuristics_never_prefetch_until_swept():
    for m in (1, 16, 32, 64):
        assert L.default_config(L.bucket_for(m)).prefetch == 0
        assert L.default_config(L.bucket_for(m), 4096, 4096, "nvfp4").prefetch == 0


def test_shape_blind_default_unchanged():
    assert L.default_config("decode8") == DecodeConfig(warps=8, tiles=2, ntiles=1, unroll=2)
    assert L.default_config("decode16") == DecodeConfig(warps=8, tiles=2, ntiles=2, unroll=1)
    assert L.default_config("decode32") == DecodeConfig(warps=8, tiles=2, ntiles=4, unroll=1)
    assert L.default_config("decode64") == DecodeConfig(warps=4, tiles=2, ntiles=8, unroll=1)


# Not swept yet (the extrapolation in decode_config_for's docstring): pinned so a change is deliberate.
EXTRAPOLATED = [
    # fmt, M, N, K, (warps, tiles, ntiles, unroll): the demo block's linears and two Llama shapes
    ("nvfp4", 32, 3072, 2048, (8, 2, 4, 1)),
    ("nvfp4", 32, 11264, 2048, (4, 2, 4, 1)),
    ("nvfp4", 32, 2048, 5632, (8, 2, 4, 1)),
    ("nvfp4", 64, 2048, 2048, (8, 2, 8, 1)),
    ("nvfp4", 64, 11264, 2048, (4, 2, 8, 1)),
    ("mxfp8", 64, 4096, 14336, (8, 2, 8, 1)),
    ("fp8_block", 24, 28672, 4096, (4, 2, 4, 1)),
]


@pytest.mark.parametrize("fmt,m,n,k,want", EXTRAPOLATED)
def test_decode32_decode64_heuristic(fmt, m, n, k, want):
    cfg = L.default_config(L.bucket_for(m), n, k, fmt)
    assert cfg == DecodeConfig(*want)
    assert cfg.warps <= 8 and cfg.red_bytes <= 64 * 1024  # the register and shared-memory caps it keeps


def test_candidate_configs_per_bucket():
    from flashinfer.experimental.b12x.gemm.blockscaled._decode_sweeps import candidate_configs

    for m, count, prefetching in ((8, 30, 12), (16, 30, 12), (32, 28, 12), (64, 20, 10)):
        cands = candidate_configs(m)
        assert len(cands) == len(set(cands)) == count
        assert sum(c.prefetch > 0 for c in cands) == prefetching  # bench_gemm --sweep times them too
        assert {c.ntiles for c in cands} == {m // 8}
        assert all(why_not("bfloat16", "nvfp4", "bfloat16", c) is None for c in cands)
    assert L.default_config("decode32") in candidate_configs(32)
    assert L.default_config("decode64") in candidate_configs(64)
    with pytest.raises(ValueError, match="serves M <= 64, got 65"):
        candidate_configs(65)


@pytest.mark.compile
def test_one_wave_range_rests_on_these_registers(cuda_binary):
    """`decode_rules.ONE_WAVE_CTAS` assumes the W4A16 NVFP4 M <= 8 tile of 8 warps x 2 tiles fits 3 CTAs of 256
    threads an SM at unroll 1 and 2 at unroll 2 (ptxas, sm_90a: 80 and 112 registers a lane in session 28).
    A toolchain that moves either count moves the range: re-time it (scripts/jobs/s28_c.sh)."""
    import dataclasses

    pytest.importorskip("cutlass")
    pytest.importorskip("tvm_ffi")
    from flashinfer.experimental.b12x.gemm.blockscaled import _kernel_decode as KD

    cfg = L.default_config("decode8", 11264, 2048, "nvfp4", a_fmt="bfloat16")
    assert (cfg.warps, cfg.tiles, cfg.unroll) == (8, 2, 1) and 11264 // 32 in range(*R.ONE_WAVE_CTAS)
    ctas_per_sm = {}
    for unroll in (1, 2):
        fn = KD.compile_decode("bfloat16", "nvfp4", "bfloat16", dataclasses.replace(cfg, unroll=unroll), "sm_90a")
        usage = cuda_binary.resources(fn.artifacts.CUBIN)
        assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
        ctas_per_sm[unroll] = 65536 // (int(usage["REG"]) * 32 * cfg.warps)
    assert ctas_per_sm == {1: 3, 2: 2}
    assert R.ONE_WAVE_CTAS == (2 * 132, 3 * 132)  # those counts on the H200's 132 SMs


@pytest.mark.parametrize("arch, unroll", [(None, 1), ("sm_90a", 1), ("sm_120a", 2), ("sm_121a", 2)])
def test_one_wave_rule_only_where_it_was_measured(arch, unroll):
    """The H200's one-wave unroll-1 tiling (132 SMs, sm_90a registers) is not carried to SM120, whose SM
    counts put 11264 / 32 = 352 CTAs in other waves (`decode_rules.ONE_WAVE_ARCHS`)."""
    cfg = L.default_config("decode8", 11264, 2048, "nvfp4", a_fmt="bfloat16", arch=arch)
    assert (cfg.warps, cfg.tiles, cfg.unroll) == (8, 2, unroll)
    assert L.default_config("decode8", 7168, 2048, "nvfp4", a_fmt="bfloat16", arch=arch).unroll == 2  # one wave


def test_mxfp4_wide_one_wave(monkeypatch):
    """`decode_rules.MXFP4_WIDE_ONE_WAVE` (on since session 54): W4A16 MXFP4's shared-activation tiling at 9..16 tokens
    unrolled once over 397-528 CTAs of N / 64 rows at 4 warps (its unroll-2 kernel fits 3 CTAs an SM, the unroll-1 one
    4) and 133-264 at 8 (1 against 2: N = 16384), the plain kernel only, sm_90a or a shape-only query; NVFP4 and every
    other grid unchanged."""
    assert R.MXFP4_WIDE_ONE_WAVE
    monkeypatch.setattr(R, "FUSED_SILU_GROUPS", False)  # the fused kernel's own unroll-1 rule (test_fused_silu_groups)
    for on in (False, True):
        monkeypatch.setattr(R, "MXFP4_WIDE_ONE_WAVE", on)
        for n in (16384, 24576, 25600, 28672, 33792, 40960):
            cfg = L.default_config("decode16", n, 4096, "mxfp4", a_fmt="bfloat16")
            assert (cfg.wn, cfg.ashare) == (2, True)
            assert cfg.unroll == (1 if on and (25344 < n <= 33792 or n == 16384) else 2), (on, n)
            assert L.default_config("decode16", n, 4096, "nvfp4", a_fmt="bfloat16").unroll == 2
            assert L.default_config("decode16", n, 4096, "mxfp4", a_fmt="bfloat16", arch="sm_120a").unroll == 2
            fused = L.fused_config("decode16", n, 4096, "mxfp4", "bfloat16", "silu_mul", "off")
            assert fused.decode.unroll == 2
