#!/usr/bin/env bash
# Session 31, data for the next session (after the toolchain calls, on a snapshot): other MXFP8 "quarters"
# tiles in K-major order, bit for bit (test_gpu_candidates), then timed against the K-major default at #4's
# 4096-row shapes, plain and as programmatic dependents: is there a tile that reaches 80% of copy at 4096 x 4096
# launched plainly (the default reads 78.4%)?
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=90 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_g_sel.txt 2>&1 | tail -2 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 90 python3 -m benchmarks.experimental.b12x.bench_quantization --op mxfp8 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "layout='quarters', pdl=False, k_major=True" \
  --json "$OUT/mx_tiles.json" >"$OUT/mx_tiles.txt" 2>&1
echo "bench rc=$?"
