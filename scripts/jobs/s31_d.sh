#!/usr/bin/env bash
# Session 31, fourth machine session (after the toolchain calls, on a snapshot): the dispatch's K-major mid tile
# (`_dispatch.MID_K_MAJOR_MAX_K`) through the quantization gpu tier (the dispatch bit for bit at K = 32 / 160 /
# 4096 on both sides of the threshold, fp16, PDL, graph capture), then the plan against the previous mid tile
# (the same preload tile in the default order) at the 4096-row shapes and 16384 x 4096, plain and as programmatic
# dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=300 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_d_sel.txt 2>&1 | tail -4 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 --timer graph \
  --no-peers --pdl --match "halves', k_iters=4, prefetch=False, unroll=True, persistent=0, stream=False, max_regs=0, lut=True, preload=True, pdl=False, k_major=False" \
  --json "$OUT/mid.json" >"$OUT/mid.txt" 2>&1
echo "bench rc=$?"
timeout 100 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 7168 --timer graph \
  --no-peers --pdl --json "$OUT/mid7168.json" >"$OUT/mid7168.txt" 2>&1
echo "bench rc=$?"
