"""The persistent decode kernel (`DecodeConfig.persistent`) on the CPU: its item order and its
shared-memory placement against their Python mirrors (`_config.persistent_items`,
`_config.epilogue_offsets`), the predicate and the bench entry, and the compile for sm_90a and
sm_120a (PTX shape, registers); the page-table L2 prefetch (`DecodeConfig.prefetch_pages`) with
and without it. The GPU tier is test_paged_persistent_gpu.py.
"""

import dataclasses
import itertools

import pytest

from flashinfer.experimental.b12x.attention.paged._config import (
    M_TILE,
    DecodeConfig,
    ScheduleConfig,
    epilogue_offsets,
    parse_decode_entry,
    persistent_grid_rows,
    persistent_items,
    resident_ctas,
    ring_stage_bytes,
    schedule_reference,
    split_schedule,
    why_not,
)

from .test_paged_compile import _check_binary, _modules, _ptxas_usage

ARCHS = ("sm_90a", "sm_120a")
PERSISTENT = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True)
# the configs the GPU tier runs (sm_90a) and the ones that fit sm_120a's 99 KB
SM90 = {"float8_e4m3fn": DecodeConfig(4, 32, 3, **PERSISTENT), "bfloat16": DecodeConfig(4, 16, 3, **PERSISTENT)}
SM120 = {"float8_e4m3fn": DecodeConfig(2, 32, 3, **PERSISTENT), "bfloat16": DecodeConfig(2, 16, 3, **PERSISTENT)}


