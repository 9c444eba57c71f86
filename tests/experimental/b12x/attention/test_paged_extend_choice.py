"""Contract tier (CPU) of the extend kernel's live tile choice (`ExtendConfig.small`,
`_kernel_extend_schedule`): the schedule's Python mirror picks the tile on each side of the
threshold, its counts and capacity; the config's validation, string form and plan / bind sizing."""

import dataclasses
import math
import random
import re

import pytest
import torch

import b12x
from flashinfer.experimental.b12x.attention.paged._config import (
    ExtendConfig,
    default_extend_config,
    extend_item_capacity,
    extend_schedule_reference,
    parse_extend_config,
    why_not_extend,
)
from flashinfer.experimental.b12x.attention.paged._config_extend import (
    dual_extend_schedule_reference,
    live_small_tile,
    persistent_grid_rows,
    persistent_item_order,
)

from .paged_cases import make_case

pytestmark = [pytest.mark.contract, pytest.mark.usefixtures("quiet_cpu_reference")]

paged = b12x.attention.paged

LARGE = ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True)
SMALL = ExtendConfig(128, 64, 2, 2, True)
DUAL = ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True, small=SMALL)
DIMS = ("bfloat16", "bfloat16", 32, 8, 128, 128, 16)


def _cu(q_lens):
    return [0, *torch.tensor(q_lens, dtype=torch.int64).cumsum(0).tolist()]


# -- the schedule's mirror -------------------------------------------------------------------------
@pytest.mark.parametrize("below", [1, 64, 512, 768, 1024])
def test_choice_flips_at_the_token_weighted_mean_q_len(below):
    for mean in (below - 1, below, below + 1):
        if mean < 1:
            continue
        want_small = mean < below
        # uniform batches (empty requests weigh nothing): the weighted mean is their q_len
        for q_lens in ([mean] * 16, [mean, 0, 0, mean], [mean]):
            assert live_small_tile(_cu(q_lens), below) == want_small, (q_lens, below)
    assert not live_small_tile([0, 0, 0], below)  # nothing live: the large tile (nothing launches)


def test_choice_weighs_requests_by_their_tokens():
    # sum L^2 / sum L: the q_len of the request an average query token belongs to
    assert not live_small_tile(_cu([4096] + [1] * 15), 768)  # a long prefill among one-token requests
    assert live_small_tile(_cu([700] * 15 + [1000]), 768)  # (15 * 700^2 + 1000^2) / 11500 = 726
    assert not live_small_tile(_cu([512] * 16 + [4096]), 768)  # (16 * 512^2 + 4096^2) / 12288 = 1706
    assert live_small_tile(_cu([767, 768]), 768)  # 767.5: exact, no rounding to 768
    assert not live_small_tile(_cu([768, 768]), 768)
    # lens 10, 0 (a decreasing row counts as empty), 4: 116 / 14 = 8.3
    assert not live_small_tile([0, 10, 4, 8], 8) and live_small_tile([0, 10, 4, 8], 9)
    assert not live_small_tile(_cu([10**6]), 0)  # small_below 0: never the small tile
    assert live_small_tile(_cu([2**31 - 2]), 2**31 - 1)  # a huge one: always, and no int32 overflow


@pytest.mark.parametrize("group", [1, 4, 5, 8])
@pytest.mark.parametrize("seed", range(4))
def test_dual_schedule_lists_the_chosen_tile_within_capacity(group, seed):
    rng = random.Random(seed * 10 + group)
    large, small = LARGE.tokens_per_tile(group), SMALL.tokens_per_tile(group)
    for below in (0, 300, 768, 10**9):
        batch = rng.randint(1, 24)
        q_lens = [0 if rng.random() < 0.2 else rng.choice([1, small - 1, small, large + 1, 511, 512, 1024, 3000])
                  for _ in range(batch)]  # fmt: skip
        cu = _cu(q_lens)
        work, counts, chose_small = dual_extend_schedule_reference(cu, large, small, below)
        assert chose_small == live_small_tile(cu, below)
        tokens = small if chose_small else large
        assert (work, len(work)) == extend_schedule_reference(cu, tokens)
        assert counts == ((0, len(work)) if chose_small else (len(work), 0))
        # the list is sized for the small tile; the large kernel's grid for its own tile
        cap = extend_item_capacity(cu[-1], batch, DUAL.list_tokens(group))
        assert len(work) <= cap and counts[0] <= extend_item_capacity(cu[-1], batch, large)
        covered = sorted((b, t) for b, t0 in work for t in range(t0, min(t0 + tokens, q_lens[b])))
        assert covered == [(b, t) for b, n in enumerate(q_lens) for t in range(n)]


