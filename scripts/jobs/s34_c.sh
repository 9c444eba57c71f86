#!/usr/bin/env bash
# Session 34, third machine session (after the toolchain calls, on a snapshot): the demo gpu tests and the demo
# itself on the new 16-bit KV default (heads_n8), then fp8 decode on 16 warps an SM: the n8 8x16x2 tile (124
# registers, 76 KB: two CTAs an SM) at its own split and at the one-wave target of two an SM (t33), beside the m16
# 8x16x2 / the heuristic, and the 4-warp n8 tile at the m16 tile's split (t33), 8 calls a graph.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=400 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/demo 2>&1 | tail -3 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 200 python3 -m b12x demo >"$OUT/demo.txt" 2>&1; echo "demo rc=$?"; tail -5 "$OUT/demo.txt"
timeout 300 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all \
  --shapes 1x1024 1x8192 1x32768 8x1024 8x8192 32x1024 32x8192 --timer graph --calls-per-graph 8 --no-peers \
  --decode-configs heuristic 8x16x2fspldk@fp8 8x16x2fspldkn@fp8 8x16x2fspldkn:t33@fp8 8x16x2fspldkn:t66@fp8 \
  4x32x2fspldkn:t33@fp8 --json "$OUT/att.json" >"$OUT/att.txt" 2>&1
echo "bench att rc=$?"
grep -E "^decode_fp8|^fp8 / bf16" "$OUT/att.txt"
