"""The decode algorithm as the kernels run it, emulated in float64 on the CPU, against the reference.

Mirrors `_kernel_split.Schedule` (via `schedule_reference`), `_kernel_decode.PagedDecode` (work
item -> W warps taking sub-tiles w, w + W, ...; masking of keys outside the item's range; online
softmax in base 2 with the "max = -inf -> use 0" guard; the epilogue's warp merge, v_descale and sink
folding; final vs partial rows) and `_kernel_split.PartialMerge` (W warps split the items, online
base-2 merge, then across warps), run either by `Merge` after every item or, with fused_merge, by the
CTA that draws the last ticket of its (request, KV head) while the CTAs finish in a random order. It
checks the algorithm and its index arithmetic, not the CuTe code (the GPU tier does that).
"""

import math

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import (
    NO_SPLIT_CHUNK,
    DecodeConfig,
    ScheduleConfig,
    persistent_grid_rows,
    persistent_items,
    schedule_reference,
    split_schedule,
)
from flashinfer.experimental.b12x.attention.paged.reference import LOG2E, paged_attention_reference

from .paged_cases import make_case

pytestmark = pytest.mark.reference


def _exp2(x):
    with np.errstate(invalid="ignore"):
        return np.exp2(x)


def partial_merge(part_o, part_lse, first, n, heads, warps, sink2):
    """`PartialMerge.merge` for the query heads `heads` of one KV head: (out rows, lse)."""
    group, dv = len(range(part_o.shape[1])[heads]), part_o.shape[2]
    ms, ss, accs = [], [], []
    for w in range(warps):  # phase 1: warp w folds items first + w, first + w + W, ... online
        m, sm, acc = np.full(group, -np.inf), np.zeros(group), np.zeros((group, dv))
        for i in range(first + w, first + n, warps):
            lse_i = part_lse[i, heads]
            m_new = np.maximum(m, lse_i)
            m_use = np.where(m_new == -np.inf, 0.0, m_new)
            corr, wt = _exp2(m - m_use), _exp2(lse_i - m_use)
            sm = sm * corr + wt
            acc = acc * corr[:, None] + wt[:, None] * part_o[i, heads]
            m = m_new
        ms.append(m)
        ss.append(sm)
        accs.append(acc)
    top = np.max(ms, axis=0)  # phase 2: across the warps
    top_use = np.where(top == -np.inf, 0.0, top)
    total = sum(sw * _exp2(mw - top_use) for sw, mw in zip(ss, ms))
    o = sum(aw * _exp2(mw - top_use)[:, None] for aw, mw in zip(accs, ms))
    pos = total > 0
    row_lse = np.where(pos, top_use + np.log2(np.where(pos, total, 1.0)), -np.inf)
    factor = np.where(pos, 1.0 / np.where(pos, total, 1.0), 0.0)
    if sink2 is not None:
        sk = sink2[heads]
        hi = np.maximum(row_lse, sk)
        full = hi + np.log2(_exp2(row_lse - hi) + _exp2(sk - hi))
        factor = factor * _exp2(row_lse - full)
        row_lse = full
    return o * factor[:, None], row_lse