def test_bench_cases_choose_as_predicted():
    """bench_attention's extend cases (B x L, kv = q): the default threshold runs 512 small, 1k+ large."""
    for batch, q_len, want in ((16, 512, True), (16, 1024, False), (16, 2048, False), (8, 4096, False)):
        _, counts, small = dual_extend_schedule_reference(_cu([q_len] * batch), 64, 32, DUAL.small_below)
        assert small == want
        assert counts == ((0, batch * q_len // 32) if want else (batch * q_len // 64, 0))


# -- config, string form, validation ---------------------------------------------------------------
def test_config_string_form_and_fields():
    assert parse_extend_config("256x64x3x2pgiw+128x64x2x2p") == DUAL
    assert parse_extend_config("256x64x3x2pgiw+128x64x2x2p@512") == ExtendConfig(
        256, 64, 3, 2, True, stagger=True, split_issue=True, wide_copy=True, small=SMALL, small_below=512
    )
    assert DUAL.single == LARGE and DUAL.tiles() == (LARGE, SMALL) and LARGE.tiles() == (LARGE,)
    assert DUAL.list_tokens(4) == 32 and DUAL.tokens_per_tile(4) == 64 and LARGE.list_tokens(4) == 64
    assert "small=ExtendConfig(block_m=128" in repr(DUAL) and "small_below=768" in repr(DUAL)
    assert "small" not in repr(LARGE)
    cond = parse_extend_config("256x64x3x2pgiw+128x64x2x2p@1024c")
    assert cond.conditional and cond.small_below == 1024 and cond.small == SMALL
    assert cond.single == LARGE and "conditional=True" in repr(cond) and not DUAL.conditional
    over = parse_extend_config("256x64x3x2pgiw+128x64x2x2p@600o")
    assert over.overlap and not over.conditional and over.small_below == 600 and "overlap=True" in repr(over)
    assert over.single == LARGE and over.pdl_modes() == ("trigger", "dependent")
    assert DUAL.pdl_modes() == cond.pdl_modes() == ("none", "none") and LARGE.pdl_modes() == ("none",)
    for tail in (
        "@x",
        "@c",
        "@5cc",
        "@5oc",
        "@5co",
        "@",
        "@5 ",
        "@5rs",
        "@5rR",
        "@5so",
        "@5ss",
        "@5r ",
        "@5ls",
        "@5rl",
    ):
        with pytest.raises(ValueError, match=re.escape("'@N[c|o][s][l][r|R]' (small_below, conditional / overlap,")):
            parse_extend_config("256x64x3x2pgiw+128x64x2x2p" + tail)
    with pytest.raises(ValueError, match=re.escape("like 128x64x2x1")):
        parse_extend_config("256x64x3x2pgiw+128x64")


def test_validation_names_the_failing_tile():
    assert why_not_extend(*DIMS, DUAL, "sm_90a") is None
    # sm_120a: the large tile does not fit its 99 KB (the plan keeps one kernel there)
    assert "bytes of shared memory" in why_not_extend(*DIMS, DUAL, "sm_120a")
    both_fit = ExtendConfig(128, 64, 2, 2, True, small=ExtendConfig(64, 64, 2, 1))
    assert why_not_extend(*DIMS, both_fit, "sm_120a") is None
    bad_small = ExtendConfig(128, 64, 2, 2, small=ExtendConfig(48, 64, 2, 1))
    assert why_not_extend(*DIMS, bad_small, "sm_90a").startswith("small: config out of range")
    nested = ExtendConfig(128, 64, 2, 2, small=DUAL)
    assert "without its own small" in why_not_extend(*DIMS, nested, "sm_90a")
    for flag in ("conditional", "overlap"):
        lone = ExtendConfig(128, 64, 2, 2, **{flag: True})
        assert "conditional (CUDA-graph if-nodes) and overlap need small" in why_not_extend(*DIMS, lone, "sm_90a")
        odd = ExtendConfig(128, 64, 2, 2, small=SMALL, **{flag: 1})
        assert f"{flag} must be a bool" in why_not_extend(*DIMS, odd, "sm_90a")
    both = ExtendConfig(128, 64, 2, 2, small=SMALL, conditional=True, overlap=True)
    assert "exclude each other" in why_not_extend(*DIMS, both, "sm_90a")
    for below in (-1, 2**31, True, 1.5):
        cfg = ExtendConfig(128, 64, 2, 2, small=SMALL, small_below=below)
        assert "small_below must be an int" in why_not_extend(*DIMS, cfg, "sm_90a")


def test_default_follows_its_switches(monkeypatch):
    """The sm_90a bf16 extend default is the 256-row tile, with early_pages per EARLY_PAGES, the
    ranked list per RANKED_LIST (single tile only) and the live choice per LIVE_TILE_CHOICE (its
    if-node form per LIVE_TILE_CONDITIONAL, else '@768o');
    whatever the switches say today (the lead flips them after an H200 run), and every combination."""
    from flashinfer.experimental.b12x.attention.paged import _config_extend as ce

    today = default_extend_config("bfloat16", 128, "sm_90a")
    ranked = ce.RANKED_LIST and not ce.LIVE_TILE_CHOICE
    assert today.single == dataclasses.replace(LARGE, early_pages=ce.EARLY_PAGES, ranked=ranked)
    assert (today.small is not None) == ce.LIVE_TILE_CHOICE
    monkeypatch.setattr(ce, "RANKED_LIST", True)  # the single tile's list only: the dual keeps its order
    launch = dict(overlap=True)  # '@768o', the H200's choice (21:16, session 8)
    assert ce.LIVE_TILE_LAUNCH == launch
    for early in (False, True):
        monkeypatch.setattr(ce, "EARLY_PAGES", early)
        monkeypatch.setattr(ce, "LIVE_TILE_CHOICE", False)
        want = dataclasses.replace(LARGE, early_pages=early, ranked=True)
        assert default_extend_config("bfloat16", 128, "sm_90a") == want
        monkeypatch.setattr(ce, "LIVE_TILE_CHOICE", True)
        for conditional in (False, True):
            monkeypatch.setattr(ce, "LIVE_TILE_CONDITIONAL", conditional)
            want = dataclasses.replace(DUAL, early_pages=early, **({"conditional": True} if conditional else launch))
            assert default_extend_config("bfloat16", 128, "sm_90a") == want
            assert why_not_extend(*DIMS, want, "sm_90a") is None
    for args in (("bfloat16", 128, "sm_120a"), ("float8_e4m3fn", 128, "sm_90a"), ("bfloat16", 256, "sm_90a"),
                 ("bfloat16", 128, "sm_90a", "verify")):  # fmt: skip
        assert default_extend_config(*args).small is None, args
        assert not default_extend_config(*args).early_pages and not default_extend_config(*args).ranked, args


# -- plan and bind ---------------------------------------------------------------------------------
def caps(**kw):
    base = dict(
        device="cpu", mode="extend", dtype="bfloat16", kv_dtype="bfloat16", num_q_heads=32, num_kv_heads=8,
        head_dim_qk=128, head_dim_vo=128, page_size=16, max_total_q=1000, max_batch=6, max_page_table_width=64,
        max_work_items=1, max_partial_rows=1, num_cache_pages=400, config=DUAL,
    )  # fmt: skip
    base.update(kw)
    return paged.Caps(**base)


def test_plan_compiles_both_tiles_and_sizes_the_list_for_the_small_one():
    p = paged.plan(caps())
    sel = p.heuristic("sm_90a")
    assert sel.extend == DUAL
    (sched, sched_args), (k1, args1), (k2, args2) = p.kernels(sel, "sm_90a")
    assert sched.op == "attention.paged.dual_extend_schedule" and sched_args == (64, 32, 768, "sm_90a")
    assert k1.op == k2.op == "attention.paged.extend"
    # LARGE: the single plan's key; overlap: the large kernel lets the small one launch early
    assert args1 == (*DIMS, LARGE, "sm_90a", "none") and args2 == (*DIMS, SMALL, "sm_90a", "none")
    over = paged.plan(caps(config=dataclasses.replace(DUAL, overlap=True)))
    _, (_, args1), (_, args2) = over.kernels(over.heuristic("sm_90a"), "sm_90a")
    assert args1 == (*DIMS, LARGE, "sm_90a", "trigger") and args2 == (*DIMS, SMALL, "sm_90a", "dependent")
    single = paged.plan(caps(config=LARGE))
    assert len(single.kernels(single.heuristic("sm_90a"), "sm_90a")) == 2
    with pytest.raises(NotImplementedError, match="bytes of shared memory"):
        p.kernels(sel, "sm_120a")
    tiles = {s.name: s.shape for s in p.scratch_specs(sel, "cpu")}["tiles"]
    assert tiles == (extend_item_capacity(1000, 6, 32), 2)
    one = {s.name: s.shape for s in single.scratch_specs(None, "cpu")}["tiles"]
    assert one == (extend_item_capacity(1000, 6, 64), 2)


def test_bind_sizes_each_kernels_grid_and_the_reference_runs():
    p = paged.plan(caps())
    b12x.PreparationSession("cpu").prepare([p])
    q_lens, kv_lens = [300, 0, 17, 1, 500], [300, 9, 400, 1, 900]
    case = make_case(kv_lens, q_lens, num_q_heads=32, num_kv_heads=8, head_dim=128, width=64, seed=3)
    binding = paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q)  # fmt: skip
    total, batch = sum(q_lens), len(q_lens)
    assert binding.work.shape[0] == extend_item_capacity(total, batch, 32)
    counts, flags, large_work, large_count, small_count, large_pred, small_pred = binding.extend_views
    assert counts.shape == (4,) and large_count.data_ptr() == counts.data_ptr()  # items, items, counters
    assert large_count.shape == small_count.shape == (1,)  # not persistent: the items only
    assert small_count.data_ptr() == counts.data_ptr() + 4
    assert flags.dtype == torch.uint8 and flags.shape == (2,)
    for i, pred in enumerate((large_pred, small_pred)):  # the if-nodes' predicates: 0-d bools on the flags
        assert pred.dtype == torch.bool and pred.dim() == 0 and pred.data_ptr() == flags.data_ptr() + i
    assert large_work.shape[0] == extend_item_capacity(total, batch, 64)
    assert large_work.data_ptr() == binding.work.data_ptr()
    out, lse = paged.run(binding=binding)
    want_out, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    torch.testing.assert_close(out, want_out.to(out.dtype), rtol=0, atol=0)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)
    single = paged.plan(caps(config=LARGE))
    b12x.PreparationSession("cpu").prepare([single])
    plain = paged.bind(single, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                       cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q)  # fmt: skip
    assert len(plain.extend_views) == 1 and plain.work.shape[0] == extend_item_capacity(total, batch, 64)


