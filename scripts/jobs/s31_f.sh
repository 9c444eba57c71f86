#!/usr/bin/env bash
# Session 31, last machine session (after the toolchain calls, on a snapshot): MXFP8's default tile in K-major
# order through the quantization gpu tier's default paths (test_gpu.py, test_gpu_pdl.py) and gemm.mxfp8_linear,
# which quantizes its activation with it; then the new default against the previous one (the same tile in the
# two-axis order) at #4's four shapes, plain and as programmatic dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_f_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 120 python3 -m benchmarks.experimental.b12x.bench_quantization --op mxfp8 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --pdl \
  --match "block_m=4, block_k=512, num_warps=2, lean=True, layout='quarters', pdl=False, k_major=False" \
  --json "$OUT/mx_default.json" >"$OUT/mx_default.txt" 2>&1
echo "bench rc=$?"
