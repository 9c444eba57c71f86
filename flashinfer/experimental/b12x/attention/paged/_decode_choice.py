"""The decode heuristic of a plan (`api.PagedAttentionPlan.heuristic` in mode decode): the kernel config for the plan's
capacities, its split schedule and, for plans above CLUSTER_PAIRS_MAX requests, a second one-launch kernel that
serves live batches of at most LIVE_SMALL_BATCH requests (`Selection.small`; run() picks by the live batch, which
the host knows from the bound tensors' shapes, so a captured graph replays the kernel of its own batch size)."""

from __future__ import annotations

import dataclasses

from . import _config  # its switches read at call time (tests and probes set them)
from ._config import (
    cluster_by_default,
    clustered_default,
    default_config,
    heads_n8_by_default,
    paired_default,
    pairs_by_default,
    split_schedule,
    tile_head_dim,
    why_not,
    with_pdl,
)

# LIVE_SMALL_BATCH (session 37, H200 graph timer, 8 calls a graph; docs/performance.md, session 37): a plan for more
# than CLUSTER_PAIRS_MAX requests also compiles the kernel a plan for CLUSTER_PAIRS_MAX would run (the 8-warp tile as
# cluster pairs, sm_90a, D 128) and runs it for live batches of at most this many requests. s37_c, plans for 32 /
# 128 requests, the plan's own kernel -> the 8-warp pairs, µs: fp8 B = 1 L = 8k 12.12 / 18.92 -> 9.73 / 9.67, B = 8
# L = 1k 10.82 / 11.32 -> 8.74 / 8.73, L = 8k 38.40 / 53.55 -> 36.46 / 36.45, B = 16 L = 1k 15.36 / 13.43 -> 10.35 /
# 10.37; bf16 B = 8 L = 1k 12.44 / 12.75 -> 9.96 / 9.91, B = 16 L = 1k 21.58 / 22.11 -> 20.26 / 20.37; at B = 32
# the plan's own tiles win (fp8 21.22 vs 23.97 at cap 32, bf16 35.64 vs 38.06), so the bound is 16. 0 turns it off.
# On since session 39 (614558d, H200): the attention gpu tier passed with it (test_paged_cluster_pairs_gpu.py -k
# live_small) and s38_b timed it in plans for 32 / 128 requests, on against off, µs: fp8 B = 1 L = 8k 9.58 / 9.62
# against 12.08 / 18.78, B = 8 L = 1k 8.71 / 8.72 against 10.92 / 11.29, B = 16 L = 1k 10.35 / 10.38 against 15.24 /
# 13.50; bf16 B = 8 L = 1k 9.95 / 9.84 against 12.70 / 12.72, B = 16 20.30 / 20.62 against 22.02 / 22.40; B = 17 /
# 32 / 128 (the plan's own kernel either way) within noise (docs/performance.md, session 39).
LIVE_SMALL_BATCH = 16
LIVE_SMALL_BATCH_MEASURED = 16  # the bound s37_c supports and s38_b confirmed


def _fit_page(config, page_size: int):
    """A warp's sub-tile may span two pages (the kernel copies it as two one-page pieces)."""
    if config.keys_per_warp <= 2 * page_size:
        return config
    return dataclasses.replace(config, keys_per_warp=page_size)


def decode_choice(caps, arch: str, sm_count: int, max_batch: int | None = None):
    """(DecodeConfig, ScheduleConfig) of the heuristic for `caps` on `arch`, as if the plan held `max_batch` requests
    (default: caps.max_batch); caps.config, when set, is taken as it is (with the plan's pdl)."""
    max_batch = caps.max_batch if max_batch is None else max_batch
    dim = tile_head_dim(caps.head_dim_qk, caps.head_dim_vo)
    decode = caps.config or default_config(caps.kv_dtype, dim, caps.page_size, arch, max_batch)
    dims = (caps.dtype, caps.kv_dtype, caps.num_q_heads, caps.num_kv_heads, caps.head_dim_qk, caps.head_dim_vo)
    fits = lambda d: why_not(*dims, caps.page_size, d, arch) is None  # noqa: E731
    if caps.config is None and not fits(_fit_page(decode, caps.page_size)):
        decode = default_config(caps.kv_dtype, dim, caps.page_size, arch)  # small shape unfit here
    decode = _fit_page(decode, caps.page_size)
    if caps.config is None and _config.FUSED_BY_DEFAULT:
        one_launch = max_batch <= _config.FUSED_SCHEDULE_MAX_BATCH
        decode = dataclasses.replace(decode, fused_merge=True, fused_schedule=one_launch)
    decode = with_pdl(caps.pdl, decode)
    clustered = clustered_default(decode)
    max_context = caps.max_page_table_width * caps.page_size
    if caps.config is None and cluster_by_default(max_batch, max_context, decode) and fits(clustered):
        decode = clustered
    pairs = paired_default(decode)
    if caps.config is None and pairs_by_default(caps.kv_dtype, dim, arch, max_batch, decode):
        decode = pairs if fits(pairs) else decode
    light = dataclasses.replace(decode, heads_n8=True)
    if caps.config is None and heads_n8_by_default(caps.kv_dtype, caps.group, arch, decode) and fits(light):
        decode = light
    return decode, split_schedule(decode, caps.kv_dtype, dim, caps.num_kv_heads, sm_count, arch)


def small_choice(caps, arch: str, sm_count: int):
    """(DecodeConfig, ScheduleConfig, live batches it serves) of the live small-batch kernel (LIVE_SMALL_BATCH above),
    or None: only for the heuristic's plans (no caps.config) above CLUSTER_PAIRS_MAX requests whose
    CLUSTER_PAIRS_MAX-request choice is cluster pairs (sm_90a, D 128; not with pdl='prefetch')."""
    bound = min(LIVE_SMALL_BATCH, _config.CLUSTER_PAIRS_MAX)
    if caps.config is not None or bound <= 0 or caps.max_batch <= _config.CLUSTER_PAIRS_MAX:
        return None  # plans of at most CLUSTER_PAIRS_MAX requests run that kernel already (or their small shape)
    decode, schedule = decode_choice(caps, arch, sm_count, max_batch=_config.CLUSTER_PAIRS_MAX)
    return (decode, schedule, bound) if decode.cluster_pairs else None
