#!/usr/bin/env bash
# Session 32, fifth machine session (after the toolchain calls, on a snapshot): the NVFP4 preload tile with its group's
# loads before the global scale's load and the prologue (`NvFp4Config.early`, K-major and two-axis) bit for bit
# (test_gpu_candidates), then against the same tiles without it and the plan at the 4096- to 16384-row shapes, plain
# and as programmatic dependents, graph timer, one process (prediction: docs/predictions/quantization.md, session 32).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s32_e_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 240 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 8192 16384 --ks 4096 7168 \
  --timer graph --no-peers --pdl \
  --match "k_iters=4, prefetch=False, unroll=True, persistent=0, stream=False, max_regs=0, lut=True, preload=True, pdl=False" \
  --json "$OUT/nv_early.json" >"$OUT/nv_early.txt" 2>&1
echo "bench rc=$?"
