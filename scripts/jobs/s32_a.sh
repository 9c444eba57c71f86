#!/usr/bin/env bash
# Session 32, first machine session (after the toolchain calls, on a snapshot): MXFP8 without the per-value NaN
# select (`MxFp8Config.hw_nan`, the conversion's own 0x7F) bit for bit on every hw_nan candidate
# (test_gpu_candidates: its extreme blocks hold NaN and Inf), then those tiles against the plan and the same-size
# copy at #4's four shapes, plain and as programmatic dependents, graph timer, one process; then session 31's
# staged NVFP4 mid-tile order sweep (K = 2048 / 3072 / 5120) for `_dispatch.MID_K_MAJOR_MAX_K`.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s32_a_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 170 python3 -m benchmarks.experimental.b12x.bench_quantization --op mxfp8 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "hw_nan=True" --json "$OUT/mx.json" >"$OUT/mx.txt" 2>&1
echo "bench mx rc=$?"
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 8192 --ks 2048 3072 5120 \
  --timer graph --no-peers \
  --match "k_iters=4, prefetch=False, unroll=True, persistent=0, stream=False, max_regs=0, lut=True, preload=True, pdl=False" \
  --json "$OUT/nv.json" >"$OUT/nv.txt" 2>&1
echo "bench nv rc=$?"
