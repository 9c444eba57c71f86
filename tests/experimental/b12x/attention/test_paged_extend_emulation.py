"""The extend kernel's control flow, emulated in float32 torch on the CPU, against the reference.

Mirrors `_kernel_split.ExtendSchedule` (via `extend_schedule_reference`) and
`_kernel_extend.PagedExtend`: packed GQA rows (row r = token r // G, head r % G), the visible key
range [lo, hi) of a tile of tokens, KV tiles aligned to block_n with keys past the cache length
zero-filled, masks applied only on tiles the kernel flags as crossing (diagonal of the first
token, window of the last, end of the cache), base-2 online softmax, the sink folded at the end.
K/V tiles are read from the paged cache (NaN past each request's keys) chunk by chunk through the
kernel's `stages`-deep ring, with the page ids looked up when the kernel looks them up: at the
tile's issue, or with page_prefetch one tile earlier (`_page_ids` before the previous tile's math).
With stagger the first warp group's rows take each tile's P V one step late, from the ring slot as it
stands then (stages - 2 tiles in flight): a slot refilled too early shows up as a ring assertion.
A wrong skip, mask condition, page lookup or ring slot shows up here as a mismatch with the reference.
"""

import functools
import math

import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import ExtendConfig, extend_schedule_reference
from flashinfer.experimental.b12x.attention.paged.reference import LOG2E, paged_attention_reference

from .paged_cases import make_case

pytestmark = pytest.mark.reference