def test_caps_grid_limit_counts_the_small_tile():
    # 65535 rows: the large tile's list fits, the small one's (twice the items) does not
    total = 64 * (65535 - 6)
    paged.plan(caps(config=LARGE, max_total_q=total))
    with pytest.raises(ValueError, match=re.escape("query tiles of 32 tokens, more than the 65535")):
        paged.plan(caps(max_total_q=total))
    assert math.ceil(total / 32) + 6 > 65535


def test_bench_times_the_choice_beside_the_single_tiles():
    from benchmarks.experimental.b12x import bench_attention as B

    entries = ["heuristic", "128x64x2x2p", "256x64x3x2pgiw+128x64x2x2p@768", "256x64x3x2pgiw+128x64x2x2p@768c",
               "256x64x3x2pgiw+128x64x2x2p@768o", "256x64x3x2pgiw+128x64x2x2p@0", "256x64x3x2pgiw+128x64x2x2p@1000000000c"]  # fmt: skip
    args = B.parse_args(["--mode", "extend", "--extend-configs", *entries])
    assert args.extend_configs == entries
    assert B.parse_extend_config(entries[3]) == dataclasses.replace(DUAL, conditional=True)
    for bad in ("256x64x3x2pgiw+48x64x2x1", "256x64x3x2pgiw+128x64x2x2p@768x", "256x64x3x2pgiw+128x64x2x2p+64x64x2x1"):
        with pytest.raises(SystemExit):
            B.parse_args(["--mode", "extend", "--extend-configs", bad])


