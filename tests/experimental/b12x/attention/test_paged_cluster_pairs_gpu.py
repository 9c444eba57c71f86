"""Cluster pairs on the GPU (`DecodeConfig.cluster_pairs`, bench part `:c2s`; CPU tiers in
test_paged_cluster_pairs.py): against the fp32 reference on NaN-poisoned outputs (test_paged_gpu's rule), twice
bit-equal (a DSMEM or ticket race would show as a changed bit or a NaN), within the reference budget of the same
config without clusters, the tickets back at zero; paired batches of one pair a request (the DSMEM combine writes
the output) and of several (pair rows, then the ticket merge), empty and one-key requests (an empty second item),
sinks and windows, and unpaired batches (B = 9, 16: the kernel's ticket merge in clusters of two); CUDA-graph
replay with new lengths; the pair merged by peers' DSMEM loads (pull) and by st.async pushes (`cluster_push`); the
heuristic's pairs (session 37) in a plan for 16 requests serving 3, 8 and 12, page sizes 16 and 64.
"""

import dataclasses

import pytest
import torch

from flashinfer.experimental.b12x._lib.arch import target_arch
from flashinfer.experimental.b12x.attention.paged import _decode_choice

from .paged_cases import make_case
from .test_paged_cluster_gpu import LENS, base_config, cluster_plan, run_checked
from .test_paged_gpu import DEV, caps_for, prepared, replay_with_new_lengths

pytestmark = pytest.mark.gpu

PAIR_LENS = {**LENS, "b2-1k": [1024, 1000], "b8-1k": [1024] * 8, "b9-ragged": [0, 1, 17, 1000, 5000, 4097, 65, 300, 9],
             "b16-2k": [2048] * 16}  # fmt: skip


PUSH = pytest.mark.parametrize("push", [False, True], ids=["pull", "push"])  # the pair's DSMEM merge


def checked_twice(plan, case, **kw):
    """run_checked twice: the same bits both times (a DSMEM or ticket race would show as a changed bit or a NaN)."""
    out, lse = run_checked(plan, case, **kw)
    again, again_lse = run_checked(plan, case, **kw)
    assert torch.equal(out, again) and torch.equal(lse.nan_to_num(), again_lse.nan_to_num())
    return out, lse


def pairs_config(kv_dtype, push, group=2):
    return dataclasses.replace(base_config(kv_dtype, cluster=group, push=push), lean_ticket=True, cluster_pairs=True)


GROUP_LENS = {k: PAIR_LENS[k] for k in ("b1-1k", "b1-8k", "b1-0", "b1-33", "b4-ragged", "b2-1k", "b9-ragged")}


