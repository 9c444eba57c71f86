"""`PreparationSession(autotune=True)` for gemm.blockscaled plans: what `GemmPlan.candidates` offers and how
`GemmPlan.measure` times one.

A selection holds one config per bucket. Each bucket's list starts with the heuristic's config, then the
alternatives its kernel family has, each checked by `launch.why_not` for the plan's formats:
- the decode kernel (a plain `DecodeConfig`): the other FP4 placements (FP4 weights) and the K splits over a
  cluster, the sweeps `bench_gemm --sweep-subset fp4 / ksplit` time (`_decode_sweeps`);
- the tiled kernel (`TiledConfig`): `_kernel_tiled.candidate_configs` for the bucket's M;
- fused, stream, GEMV, two-pass and SM120 configs: the heuristic's alone (their variants are the benchmark's).
The candidates are the product of the buckets' lists, cut to at most MAX_CANDIDATES by dropping the last entry
of the longest list first (the heuristic's stays first everywhere, so candidate 0 is the heuristic selection): a
plan of one or two buckets (an `invocation`, or a few m_values) tries all PER_BUCKET entries of each, a plan of
all six buckets one alternative in each.
`measure` sums, over the selection's buckets, one launch's mean device time (CUDA events, `_lib.timing`) on
synthetic operands at the largest M the plan serves in that bucket."""

from __future__ import annotations

import itertools
import math

from .._shared import launch as L

PER_BUCKET = 8  # entries a bucket's list keeps before the product is cut
# selections timed at most (each bucket's kernels compile once, shared by the products): 2 ^ the bucket count, so a
# plan of every bucket still tries one alternative in each
MAX_CANDIDATES = 2 ** len(L.BUCKETS)


def bucket_configs(query, bucket: str, heuristic) -> tuple:
    """The heuristic's config of `bucket` first, then its family's alternatives the plan's formats can run."""
    kind = type(heuristic).__name__
    if kind == "DecodeConfig" and bucket.startswith("decode"):
        from . import _decode_sweeps as DS

        fp4 = DS.fp4_variants(heuristic) if query.b_format in ("nvfp4", "mxfp4") else ()
        alternatives = fp4 + DS.ksplit_variants(heuristic, query.k)
    elif kind == "TiledConfig":
        from . import _kernel_tiled as KT

        alternatives = KT.candidate_configs(tuned_m(query, bucket))
    else:
        alternatives = ()
    out = [heuristic]
    for c in alternatives:
        if c not in out and L.why_not(query.a_format, query.b_format, query.out_dtype, bucket, c) is None:
            out.append(c)
    return tuple(out[:PER_BUCKET])


def candidates(query, selection: tuple) -> tuple:
    """Selections ((bucket, config), ...) to time: the product of `bucket_configs`, at most MAX_CANDIDATES, the
    heuristic `selection` first."""
    lists = [list(bucket_configs(query, b, cfg)) for b, cfg in selection]
    while math.prod(len(x) for x in lists) > MAX_CANDIDATES:
        max(lists, key=len).pop()
    buckets = [b for b, _ in selection]
    return tuple(tuple(zip(buckets, combo)) for combo in itertools.product(*lists))


def tuned_m(query, bucket: str) -> int:
    """The M a bucket is timed at: the largest of the plan's m_values in it, else the bucket's largest M within
    max_m (at most 4096, as prime runs it)."""
    mine = [m for m in query.m_values if L.bucket_for(m) == bucket]
    return max(mine) if mine else int(min(L.BUCKET_MAX_M[bucket], query.max_m, 4096))


def measure(query, state, synthetic_call) -> float:
    """Seconds of one launch of each bucket's prepared variant (`state.extra["launchers"]`, prime's), summed."""
    from ..._lib.timing import seconds_per_run

    total = 0.0
    for bucket, cfg in state.selection:
        launch = state.extra["launchers"][bucket][0]
        q = query
        call = synthetic_call(
            q.a_format, q.b_format, q.n, q.k, tuned_m(q, bucket), q.out_dtype, state.device, launch, cfg
        )
        total += seconds_per_run(call)
    return total
