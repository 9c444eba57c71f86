"""The decode kernel's sweep candidates (`bench_gemm --sweep`, `--sweep-subset stream|probe|ksplit`): configs
to time around a case's heuristic, one hypothesis each. Only benchmarks and tests read this module; what the
library launches comes from `decode_rules.decode_config_for`."""

from __future__ import annotations

from dataclasses import replace

from . import _kernel_decode as KD


def candidate_configs(max_m: int) -> tuple[KD.DecodeConfig, ...]:
    """What `bench_gemm --sweep` times for a bucket: M <= 16 every warps x tiles x unroll of the
    2026-11-30 sweep (warps 4/8/16 x tiles 1/2/4 x unroll 1/2); M <= 32 / 64 the implementable ones of
    the same grid (16 and 10 configs). Then the weight-prefetch variants (prefetch 1 and 2, unroll 1,
    tiles 1/2, every warp count; implementable ones only): 12 more per bucket, 10 at M <= 64."""
    ntiles = KD.ntiles_for(max_m)
    out = []
    for warps in (4, 8, 16):
        for tiles in (1, 2, 4):
            for unroll in (1, 2):
                cfg = KD.DecodeConfig(warps, tiles, ntiles, unroll)
                if ntiles <= 2 or KD.tiling_reason(cfg) is None:
                    out.append(cfg)
    for prefetch in (1, 2):
        for warps in (4, 8, 16):
            for tiles in (1, 2):
                cfg = KD.DecodeConfig(warps, tiles, ntiles, 1, prefetch)
                if KD.tiling_reason(cfg) is None:
                    out.append(cfg)
    return tuple(out)


def stream_variants(base: KD.DecodeConfig) -> tuple[KD.DecodeConfig, ...]:
    """The streaming options around `base` (a case's heuristic config): what `bench_gemm
    --sweep-subset stream` times after `base`, one hypothesis each: L1 kept for the activations (na +
    el), bigger L2 fetches (na256), unpredicated loads (clamp), fewer ALU-pipe instructions (fp4
    "left"), warp groups along N (2 groups of the base's warps, 2 groups of half of them, 4 groups of
    the base's warps), twice the rows per warp (half the CTAs, so half the activation reads, more
    registers), two combinations (everything on the instruction side with na256, and with 2 warp
    groups), and 2 warp groups sharing activations through smem (ashare: twice the base's warps, or
    the base's), and the base with one chunk a step (unroll 1: fewer registers a lane, so more resident
    CTAs; session 25: 11264 x 2048 fits one wave at 80 registers, not at 112). ("na" alone, "ef" and
    kgroup stay selectable, not swept.) Valid configs only, base excluded, no duplicates."""
    hinted = replace(base, wcache="na", acache="el")
    lean = replace(hinted, clamp=True, fp4="left", prefetch=0)
    cands = (
        hinted,
        replace(hinted, wcache="na256"),
        replace(hinted, clamp=True, prefetch=0),
        replace(hinted, fp4="left"),
        replace(hinted, warps=2 * base.warps, wn=2 * base.wn),
        replace(hinted, wn=2 * base.wn),
        replace(hinted, warps=4 * base.warps, wn=4 * base.wn),
        replace(hinted, tiles=2 * base.tiles),
        replace(lean, wcache="na256"),
        replace(lean, warps=2 * base.warps, wn=2 * base.wn),
        replace(hinted, warps=2 * base.warps, wn=2 * base.wn, ashare=True, prefetch=0, kgroup=1),
        replace(hinted, wn=2 * base.wn, ashare=True, prefetch=0, kgroup=1),
        replace(base, unroll=1),
    )
    return _valid_new(base, cands)


def _valid_new(base: KD.DecodeConfig, cands) -> tuple[KD.DecodeConfig, ...]:
    """`cands` in order, without base, duplicates and configs the kernel cannot run."""
    out = []
    for cfg in cands:
        if cfg != base and cfg not in out and KD.tiling_reason(cfg) is None:
            out.append(cfg)
    return tuple(out)


