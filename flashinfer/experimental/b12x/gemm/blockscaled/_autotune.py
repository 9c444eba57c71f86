"""`PreparationSession(autotune=True)` for gemm.blockscaled plans: the alternatives `GemmPlan.candidate_parts`
offers and how `GemmPlan.measure_parts` times them.

Each M runs one bucket's kernel, so a plan's run time is a sum of independent per-bucket times and the tuning is
separable: a part is one bucket, its alternatives ((bucket, config) pairs) start with the heuristic's config,
then the ones its kernel family has, each checked by `launch.why_not` for the plan's formats:
- the decode kernel (a plain `DecodeConfig`): the other FP4 placements (FP4 weights) and the K splits over a
  cluster, the sweeps `bench_gemm --sweep-subset fp4 / ksplit` time (`_decode_sweeps`);
- the tiled kernel (`TiledConfig`): `_kernel_tiled.candidate_configs` for the bucket's M;
- fused, stream, GEMV, two-pass and SM120 configs: the heuristic's alone (their variants are the benchmark's).
The session times `preparation.plan.rounds(parts)`: as many selections as the longest list (at most
PER_BUCKET), so every alternative of every bucket runs once and each bucket keeps its fastest.
`measure_parts` times, per bucket of the selection, one launch's mean device time (CUDA events, `_lib.timing`)
on synthetic operands at the largest M the plan serves in that bucket."""

from __future__ import annotations

from .._shared import launch as L

PER_BUCKET = 8  # alternatives a bucket keeps: the rounds the session times


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


def parts(query, selection: tuple) -> tuple:
    """Per bucket of the heuristic `selection`, its alternatives as (bucket, config) pairs, the heuristic's first."""
    return tuple(tuple((b, c) for c in bucket_configs(query, b, cfg)) for b, cfg in selection)


def tuned_m(query, bucket: str) -> int:
    """The M a bucket is timed at: the largest of the plan's m_values in it, else the bucket's largest M within
    max_m (at most 4096, as prime runs it)."""
    mine = [m for m in query.m_values if L.bucket_for(m) == bucket]
    return max(mine) if mine else int(min(L.BUCKET_MAX_M[bucket], query.max_m, 4096))


def measure_parts(query, state, synthetic_call) -> tuple[float, ...]:
    """Seconds of one launch of each bucket's prepared variant (`state.extra["launchers"]`, prime's)."""
    from ..._lib.timing import seconds_per_run

    times = []
    for bucket, cfg in state.selection:
        launch = state.extra["launchers"][bucket][0]
        q = query
        call = synthetic_call(
            q.a_format, q.b_format, q.n, q.k, tuned_m(q, bucket), q.out_dtype, state.device, launch, cfg
        )
        times.append(seconds_per_run(call))
    return tuple(times)
