"""Shared builders for the attention.paged tests: paged caches filled from contiguous per-request K/V.

`make_case` draws contiguous K/V per request, scatters them into randomly permuted pages of one
cache (unused token slots and pages hold NaN, or 0x7F NaN codes for fp8, so a kernel or oracle that
reads past a request's length is caught), and returns the contiguous copies for independent checks.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
import torch

from flashinfer.experimental.b12x.attention.paged._config import parse_decode_entry

# The DecodeConfig flags of the plan heuristic's one-launch decode (the fused merge and schedule, and
# what DECODE_LATENCY_FLAGS and LEAN_TICKET add): explicit configs with them run as the defaults do.
ONE_LAUNCH = dict(fused_merge=True, fused_schedule=True, fast_prologue=True, preload_lengths=True, direct_items=True,
                  lean_ticket=True)  # fmt: skip


@dataclass
class Case:
    q: torch.Tensor  # [total_q, Hq, D]
    k_cache: torch.Tensor  # [pages, page_size, Hkv, D]
    v_cache: torch.Tensor
    page_table: torch.Tensor  # int32 [batch, width]
    cache_seqlens: torch.Tensor  # int32 [batch]
    cu_seqlens_q: torch.Tensor  # int32 [batch + 1]
    k_dense: list  # per request float32 [N, Hkv, D] (descale applied)
    v_dense: list
    k_descale: torch.Tensor | None
    v_descale: torch.Tensor | None


def make_case(
    kv_lens,
    q_lens=None,
    *,
    num_q_heads=8,
    num_kv_heads=2,
    head_dim=64,
    head_dim_v=None,
    page_size=16,
    dtype=torch.bfloat16,
    kv_dtype=None,
    combined=False,
    extra_pages=3,
    width=None,
    device="cpu",
    seed=0,
):
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    kv_dtype = kv_dtype or dtype
    fp8 = kv_dtype == torch.float8_e4m3fn
    batch = len(kv_lens)
    q_lens = [1] * batch if q_lens is None else list(q_lens)
    pages_per = [math.ceil(n / page_size) for n in kv_lens]
    num_pages = sum(pages_per) + extra_pages
    width = width or max([*pages_per, 1])
    dv = head_dim if head_dim_v is None else head_dim_v
    shape = (num_pages, page_size, num_kv_heads, head_dim)
    if combined:  # one [pages, 2, page_size, Hkv, D] tensor; K and V are strided views of it
        assert dv == head_dim, "combined K/V caches share one head dim"
        kv = torch.empty((num_pages, 2, page_size, num_kv_heads, head_dim), dtype=kv_dtype, device=dev)
        k_cache, v_cache = kv[:, 0], kv[:, 1]
    else:
        k_cache = torch.empty(shape, dtype=kv_dtype, device=dev)
        v_cache = torch.empty(shape[:3] + (dv,), dtype=kv_dtype, device=dev)
    for cache in (k_cache, v_cache):
        if fp8:
            cache.view(torch.uint8).fill_(0x7F)  # e4m3 NaN
        else:
            cache.fill_(float("nan"))
    perm = torch.randperm(num_pages, generator=gen, device=dev)
    page_table = torch.randint(0, num_pages, (batch, width), generator=gen, dtype=torch.int32, device=dev)
    k_scale = torch.rand(batch, num_kv_heads, generator=gen, device=dev) * 0.5 + 0.05 if fp8 else None
    v_scale = torch.rand(batch, num_kv_heads, generator=gen, device=dev) * 0.5 + 0.05 if fp8 else None
    k_dense, v_dense, cursor = [], [], 0
    for b, n in enumerate(kv_lens):
        padded = pages_per[b] * page_size
        k = torch.randn(padded, num_kv_heads, head_dim, generator=gen, device=dev)
        v = torch.randn(padded, num_kv_heads, dv, generator=gen, device=dev)
        k, v = ((k * 40).to(kv_dtype), (v * 40).to(kv_dtype)) if fp8 else (k.to(kv_dtype), v.to(kv_dtype))
        mine = perm[cursor : cursor + pages_per[b]]
        cursor += pages_per[b]
        page_table[b, : pages_per[b]] = mine.to(torch.int32)
        # whole pages at once; the tail of the last page (past n) keeps the NaN fill
        full = n // page_size
        if full:
            k_cache[mine[:full]] = k[: full * page_size].view(full, page_size, num_kv_heads, head_dim)
            v_cache[mine[:full]] = v[: full * page_size].view(full, page_size, num_kv_heads, dv)
        if n % page_size:
            k_cache[mine[full], : n % page_size] = k[full * page_size : n]
            v_cache[mine[full], : n % page_size] = v[full * page_size : n]
        kf, vf = k[:n].float(), v[:n].float()
        if fp8:
            kf, vf = kf * k_scale[b][None, :, None], vf * v_scale[b][None, :, None]
        k_dense.append(kf)
        v_dense.append(vf)
    total_q = sum(q_lens)
    q = (torch.randn(total_q, num_q_heads, head_dim, generator=gen, device=dev) * 2).to(dtype)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=dev)
    return Case(q, k_cache, v_cache, page_table, lens, cu, k_dense, v_dense, k_scale, v_scale)


def dense_attention(case: Case, *, sm_scale=None, window_left=-1, sinks=None):
    """Independent check: per request, SDPA in float64 on contiguous K/V (sinks as an extra key with
    K = V = 0 and an additive bias), LSE from an explicit logsumexp. Returns (out, lse base 2)."""
    q = case.q.double().cpu()
    hq, d = q.shape[1], q.shape[2]
    scale = 1 / math.sqrt(d) if sm_scale is None else sm_scale
    outs, lses = [], []
    cu = case.cu_seqlens_q.tolist()
    for b, (k, v) in enumerate(zip(case.k_dense, case.v_dense)):
        qb = q[cu[b] : cu[b + 1]].transpose(0, 1)  # [Hq, L, D]
        length, n = qb.shape[1], k.shape[0]
        group = hq // k.shape[1]
        kb = k.double().repeat_interleave(group, 1).transpose(0, 1)  # [Hq, N, D]
        vb = v.double().repeat_interleave(group, 1).transpose(0, 1)
        i = torch.arange(length)[:, None]
        j = torch.arange(n)[None, :]
        allowed = j <= i + n - length
        if window_left >= 0:
            allowed &= j >= i + n - length - window_left
        bias = torch.zeros(hq, length, n, dtype=torch.float64).masked_fill(~allowed, -math.inf)
        if sinks is not None:
            kb = torch.cat([kb, torch.zeros(hq, 1, d, dtype=torch.float64)], 1)
            vb = torch.cat([vb, torch.zeros(hq, 1, vb.shape[2], dtype=torch.float64)], 1)
            bias = torch.cat([bias, sinks.double().cpu()[:, None, None].expand(hq, length, 1)], 2)
        if length == 0:
            continue
        logits = torch.matmul(qb, kb.transpose(1, 2)) * scale + bias
        lse = torch.logsumexp(logits, dim=2) / math.log(2)
        visible = torch.isfinite(logits).any(dim=2, keepdim=True)
        out = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, scale=scale)
        outs.append(torch.where(visible, out, torch.zeros_like(out)).transpose(0, 1))
        lses.append(lse.transpose(0, 1))
    return torch.cat(outs).float(), torch.cat(lses).float()


def check_against_reference(case: Case, out, lse, emu, *, window_left=-1, sinks=None) -> None:
    """One run's (out, lse) against reference.py: the NaN poison is gone, max |out - ref| is within 2x
    that of `emu` (the reference's math at the kernel's precision) + 1e-3, and LSE within 2e-3 with the
    same rows finite."""
    from flashinfer.experimental.b12x.attention.paged.reference import paged_attention_reference

    ref_out, ref_lse = paged_attention_reference(
        case.q, case.k_cache, case.v_cache, case.page_table, case.cache_seqlens, case.cu_seqlens_q,
        window_left=window_left, sinks=sinks, k_descale=case.k_descale, v_descale=case.v_descale,
    )  # fmt: skip
    assert not torch.isnan(out).any(), "output rows left unwritten (NaN poison survived)"
    assert not torch.isnan(lse).any(), "lse rows left unwritten (NaN poison survived)"
    budget = 2 * (emu - ref_out).abs().max().item() + 1e-3
    err = (out.float() - ref_out).abs().max().item()
    assert err <= budget, f"max |out - ref| = {err:.3g} > {budget:.3g} (2x torch at kernel precision + 1e-3)"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse))
    torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=0, atol=2e-3)


def assert_bench_flag(entry: str, field: str, letter: str):
    """A decode bench entry with flag `letter` parses to a config with `field` set, the repr names the field only
    when set, and the letter needs an explicit WxKxS entry (not 'h'); returns the config."""
    cfg, flags, *_ = parse_decode_entry(entry)
    assert getattr(cfg, field) is True and letter in flags
    assert f"{field}=True" in repr(cfg) and field not in repr(dataclasses.replace(cfg, **{field: False}))
    with pytest.raises(ValueError, match="need an explicit WxKxS entry"):
        parse_decode_entry("h" + letter)
    return cfg