def item_row(case, q, row, kvh, decode, sink2):
    """One work row's CTA for KV head kvh in float64 (W warps taking sub-tiles w, w + W, ...; keys outside the
    item masked; online base-2 softmax; the warp merge; an unsplit row folds the sink): (o rows [G, Dv], lse [G])."""
    b, start, end, split = row
    hq, d = q.shape[1], q.shape[2]
    hkv = case.k_dense[b].shape[1]
    group = hq // hkv
    scale_log2 = LOG2E / math.sqrt(d)
    w_n, nw = decode.warps, decode.keys_per_warp
    dv = case.v_dense[b].shape[2]
    keys_k = case.k_dense[b].double().numpy()  # [N, Hkv, D], descale applied
    keys_v = case.v_dense[b].double().numpy()
    qh = q[b, kvh * group : (kvh + 1) * group]  # [G, D]
    t_begin = start // nw
    t_end = (end + nw - 1) // nw if end > start else t_begin
    ms, ls, os_ = [], [], []
    for w in range(w_n):
        m = np.full(group, -np.inf)
        lsum = np.zeros(group)
        o = np.zeros((group, dv))
        for i in range(max(t_end - t_begin - w + w_n - 1, 0) // w_n):
            key0 = (t_begin + w + i * w_n) * nw
            idx = np.arange(key0, key0 + nw)
            valid = (idx >= start) & (idx < end)
            kk = np.where(valid[:, None], keys_k[np.clip(idx, 0, len(keys_k) - 1), kvh], 0.0)
            vv = np.where(valid[:, None], keys_v[np.clip(idx, 0, len(keys_v) - 1), kvh], 0.0)
            s = np.where(valid[None, :], qh @ kk.T * scale_log2, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            m_use = np.where(m_new == -np.inf, 0.0, m_new)
            p = _exp2(s - m_use[:, None])
            corr = _exp2(m - m_use)
            lsum = lsum * corr + p.sum(axis=1)
            m = m_new
            o = o * corr[:, None] + p @ vv
        ms.append(m)
        ls.append(lsum)
        os_.append(o)
    m_top = np.max(ms, axis=0)
    m_use = np.where(m_top == -np.inf, 0.0, m_top)
    total = sum(lw * _exp2(mw - m_use) for lw, mw in zip(ls, ms))
    row_lse = np.where(total > 0, m_use + np.log2(np.where(total > 0, total, 1.0)), -np.inf)
    factor = np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), 0.0)
    if not split and sink2 is not None:
        sk = sink2[kvh * group : (kvh + 1) * group]
        top = np.maximum(row_lse, sk)
        full = top + np.log2(_exp2(row_lse - top) + _exp2(sk - top))
        factor = factor * _exp2(row_lse - full)
        row_lse = full
    o_row = sum(_exp2(mw - m_use)[:, None] * factor[:, None] * ow for mw, ow in zip(ms, os_))
    return o_row, row_lse


def emulate(case, *, window_left=-1, sinks=None, decode=None, schedule=None, rows=None, tickets=None, seed=0):
    """The decode launches in float64. With decode.fused_merge the (item, KV head) CTAs finish in a
    random order (`seed`) and take tickets from `tickets` (zeros: a fresh or reset counter array);
    with decode.persistent each CTA row runs its `persistent_items` in order, the CTAs interleaved
    at random (an item never run leaves NaN rows); returns (out, lse, item count)."""
    decode = decode or DecodeConfig()
    q = case.q.double().numpy()
    total_q, hq, d = q.shape
    hkv = case.k_dense[0].shape[1] if case.k_dense else 1
    group = hq // hkv
    lens = case.cache_seqlens.tolist()
    schedule = schedule or ScheduleConfig(tile_keys=decode.tile_keys, target_items=8, min_chunk=decode.tile_keys)
    rows = rows or len(lens) + schedule.target_items
    work, reqs, count = schedule_reference(lens, window_left, rows, schedule)
    w_n = decode.warps
    dv = case.v_dense[0].shape[2]
    out = np.full((total_q, hq, dv), np.nan)
    lse = np.full((total_q, hq), np.nan)
    part_o = np.full((rows, hq, dv), np.nan)
    part_lse = np.full((rows, hq), np.nan)
    sink2 = None if sinks is None else sinks.double().numpy() * LOG2E
    ctas = [(item, kvh) for item in range(len(work)) for kvh in range(hkv)]
    if decode.fused_merge:
        np.random.default_rng(seed).shuffle(ctas)  # any completion order
        tickets = np.zeros((len(lens), hkv), dtype=np.int64) if tickets is None else tickets
    if decode.persistent:  # CTA (y, kvh) runs persistent_items(y) in order; the CTAs interleave at random
        queues = [[(i, kvh) for i in persistent_items(y, rows, schedule) if i < len(work)]
                  for y in range(persistent_grid_rows(rows, schedule)) for kvh in range(hkv)]  # fmt: skip
        rng, ctas = np.random.default_rng(seed + 1), []
        while any(queues):
            ctas.append(queues[rng.choice([j for j, q in enumerate(queues) if q])].pop(0))
    for item, kvh in ctas:
        b, start, end, split = work[item]
        heads = slice(kvh * group, (kvh + 1) * group)
        o_row, row_lse = item_row(case, q, work[item], kvh, decode, sink2)
        if split:
            part_o[item, heads], part_lse[item, heads] = o_row, row_lse
        else:
            out[b, heads], lse[b, heads] = o_row, row_lse
        if split and decode.fused_merge:  # _merge_if_last: the last ticket merges and resets
            first, n = reqs[b]
            tickets[b, kvh] += 1
            if tickets[b, kvh] == n:
                tickets[b, kvh] = 0
                out[b, heads], lse[b, heads] = partial_merge(part_o, part_lse, first, n, heads, w_n, sink2)
    for b, (first, n) in enumerate(reqs):  # the Merge launch (4 warps)
        if n > 1 and not decode.fused_merge:
            out[b], lse[b] = partial_merge(part_o, part_lse, first, n, slice(0, hq), 4, sink2)
    return torch.from_numpy(out).float(), torch.from_numpy(lse).float(), count