@pytest.mark.parametrize("group", [4, 8])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("lens", list(GROUP_LENS))
def test_groups_of_four_and_eight_match_reference(kv_dtype, lens, group):
    """Groups of C items a cluster (session 37, opt-in: cluster_pairs with cluster 4 / 8, pushed): one group a
    request writes the output, several write group rows that the ticket merges; a batch too large to group (C B >
    min(target, work rows - (C - 1) B): B >= 2 with C = 8, B >= 3 with C = 4 at the bound work rows) runs the ticket
    merge in clusters of C; sinks; twice bit-equal; within the plain config's budget."""
    case = make_case(GROUP_LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 37 + group)  # fmt: skip
    cfg = pairs_config(kv_dtype, True, group)
    plan = cluster_plan(case, kv_dtype, cfg)
    assert plan.state.selection.decode.cluster == group  # the kernel's schedule groups by the cluster size
    for sinks in (None, torch.randn(32, device=DEV) * 3):
        out, lse = checked_twice(plan, case, sinks=sinks)
    plain = dataclasses.replace(cfg, cluster=0, cluster_pairs=False, cluster_push=False)
    plain_out, _ = run_checked(cluster_plan(case, kv_dtype, plain), case, sinks=sinks)
    torch.testing.assert_close(out.float(), plain_out.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("group", [4, 8])
def test_groups_windows_and_graph_replay(group):
    """Groups of C in a plan for 16 requests serving 6 under windows and sinks, then graph replay of 8 with new
    lengths (fp8 KV)."""
    lens = [0, 1, 5000, 33, 20000, 17]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=torch.float8_e4m3fn,
                     extra_pages=50, width=1400, device=DEV, seed=63)  # fmt: skip
    plan = cluster_plan(case, "float8_e4m3fn", pairs_config("float8_e4m3fn", True, group), max_batch=16)
    sinks = torch.randn(32, device=DEV) * 3
    for window_left in (-1, 0, 100, 4096):
        run_checked(plan, case, window_left=window_left, sinks=sinks)
    full = make_case([32000] * 8, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=torch.float8_e4m3fn, width=2100, device=DEV, seed=64)  # fmt: skip
    replay_with_new_lengths(cluster_plan(full, "float8_e4m3fn", pairs_config("float8_e4m3fn", True, group)), full,
                            seed=37, steps=3)  # fmt: skip


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("lens", list(PAIR_LENS))
def test_pairs_match_reference_and_the_ticket_merge(kv_dtype, lens, push):
    case = make_case(PAIR_LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 36)  # fmt: skip
    cfg = pairs_config(kv_dtype, push)
    plan = cluster_plan(case, kv_dtype, cfg)
    for sinks in (None, torch.randn(32, device=DEV) * 3):
        out, lse = checked_twice(plan, case, sinks=sinks)
    plain = dataclasses.replace(cfg, cluster=0, cluster_pairs=False, cluster_push=False)
    plain_out, plain_lse = run_checked(cluster_plan(case, kv_dtype, plain), case, sinks=sinks)
    torch.testing.assert_close(out.float(), plain_out.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(torch.isfinite(lse), torch.isfinite(plain_lse))


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_pairs_windows_in_a_wider_plan(kv_dtype, push):
    """A plan of 16 requests run with 6 (paired) under sliding windows, sinks on a wider page table."""
    lens = [0, 1, 5000, 33, 20000, 17]
    case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, kv_dtype=getattr(torch, kv_dtype),
                     extra_pages=50, width=1400, device=DEV, seed=61)  # fmt: skip
    plan = cluster_plan(case, kv_dtype, pairs_config(kv_dtype, push), max_batch=16)
    sinks = torch.randn(32, device=DEV) * 3
    for window_left in (-1, 0, 100, 4096):
        run_checked(plan, case, window_left=window_left, sinks=sinks)


@PUSH
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("batch", [8, 16])  # paired, unpaired
def test_pairs_graph_replay_with_new_lengths(kv_dtype, batch, push):
    full = make_case([32000] * batch, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=62)  # fmt: skip
    replay_with_new_lengths(cluster_plan(full, kv_dtype, pairs_config(kv_dtype, push)), full, seed=36, steps=3)