# -- small_first and persistent (session 8: the dead grid's cost) ----------------------------------
def test_small_first_and_persistent_string_form_and_fields():
    cfg = parse_extend_config("256x64x3x2pgiw+128x64x2x2p@768osr")
    assert cfg == dataclasses.replace(DUAL, overlap=True, small_first=True, persistent=1)
    assert "small_first=True" in repr(cfg) and "persistent=1" in repr(cfg) and cfg.single == LARGE
    # overlap: the kernel launched first triggers, the other is the programmatic dependent
    assert cfg.pdl_modes() == ("dependent", "trigger") and cfg.persistent_tiles() == (False, True)
    both = parse_extend_config("256x64x3x2pgiw+128x64x2x2p@0R")
    assert both.persistent == 2 and not both.small_first and both.persistent_tiles() == (True, True)
    assert both.pdl_modes() == ("none", "none") and both.small_below == 0
    assert parse_extend_config("256x64x3x2pgiw+128x64x2x2p@768cs") == dataclasses.replace(
        DUAL, conditional=True, small_first=True
    )
    assert DUAL.persistent_tiles() == (False, False) and LARGE.persistent_tiles() == (False,)
    assert "small_first" not in repr(DUAL) and "persistent" not in repr(DUAL)


def test_small_first_and_persistent_are_validated():
    assert why_not_extend(*DIMS, dataclasses.replace(DUAL, small_first=True, persistent=2), "sm_90a") is None
    for field, value in (("small_first", True), ("persistent", 1), ("early_launch", True)):
        lone = dataclasses.replace(LARGE, **{field: value})
        assert "small_first, early_launch and persistent need small" in why_not_extend(*DIMS, lone, "sm_90a")
    assert "early_launch must be a bool" in why_not_extend(*DIMS, dataclasses.replace(DUAL, early_launch=1), "sm_90a")
    both = dataclasses.replace(DUAL, conditional=True, early_launch=True)
    assert "conditional (if-nodes) and early_launch" in why_not_extend(*DIMS, both, "sm_90a")
    assert "small_first must be a bool" in why_not_extend(*DIMS, dataclasses.replace(DUAL, small_first=1), "sm_90a")
    for bad in (3, -1, True, 1.0):
        reason = why_not_extend(*DIMS, dataclasses.replace(DUAL, persistent=bad), "sm_90a")
        assert "persistent must be 0, 1 (the small kernel) or 2 (both)" in reason, bad


