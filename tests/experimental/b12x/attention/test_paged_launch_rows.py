"""The fused decode's launch rows (session 37, `_config.launch_rows`; `DecodeConfig.full_grid` opts out): the grid
holds the rows the live batch can fill, not the plan's work-row capacity.
reference: on random batches, lengths, windows, targets and capacities, every item of `schedule_reference` lies
within `launch_rows` (paired and not), and the bound is the schedule's count where it can be (one item a request,
a one-wave split); the launcher's own arithmetic (`PagedDecode._grid_rows`, run on Python values) gives exactly
`launch_rows`, rounded up to whole clusters of two for pairs, the capacity with full_grid or without the fused
schedule, and the cluster and persistent grids as before; the bench flag w and the repr.
"""

import dataclasses
import random
from types import SimpleNamespace

import pytest

from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    launch_rows,
    paired,
    parse_decode_entry,
    schedule_reference,
    why_not,
    why_not_schedule,
)
from flashinfer.experimental.b12x.attention.paged._kernel_decode import PagedDecode

pytestmark = pytest.mark.reference


def _random_case(rng):
    batch = rng.choice([1, 2, 3, 5, 8, 9, 16, 33, 100, 128])
    lens = [rng.choice([0, 1, rng.randrange(1, 3000), rng.randrange(1, 70000)]) for _ in range(batch)]
    window_left = rng.choice([-1, -1, 0, 100, 3000])
    target, tile = rng.choice([17, 33, 50, 66]), rng.choice([64, 128, 256])
    cap = batch + rng.choice([0, 1, 17, 66, 200])
    config = ScheduleConfig(tile, target, rng.choice([128, 256, 512]), pairs=rng.random() < 0.5,
                            group=rng.choice([2, 2, 4, 8]), budget=rng.random() < 0.3)  # fmt: skip
    return lens, window_left, cap, config


@pytest.mark.parametrize("seed", range(60))
def test_every_item_lies_within_the_launch_rows(seed):
    rng = random.Random(seed)
    for _ in range(20):
        lens, window_left, cap, config = _random_case(rng)
        batch = len(lens)
        _, _, count = schedule_reference(lens, window_left, cap, config)
        rows = launch_rows(batch, cap, config)
        assert count <= rows <= cap, (lens, window_left, cap, config)
        assert rows >= batch


def test_the_bound_is_tight_where_the_schedule_fills_it():
    eight_warps = ScheduleConfig(256, 17, 512, pairs=True)
    assert schedule_reference([1024] * 8, -1, 25, eight_warps)[2] == 16 <= launch_rows(8, 25, eight_warps) == 25
    plain = dataclasses.replace(eight_warps, pairs=False)
    assert launch_rows(8, 25, plain) == 17  # bind's work rows at B = 8: 25 (B + target), 200 CTAs at Hkv 8
    assert schedule_reference([70000], -1, 18, plain)[2] == 16 < launch_rows(1, 18, plain) == 17  # was 18
    assert launch_rows(128, 145, plain) == 128 == schedule_reference([100] * 128, -1, 145, plain)[2]  # unsplit
    assert not paired(9, 26, eight_warps) and launch_rows(9, 26, eight_warps) == 17
    assert launch_rows(16, 33, plain) == 17  # was 33 rows: the B = 16 gain of s37_a


def _launcher(config: DecodeConfig, schedule: ScheduleConfig):
    from flashinfer.experimental.b12x.attention.paged._kernel_split import Schedule

    fake = SimpleNamespace(
        cluster=config.cluster, pairs=config.cluster_pairs, persistent=config.runs_persistent,
        fused_schedule=config.fused_schedule, config=config, schedule=Schedule(schedule),
    )  # fmt: skip
    return lambda batch, cap: int(
        PagedDecode._grid_rows(fake, SimpleNamespace(shape=(cap, 4)), SimpleNamespace(shape=(batch,)))
    )


