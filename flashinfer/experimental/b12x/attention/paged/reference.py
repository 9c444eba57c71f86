"""Plain-torch oracle of `attention.paged`: the op's math, one request at a time, in float32.

Conventions (docs: FORMATS.md "attention.paged"):
- q [total_q, Hq, D]; k_cache/v_cache [num_pages, page_size, Hkv, D|Dv] (NHD; any strides, e.g.
  views of one combined KV tensor); page_table int32 [batch, max_pages]; cache_seqlens int32
  [batch] = KV length INCLUDING the new tokens; cu_seqlens_q int32 [batch + 1]. Hq % Hkv == 0 and
  query head h reads KV head h // (Hq // Hkv).
- Causal, right-aligned: query i of a request with q_len L and kv_len N sees key k iff
  k <= i + N - L, and with window_left >= 0 also k >= i + N - L - window_left.
- Scores are `sm_scale * q . k` (default sm_scale 1/sqrt(D)). Optional sink logits [Hq] (natural
  units, like the scores) join only the softmax denominator.
- LSE is log2 of the whole denominator (sink included): out = sum_k 2^(log2(e) * s_k - lse) v_k.
  A row that sees no key and has no sink gets out = 0 and lse = -inf.
- FP8 (e4m3) KV: k = fp8 * k_descale[b, kv_head] (same for v); the descales are float32 [batch, Hkv]
  or anything that broadcasts to it.
"""

from __future__ import annotations

import math

import torch

LOG2E = 1.0 / math.log(2.0)


def _descale(scale, batch: int, hkv: int, name: str):
    if scale is None:
        return None
    scale = torch.as_tensor(scale, dtype=torch.float32)
    try:
        return torch.broadcast_to(scale.float(), (batch, hkv))
    except RuntimeError:
        raise ValueError(f"{name} must broadcast to [batch, Hkv] = [{batch}, {hkv}], got {list(scale.shape)}") from None


_SCORE_ELEMENTS = 1 << 27  # float32 scores and K / V values held at once for a chunk of heads (512 MB)


def head_chunks(hq: int, group: int, rows: int, keys: int, dims: int, device=None):
    """(slice of query heads, their KV heads' indices) in chunks whose float32 scores [h, rows, keys] and K / V
    [h, keys, dims] stay within _SCORE_ELEMENTS: a long request over all heads at once holds GBs."""
    step = max(1, _SCORE_ELEMENTS // max(1, (rows + dims) * (keys + 1)))
    for h0 in range(0, hq, step):
        hs = slice(h0, min(hq, h0 + step))
        yield hs, torch.arange(hs.start, hs.stop, device=device) // group


def gather_kv(cache: torch.Tensor, page_table_row: torch.Tensor, kv_len: int) -> torch.Tensor:
    """The first `kv_len` tokens of one request as a contiguous float32 [kv_len, Hkv, D] tensor."""
    page_size = cache.shape[1]
    n_pages = -(-kv_len // page_size)
    pages = page_table_row[:n_pages].long()
    return cache[pages].float().reshape(n_pages * page_size, *cache.shape[2:])[:kv_len]


def visible_mask(q_len: int, kv_len: int, window_left: int = -1, device=None) -> torch.Tensor:
    """bool [q_len, kv_len]: True where query i may attend key k (causal, right-aligned, window)."""
    i = torch.arange(q_len, device=device).unsqueeze(1)
    k = torch.arange(kv_len, device=device).unsqueeze(0)
    last = i + kv_len - q_len
    mask = k <= last
    if window_left >= 0:
        mask &= k >= last - window_left
    return mask


def paged_attention_reference(
    q,
    k_cache,
    v_cache,
    page_table,
    cache_seqlens,
    cu_seqlens_q,
    *,
    sm_scale: float | None = None,
    window_left: int = -1,
    sinks=None,
    k_descale=None,
    v_descale=None,
):
    """(out float32 [total_q, Hq, Dv], lse float32 [total_q, Hq], base 2); see the module docstring."""
    total_q, hq, d = q.shape
    hkv, dv = k_cache.shape[2], v_cache.shape[3]
    if hq % hkv:
        raise ValueError(f"num_q_heads ({hq}) must be a multiple of num_kv_heads ({hkv})")
    group = hq // hkv
    batch = int(cache_seqlens.shape[0])
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    kd = _descale(k_descale, batch, hkv, "k_descale")
    vd = _descale(v_descale, batch, hkv, "v_descale")
    seqlens = cache_seqlens.tolist()
    cu = cu_seqlens_q.tolist()
    out = torch.zeros(total_q, hq, dv, dtype=torch.float32, device=q.device)
    lse = torch.full((total_q, hq), -math.inf, dtype=torch.float32, device=q.device)
    sink2 = None if sinks is None else sinks.float().to(q.device) * LOG2E  # [Hq], base 2
    for b in range(batch):
        q0, q1, n = cu[b], cu[b + 1], int(seqlens[b])
        length = q1 - q0
        if length == 0:
            continue
        k = gather_kv(k_cache, page_table[b], n).to(q.device)  # [N, Hkv, D]
        v = gather_kv(v_cache, page_table[b], n).to(q.device)  # [N, Hkv, Dv]
        if kd is not None:
            k = k * kd[b].to(q.device)[None, :, None]
        if vd is not None:
            v = v * vd[b].to(q.device)[None, :, None]
        k, v = k.transpose(0, 1), v.transpose(0, 1)  # [Hkv, N, D], [Hkv, N, Dv]
        qb = q[q0:q1].float().transpose(0, 1)  # [Hq, L, D]
        visible = visible_mask(length, n, window_left, q.device)
        for hs, kv_heads in head_chunks(hq, group, length, n, d + dv, q.device):
            kh, vh = k[kv_heads], v[kv_heads]  # [h, N, D], [h, N, Dv]: each query head's KV head
            s2 = torch.matmul(qb[hs], kh.transpose(1, 2)) * (scale * LOG2E)  # [h, L, N], base 2
            s2 = s2.masked_fill(~visible, -math.inf)
            if sink2 is not None:
                s2 = torch.cat([s2, sink2[hs, None, None].expand(s2.shape[0], length, 1)], dim=2)
            if s2.shape[2] == 0:  # no key and no sink: out 0, lse -inf
                break
            row_max = s2.amax(dim=2, keepdim=True)
            row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
            p = torch.exp2(s2 - row_max)
            del s2
            denom = p.sum(dim=2, keepdim=True)
            if sink2 is not None:
                p = p[:, :, :n]
            o = torch.matmul(p, vh) / torch.where(denom > 0, denom, torch.ones_like(denom))  # [h, L, Dv]
            out[q0:q1, hs] = o.transpose(0, 1)
            lse[q0:q1, hs] = (row_max + torch.log2(denom)).squeeze(2).transpose(0, 1)
    return out, lse
