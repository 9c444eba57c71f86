"""Replay norm.mhc calls captured in a CUDA graph under Nsight Compute, one profile per kernel node.

    ncu --profile-from-start off --clock-control none --graph-profiling node --metrics gpu__time_duration.sum \
        --csv python3 scripts/ncu_mhc.py [--op post_pre] [--tokens 1] [--hidden 7168] [--variant pdl_ctas1] \
        [--calls 8] [--replays 2]

Builds the call as bench_norm does (caller-buffer form, the plan's default selection or a bench_norm
--variants name), captures --calls calls in one graph and brackets --replays replays with
cudaProfilerStart/Stop. ncu serializes the kernel nodes: each duration is the kernel's own, without the
launch gaps and PDL overlap of a real replay, so the sum over one call's kernels against bench_norm's
per-call graph time splits #5's T = 1 figure into kernel time and the rest (launches, gaps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks/ is not installed
    import b12x
    from benchmarks.experimental.b12x import bench_norm as BN
    from benchmarks.experimental.b12x.common import capture_graph, profiled_replays
    from flashinfer.experimental.b12x.norm import mhc
    from flashinfer.experimental.b12x.norm.mhc import api, reference

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="post_pre", choices=("pre", "post", "post_pre"))
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--variant", default=None, help="a bench_norm --variants name (default: the plan's selection)")
    p.add_argument("--calls", type=int, default=8, help="calls captured in the graph")
    p.add_argument("--replays", type=int, default=2)
    args = p.parse_args()
    if min(args.tokens, args.calls, args.replays) < 1:
        p.error(f"--tokens, --calls and --replays must be >= 1, got {args.tokens}, {args.calls}, {args.replays}")
    override = None
    if args.variant is not None:
        variants = BN.sweep_configs()
        if args.variant not in variants:
            p.error(
                f"--variant must be one of bench_norm's variants ({', '.join(sorted(variants))}), got {args.variant}"
            )
        override = variants[args.variant]
    dev = torch.device("cuda")
    plan = mhc.plan(mhc.Caps(device=dev, max_tokens=args.tokens, hidden_size=args.hidden), override=override)
    with b12x.PreparationSession(dev) as session:
        session.prepare([plan])
    t, h = args.tokens, args.hidden
    ins = api.synthetic_inputs(t, h, device=dev, generator=torch.Generator(device=dev).manual_seed(t))
    outs = dict(
        residual=torch.empty(t, 4, h, dtype=torch.bfloat16, device=dev),
        y=torch.empty(t, h, dtype=torch.bfloat16, device=dev),
        post=torch.empty(t, 4, device=dev),
        comb=torch.empty(t, 4, 4, device=dev),
    )
    call = BN._calls(mhc, reference, plan, ins, outs)[args.op][0]

    def calls():
        for _ in range(args.calls):
            call()

    graph = capture_graph(calls, dev)
    print(f"norm.mhc {args.op} T={t} H={h} variant={args.variant or 'default'}: {args.calls} calls a graph")
    profiled_replays(graph, args.replays)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
