"""The decode algorithm as the kernels run it, emulated in float64 on the CPU, against the reference.

Mirrors `_kernel_split.Schedule` (via `schedule_reference`), `_kernel_decode.PagedDecode` (work
item -> W warps taking sub-tiles w, w + W, ...; masking of keys outside the item's range; online
softmax in base 2 with the "max = -inf -> use 0" guard; the epilogue's warp merge, v_descale and sink
folding; final vs partial rows) and `_kernel_split.Merge`. It checks the algorithm and its index
arithmetic, not the CuTe code (the GPU tier does that).
"""

import math

import numpy as np
import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import DecodeConfig, ScheduleConfig, schedule_reference
from flashinfer.experimental.b12x.attention.paged.reference import LOG2E, paged_attention_reference

from .paged_cases import make_case

pytestmark = pytest.mark.reference


def _exp2(x):
    with np.errstate(invalid="ignore"):
        return np.exp2(x)


def emulate(case, *, window_left=-1, sinks=None, decode=None, schedule=None, rows=None):
    decode = decode or DecodeConfig()
    q = case.q.double().numpy()
    total_q, hq, d = q.shape
    hkv = case.k_dense[0].shape[1] if case.k_dense else 1
    group = hq // hkv
    lens = case.cache_seqlens.tolist()
    schedule = schedule or ScheduleConfig(tile_keys=decode.tile_keys, target_items=8, min_chunk=decode.tile_keys)
    rows = rows or len(lens) + schedule.target_items
    work, reqs, count = schedule_reference(lens, window_left, rows, schedule)
    scale_log2 = LOG2E / math.sqrt(d)
    w_n, nw = decode.warps, decode.keys_per_warp
    dv = case.v_dense[0].shape[2]
    out = np.full((total_q, hq, dv), np.nan)
    lse = np.full((total_q, hq), np.nan)
    part_o = np.full((rows, hq, dv), np.nan)
    part_lse = np.full((rows, hq), np.nan)
    sink2 = None if sinks is None else sinks.double().numpy() * LOG2E
    for item, (b, start, end, split) in enumerate(work):
        keys_k = case.k_dense[b].double().numpy()  # [N, Hkv, D], descale applied
        keys_v = case.v_dense[b].double().numpy()
        for kvh in range(hkv):
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
            heads = slice(kvh * group, (kvh + 1) * group)
            if not split and sink2 is not None:
                sk = sink2[heads]
                top = np.maximum(row_lse, sk)
                full = top + np.log2(_exp2(row_lse - top) + _exp2(sk - top))
                factor = factor * _exp2(row_lse - full)
                row_lse = full
            o_row = sum(_exp2(mw - m_use)[:, None] * factor[:, None] * ow for mw, ow in zip(ms, os_))
            if split:
                part_o[item, heads], part_lse[item, heads] = o_row, row_lse
            else:
                out[b, heads], lse[b, heads] = o_row, row_lse
    for b, (first, n) in enumerate(reqs):  # Merge
        if n <= 1:
            continue
        pl, po = part_lse[first : first + n], part_o[first : first + n]
        m = pl.max(axis=0)
        m_use = np.where(m == -np.inf, 0.0, m)
        w = _exp2(pl - m_use)
        total = w.sum(axis=0)
        row_lse = m_use + np.log2(total)
        factor = 1.0 / total
        if sink2 is not None:
            top = np.maximum(row_lse, sink2)
            full = top + np.log2(_exp2(row_lse - top) + _exp2(sink2 - top))
            factor = factor * _exp2(row_lse - full)
            row_lse = full
        out[b] = (w[:, :, None] * po).sum(axis=0) * factor[:, None]
        lse[b] = row_lse
    return torch.from_numpy(out).float(), torch.from_numpy(lse).float(), count


CASES = [
    dict(lens=[1, 17, 130, 64, 0], decode=DecodeConfig(4, 16, 2)),
    dict(lens=[3000, 5], decode=DecodeConfig(4, 16, 3)),  # splits into several items
    dict(lens=[2049, 700, 1], decode=DecodeConfig(2, 32, 2), page_size=32),
    dict(lens=[4096], decode=DecodeConfig(8, 16, 2), window_left=1000),
    dict(lens=[0, 0, 33], decode=DecodeConfig(4, 16, 2), window_left=0),
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