def probe_variants(base: KD.DecodeConfig) -> tuple[KD.DecodeConfig, ...]:
    """The timing probes `bench_gemm --sweep-subset probe` times after `base`: loads only and
    dequant without MMA, for base and for base with the L1 hints (na + el); then base's weight loads
    alone ("wloads") and its loads with the activations' from L1 ("l1act"): what the activations'
    loads cost, and whether as L2 traffic or as instructions (docs/predictions/gemm_decode.md,
    session 39)."""
    hinted = replace(base, wcache="na", acache="el")
    probes = (replace(base, probe="loads"), replace(base, probe="nomma"), hinted, replace(hinted, probe="loads"))
    return probes + (replace(base, probe="wloads"), replace(base, probe="l1act"))


def fp4_variants(base: KD.DecodeConfig) -> tuple[KD.DecodeConfig, ...]:
    """`--sweep-subset fp4` (docs/predictions/gemm_decode.md, session 48): base's FP4 placement by the other
    methods (`DecodeConfig.fp4`: shift, left, mul), the same bits by fewer or other instructions."""
    return _valid_new(base, [replace(base, fp4=f) for f in KD.FP4])


def ksplit_variants(base: KD.DecodeConfig, k: int | None = None) -> tuple[KD.DecodeConfig, ...]:
    """`--sweep-subset ksplit` (docs/predictions/gemm_decode.md, session 38): K split over a cluster of C CTAs
    (`DecodeConfig.ksplit`), so each CTA reads 1 / C of the activations. Around `base` (the case's heuristic):
    C = 2 and 4 on the base itself (C x the CTAs, the same rows each); then, with the base's cache hints, warp
    groups along N grown by C with the activations shared through shared memory (ashare; BN x C at the base's CTA
    count: 1 / C of the activation traffic) and the same without ashare (the groups' reads meet in L1 or not).
    Each of those with more than 8 warps also with half its warps (session 40): 16 warps at ~118 registers are one
    CTA an SM on the H200, so ksplit 2 on the base ran 256 CTAs in two waves and the grown ksplit 4 ran 32 clusters
    of 4 where 30 fit (`scripts/cluster_occupancy.py`); at 8 warps two CTAs share an SM. Plus C = 4 with groups
    grown by 2 at 8 warps (ashare): 2 x the base's CTAs, two an SM, each SM reading half the base's activations.
    Valid configs only, base excluded, no duplicates; with k, none whose warps along K (kwarps x C) outnumber
    its 128-value chunks (whole ranks would idle)."""
    cands = []
    for c in (2, 4):
        cands.append(replace(base, ksplit=c))
        grown = replace(base, ksplit=c, wn=base.wn * c, warps=max(base.warps, base.wn * c), prefetch=0, kgroup=1)
        cands += [replace(grown, ashare=True, upfront=0), replace(grown, ashare=False, acache="el")]
    cands += [replace(v, warps=v.warps // 2) for v in cands if v.warps > 8 and v.warps // 2 >= v.wn]
    if base.warps > 8:  # and C = 4 over half the grown rows: 2 x the base's CTAs, 16 warps an SM, half its activations
        grown = replace(base, ksplit=4, wn=base.wn * 2, warps=base.warps // 2, prefetch=0, kgroup=1, upfront=0)
        cands.append(replace(grown, ashare=True))
    if k is not None:
        cands = [c for c in cands if k // KD.CHUNK >= c.kwarps * c.ksplit]
    return _valid_new(base, cands)


def ksplit_sweep(base: KD.DecodeConfig, k: int | None = None) -> tuple[KD.DecodeConfig, ...]:
    """What `--sweep-subset ksplit` times after `base`: base as a programmatic dependent (`pdl_wait`: each
    call of the timed graph overlaps the one before, as the fused kernel's pdl "wait" rows did), then every
    `ksplit_variants` config launched plainly and as a programmatic dependent."""
    variants = ksplit_variants(base, k)
    dependent = tuple(replace(c, pdl_wait=True) for c in (base, *variants))
    return dependent[:1] + variants + dependent[1:]
