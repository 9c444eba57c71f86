#!/usr/bin/env bash
# Session 34, second machine session (after the toolchain calls, on a snapshot): the attention gpu tier with 16-bit
# KV plans on the heads_n8 tile by default (KV16_HEADS_N8), then #8's decode grid with 8 calls a graph: the
# heuristic rows beside the m16 tiles the bf16 heuristic took before (the A/B) and the n8 single-request cluster.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=14 TEST_LIMIT=420 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention 2>&1 | tail -4 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 330 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --batch 1 8 32 128 \
  --kv-len 1024 8192 32768 --timer graph --calls-per-graph 8 --no-peers \
  --decode-configs heuristic 8x16x2fspldk:c8p@bf16 8x16x2fspldk@bf16 4x16x3fspldk@bf16 8x16x2fspldkn:c8p@fp8 \
  --json "$OUT/att.json" >"$OUT/att.txt" 2>&1
echo "bench att rc=$?"
grep -E "^fp8 / bf16" "$OUT/att.txt"