@pytest.mark.parametrize(
    "entry",
    [
        "8x32x2fspldk",
        "8x32x2fspldk:c2sp",
        "8x16x2fspldkn:c2s",
        "4x16x3fspldkn",
        "8x16x2fspldk:c8sp",
        "4x32x2fspldk:c4s",
        "8x32x2fspldkb:c2sp",
        "8x16x2fspldkb:c8sp",
    ],
)
def test_the_launcher_computes_launch_rows(entry):
    decode = parse_decode_entry(entry)[0]
    rng = random.Random(entry)
    group = decode.cluster if decode.cluster_pairs else 2
    whole = (lambda n: -(-n // group) * group) if decode.cluster_pairs else (lambda n: n)  # whole clusters
    for target in (17, 33, 66):
        schedule = ScheduleConfig(decode.tile_keys, target, 256, pairs=decode.cluster_pairs, group=group,
                                  budget=decode.pair_budget)  # fmt: skip
        grid = _launcher(decode, schedule)
        full = _launcher(dataclasses.replace(decode, full_grid=True), schedule)
        for _ in range(50):
            batch = rng.randrange(1, 129)
            cap = batch + rng.choice([0, 1, 17, 66, 200])
            want = launch_rows(batch, cap, schedule)
            assert grid(batch, cap) == whole(want), (batch, cap, target)
            assert full(batch, cap) == whole(cap)


def test_other_launches_keep_their_grids():
    schedule = ScheduleConfig(128, 17, 256)
    assert _launcher(parse_decode_entry("4x16x3")[0], schedule)(8, 74) == 74  # three launches: the work rows
    assert _launcher(parse_decode_entry("8x16x2fspld:c8p")[0], schedule)(3, 74) == 24  # C a request
    persistent = parse_decode_entry("4x32x3fspldr")[0]
    assert _launcher(persistent, schedule)(8, 74) == 17  # one wave of the target


def test_full_grid_flag_entry_and_repr():
    cfg = parse_decode_entry("8x32x2fspldkw")[0]
    assert cfg.full_grid and "full_grid=True" in repr(cfg) and "full_grid" not in repr(DecodeConfig())
    assert why_not("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, cfg, "sm_90a") is None
    bad = dataclasses.replace(cfg, full_grid=1)
    assert why_not("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16, bad, "sm_90a") == "full_grid must be a bool, got 1"
    with pytest.raises(ValueError):
        parse_decode_entry("hw")


def test_pair_budget_launches_no_more_than_the_target():
    """`DecodeConfig.pair_budget` (session 37, opt-in): the pairs' split counts the rounding, so B = 8 on the 8-warp
    tiles launches 17 rows (18 in clusters) instead of 25, the items at B = 8 1k unchanged and at B = 4 4k halved."""
    pairs = ScheduleConfig(256, 17, 512, pairs=True)
    budget = dataclasses.replace(pairs, budget=True)
    assert "budget=True" in repr(budget) and "budget" not in repr(pairs)
    assert launch_rows(8, 25, pairs) == 25 and launch_rows(8, 25, budget) == 17
    assert schedule_reference([1024] * 8, -1, 25, budget)[2] == schedule_reference([1024] * 8, -1, 25, pairs)[2] == 16
    assert schedule_reference([4096] * 4, -1, 21, pairs)[2] == 16
    assert schedule_reference([4096] * 4, -1, 21, budget)[2] == 8
    cfg = parse_decode_entry("8x32x2fspldkb:c2sp")[0]
    assert cfg.pair_budget and "pair_budget=True" in repr(cfg)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    assert why_not(*dims, cfg, "sm_90a") is None
    lone = dataclasses.replace(cfg, cluster=0, cluster_push=False, cluster_pairs=False)
    assert "pair_budget=True needs cluster_pairs=True" in why_not(*dims, lone, "sm_90a")
    assert why_not_schedule(dataclasses.replace(budget, budget=1)) == "ScheduleConfig.budget must be a bool, got 1"