SERVING_LENS = {"b8-paired": [1024, 0, 1, 2048, 777, 32768, 4097, 300], "b3-paired": [0, 1, 5000],
                "b12-unpaired": [1024] * 5 + [0, 1, 17, 9000, 65, 300, 2048]}  # fmt: skip


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("lens", list(SERVING_LENS))
def test_the_default_pairs_of_a_serving_plan(kv_dtype, page_size, lens):
    """The heuristic's cluster pairs (`_config.CLUSTER_PAIRS_MAX`, session 37: plans of 5-16 requests, sm_90a, D 128;
    bf16 8x16x2 n8, fp8 8x32x2, pushed) in a plan for 16 requests serving fewer, paired and not, under sinks and
    windows, its grid sized by the live batch (`launch_rows`); twice bit-equal."""
    case = make_case(SERVING_LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=page_size,
                     kv_dtype=getattr(torch, kv_dtype), width=40000 // page_size, device=DEV, seed=37 + len(lens))  # fmt: skip
    plan = _default_pairs_plan(case, kv_dtype)
    sinks = torch.randn(32, device=DEV) * 3
    for window_left, sink in ((-1, None), (-1, sinks), (300, sinks)):
        checked_twice(plan, case, window_left=window_left, sinks=sink)


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
def test_the_default_pairs_replay_with_new_lengths(kv_dtype):
    full = make_case([32000] * 8, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=38)  # fmt: skip
    replay_with_new_lengths(_default_pairs_plan(full, kv_dtype), full, seed=37, steps=3)


def _default_pairs_plan(case, kv_dtype):
    """The heuristic's plan for 16 requests (no override): cluster pairs on sm_90a."""
    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("the pairs default is sm_90a's (not measured on an SM120 GPU)")
    plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, max_batch=16))
    decode = plan.state.selection.decode
    assert decode.cluster_pairs and decode.cluster_push and decode.warps == 8 and not decode.full_grid
    return plan


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("cap", [32, 129])  # a one-launch plan, a three-launch one (above FUSED_SCHEDULE_MAX_BATCH)
def test_the_live_small_kernel_of_a_large_plan(kv_dtype, cap, monkeypatch):
    """`Selection.small` (session 37, `_decode_choice.LIVE_SMALL_BATCH`): a plan for 32 or 129 requests runs the
    8-warp pairs kernel for 8 live requests and its own kernel(s) for 20, each against the reference, twice
    bit-equal; then graph replays of 8 requests with new lengths."""
    if target_arch(torch.device(DEV)) != "sm_90a":
        pytest.skip("the pairs default is sm_90a's (not measured on an SM120 GPU)")
    monkeypatch.setattr(_decode_choice, "LIVE_SMALL_BATCH", _decode_choice.LIVE_SMALL_BATCH_MEASURED)  # as shipped
    for lens in (SERVING_LENS["b8-paired"], SERVING_LENS["b12-unpaired"] + [700, 0, 1, 4097, 65, 2048, 9, 30000]):
        case = make_case(lens, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                         kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=40 + len(lens))  # fmt: skip
        plan = prepared(caps_for(case, dtype="bfloat16", kv_dtype=kv_dtype, max_batch=cap))
        sel = plan.state.selection
        assert sel.small is not None and sel.small.decode.cluster_pairs and sel.small_below == 16
        for sinks in (None, torch.randn(32, device=DEV) * 3):
            requests = plan.state.scratch["requests"]
            requests.fill_(-7)
            checked_twice(plan, case, sinks=sinks)
            if len(lens) <= 16:  # the pairs kernel ran: every request's item count is even
                assert (requests[: len(lens), 1] % 2 == 0).all() and (requests[: len(lens), 1] >= 2).all()
    full = make_case([32000] * 8, num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), width=2100, device=DEV, seed=39)  # fmt: skip
    replay_with_new_lengths(
        prepared(caps_for(full, dtype="bfloat16", kv_dtype=kv_dtype, max_batch=cap)), full, seed=38, steps=3
    )


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("lens", ["b1-8k", "b2-1k", "b4-ragged", "b8-1k", "b9-ragged", "b16-2k"])
def test_pair_budget_matches_reference(kv_dtype, lens):
    """`DecodeConfig.pair_budget` (session 37, opt-in): pairs whose split counts the rounding, launched on
    `launch_rows`' tighter rows, against the reference; sinks; twice bit-equal."""
    case = make_case(PAIR_LENS[lens], num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16,
                     kv_dtype=getattr(torch, kv_dtype), device=DEV, seed=len(lens) + 73)  # fmt: skip
    plan = cluster_plan(case, kv_dtype, dataclasses.replace(pairs_config(kv_dtype, True), pair_budget=True))
    for sinks in (None, torch.randn(32, device=DEV) * 3):
        out, lse = checked_twice(plan, case, sinks=sinks)