def test_resident_ctas_are_one_wave_of_each_tile():
    from flashinfer.experimental.b12x.attention.paged._config_extend import resident_ctas

    # 255 registers a thread: 4 warps x 2 CTAs, or one 8-warp CTA, fill the 64k register file
    assert resident_ctas("bfloat16", 128, 128, SMALL, "sm_90a") == 2
    assert resident_ctas("bfloat16", 128, 128, LARGE, "sm_90a") == 1
    assert resident_ctas("float8_e4m3fn", 128, 128, SMALL, "sm_90a") == 2
    # sm_120a's 99 KB: one 128-row bf16 tile (97 KB) an SM
    assert resident_ctas("bfloat16", 128, 128, SMALL, "sm_120a") == 1
    assert resident_ctas("bfloat16", 128, 128, ExtendConfig(64, 32, 2, 1), "sm_120a") == 2  # 49 KB


def test_plan_passes_one_wave_to_persistent_kernels_and_keeps_the_large_key():
    over = paged.plan(caps(config=dataclasses.replace(DUAL, overlap=True, small_first=True, persistent=1)))
    sms = over._sm_count()
    (sched, sched_args), (_, args1), (_, args2) = over.kernels(over.heuristic("sm_90a"), "sm_90a")
    assert sched_args == (64, 32, 768, "sm_90a")
    # the large kernel: the single-tile plan's key (no persistent argument), the dependent launch
    assert args1 == (*DIMS, LARGE, "sm_90a", "dependent")
    assert args2 == (*DIMS, SMALL, "sm_90a", "trigger", 2 * sms)  # 2 CTAs an SM of the small tile
    both = paged.plan(caps(config=dataclasses.replace(DUAL, persistent=2)))
    _, (_, args1), (_, args2) = both.kernels(both.heuristic("sm_90a"), "sm_90a")
    assert args1 == (*DIMS, LARGE, "sm_90a", "none", sms) and args2 == (*DIMS, SMALL, "sm_90a", "none", 2 * sms)