CASES = [
    dict(lens=[1, 17, 130, 64, 0], decode=DecodeConfig(4, 16, 2)),
    dict(lens=[3000, 5], decode=DecodeConfig(4, 16, 3)),  # splits into several items
    dict(lens=[2049, 700, 1], decode=DecodeConfig(2, 32, 2), page_size=32),
    dict(lens=[4096], decode=DecodeConfig(8, 16, 2), window_left=1000),
    dict(lens=[0, 0, 33], decode=DecodeConfig(4, 16, 2), window_left=0),
    dict(lens=[3000, 0, 1, 2000], decode=DecodeConfig(4, 16, 2, fused_merge=True)),
    dict(lens=[5000], decode=DecodeConfig(2, 32, 3, fused_merge=True), page_size=32, window_left=3000),
    dict(lens=[4096, 17], decode=DecodeConfig(8, 16, 2, fused_merge=True)),
    # persistent: 8 CTA rows for the 2 + 8 rows of these work lists (split: one item a CTA) ...
    dict(lens=[3000, 0, 1, 2000], decode=DecodeConfig(4, 16, 3, True, True, persistent=True)),
    dict(lens=[5000], decode=DecodeConfig(2, 32, 3, True, True, persistent=True), page_size=32, window_left=3000),
    # ... and unsplit batches of more requests than CTA rows (several items a CTA)
    dict(lens=[1, 17, 130, 64, 0, 700, 33, 2, 900, 5, 16], decode=DecodeConfig(4, 16, 3, True, True, persistent=True)),
    dict(lens=[200] * 9 + [0, 1000], decode=DecodeConfig(4, 16, 3, True, True, persistent=True), window_left=100),
]


@pytest.mark.parametrize("case_kw", CASES)
@pytest.mark.parametrize("with_sinks", [False, True])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_emulated_kernels_match_reference(case_kw, with_sinks, kv_dtype):
    kw = dict(case_kw)
    lens, decode, window_left = kw.pop("lens"), kw.pop("decode"), kw.pop("window_left", -1)
    case = make_case(lens, num_q_heads=8, num_kv_heads=2, head_dim=64, kv_dtype=kv_dtype, seed=len(lens), **kw)
    sinks = torch.randn(8) if with_sinks else None
    out, lse, count = emulate(case, window_left=window_left, sinks=sinks, decode=decode)
    ref_out, ref_lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=window_left, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "a row was never written"
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    if sum(lens) >= 3000:
        assert count > len(lens)  # the long cases really exercise split + merge


