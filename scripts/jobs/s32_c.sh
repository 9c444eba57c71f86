#!/usr/bin/env bash
# Session 32, third machine session (after the toolchain calls, on a snapshot): the NVFP4 K-major preload tile with
# its last groups one tile a program (`NvFp4Config.tail` 264 / 462 / 924) bit for bit (test_gpu_candidates), then
# against the same tile without a tail and the plan at the 4096- and 8192-row shapes and 16384 x 4096, plain and as
# programmatic dependents, graph timer, one process (prediction: docs/predictions/quantization.md, session 32).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s32_c_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 240 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 8192 16384 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "preload=True, pdl=False, k_major=True" \
  --json "$OUT/nv_tail.json" >"$OUT/nv_tail.txt" 2>&1
echo "bench rc=$?"
