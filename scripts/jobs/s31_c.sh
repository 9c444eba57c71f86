#!/usr/bin/env bash
# Session 31, third machine session (after the toolchain calls, on a snapshot): the NVFP4 quantizer's K-major
# grids and 64-register preload tiles (`NvFp4Config.k_major`, `_candidates._UNVALIDATED_ORDER`) bit for bit
# (test_gpu_candidates), the quantization gpu tier (every kernel took the K_MAJOR constexpr), then the new
# candidates against the plan and the same-size copy at #4's four shapes, plain, and as programmatic
# dependents at the 4096-row ones; graph timer, one process each.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=330 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_c_sel.txt 2>&1 | tail -5 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --match "k_major=True" "max_regs=64, lut=True, preload=True" \
  --json "$OUT/order.json" >"$OUT/order.txt" 2>&1
echo "bench rc=$?"
timeout 100 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "k_major=True" "max_regs=64, lut=True, preload=True" \
  --json "$OUT/order_pdl.json" >"$OUT/order_pdl.txt" 2>&1
echo "bench pdl rc=$?"
