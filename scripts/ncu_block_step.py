"""Replay the demo block's captured decode step under Nsight Compute, one profile per kernel node.

    ncu --profile-from-start off --clock-control none --graph-profiling node [--cache-control all] \
        --section SpeedOfLight --section LaunchStats --section WarpStateStats --csv \
        python3 scripts/ncu_block_step.py [--variant fused+pdl] [--tokens 1] [--replays 2]

Builds the step exactly as `bench_block` does for --variant (triton-pdl glue), captures it in a CUDA
graph, and brackets --replays replays with cudaProfilerStart/Stop so ncu profiles only those kernels
(ncu serializes them: every kernel's duration is its own, without the PDL overlap of the real
replay; with --cache-control all each starts from a flushed L2, as bench_block's replays do).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks/ is not installed
    from benchmarks.experimental.b12x import bench_block as BB
    from benchmarks.experimental.b12x.common import capture_graph, profiled_replays
    from flashinfer.experimental.b12x._demo import block as B
    from flashinfer.experimental.b12x._demo import run as R

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", default="fused+pdl", choices=tuple(BB.VARIANTS))
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--glue", default="triton-pdl")
    p.add_argument("--replays", type=int, default=2)
    args = p.parse_args()
    spec, dev = B.MODELS["llama-small"], torch.device("cuda")
    with tempfile.TemporaryDirectory(prefix="b12x-ncu-") as tmp:
        built = R.build(spec, args.tokens, dev, seed=args.tokens, tmp=tmp, lens=[args.context] * args.tokens)
    kw = dict(BB.VARIANTS[args.variant])
    l2, _ = kw.pop("l2") or (None, None)
    plans, _ = R.prepare(spec, built["weights"], built["cache"], dev, args.tokens, freeze=False, **kw)
    step = R.DecodeStep(spec, built["weights"], built["norms"], built["cache"], plans, dev, args.tokens,
                        glue=args.glue, l2_prefetch=l2)  # fmt: skip
    step.x.copy_(torch.randn(args.tokens, spec.hidden).to(torch.bfloat16))
    graph = capture_graph(step, dev)
    torch.cuda.synchronize()
    print("ops:", [name for name, _, _ in step.ops])
    profiled_replays(graph, args.replays)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