def test_fused_merge_tickets_reset_across_launches():
    """Two launches (a graph replay) on one ticket array with new lengths: every counter is back at
    zero after each, and the merged rows match the reference; a counter left at 1 (a missed reset)
    delays the merge past the last CTA, so that request's rows are never written (NaN)."""
    decode = DecodeConfig(4, 16, 2, fused_merge=True)
    tickets = np.zeros((3, 2), dtype=np.int64)
    for step, lens in enumerate(([3000, 1, 700], [0, 4000, 2500])):
        case = make_case(lens, num_q_heads=8, num_kv_heads=2, head_dim=64, seed=step)
        out, lse, count = emulate(case, decode=decode, tickets=tickets, seed=step)
        assert count > len(lens) and not tickets.any()
        ref_out, _ = paged_attention_reference(
            case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q
        )
        torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    tickets[1, 0] = 1
    out, _, _ = emulate(case, decode=decode, tickets=tickets)
    assert torch.isnan(out[1, :4]).all() and not torch.isnan(out[1, 4:]).any()


def test_partial_merge_warp_split_equals_one_pass():
    """PartialMerge's W-warp online merge is the single-pass formula for any W and item count."""
    rng = np.random.default_rng(3)
    for n, warps in ((1, 4), (2, 4), (7, 4), (9, 2), (33, 8)):
        part_o = rng.standard_normal((n + 2, 4, 32))
        part_lse = rng.standard_normal((n + 2, 4)) * 5
        part_lse[n, 2] = -np.inf if n > 1 else 0.0  # an item that saw no key (another one did)
        got_o, got_lse = partial_merge(part_o, part_lse, 1, n, slice(0, 4), warps, None)
        pl, po = part_lse[1 : 1 + n], part_o[1 : 1 + n]
        w = np.exp2(pl - pl.max(axis=0))
        want_o = (w[:, :, None] * po).sum(axis=0) / w.sum(axis=0)[:, None]
        np.testing.assert_allclose(got_o, want_o, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_lse, pl.max(axis=0) + np.log2(w.sum(axis=0)), rtol=1e-12)


def locate(lens, window_left, cap, config, item):
    """`Schedule.locate` lane by lane: a warp-wide sum of the visible lengths 32 requests a step, the
    chunk, then per step an inclusive scan of the 32 lanes' item counts and a ballot of the lane whose
    range holds `item` (read by shuffles). Returns (request or -1, kv_start, kv_end, first, n, count)."""
    batch = len(lens)

    def visible(b):
        return lens[b] if window_left < 0 else min(lens[b], window_left + 1)

    def cdiv(a, b):
        return (a + b - 1) // b

    def split(length, chunk):  # Schedule._split
        if length <= 0:
            return 1, config.tile_keys
        size = cdiv(cdiv(length, cdiv(length, chunk)), config.tile_keys) * config.tile_keys
        return cdiv(length, size), size

    total = sum(sum(visible(b) for b in range(b0, min(b0 + 32, batch))) for b0 in range(0, batch, 32))
    target = min(config.target_items, cap) - batch
    chunk = NO_SPLIT_CHUNK
    if target > 0:
        chunk = cdiv(max(config.min_chunk, cdiv(total, target)), config.tile_keys) * config.tile_keys
    found, base = (-1, 0, 0, 0, 0), 0
    for b0 in range(0, batch, 32):
        lanes = [(lens[b0 + i], visible(b0 + i), *split(visible(b0 + i), chunk)) if b0 + i < batch else (0, 0, 0, 0)
                 for i in range(32)]  # fmt: skip
        incl = np.cumsum([items for _, _, items, _ in lanes]).tolist()
        ballot = 0
        for i, (_, _, items, _) in enumerate(lanes):
            if base + incl[i] - items <= item < base + incl[i]:
                ballot |= 1 << i
        if ballot:
            src = ballot.bit_length() - 1  # 31 - clz
            assert ballot == 1 << src, "two lanes claimed one item"
            n, length, items, size = lanes[src]
            first = base + incl[src] - items
            start = n - length + (item - first) * size
            found = (b0 + src, start, min(start + size, n), first, items)
        base += incl[31]
    return (*found, base)


