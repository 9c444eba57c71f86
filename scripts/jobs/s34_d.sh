#!/usr/bin/env bash
# Session 34, fourth machine session (after the toolchain calls, on a snapshot): the attention gpu tier with fp8's
# small-batch plans on the n8 tile too, then fp8 at B = 1 / 2 / 4 against the m16 small-batch shape the heuristic
# ran before (8x16x2, and its 8-CTA cluster at B = 1 L = 1k), 8 calls a graph.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=14 TEST_LIMIT=420 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention 2>&1 | tail -3 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 200 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all \
  --shapes 1x1024 1x8192 1x32768 2x1024 2x8192 4x1024 4x8192 4x32768 --timer graph --calls-per-graph 8 --no-peers \
  --decode-configs heuristic 8x16x2fspldk@fp8 8x16x2fspldk:c8p@fp8 --json "$OUT/att.json" >"$OUT/att.txt" 2>&1
echo "bench att rc=$?"
grep -E "^decode_fp8|^fp8 / bf16" "$OUT/att.txt"
