"""The live small-batch decode kernel (session 37, `_decode_choice.LIVE_SMALL_BATCH`, `Selection.small`): a plan for
more than CLUSTER_PAIRS_MAX requests on sm_90a at D 128 also selects the kernel a plan for CLUSTER_PAIRS_MAX would run
(the 8-warp tile as cluster pairs) for live batches of at most LIVE_SMALL_BATCH requests; run() picks by the live
batch (a shape, no host read). The switch ships at the measured bound (16) since session 39's GPU run; these tests
set it themselves. The GPU tier is test_paged_cluster_pairs_gpu.py (`-k live_small`).
reference: which plans get one and which not, its kernel listed last, the work rows it needs, the override checks,
the CPU lifecycle of such a plan.
"""

import dataclasses
import re

import pytest

from flashinfer.experimental.b12x.attention.paged import _config, _decode_choice
from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, parse_decode_entry, split_schedule
from flashinfer.experimental.b12x.attention.paged.api import Selection

from .paged_cases import make_case
from .test_paged_cluster import paged
from .test_paged_lean import check_cpu_lifecycle

pytestmark = pytest.mark.reference
ENTRY = {"bfloat16": "8x16x2fspldkn:c2sp", "float8_e4m3fn": "8x32x2fspldk:c2sp"}


def _caps(kv_dtype, batch, head_dim=128, **kw):
    work = paged.default_max_work_items(batch, 8)
    return paged.Caps(
        device="cpu", mode="decode", dtype="bfloat16", kv_dtype=kv_dtype, num_q_heads=32, num_kv_heads=8,
        head_dim_qk=head_dim, head_dim_vo=head_dim, page_size=16, max_total_q=batch, max_batch=batch,
        max_page_table_width=512, max_work_items=work, max_partial_rows=paged.default_max_partial_rows(work, 32),
        num_cache_pages=4096, **kw,
    )  # fmt: skip


@pytest.fixture
def live_small(monkeypatch):
    """The switch at the measured bound (it ships there since session 39; the tests below hold if it moves)."""
    monkeypatch.setattr(_decode_choice, "LIVE_SMALL_BATCH", _decode_choice.LIVE_SMALL_BATCH_MEASURED)


def test_the_switch_ships_on_since_its_gpu_run():
    """Session 39's run (s38_a / s38_b on 614558d) turned it on at the measured bound."""
    assert _decode_choice.LIVE_SMALL_BATCH == _decode_choice.LIVE_SMALL_BATCH_MEASURED == 16
    assert paged.plan(_caps("bfloat16", 64)).heuristic("sm_90a").small is not None


@pytest.mark.usefixtures("live_small")
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_plans_above_sixteen_requests_carry_the_pairs_kernel_for_small_live_batches(kv_dtype):
    assert _decode_choice.LIVE_SMALL_BATCH == 16 == _config.CLUSTER_PAIRS_MAX
    want = parse_decode_entry(ENTRY[kv_dtype])[0]
    for batch in (17, 32, 128, 129):
        p = paged.plan(_caps(kv_dtype, batch))
        sel = p.heuristic("sm_90a")
        assert sel.small == Selection(want, split_schedule(want, kv_dtype, 128, 8, 132, "sm_90a")), batch
        assert sel.small_below == 16 and not sel.decode.cluster_pairs
        kernels = p.kernels(sel, "sm_90a")
        assert kernels[-1][1][-3:] == (want, "sm_90a", sel.small.schedule)  # listed last: run() pops it
        assert len(kernels) == (2 if batch <= 128 else 3)  # one-launch main (or schedule + decode) + small
    for batch in (1, 8, 16):
        assert paged.plan(_caps(kv_dtype, batch)).heuristic("sm_90a").small is None
    assert paged.plan(_caps(kv_dtype, 64)).heuristic("sm_120a").small is None
    assert paged.plan(_caps(kv_dtype, 64, head_dim=64)).heuristic("sm_90a").small is None
    assert paged.plan(_caps(kv_dtype, 64, pdl="prefetch")).heuristic("sm_90a").small is None
    assert paged.plan(_caps(kv_dtype, 64, config=DecodeConfig(4, 16, 2))).heuristic("sm_90a").small is None
    waiting = paged.plan(_caps(kv_dtype, 64, pdl="wait")).heuristic("sm_90a").small
    assert waiting.decode == dataclasses.replace(want, pdl="wait")