@pytest.mark.parametrize("persistent", [1, 2])
def test_bind_gives_persistent_kernels_their_items_and_counter(persistent):
    p = paged.plan(caps(config=dataclasses.replace(DUAL, persistent=persistent, small_first=True)))
    b12x.PreparationSession("cpu").prepare([p])
    q_lens, kv_lens = [300, 0, 17], [300, 9, 400]
    case = make_case(kv_lens, q_lens, num_q_heads=32, num_kv_heads=8, head_dim=128, width=64, seed=5)
    binding = paged.bind(p, q=case.q, k_cache=case.k_cache, v_cache=case.v_cache, page_table=case.page_table,
                         cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q)  # fmt: skip
    counts, _, _, large_count, small_count, _, _ = binding.extend_views
    base = counts.data_ptr()
    # (items, counter) of each kernel: count[k::2], the dual schedule's count[k] and count[k + 2]
    assert small_count.shape == (2,) and small_count.stride() == (2,) and small_count.data_ptr() == base + 4
    if persistent == 2:
        assert large_count.shape == (2,) and large_count.stride() == (2,) and large_count.data_ptr() == base
    else:
        assert large_count.shape == (1,) and large_count.data_ptr() == base
    out, lse = paged.run(binding=binding)  # CPU: the reference backend
    want_out, want_lse = paged.paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    torch.testing.assert_close(out, want_out.to(out.dtype), rtol=0, atol=0)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)


def test_persistent_items_run_once_in_any_finishing_order():
    """The persistent kernel's draw (Python mirror): every (work row, KV head) pair below the live
    count starts exactly once, whatever order CTAs finish in; the first wave is the one-item grid's
    first CTAs; a dead kernel (count 0) starts none; a grid of more rows than items is that grid."""
    hkv = 8
    assert persistent_grid_rows(528, 264, hkv) == 33 and persistent_grid_rows(20, 264, hkv) == 20
    assert persistent_grid_rows(0, 264, hkv) == 1 and persistent_grid_rows(272, 132, hkv) == 17  # 132 -> 136 CTAs
    for seed, (count, rows) in enumerate(((0, 33), (5, 33), (200, 33), (1000, 17), (40, 200))):
        rng = random.Random(seed)
        grid = persistent_grid_rows(rows, 264, hkv)
        for finish in (lambda r: r[0], lambda r: r[-1], rng.choice):
            order = persistent_item_order(count, grid, hkv, finish)
            assert sorted(order) == [(i, k) for i in range(count) for k in range(hkv)], (count, rows)
            first = [(i, k) for i in range(min(count, grid)) for k in range(hkv)]
            assert order[: len(first)] == first  # heads fastest, as the hardware launches the grid


def test_early_pages_string_form_and_validation():
    cfg = parse_extend_config("256x64x3x2pgiwe")
    assert cfg == dataclasses.replace(LARGE, early_pages=True) and "early_pages=True" in repr(cfg)
    assert "early_pages" not in repr(LARGE) and why_not_extend(*DIMS, cfg, "sm_90a") is None
    dual = parse_extend_config("256x64x3x2pgiwe+128x64x2x2p@768osr")
    assert dual.single == cfg and dual.small == SMALL and dual.persistent == 1
    assert parse_extend_config("128x64x2x2pes2") == ExtendConfig(128, 64, 2, 2, True, early_pages=True, sub_tiles=2)
    reason = why_not_extend(*DIMS, ExtendConfig(128, 64, 2, 2, early_pages=True), "sm_90a")
    assert "early_pages needs page_prefetch" in reason
    assert "early_pages must be a bool" in why_not_extend(*DIMS, dataclasses.replace(cfg, early_pages=1), "sm_90a")
    with pytest.raises(ValueError, match=re.escape("like 128x64x2x1")):
        parse_extend_config("256x64x3x2pgiew")  # flags in their order only