@pytest.mark.parametrize("window_left", [-1, 0, 100])
@pytest.mark.parametrize("batch", [1, 3, 31, 32, 33, 70, 128])
def test_fused_schedule_locate_matches_the_schedule(batch, window_left):
    """Every work row (live or dead) that a decode CTA finds by itself is the schedule launch's row."""
    rng = np.random.default_rng(batch)
    lens = [int(x) for x in rng.choice([0, 1, 17, 300, 5000, 32768], size=batch)]
    config = ScheduleConfig(tile_keys=64, target_items=33, min_chunk=256)
    for cap in (batch, batch + 33, batch + 66):
        work, reqs, count = schedule_reference(lens, window_left, cap, config)
        for item in range(cap):
            req, start, end, first, n, total = locate(lens, window_left, cap, config, item)
            assert total == count
            if item < count:
                assert (req, start, end, int(n > 1)) == tuple(work[item]) and (first, n) == tuple(reqs[req])
            else:
                assert req == -1


@pytest.mark.parametrize("window_left", [-1, 0, 100])
@pytest.mark.parametrize("batch", [1, 8, 33, 128])
def test_direct_items_is_the_schedule_when_nothing_splits(batch, window_left):
    """`Schedule.locate(direct=True)` skips the scan when min(target_items, cap) <= batch: then the
    schedule must make exactly one item per request, item b = (b, n_b - visible_b, n_b, 0)."""
    rng = np.random.default_rng(batch + 7)
    lens = [int(x) for x in rng.choice([0, 1, 15, 16, 17, 300, 5000, 32768], size=batch)]
    for target in (1, batch):
        config = ScheduleConfig(tile_keys=64, target_items=target, min_chunk=256)
        for cap in (batch, batch + 33):
            assert min(target, cap) - batch <= 0
            work, reqs, count = schedule_reference(lens, window_left, cap, config)
            assert count == batch and reqs == [(b, 1) for b in range(batch)]
            for b, n in enumerate(lens):
                visible = n if window_left < 0 else min(n, window_left + 1)
                assert tuple(work[b]) == (b, n - visible, n, 0)


def test_min_chunk_16_key_fills_switch(monkeypatch):
    """_config.MIN_CHUNK_16_KEY_FILLS: fp8's two-page 4x32x3 gets bf16's 256-key shortest chunk (512
    without), so B=1 L=1k / 8k and B=8 L=1k split into more, shorter items and the long shapes split as
    before; the decode and its merge on such a split still match the reference."""
    from flashinfer.experimental.b12x.attention.paged import _config

    fp8, bf16, args = DecodeConfig(4, 32, 3), DecodeConfig(4, 16, 3), (128, 8, 132, "sm_90a")
    assert split_schedule(fp8, "float8_e4m3fn", *args).min_chunk == 512
    assert split_schedule(bf16, "bfloat16", *args).min_chunk == 256
    monkeypatch.setattr(_config, "MIN_CHUNK_16_KEY_FILLS", True)
    sched = split_schedule(fp8, "float8_e4m3fn", *args)
    assert sched.min_chunk == 256 and split_schedule(bf16, "bfloat16", *args).min_chunk == 256
    for lens, items in (
        ([1024], 4),
        ([8192], 32),
        ([1024] * 8, 24),
        ([32768], 32),
        ([8192] * 8, 32),
        ([1024] * 32, 32),
    ):
        assert schedule_reference(lens, -1, len(lens) + sched.target_items, sched)[2] == items, lens
    case = make_case([1024, 300, 0], num_q_heads=8, num_kv_heads=2, head_dim=64, kv_dtype=torch.float8_e4m3fn, seed=3)
    small = ScheduleConfig(fp8.tile_keys, 8, sched.min_chunk)
    out, lse, count = emulate(case, decode=DecodeConfig(4, 32, 3, fused_merge=True), schedule=small)
    assert count == 5  # 3 items of the 1k request (chunk 384), one each for the others
    ref_out, ref_lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
