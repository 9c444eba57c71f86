#!/usr/bin/env bash
# Session 34, first machine session (after the toolchain calls, on a snapshot): the register-light decode tile
# (`DecodeConfig.heads_n8`, `_decode_n8.py`) against the reference (test_paged_n8_gpu.py), then #8's decode grid
# with 8 calls a graph: the heuristic rows (the baseline) beside the n8 tiles of both KV dtypes and fp8's best m16
# entry (8x32x2fspldk), one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=300 bash scripts/device_snapshot_run.sh - @scripts/jobs/s34_a_sel.txt 2>&1 | tail -3 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 400 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --batch 1 8 32 128 \
  --kv-len 1024 8192 32768 --timer graph --calls-per-graph 8 --no-peers \
  --decode-configs heuristic 8x32x2fspldk@fp8 8x32x2fspldkn@fp8 4x32x2fspldkn@fp8 2x32x2fspldkn@fp8 \
  4x16x3fspldkn@bf16 8x16x2fspldkn@bf16 --json "$OUT/att.json" >"$OUT/att.txt" 2>&1
echo "bench att rc=$?"
tail -c 6000 "$OUT/att.txt"
