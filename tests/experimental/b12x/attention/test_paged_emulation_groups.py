"""Cluster pairs and groups of C items a cluster (`DecodeConfig.cluster_pairs`, sessions 36-37), emulated in float64
on the CPU against the reference, as test_paged_emulation.py does for the other decode paths: the live schedule's
groups (`schedule_reference` with `ScheduleConfig.pairs` / `group` / `budget`), every item's CTA as the kernel runs it
(`item_row`), each cluster's C partial rows combined as `ClusterMerge._combine` does (the max LSE, exp2 weights,
`softmax_finish`), a request of one group writing its output with the sink folded, one of P > 1 groups writing its
group rows that the last of the request's C P ticket draws merges (`PartialMerge`, the sink there), the clusters
finishing in a random order; a batch that does not group runs the ticket merge. It checks the algorithm and its
index arithmetic, not the CuTe code (test_paged_cluster_pairs_gpu.py does that on a GPU).
"""

import dataclasses

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import (
    DecodeConfig,
    ScheduleConfig,
    paired,
    schedule_reference,
)
from flashinfer.experimental.b12x.attention.paged.reference import LOG2E, paged_attention_reference

from .paged_cases import make_case
from .test_paged_emulation import _exp2, emulate, item_row, partial_merge

pytestmark = pytest.mark.reference


def _fold_sink(o, row_lse, sink):
    """`fold_sink`: the sink (base 2) joins the row's denominator."""
    hi = np.maximum(row_lse, sink)
    full = hi + np.log2(_exp2(row_lse - hi) + _exp2(sink - hi))
    return o * _exp2(row_lse - full)[:, None], full


def emulate_groups(case, *, decode, schedule, rows, window_left=-1, sinks=None, seed=0):
    """(out, lse, grouped, tickets) of the pairs / groups kernel in float64."""
    q = case.q.double().numpy()
    hq, hkv = q.shape[1], case.k_dense[0].shape[1]
    g, dv = hq // hkv, case.v_dense[0].shape[2]
    lens = case.cache_seqlens.tolist()
    c = schedule.group
    if not paired(len(lens), rows, schedule):  # the ticket merge, in clusters that only co-schedule
        out, lse, _ = emulate(case, window_left=window_left, sinks=sinks, decode=decode, schedule=schedule, rows=rows,
                              seed=seed)  # fmt: skip
        return out, lse, False, np.zeros((len(lens), hkv), dtype=np.int64)
    work, reqs, count = schedule_reference(lens, window_left, rows, schedule)
    out, lse = np.full((q.shape[0], hq, dv), np.nan), np.full((q.shape[0], hq), np.nan)
    part_o, part_lse = np.full((rows, hq, dv), np.nan), np.full((rows, hq), np.nan)
    sink2 = None if sinks is None else sinks.double().numpy() * LOG2E
    tickets = np.zeros((len(lens), hkv), dtype=np.int64)
    clusters = [(k, kvh) for k in range(count // c) for kvh in range(hkv)]
    np.random.default_rng(seed).shuffle(clusters)  # any completion order
    for k, kvh in clusters:
        items = range(k * c, k * c + c)
        b = work[k * c][0]
        assert all(work[i][0] == b and work[i][3] == 1 for i in items), "a cluster spans two requests"
        parts = [item_row(case, q, work[i], kvh, decode, sink2) for i in items]  # split rows: no sink
        vals, lses = np.stack([o for o, _ in parts]), np.stack([lv for _, lv in parts])
        top = lses.max(axis=0)
        use = np.where(top == -np.inf, 0.0, top)
        w = _exp2(lses - use)
        total = w.sum(axis=0)
        pos = total > 0
        row_lse = np.where(pos, use + np.log2(np.where(pos, total, 1.0)), -np.inf)
        o = (w[:, :, None] * vals).sum(axis=0) * np.where(pos, 1.0 / np.where(pos, total, 1.0), 0.0)[:, None]
        first, n = reqs[b]
        heads = slice(kvh * g, (kvh + 1) * g)
        if n == c:  # one group: the cluster writes the output
            if sink2 is not None:
                o, row_lse = _fold_sink(o, row_lse, sink2[heads])
            out[b, heads], lse[b, heads] = o, row_lse
            continue
        prow = first + (k * c - first) // c
        assert first <= prow < first + n // c
        part_o[prow, heads], part_lse[prow, heads] = o, row_lse
        tickets[b, kvh] += c  # each of the C CTAs draws after writing its slice
        if tickets[b, kvh] == n:
            tickets[b, kvh] = 0
            out[b, heads], lse[b, heads] = partial_merge(part_o, part_lse, first, n // c, heads, decode.warps, sink2)
    return torch.from_numpy(out).float(), torch.from_numpy(lse).float(), True, tickets


CASES = [  # (lens, group, target, window_left): each groups at rows = B + target
    ([1024], 8, 17, -1),  # one group of eight 128-key items: the output straight from the cluster
    ([8192], 8, 17, -1),  # two groups, their rows merged by the ticket
    ([0], 8, 17, -1),  # eight empty items
    ([33], 4, 17, -1),
    ([1000, 0], 4, 33, -1),
    ([4096, 17, 300, 1], 4, 33, 1000),
    ([3000, 5, 1, 2000], 2, 17, -1),
    ([700] * 8, 2, 17, -1),
    ([5000], 2, 17, 300),
]


@pytest.mark.parametrize("lens, group, target, window_left", CASES)
@pytest.mark.parametrize("budget", [False, True], ids=["plain", "budget"])
@pytest.mark.parametrize("with_sinks", [False, True])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_emulated_groups_match_reference(lens, group, target, window_left, budget, with_sinks, kv_dtype):
    decode = DecodeConfig(4, 16, 2, fused_merge=True, fused_schedule=True, cluster=group, cluster_pairs=True)
    schedule = ScheduleConfig(64, target, 64, pairs=True, group=group, budget=budget)
    rows = len(lens) + target
    case = make_case(lens, num_q_heads=8, num_kv_heads=2, head_dim=64, kv_dtype=kv_dtype, seed=len(lens) + group)
    sinks = torch.randn(8) if with_sinks else None
    out, lse, grouped, tickets = emulate_groups(case, decode=decode, schedule=schedule, rows=rows,
                                                window_left=window_left, sinks=sinks, seed=group)  # fmt: skip
    assert grouped, "the case should group"
    ref_out, ref_lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=window_left, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "a row was never written"
    assert not tickets.any(), "a ticket was left drawn"
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)


def test_a_batch_that_cannot_group_runs_the_ticket_merge():
    """B = 2 with groups of 8 at rows = B + 17: 16 > min(17, 19 - 14): the unpaired path, still the reference's."""
    decode = DecodeConfig(4, 16, 2, fused_merge=True, fused_schedule=True, cluster=8, cluster_pairs=True)
    schedule = ScheduleConfig(64, 17, 64, pairs=True, group=8)
    case = make_case([3000, 100], num_q_heads=8, num_kv_heads=2, head_dim=64, seed=5)
    out, _, grouped, _ = emulate_groups(case, decode=decode, schedule=schedule, rows=19)
    assert not grouped
    ref_out, _ = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
    )
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    assert dataclasses.replace(schedule, group=2).group == 2  # pairs of the same batch would group
    assert paired(2, 19, dataclasses.replace(schedule, group=2))
