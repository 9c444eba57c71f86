"""Cluster pairs on the CPU (`DecodeConfig.cluster_pairs`, bench part `:c2s`; session 36): two-CTA clusters that
take their items from the live fused schedule (docs/predictions/attention.md, session 36). The GPU tier is
test_paged_cluster_pairs_gpu.py.
reference: the schedule's pairs (`_config.paired`, `schedule_reference` with `ScheduleConfig.pairs`) on random
batches: a paired batch gives every request an even item count starting on an even row, its items tile the visible
range, and the list fits the work rows; an unpaired batch (2 B > min(target, cap - B)) is scheduled exactly as
without pairs; the entry, repr and predicate; the planned lifecycle with the flag on CPU tensors.
compile: sm_90a (8 warps) and sm_120a (4 warps), bf16 and fp8: the launch has the cluster dimension, the PTX both
the DSMEM combine and the ticket (pairs of a long request, and unpaired batches), no local memory or spills.
"""

import dataclasses
import random

import pytest

from flashinfer.experimental.b12x.attention.paged._config import (
    ScheduleConfig,
    paired,
    parse_decode_entry,
    schedule_reference,
    split_schedule,
    why_not,
    why_not_schedule,
)
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import make_case
from .test_paged_cluster import ARCHS, CLUSTER_DIM_ATTR, W4, W8, _compile, paged
from .test_paged_compile import _check_binary, _ptxas_usage
from .test_paged_lean import check_cpu_lifecycle, cpu_caps


@pytest.mark.reference
@pytest.mark.parametrize("seed", range(40))
def test_paired_schedule_tiles_and_fits(seed):
    rng = random.Random(seed)
    batch = rng.choice([1, 2, 3, 4, 5, 8, 9, 16])
    lens = [rng.choice([0, 1, rng.randrange(1, 5000), rng.randrange(1, 70000)]) for _ in range(batch)]
    window_left = rng.choice([-1, -1, 0, 100, 3000])
    target, tile = rng.choice([17, 33, 66]), rng.choice([64, 128, 256])
    group = rng.choice([2, 2, 4, 8])  # pairs, or groups of 4 / 8 items a cluster
    cap = batch + target + rng.choice([0, 5]) + (group - 2) * batch * rng.choice([0, 1])
    plain = ScheduleConfig(tile, target, rng.choice([128, 256, 512]))
    pairs = dataclasses.replace(plain, pairs=True, group=group)
    work, reqs, count = schedule_reference(lens, window_left, cap, pairs)
    assert count == len(work) <= cap
    if not paired(batch, cap, pairs):
        assert (work, reqs, count) == schedule_reference(lens, window_left, cap, plain)
        return
    for b, (first, items) in enumerate(reqs):
        assert first % group == 0 and items % group == 0 and items >= group
        rows = work[first : first + items]
        assert all(row[0] == b and row[3] == 1 for row in rows)  # every paired item is a split row (no sink)
        visible = lens[b] if window_left < 0 else min(lens[b], window_left + 1)
        keys = [k for row in rows for k in range(row[1], row[2])]
        assert keys == list(range(lens[b] - visible, lens[b]))  # the groups' items tile the visible keys once
    spare = (group - 1) * batch
    assert count <= min(target, cap - spare) + spare


@pytest.mark.reference
def test_pairs_entry_repr_and_predicate():
    cfg = parse_decode_entry("8x32x2fspldk:c2s")[0]
    assert cfg.cluster == 2 and cfg.cluster_pairs and not cfg.cluster_push
    assert "cluster=2, cluster_pairs=True" in repr(cfg)
    dims = ("bfloat16", "float8_e4m3fn", 32, 8, 128, 128, 16)
    assert why_not(*dims, cfg, "sm_90a") is None
    assert "cluster_pairs=True needs cluster in (2, 4, 8)" in why_not(
        *dims, dataclasses.replace(cfg, cluster=16), "sm_90a"
    )
    groups = parse_decode_entry("8x32x2fspldk:c8sp")[0]  # groups of 8 items a cluster (session 37, opt-in)
    assert groups.cluster == 8 and groups.cluster_pairs and why_not(*dims, groups, "sm_90a") is None
    sched = split_schedule(groups, "float8_e4m3fn", 128, 8, 132, "sm_90a")
    assert (
        sched.group == 8
        and "group=8" in repr(sched)
        and "group" not in repr(split_schedule(cfg, *dims[1:2], 128, 8, 132, "sm_90a"))
    )
    assert (
        why_not_schedule(dataclasses.replace(sched, group=3)) == "ScheduleConfig.group must be one of (2, 4, 8), got 3"
    )
    pushed = parse_decode_entry("8x32x2fspldk:c2sp")[0]
    assert pushed == dataclasses.replace(cfg, cluster_push=True) and why_not(*dims, pushed, "sm_90a") is None
    assert split_schedule(cfg, "float8_e4m3fn", 128, 8, 132, "sm_90a").pairs
    with pytest.raises(ValueError):
        parse_decode_entry("8x32x2fspldk:c2ps")


