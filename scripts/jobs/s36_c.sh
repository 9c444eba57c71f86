#!/usr/bin/env bash
# Session 36: #8's B = 32 L = 1k fp8 (1.67x bf16 in s35_c, needs 1.70x: 21.4 µs against 21.8) across the fp8
# tiles that change its warps, stages, CTAs an SM or split (predictions in docs/predictions/attention.md, session
# 36), with bf16's heuristic in the same process for the ratio. After the two toolchain calls; runs the travelled
# tree (the commit in COMMIT) on PYTHONPATH.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD:$PWD/flashinfer/experimental/b12x/_compat
export B12X_CACHE_DIR=/tmp/b12x-cache  # (_compat holds the b12x shim the benchmarks import)
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
timeout 500 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --shapes 32x1024 8x1024 \
  --timer graph --calls-per-graph 8 --no-peers \
  --decode-configs heuristic 4x32x3fspldk@fp8 4x32x2fspldk:o3@fp8 2x32x2fspldk@fp8 4x16x2fspldk@fp8 \
  4x32x2fspldkq@fp8 4x32x2fspldk:t100@fp8 8x32x2fspldk:c2p@fp8 --json "$OUT/att.json" >"$OUT/att.txt" 2>&1
echo "bench att rc=$?"
grep -E "^decode|^case" "$OUT/att.txt" | tail -40