def test_early_launch_chains_the_first_kernel_to_the_schedule():
    cfg = parse_extend_config("256x64x3x2pgiw+128x64x2x2p@768oslr")
    assert cfg == dataclasses.replace(DUAL, overlap=True, small_first=True, early_launch=True, persistent=1)
    assert "early_launch=True" in repr(cfg) and cfg.single == LARGE
    # the first launched waits for the schedule (and with overlap lets the second start)
    assert cfg.pdl_modes() == ("dependent", "wait+trigger")
    assert dataclasses.replace(cfg, small_first=False).pdl_modes() == ("wait+trigger", "dependent")
    assert dataclasses.replace(cfg, overlap=False).pdl_modes() == ("none", "wait")
    assert dataclasses.replace(cfg, overlap=False, small_first=False).pdl_modes() == ("wait", "none")
    p = paged.plan(caps(config=cfg))
    (sched, sched_args), (_, args1), (_, args2) = p.kernels(p.heuristic("sm_90a"), "sm_90a")
    assert sched_args == (64, 32, 768, "sm_90a", True)  # the schedule triggers at its start
    assert args1 == (*DIMS, LARGE, "sm_90a", "dependent")
    assert args2 == (*DIMS, SMALL, "sm_90a", "wait+trigger", 2 * p._sm_count())
    plain = paged.plan(caps(config=dataclasses.replace(cfg, early_launch=False)))
    assert plain.kernels(plain.heuristic("sm_90a"), "sm_90a")[0][1] == (64, 32, 768, "sm_90a")


def test_ranked_list_is_a_permutation_in_class_order():
    """ranked (tile flag 'k', single-tile plans): the Python mirror of `_kernel_extend_ranked` lists
    the plain schedule's items by class min(rank, 63): every request's last tile first; for a batch
    of one q_len that is the longest-first order (each tile's keys never grow along the list)."""
    from flashinfer.experimental.b12x.attention.paged._config_extend import (
        RANK_CLASSES,
        rank_class,
        ranked_extend_schedule_reference,
    )

    assert RANK_CLASSES == 64
    rng = random.Random(3)
    for _ in range(20):
        q_lens = [rng.choice([0, 1, 31, 32, 33, 64, 500, 4096, 5000]) for _ in range(rng.randint(1, 12))]
        cu = _cu(q_lens)
        for tq in (16, 32, 64):
            plain, count = extend_schedule_reference(cu, tq)
            work, n = ranked_extend_schedule_reference(cu, tq)
            assert n == count and sorted(work) == sorted(plain)
            classes = [rank_class(cu, w, tq) for w in work]
            assert classes == sorted(classes) and max(classes, default=0) <= 63
    work, _ = ranked_extend_schedule_reference(_cu([512] * 4), 64)
    assert work[:4] == [(b, 448) for b in range(4)] and work[-4:] == [(b, 0) for b in range(4)]
    keys = [t0 + 64 for _, t0 in work]  # causal, no prefix: the keys a tile sees
    assert keys == sorted(keys, reverse=True)
    cfg = parse_extend_config("256x64x3x2pgiwek")
    assert cfg == dataclasses.replace(LARGE, early_pages=True, ranked=True) and "ranked=True" in repr(cfg)
    assert why_not_extend(*DIMS, cfg, "sm_90a") is None
    reason = why_not_extend(*DIMS, dataclasses.replace(DUAL, ranked=True), "sm_90a")
    assert "ranked is for single-tile plans" in reason
    reason = why_not_extend(*DIMS, dataclasses.replace(DUAL, small=dataclasses.replace(SMALL, ranked=True)), "sm_90a")
    assert "ranked is for single-tile plans" in reason
    assert "ranked must be a bool" in why_not_extend(*DIMS, dataclasses.replace(LARGE, ranked=1), "sm_90a")