def _cdiv(a, b):
    return -(-a // b)


def _page_ids(case, config, req, key0, kv_len):
    """The page of each chunk (min(page_size, block_n) keys) of the tile at key0; 0 past kv_len."""
    page = case.k_cache.shape[1]
    ck = min(page, config.block_n)
    width = case.page_table.shape[1]
    return [
        int(case.page_table[req, min(k0 // page, width - 1)]) if k0 < kv_len else 0
        for k0 in range(key0, key0 + config.block_n, ck)
    ]


def _load_tile(case, config, req, kvh, kv_len, key0, pages):
    """K and V of keys [key0, key0 + block_n) from the paged cache, chunk ch from page pages[ch]
    (looked up now when pages is None), keys >= kv_len zero-filled; (key0, K, V) in float32."""
    page = case.k_cache.shape[1]
    ck = min(page, config.block_n)
    pages = pages if pages is not None else _page_ids(case, config, req, key0, kv_len)
    k = torch.zeros(config.block_n, case.k_cache.shape[3])
    v = torch.zeros(config.block_n, case.v_cache.shape[3])
    for ch, pg in enumerate(pages):
        k0 = key0 + ch * ck
        within = k0 % page
        n = max(0, min(ck, kv_len - k0))
        k[ch * ck : ch * ck + n] = case.k_cache[pg, within : within + n, kvh].float()
        v[ch * ck : ch * ck + n] = case.v_cache[pg, within : within + n, kvh].float()
    if case.k_descale is not None:
        k, v = k * case.k_descale[req, kvh], v * case.v_descale[req, kvh]
    return key0, k, v


def _late_pv(ring, tile, key0, p_late, late):
    """stagger: the late warp group's P V of tile `tile` (keys from key0), read from its ring slot as
    it stands now; rows of the other group get 0."""
    slot_key0, _, v = ring[tile % len(ring)]
    assert slot_key0 == key0, "the late PV's ring slot was refilled"
    pv = p_late @ v
    return torch.where(late[:, None], pv, torch.zeros_like(pv))


def emulate_extend(case, config: ExtendConfig, *, window_left=-1, sinks=None):
    q = case.q.float()
    total_q, hq, d = q.shape
    hkv = case.k_cache.shape[2]
    g = hq // hkv
    bm, bn = config.block_m, config.block_n
    tokens = config.tokens_per_tile(g)
    cu = case.cu_seqlens_q.tolist()
    lens = case.cache_seqlens.tolist()
    scale2 = LOG2E / math.sqrt(d)
    out = torch.full((total_q, hq, case.v_cache.shape[3]), float("nan"))
    lse = torch.full((total_q, hq), float("nan"))
    work, _ = extend_schedule_reference(cu, tokens)
    rows = torch.arange(bm)
    warp_of_row = (rows % (16 * config.warps)) // 16  # the mma's 16-row blocks, warps fastest
    # stagger: rows of the first warp group (warps < warps / 2) run each tile's PV one step late
    late = warp_of_row < config.warps // 2 if config.stagger else torch.zeros(bm, dtype=torch.bool)
    ahead = config.stages - 2 if config.stagger else config.stages - 1  # tiles in flight
    for req, tok0 in work:
        q0, q_len, kv_len = cu[req], cu[req + 1] - cu[req], lens[req]
        n_tok = min(tokens, q_len - tok0)
        diag = kv_len - q_len
        hi = max(min(tok0 + n_tok + diag, kv_len), 0)
        lo = max(tok0 + diag - window_left, 0) if window_left >= 0 else 0
        t_begin, t_end = lo // bn, _cdiv(hi, bn)
        if hi <= lo:
            t_end = t_begin
        valid = rows < n_tok * g
        tok = tok0 + rows // g
        limit = tok + diag
        low = limit - window_left if window_left >= 0 else torch.full_like(limit, -1)
        n_tiles = t_end - t_begin
        for kvh in range(hkv):
            heads = kvh * g + rows % g
            qt = torch.zeros(bm, d)
            qt[valid] = q[q0 + tok[valid], heads[valid]]
            m = torch.full((bm,), -math.inf)
            s_sum = torch.zeros(bm)
            acc = torch.zeros(bm, case.v_cache.shape[3])
            ring = [None] * config.stages  # (key0, K, V) per cp.async stage
            load = functools.partial(_load_tile, case, config, req, kvh, kv_len)
            pages = None
            for st in range(ahead):
                if config.page_prefetch:
                    pages = _page_ids(case, config, req, (t_begin + st) * bn, kv_len)
                if st < n_tiles:
                    ring[st] = load((t_begin + st) * bn, pages)
            if config.page_prefetch:
                pages = _page_ids(case, config, req, (t_begin + ahead) * bn, kv_len)

            p_late = None
            for i in range(n_tiles):
                nxt = i + ahead
                if nxt < n_tiles:
                    ring[nxt % config.stages] = load((t_begin + nxt) * bn, pages)
                if config.page_prefetch:
                    pages = _page_ids(case, config, req, (t_begin + nxt + 1) * bn, kv_len)
                if p_late is not None:
                    acc = acc + _late_pv(ring, i - 1, (t_begin + i - 1) * bn, p_late, late)
                key0, k, v = ring[i % config.stages]
                assert key0 == (t_begin + i) * bn, "the ring slot holds another tile"
                cross = key0 + bn - 1 > tok0 + diag or key0 + bn > kv_len
                if window_left >= 0:
                    cross = cross or key0 < tok0 + n_tok - 1 + diag - window_left
                bs = config.slice_keys
                for h in range(config.sub_tiles):  # sub_tiles: one online-softmax step per key slice
                    keys = torch.arange(key0 + h * bs, key0 + (h + 1) * bs)
                    s = (qt @ k[h * bs : (h + 1) * bs].T) * scale2
                    if cross:  # the kernel masks every slice of a crossing tile
                        hidden = (keys[None] > limit[:, None]) | (keys[None] < low[:, None]) | (keys >= kv_len)[None]
                        s = s.masked_fill(hidden, -math.inf)
                    m_new = torch.maximum(m, s.amax(1))
                    if config.lazy_rescale:  # a warp keeps every row's max unless one grows by > N
                        grow = (m_new > m + config.lazy_rescale).to(torch.int64)
                        renew = torch.zeros(config.warps, dtype=torch.int64).index_add_(0, warp_of_row, grow) > 0
                        m_new = torch.where(renew[warp_of_row], m_new, m)
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    p = torch.exp2(s - m_use[:, None])
                    corr = torch.exp2(m - m_use)
                    s_sum = s_sum * corr + p.sum(1)
                    m = m_new
                    pv = p @ v[h * bs : (h + 1) * bs]
                    acc = acc * corr[:, None] + torch.where(late[:, None], torch.zeros_like(pv), pv)
                    p_late = p if config.stagger else None
            if p_late is not None:
                acc = acc + _late_pv(ring, n_tiles - 1, (t_begin + n_tiles - 1) * bn, p_late, late)
            m_use = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            row_lse = torch.where(s_sum > 0, m_use + torch.log2(s_sum), torch.full_like(m, -math.inf))
            factor = torch.where(s_sum > 0, 1 / s_sum, torch.zeros_like(s_sum))
            if sinks is not None:
                sink = sinks[heads] * LOG2E
                full = torch.logaddexp2(row_lse, sink)
                factor = factor * torch.exp2(row_lse - full)
                row_lse = full
            out[q0 + tok[valid], heads[valid]] = acc[valid] * factor[valid, None]
            lse[q0 + tok[valid], heads[valid]] = row_lse[valid]
    return out, lse


CASES = [
    # kv_lens, q_lens, (Hq, Hkv), page, config, window
    ([300, 17, 64, 129], [300, 5, 1, 64], (8, 8), 16, ExtendConfig(64, 64), -1),
    ([1000, 33, 5], [77, 33, 0], (32, 8), 16, ExtendConfig(64, 64), 40),
    ([257, 90], [130, 90], (40, 8), 64, ExtendConfig(64, 32), -1),  # G = 5: rows 60..63 padding
    ([2100, 16], [16, 16], (16, 2), 32, ExtendConfig(128, 16), 0),
    ([500], [61], (64, 4), 128, ExtendConfig(32, 128), 100),
    # page_prefetch: lookups one tile ahead, with 1, 2 or 4 chunks a tile and 2 or 3 stages
    ([300, 17, 64, 129], [300, 5, 1, 64], (32, 8), 16, ExtendConfig(128, 64, page_prefetch=True), -1),
    ([1000, 33, 5], [77, 33, 0], (32, 8), 32, ExtendConfig(64, 64, 3, page_prefetch=True), 40),
    ([700, 90], [300, 90], (40, 8), 64, ExtendConfig(64, 32, 3, 2, page_prefetch=True), -1),
    ([2100, 16], [16, 16], (16, 2), 16, ExtendConfig(32, 16, page_prefetch=True), 0),
    # sub_tiles (key slices, each its own softmax step) and lazy_rescale (stale row max per warp)
    ([300, 17, 64, 129], [300, 5, 1, 64], (32, 8), 16, ExtendConfig(128, 64, 2, 2, True, sub_tiles=2), -1),
    ([1000, 33, 5], [77, 33, 0], (32, 8), 32, ExtendConfig(64, 64, 3, 1, sub_tiles=4, lazy_rescale=8), 40),
    ([700, 90], [300, 90], (40, 8), 64, ExtendConfig(128, 64, 2, 2, True, sub_tiles=2, lazy_rescale=4), -1),
    ([2100, 16], [16, 16], (16, 2), 16, ExtendConfig(128, 32, 2, 2, lazy_rescale=1), 0),
    ([900, 300], [900, 299], (32, 8), 16, ExtendConfig(128, 64, 2, 2, True, lazy_rescale=15), -1),
    # cross_tile: the same math a tile at a time (its ring of 3 slots is the emulator's ring)
    ([1000, 33, 5], [77, 33, 0], (32, 8), 16, ExtendConfig(128, 32, 3, 2, True, cross_tile=True), 40),
    # 256 rows (8 warps); stagger: the second group's PV one step late out of a ring of 3 (or 2 in flight of 3)
    ([300, 17, 64, 129], [300, 5, 1, 64], (32, 8), 16, ExtendConfig(256, 64, 2, 2, True), -1),
    ([1000, 300, 5, 1], [700, 300, 0, 1], (32, 8), 16, ExtendConfig(256, 64, 3, 2, True, stagger=True), -1),
    ([1000, 33, 5], [77, 33, 0], (32, 8), 32, ExtendConfig(256, 64, 3, 2, stagger=True), 40),
    ([700, 90], [300, 90], (40, 8), 64, ExtendConfig(256, 32, 3, 2, True, stagger=True), -1),  # G 5: 1 pad row
    ([2100, 16], [16, 16], (8, 8), 16, ExtendConfig(128, 64, 3, 1, True, stagger=True), 0),  # 8 warps x 16 rows
    ([1000, 33, 5, 700], [77, 33, 0, 700], (32, 8), 16, ExtendConfig(256, 64, 4, 2, True, stagger=True), 40),
    ([1000, 300, 5], [700, 300, 5], (32, 8), 16, ExtendConfig(256, 64, 3, 2, True, stagger=True, split_issue=True), -1),
    ([700, 90], [300, 90], (32, 8), 16, ExtendConfig(128, 64, 4, 2, True), -1),  # 4 stages, plain loop
]


@pytest.mark.parametrize("kv_lens,q_lens,heads,page,config,window", CASES)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_emulated_extend_matches_reference(kv_lens, q_lens, heads, page, config, window, with_sinks):
    case = make_case(kv_lens, q_lens, num_q_heads=heads[0], num_kv_heads=heads[1], head_dim=32, page_size=page,
                     seed=sum(kv_lens))  # fmt: skip
    sinks = torch.randn(heads[0]) * 2 if with_sinks else None
    out, lse = emulate_extend(case, config, window_left=window, sinks=sinks)
    ref_out, ref_lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=window, sinks=sinks,
    )  # fmt: skip
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "a row was never written"
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=0, atol=1e-4)


def test_emulation_skips_tiles_above_the_diagonal():
    """The work the tile range saves: a 4096-token prefill loads about half of the full square."""
    config, tokens = ExtendConfig(64, 64), 64
    loaded = 0
    for tok0 in range(0, 4096, tokens):
        hi = min(tok0 + tokens, 4096)
        loaded += _cdiv(hi, config.block_n)
    full = (4096 // tokens) * (4096 // config.block_n)
    assert loaded / full == pytest.approx(0.5 + 0.5 / 64, rel=1e-6)