@pytest.mark.reference
@pytest.mark.parametrize("batch", [1, 8, 32, 33, 100, 128])
@pytest.mark.parametrize("target", [1, 33, 50, 264])
def test_persistent_items_run_every_row_once(batch, target):
    """The CTA rows of one KV head run every work row exactly once, each CTA in increasing order, and
    the live rows (the schedule's items) all land on CTAs of the one-wave grid."""
    config = ScheduleConfig(tile_keys=128, target_items=target, min_chunk=256)
    rows = min(batch + target, 4 * 128)  # the bound's work view: batch + target rows
    grid = persistent_grid_rows(rows, config)
    assert 1 <= grid <= min(rows, target)
    runs = [persistent_items(y, rows, config) for y in range(grid)]
    assert sorted(itertools.chain(*runs)) == list(range(rows))
    assert all(run == sorted(run) and run[0] == y for y, run in enumerate(runs))
    lens = [32768 if b % 3 else 1000 for b in range(batch)]
    _, _, count = schedule_reference(lens, -1, rows, config)
    live = [i for run in runs for i in run if i < count]
    assert sorted(live) == list(range(count))
    # a split batch (count <= target) is one item a CTA; only more items than one wave repeat
    per_cta = max(len([i for i in run if i < count]) for run in runs)
    assert per_cta == -(-count // grid)
    # the kernel looks ahead to row nxt >= grid only when nxt < batch: that is nxt < count (a split
    # batch makes at most grid items, all below any CTA's second row; an unsplit one makes batch)
    for nxt in range(grid, rows + grid):
        assert (nxt < batch) == (nxt < count), (nxt, batch, count, grid)


@pytest.mark.reference
def test_persistent_grid_is_one_wave_of_resident_ctas():
    """B=128 on the H200 (132 SMs, 8 KV heads): 33 CTA rows a head, two CTAs an SM, 4 items a CTA."""
    cfg = SM90["float8_e4m3fn"]
    sched = split_schedule(cfg, "float8_e4m3fn", 128, 8, 132, "sm_90a")
    assert resident_ctas("float8_e4m3fn", 128, cfg, "sm_90a") == 2
    rows = 128 + sched.target_items
    assert persistent_grid_rows(rows, sched) == 33 and 8 * 33 <= 2 * 132
    assert max(len([i for i in persistent_items(y, rows, sched) if i < 128]) for y in range(33)) == 4


def _ranges(kv_dtype, d, cfg):
    """(stage-0 ranges, epilogue ranges, ring bytes) of the persistent kernel's shared K/V ring."""
    k_stage, v_stage = ring_stage_bytes(kv_dtype, d, d, cfg)
    k_bytes = cfg.stages * k_stage
    o_off, stats_off = epilogue_offsets(kv_dtype, d, d, cfg)
    o_bytes = 4 * cfg.warps * M_TILE * d  # the warps' O rows; the fused merge's buffer is smaller
    stats_bytes = 4 * (3 * cfg.warps * M_TILE + M_TILE)
    stage0 = [(0, k_stage), (k_bytes, k_bytes + v_stage)]
    return stage0, [(o_off, o_off + o_bytes), (stats_off, stats_off + stats_bytes)], k_bytes + cfg.stages * v_stage


@pytest.mark.reference
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_persistent_epilogue_leaves_stage_zero_free(kv_dtype, d):
    """Whenever the predicate accepts a persistent config, the epilogue's O rows and stats lie inside
    the ring and outside stage 0 of K and V (the next item's first sub-tiles are in flight there),
    and do not overlap each other; without persistent the offsets are the ring's start, as before."""
    seen = 0
    for warps, kpw, stages in itertools.product((2, 4, 8), (16, 32), (2, 3, 4, 5, 6)):
        cfg = DecodeConfig(warps, kpw, stages, **PERSISTENT, persistent=True)
        for arch in ARCHS:
            if why_not("bfloat16", kv_dtype, 32, 8, d, d, 16, cfg, arch) is not None:
                continue
            seen += 1
            stage0, epi, ring = _ranges(kv_dtype, d, cfg)
            for lo, hi in epi:
                assert 0 <= lo < hi <= ring, (cfg, lo, hi, ring)
                assert all(hi <= a or lo >= b for a, b in stage0), (cfg, lo, hi, stage0)
            (a, b), (c, e) = epi
            assert b <= c or e <= a
        plain = dataclasses.replace(cfg, persistent=False)
        assert epilogue_offsets(kv_dtype, d, d, plain) == (0, 4 * warps * M_TILE * d)
    assert seen > (0 if d == 256 else 4)


@pytest.mark.reference
def test_persistent_predicate_and_bench_entry():
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    assert why_not(*dims, SM90["float8_e4m3fn"], "sm_90a") is None
    assert why_not(*dims, dataclasses.replace(SM90["float8_e4m3fn"], persistent=True), "sm_90a") is None
    unfused = DecodeConfig(4, 32, 3, fused_merge=True, persistent=True)  # a no-op without the fused schedule
    assert why_not(*dims, unfused, "sm_90a") is None and not unfused.runs_persistent
    assert epilogue_offsets("float8_e4m3fn", 128, 128, unfused) == (0, 4 * 4 * M_TILE * 128)
    small = DecodeConfig(4, 16, 3, **PERSISTENT, persistent=True)  # fp8: 2 x 16 x 128 B < 64 x 128
    assert "persistent needs (stages - 1) x keys_per_warp" in why_not(*dims, small, "sm_90a")
    assert why_not("bfloat16", "bfloat16", 32, 8, 128, 128, 16, small, "sm_90a") is None
    bad = dataclasses.replace(SM90["float8_e4m3fn"], persistent=1)
    assert why_not(*dims, bad, "sm_90a") == "persistent must be a bool, got 1"
    decode, flags, target, _ = parse_decode_entry("4x32x3fspldr:t66")
    assert decode == dataclasses.replace(SM90["float8_e4m3fn"], persistent=True) and "r" in flags and target == 66
    assert "persistent=True" in repr(decode)
    for bad_entry, message in (("hfsr", "need an explicit WxKxS entry"), ("hfsg", "r, g, q, n, w and b, got"),
                               ("4x32x3fspldrr", "once each")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_decode_entry(bad_entry)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_persistent_compiles(arch, kv_dtype, tmp_path):
    """persistent: the grid's row count is read back (nctaid.y) for the stride; the main loop and its
    mma / cvt work are traced once as in the one-item kernel; the item's head (Q and first sub-tile
    commits) and the locate appear twice (before the loop and as the next item's lookahead); one
    more CTA barrier (the end of an item); no spills, and on sm_90a registers for two CTAs an SM
    (the one-wave grid `split_schedule` sizes assumes it)."""
    kd, _ = _modules()
    base = (SM90 if arch == "sm_90a" else SM120)[kv_dtype]
    cfg = dataclasses.replace(base, persistent=True)
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    assert why_not(*dims, cfg, arch) is None
    sched = ScheduleConfig(cfg.tile_keys, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    ptx = _check_binary(kd.compile_decode(*dims, cfg, arch=arch, schedule=sched), arch)
    assert "nctaid.y" in ptx and "nctaid.y" not in plain
    for op in ("mma.sync.aligned.m16n8k16", "cvt.rn.f16x2.e4m3x2", "atom.global", "cp.async.wait_group"):
        assert ptx.count(op) == plain.count(op), op
    assert ptx.count("bar.sync") == plain.count("bar.sync") + 1
    assert ptx.count("cp.async.commit_group") == plain.count("cp.async.commit_group") + 2
    assert ptx.count("redux.sync") == 2 * plain.count("redux.sync") > 0
    assert ptx.count("cp.async.cg.shared.global") > plain.count("cp.async.cg.shared.global")
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0, (regs, spills)
    assert regs * 32 * cfg.warps * (2 if arch == "sm_90a" else 1) <= 65536, regs


@pytest.mark.reference
def test_persistent_default_switch(monkeypatch):
    """_config.PERSISTENT_DECODE: the fp8-KV default configs whose epilogue fits the ring (D <= 128)
    get persistent, the others (bf16 KV included) stay as they are; it takes effect only with the
    fused schedule."""
    from flashinfer.experimental.b12x.attention.paged import _config

    monkeypatch.setattr(_config, "FP8_TILE_STAGES", 3)  # the switch needs fp8's 3-stage ring (persistent_fits)
    off = {(kv, d, arch): _config.default_config(kv, d, 16, arch)
           for kv in ("bfloat16", "float8_e4m3fn") for d in (64, 128, 256) for arch in ARCHS}  # fmt: skip
    assert not any(c.persistent for c in off.values())
    monkeypatch.setattr(_config, "PERSISTENT_DECODE", True)
    for (kv, d, arch), before in off.items():
        cfg = _config.default_config(kv, d, 16, arch)
        fits = kv == "float8_e4m3fn" and d <= 128 and _config.persistent_fits(kv, d, d, before)
        assert cfg == dataclasses.replace(before, persistent=fits), (kv, d, arch)
        assert why_not("bfloat16", kv, 32, 8, d, d, 16, cfg, arch) is None
    assert _config.default_config("float8_e4m3fn", 128, 16, "sm_90a") == dataclasses.replace(
        SM90["float8_e4m3fn"], fused_merge=False, fused_schedule=False, persistent=True, lean_ticket=_config.LEAN_TICKET
    )


@pytest.mark.compile
def test_persistent_without_fused_schedule_is_the_plain_kernel():
    """persistent on a three-launch config (the heuristic for max_batch > 128 under PERSISTENT_DECODE)
    compiles the one-item kernel: the same PTX."""
    kd, _ = _modules()
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    base = DecodeConfig(4, 32, 3, fused_merge=True, fast_prologue=True)
    plain = kd.compile_decode(*dims, base, arch="sm_90a").artifacts.PTX
    noop = kd.compile_decode(*dims, dataclasses.replace(base, persistent=True), arch="sm_90a").artifacts.PTX
    assert noop == plain and "nctaid.y" not in noop


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("persistent", [False, True], ids=["one-item", "persistent"])
def test_prefetch_pages_compiles(arch, kv_dtype, persistent, tmp_path):
    """prefetch_pages (bench flag g): L2 prefetches of the item's page-table lines (none without the
    flag), nothing else changes in the work (same mma, cvt, cp.async and barriers); no spills, two
    CTAs an SM on sm_90a."""
    kd, _ = _modules()
    base = dataclasses.replace((SM90 if arch == "sm_90a" else SM120)[kv_dtype], persistent=persistent)
    cfg = dataclasses.replace(base, prefetch_pages=True)
    dims = ("bfloat16", kv_dtype, 32, 8, 128, 128, 16)
    sched = ScheduleConfig(cfg.tile_keys, 33, 256)
    plain = kd.compile_decode(*dims, base, arch=arch, schedule=sched).artifacts.PTX
    ptx = _check_binary(kd.compile_decode(*dims, cfg, arch=arch, schedule=sched), arch)
    assert "prefetch.global.L2" in ptx and "prefetch" not in plain
    for op in ("mma.sync.aligned.m16n8k16", "cvt.rn.f16x2.e4m3x2", "cp.async.cg.shared.global", "bar.sync"):
        assert ptx.count(op) == plain.count(op), op
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0, (regs, spills)
    assert regs * 32 * cfg.warps * (2 if arch == "sm_90a" else 1) <= 65536, regs
    entry = parse_decode_entry("4x32x3fspld" + ("r" if persistent else "") + "g")[0]
    assert entry == dataclasses.replace(SM90["float8_e4m3fn"], persistent=persistent, prefetch_pages=True)