@pytest.mark.usefixtures("live_small")
def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(_decode_choice, "LIVE_SMALL_BATCH", 2)  # a smaller bound: still only plans above 16
    assert paged.plan(_caps("bfloat16", 4)).heuristic("sm_90a").small is None
    assert paged.plan(_caps("bfloat16", 16)).heuristic("sm_90a").small is None
    assert paged.plan(_caps("bfloat16", 17)).heuristic("sm_90a").small_below == 2
    monkeypatch.setattr(_decode_choice, "LIVE_SMALL_BATCH", 0)
    assert paged.plan(_caps("bfloat16", 64)).heuristic("sm_90a").small is None
    monkeypatch.setattr(_decode_choice, "LIVE_SMALL_BATCH", 16)
    monkeypatch.setattr(_config, "CLUSTER_PAIRS_MAX", 0)  # no pairs at 16 requests: nothing to gain
    assert paged.plan(_caps("bfloat16", 64)).heuristic("sm_90a").small is None


def _override(decode, small, below):
    sched = split_schedule(decode, "bfloat16", 128, 8, 132, "sm_90a")
    return Selection(decode, sched, small=small, small_below=below)


def test_override_checks_name_the_small_part():
    c = _caps("bfloat16", 64)
    main = parse_decode_entry("4x16x3fspldkn")[0]
    pairs = parse_decode_entry("8x16x2fspldkn:c2sp")[0]
    small = Selection(pairs, split_schedule(pairs, "bfloat16", 128, 8, 132, "sm_90a"))
    assert paged.plan(c, override=_override(main, small, 16)).override.small == small
    bad = [
        (_override(main, small, 0), "small_below must be in 1..min(max_batch - 1, FUSED_SCHEDULE_MAX_BATCH) (63)"),
        (_override(main, small, 64), "small_below must be in 1..min(max_batch - 1, FUSED_SCHEDULE_MAX_BATCH) (63)"),
        (_override(main, small, True), "small_below must be an int"),
        (_override(main, "x", 8), "override.small must be a Selection"),
        (_override(main, _override(pairs, small, 4), 8), "without a small of its own"),
        (_override(main, Selection(DecodeConfig(8, 16, 2), small.schedule), 8), "must be a one-launch DecodeConfig"),
        (_override(main, Selection(dataclasses.replace(pairs, warps=3), small.schedule), 8), "override.small"),
    ]
    for override, text in bad:
        with pytest.raises(ValueError, match=re.escape(text)):
            paged.plan(c, override=override)
    big = _caps("bfloat16", 256)  # a two-launch plan: its small kernel (one launch) scans at most 128 requests
    unfused = parse_decode_entry("4x16x3fk")[0]  # the fused merge, the schedule a launch of its own
    with pytest.raises(ValueError, match=re.escape("FUSED_SCHEDULE_MAX_BATCH) (128), got 200")):
        paged.plan(big, override=_override(unfused, small, 200))
    assert paged.plan(big, override=_override(unfused, small, 128)).override.small_below == 128


@pytest.mark.usefixtures("live_small")
def test_bind_leaves_work_rows_for_both_kernels():
    p = paged.plan(_caps("float8_e4m3fn", 64))
    sel = p.heuristic("sm_90a")
    assert sel.small.schedule.target_items < sel.schedule.target_items  # the small kernel needs no more rows
    case = make_case([1, 300, 33], num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16, seed=37)
    pairs = parse_decode_entry("8x16x2fspld:c2s")[0]
    main = parse_decode_entry("4x16x3fspld")[0]
    work = paged.default_max_work_items(40, 2)
    caps = paged.Caps(
        device="cpu", mode="decode", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=8, num_kv_heads=2,
        head_dim_qk=64, head_dim_vo=64, page_size=16, max_total_q=40, max_batch=40,
        max_page_table_width=case.page_table.shape[1], max_work_items=work,
        max_partial_rows=paged.default_max_partial_rows(work, 8), num_cache_pages=case.k_cache.shape[0],
    )  # fmt: skip
    small = Selection(
        pairs, dataclasses.replace(split_schedule(pairs, "bfloat16", 64, 2, 132, "sm_90a"), target_items=80)
    )
    override = Selection(main, split_schedule(main, "bfloat16", 64, 2, 132, "sm_90a"), small=small, small_below=16)
    check_cpu_lifecycle(case, paged.plan(caps, override=override))