def _heuristic(kv_dtype, batch, arch="sm_90a", head_dim=128, **kw):
    work = paged.default_max_work_items(batch, 8)
    c = paged.Caps(
        device="cpu", mode="decode", dtype="bfloat16", kv_dtype=kv_dtype, num_q_heads=32, num_kv_heads=8,
        head_dim_qk=head_dim, head_dim_vo=head_dim, page_size=16, max_total_q=batch, max_batch=batch,
        max_page_table_width=512, max_work_items=work, max_partial_rows=paged.default_max_partial_rows(work, 32),
        num_cache_pages=4096, **kw,
    )  # fmt: skip
    return paged.plan(c).heuristic(arch)


@pytest.mark.reference
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_plans_of_five_to_sixteen_requests_pair_by_default(kv_dtype, monkeypatch):
    """CLUSTER_PAIRS_MAX (session 37): plans of SMALL_BATCH_MAX + 1 .. CLUSTER_PAIRS_MAX requests on sm_90a at D 128
    run the 8-warp tile (bf16 8x16x2 n8, fp8 8x32x2) as pushed cluster pairs; the entry the bench timed; smaller and
    larger plans, sm_120a, other head dims, pdl='prefetch' and a caller's config keep what they had."""
    from flashinfer.experimental.b12x.attention.paged import _config

    assert _config.CLUSTER_PAIRS_MAX == 16 and _config.SMALL_BATCH_MAX == 4
    entry = {"bfloat16": "8x16x2fspldkn:c2sp", "float8_e4m3fn": "8x32x2fspldk:c2sp"}[kv_dtype]
    want = parse_decode_entry(entry)[0]
    for batch in (5, 8, 16):
        sel = _heuristic(kv_dtype, batch)
        assert sel.decode == want, batch
        assert sel.schedule == split_schedule(want, kv_dtype, 128, 8, 132, "sm_90a") and sel.schedule.pairs
        assert paired(8, paged.default_max_work_items(batch, 8), sel.schedule)  # B = 8 pairs on these tiles
        assert not paired(9, paged.default_max_work_items(batch, 8), sel.schedule)
    for batch in (1, 4, 17, 128):
        assert not _heuristic(kv_dtype, batch).decode.cluster_pairs, batch
    assert not _heuristic(kv_dtype, 8, arch="sm_120a").decode.cluster_pairs
    assert not _heuristic(kv_dtype, 8, head_dim=64).decode.cluster_pairs
    assert not _heuristic(kv_dtype, 8, pdl="prefetch").decode.cluster_pairs
    assert _heuristic(kv_dtype, 8, pdl="wait").decode == dataclasses.replace(want, pdl="wait")
    assert _heuristic(kv_dtype, 8, config=_config.DecodeConfig(8, 16, 2)).decode == _config.DecodeConfig(8, 16, 2)
    monkeypatch.setattr(_config, "CLUSTER_PAIRS_MAX", 0)  # off: the session-36 heuristic
    off = _heuristic(kv_dtype, 8).decode
    assert not off.cluster_pairs and off.warps == (8 if kv_dtype == "float8_e4m3fn" else 4)


@pytest.mark.reference
def test_cpu_lifecycle_with_pairs_matches_the_reference():
    decode = parse_decode_entry("8x16x2fspld:c2s")[0]
    case = make_case([1, 300, 33], num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16, seed=36)
    sched = split_schedule(decode, "bfloat16", 64, 2, 132, "sm_90a")
    check_cpu_lifecycle(case, paged.plan(cpu_caps(case), override=Selection(decode, sched)))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("push", [False, True], ids=["pull", "push"])
@pytest.mark.parametrize("group", [2, 8])  # pairs; groups of 8 items (session 37, opt-in)
def test_cluster_pairs_compile(arch, kv_dtype, push, group, tmp_path):
    base = W8 if arch == "sm_90a" else W4
    cfg = dataclasses.replace(base, lean_ticket=True, cluster=group, cluster_pairs=True, cluster_push=push)
    fn = _compile(cfg, arch, kv_dtype)
    ptx = _check_binary(fn, arch)
    assert CLUSTER_DIM_ATTR in str(fn.ir_module), "the launch has no cluster dimension attribute"
    assert "barrier.cluster.wait" in ptx  # the pair's DSMEM combine: peers' loads (pull) or st.async (push)
    assert (ptx.count("st.async") >= 2) if push else (ptx.count("ld.shared::cluster") >= 4)
    assert ptx.count("atom.global") == 2  # the ticket: pairs of a long request, and an unpaired batch
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * cfg.warps <= 65536, (regs, spills)


@pytest.mark.compile
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_pair_budget_compiles(arch, kv_dtype, tmp_path):
    """`DecodeConfig.pair_budget` (session 37, opt-in): the pairs' schedule with the rounding counted compiles on both
    archs without spills, and its PTX differs from the plain pairs' (the chunk's target)."""
    base = dataclasses.replace(W8 if arch == "sm_90a" else W4, lean_ticket=True, cluster=2, cluster_pairs=True)
    plain = _compile(base, arch, kv_dtype).artifacts.PTX
    fn = _compile(dataclasses.replace(base, pair_budget=True), arch, kv_dtype)
    ptx = _check_binary(fn, arch)
    assert ptx != plain and "barrier.cluster.wait" in ptx
    regs, spills = _ptxas_usage(ptx, arch, tmp_path)
    assert spills == 0 and regs * 32 * base.warps <= 65536, (regs, spills)
