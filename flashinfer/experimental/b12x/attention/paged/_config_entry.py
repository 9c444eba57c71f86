"""The bench and test entries of the decode kernel's configuration (`parse_decode_entry`: 'WxKxS[flags][:parts]'
-> DecodeConfig), apart from the planning in `_config` (one owner per file; re-exported there)."""

from __future__ import annotations

from ._config import DecodeConfig


def parse_decode_entry(text: str):
    """'4x16x3fs:t33:m256' -> (DecodeConfig(4, 16, 3, fused_merge=True, fused_schedule=True) or None
    for 'h', flags {'f', 's'} set, target_items or None, min_chunk or None). 'h' with flags stands for
    the heuristic's DecodeConfig with them.

    Flags after WxKxS: f fused_merge, s fused_schedule, p fast_prologue, l preload_lengths, d
    direct_items, r persistent, g prefetch_pages, k lean_ticket, e early_pages, q q_reload, n heads_n8, w full_grid,
    b pair_budget;
    parts: tN
    target_items, mN min_chunk, oN min_ctas, uN merge_unroll, cN cluster, cNp cluster with cluster_push, c2s
    cluster_pairs (c2sp: pushed)
    (e.g. '4x16x4fspl:o3:u8', '8x16x2fspld:c8', '8x16x2fspld:c8p'). 'h' takes only f and s (the bench
    rebuilds the heuristic's config from those two), so p, l, d, r, g, k, e, oN, uN and cN need an
    explicit WxKxS."""
    head, *rest = text.split(":")
    body = head.rstrip("fspldrgkeqnwb")
    flags = set(head[len(body) :])
    if len(head) - len(body) != len(flags):
        raise ValueError(
            f"a decode entry's flags are f, s, p, l and d, once each, and k, e, r, g, q, n, w and b, got {text!r}"
        )
    decode = None
    target = min_chunk = None
    min_ctas = 0
    unroll = 2
    cluster = 0
    push = pairs = False
    for part in rest:
        digits = part[1:].rstrip("ps")
        if part[:1] == "c" and digits.isdigit() and part[1 + len(digits) :] in ("", "p", "s", "sp"):
            cluster = int(digits)
            push, pairs = part.endswith("p"), "s" in part[1 + len(digits) :]
            continue
        if len(part) < 2 or part[0] not in "tmou" or not part[1:].isdigit() or int(part[1:]) < 1:
            raise ValueError(
                f"schedule parts are tN (target_items) or mN (min_chunk), decode parts oN (min_ctas) or uN "
                f"(merge_unroll), N >= 1, got {part!r} in {text!r}"
            )
        if part[0] == "t":
            target = int(part[1:])
        elif part[0] == "m":
            min_chunk = int(part[1:])
        elif part[0] == "o":
            min_ctas = int(part[1:])
        else:
            unroll = int(part[1:])
    if body == "h":
        if flags & {"p", "l", "d", "r", "g", "k", "e", "q", "n", "w", "b"} or min_ctas or unroll != 2 or cluster:
            raise ValueError(
                f"p, l, d, oN and uN need an explicit WxKxS entry (like 4x16x3fspl:o3), as do k, e, r, g, q, n, w and b, "
                f"got {text!r}"
            )
    else:
        parts = body.split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(
                f"a decode entry is h|WxKxS[f][s][p][l][d][:tN][:mN][:oN][:uN] like 4x16x3fs:t33 (r, g, k, e after d), got {text!r}"
            )
        decode = DecodeConfig(
            *(int(p) for p in parts),
            fused_merge="f" in flags,
            fused_schedule="s" in flags,
            fast_prologue="p" in flags,
            min_ctas=min_ctas,
            preload_lengths="l" in flags,
            merge_unroll=unroll,
            direct_items="d" in flags,
            persistent="r" in flags,
            prefetch_pages="g" in flags,
            lean_ticket="k" in flags,
            early_pages="e" in flags,
            q_reload="q" in flags,
            heads_n8="n" in flags,
            full_grid="w" in flags,
            pair_budget="b" in flags,
            cluster=cluster,
            cluster_push=push,
            cluster_pairs=pairs,
        )
    return decode, flags, target, min_chunk
