"""Replay one moe.fused_moe layer's captured call under Nsight Compute, one profile per kernel node.

    ncu --profile-from-start off --clock-control none --graph-profiling node [--cache-control all] \
        --section SpeedOfLight --section LaunchStats --section Occupancy --csv \
        python3 scripts/ncu_moe_layer.py [--shape 128x8x2048x768] [--tokens 1] [--recipe w4a16] [--replays 2]

Why: `bench_moe --steps` splits a decode layer into launch prefixes (E = 128 T = 1 w4a16, session
20: route + gather 2.1 µs, FC1 +9.0, FC2 +6.7, combine +2.6), and each increment holds a kernel's
own time plus the launch and dependency gap before it. ncu serializes the graph's kernel nodes, so
its durations are the kernels' own (no PDL overlap): their sum against the layer's 20 µs says how
much of a decode layer is gaps, and FC2's duration against its +6.7 says whether FC2 is slow or
waits. Builds the layer as `bench_moe` does (its synthetic checkpoint and routing, the heuristic's
plan), captures one call in a CUDA graph and brackets --replays replays with cudaProfilerStart/Stop.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks/ is not installed
    from b12x.moe import fused_moe as fm
    from benchmarks.experimental.b12x import bench_moe as BM
    from benchmarks.experimental.b12x.common import capture_graph, profiled_replays
    from flashinfer.experimental.b12x.moe.fused_moe import api

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=BM.parse_shape, default=(128, 8, 2048, 768), help="ExkxHxI")
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--recipe", default="w4a16", choices=BM.RECIPES)
    p.add_argument("--replays", type=int, default=2)
    args = p.parse_args()
    if args.tokens < 1 or args.replays < 1:
        p.error(f"--tokens and --replays must be >= 1, got {args.tokens} and {args.replays}")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1)
    e, k, h, _ = args.shape
    ours = BM.setup_ours(args.recipe, "silu", args.shape, args.tokens, dev, gen)
    a = torch.randn(args.tokens, h, device=dev, generator=gen).to(torch.bfloat16)
    ids, w = BM.routing(args.tokens, k, e, gen, dev)
    out = torch.empty_like(a)
    binding = fm.bind(ours.plan, a=a, experts=ours.experts, topk_weights=w, topk_ids=ids, output=out)
    graph = capture_graph(lambda: fm.run(binding=binding), dev)
    print("steps:", [name for name, _ in api.steps(ours.plan.state.extra["launchers"], binding, out)])
    profiled_replays(graph, args.replays)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
