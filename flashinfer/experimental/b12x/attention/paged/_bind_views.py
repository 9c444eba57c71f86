"""attention.paged's bind: the views of the plan's scratch a call of (batch, total_q) runs with.

They depend only on the plan, the scratch and those two numbers, so with the plan's own scratch they are built once
per (batch, total_q) and kept in the plan's state (session 46: slicing them cost about a third of bind's host time,
and an eager serving loop binds every layer at every step). Host code; split from `api.py`.
"""

from __future__ import annotations

from typing import NamedTuple

from ._caps_checks import EXTEND_MODES
from ._config import extend_item_capacity

MAX_KEPT = 1024  # (batch, total_q) pairs kept a plan; past it the cache starts over


class ScratchViews(NamedTuple):
    out: object  # [total_q, Hq, Dv]: the default output
    lse: object  # [total_q, Hq]: the default LSE
    unit: object  # [batch, Hkv] broadcast of 1.0: the default descales
    work: object  # the work-list rows this call can use (decode: batch + split target; extend: query tiles)
    no_sink: object  # the kernels' sink argument when there is none
    decode_views: tuple  # decode: (requests, count, part_o, part_lse, tickets)
    extend_views: tuple  # extend: (count,) with one tile; with two (counts, flags, large rows, large count,
    # small count, preds)


def kept(state) -> dict:
    """The plan state's views by (batch, total_q), started over whenever its scratch or its selection is no longer
    the one they were sliced from (a re-attached workspace must never be read through old views)."""
    entry = state.extra.get("bind_views")
    if entry is None or entry[0] is not state.scratch or entry[1] is not state.selection:
        entry = state.extra["bind_views"] = (state.scratch, state.selection, {})
    return entry[2]


def scratch_views(c, selection, scratch: dict, batch: int, total_q: int, kept: dict | None = None) -> ScratchViews:
    """The views for `caps` c and the plan's `selection`; `kept` (the plan state's dict, only for the plan's own
    scratch) holds them by (batch, total_q)."""
    if kept is not None:
        views = kept.get((batch, total_q))
        if views is not None:
            return views
    views = _build(c, selection, scratch, batch, total_q)
    if kept is not None:
        if len(kept) >= MAX_KEPT:
            kept.clear()
        kept[(batch, total_q)] = views
    return views


def _build(c, selection, scratch: dict, batch: int, total_q: int) -> ScratchViews:
    import torch

    extend_views = ()
    if c.mode in EXTEND_MODES:
        tiles = scratch["tiles"]
        ext = selection.extend
        need = extend_item_capacity(total_q, batch, ext.list_tokens(c.group))
        work = tiles[: min(tiles.shape[0], need)]
        no_sink = scratch["no_sink"]
        if ext.small is not None:  # the large kernel's grid: the rows its own tile could need
            large = extend_item_capacity(total_q, batch, ext.tokens_per_tile(c.group))
            count, flags = scratch["count"], scratch["choice"]
            preds = flags.view(torch.bool)  # 0-d views: the if-nodes' predicates (conditional)
            # a persistent kernel reads (its items, its next-item counter): count[k::2]
            large_count, small_count = (
                count[k::2] if p else count[k : k + 1] for k, p in enumerate(ext.persistent_tiles())
            )
            extend_views = (count[:4], flags, work[: min(work.shape[0], large)], large_count, small_count,
                            preds[0], preds[1])  # fmt: skip
        else:  # sliced here once, not at every run (host time)
            extend_views = (scratch["count"][:1],)
    else:
        # The schedule never makes more than batch + target items: launching only that many rows keeps
        # CTAs of dead items (which exit at once) few; the row count is a shape, fixed under capture.
        rows = 0
        if selection is not None:  # the items beyond one a request that either decode kernel's split may make
            small = selection.small.schedule.target_items if selection.small is not None else 0
            rows = min(c.item_capacity, batch + max(selection.schedule.target_items, small))
        work = scratch["work"][:rows]
        no_sink = scratch["partial_lse"][0]
    decode_views = ()
    if c.mode == "decode":  # sliced here once: run() then launches without building views (host time)
        rows = work.shape[0]
        decode_views = (scratch["requests"][:batch], scratch["count"][:1], scratch["partial_out"][:rows],
                        scratch["partial_lse"][:rows], scratch["tickets"][:batch])  # fmt: skip
    unit = scratch["unit"].expand(batch, c.num_kv_heads)
    return ScratchViews(scratch["out"][:total_q], scratch["lse"][:total_q], unit, work, no_sink, decode_views,
                        extend_views)  # fmt: skip
