"""attention.paged's bind-time checks of the live values (`bind` calls them outside CUDA-graph capture): the request
layout (cache_seqlens, cu_seqlens_q) and the page ids the requests read. Host code; split from `api.py`."""

from __future__ import annotations


def check_values(c, cu, lens, page_table, total_q: int, pages: int) -> None:
    """Host checks of the live request layout and of the page ids the requests read (skipped under capture). cu
    None: decode (one query row a request, cu_seqlens_q not read). cache_seqlens is read once, as a list."""
    lens_l = lens.tolist()
    for b, kv in enumerate(lens_l):
        if kv < 0:
            raise ValueError(f"cache_seqlens must be >= 0, got cache_seqlens[{b}]={kv}")
    if cu is not None:
        _check_extend_layout(c, cu, lens_l, total_q)
    need = [-(-kv // c.page_size) for kv in lens_l]  # the page-table columns each request reads
    for b, n in enumerate(need):
        if n > page_table.shape[1]:
            raise ValueError(
                f"page_table has {page_table.shape[1]} columns, request {b} needs {n} "
                f"(cache_seqlens[{b}]={lens_l[b]}, page_size {c.page_size})"
            )
    _check_page_ids(need, page_table, pages)


def _check_extend_layout(c, cu, lens_l: list, total_q: int) -> None:
    """cu_seqlens_q against q's rows and cache_seqlens (extend / verify)."""
    cu_l = cu.tolist()
    if cu_l[0] != 0 or cu_l[-1] > total_q:
        raise ValueError(
            f"cu_seqlens_q must start at 0 and end at most at total_q={total_q} (rows of q), got {cu_l[0]} .. {cu_l[-1]}"
        )
    q_lens = [b - a for a, b in zip(cu_l, cu_l[1:])]
    for b, n in enumerate(q_lens):
        if n < 0:
            raise ValueError(
                f"cu_seqlens_q must be non-decreasing, got cu_seqlens_q[{b}]={cu_l[b]} > cu_seqlens_q[{b + 1}]={cu_l[b + 1]}"
            )
    for b, (n, kv) in enumerate(zip(q_lens, lens_l)):
        if n > kv:
            raise ValueError(
                f"cache_seqlens must include the new tokens (q_len <= cache_seqlens), got q_len {n} > cache_seqlens[{b}]={kv}"
            )
    if c.mode == "verify" and len(set(q_lens)) > 1:
        raise ValueError(f"verify mode: every request must have the same q_len, got q_lens {sorted(set(q_lens))}")


def _check_page_ids(need: list, page_table, pages: int) -> None:
    """The page ids the requests read (row b's first need[b] columns; the rest may hold anything) lie in
    [0, pages). Read on the host as lists (no tensor is made here): about a millisecond for 8k live entries."""
    width = max(need, default=0)
    if width == 0:
        return
    for b, row in enumerate(page_table[:, :width].tolist()):
        live = row[: need[b]]
        if live and (min(live) < 0 or max(live) >= pages):
            j = next(j for j, page in enumerate(live) if not 0 <= page < pages)
            raise ValueError(
                f"page_table[{b}, {j}] = {live[j]} is not a page of the cache (k_cache holds {pages} pages; "
                f"request {b} reads its first {need[b]} columns)"
            )
