#!/usr/bin/env bash
# Session 32, second machine session (after the toolchain calls, on a snapshot): MXFP8's sm_90a default without the
# per-value NaN select (`MxFp8Config.hw_nan`) through the quantization gpu tier's default paths (test_gpu.py,
# test_gpu_pdl.py), every MXFP8 candidate bit for bit, and gemm.mxfp8_linear, which quantizes its activation with
# it; then #4's MXFP8 table (M 1 .. 16384, K 4096 / 7168) with the torch.compile peer and the previous default
# (the same tile with the select) in one process, plain and as programmatic dependents, graph timer.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s32_b_sel.txt 2>&1 | tail -6 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 300 python3 -m benchmarks.experimental.b12x.bench_quantization --op mxfp8 --timer graph --pdl \
  --match "block_m=4, block_k=512, num_warps=2, lean=True, layout='quarters', pdl=False, k_major=True, hw_nan=False" \
  --json "$OUT/mx_table.json" >"$OUT/mx_table.txt" 2>&1
echo "bench rc=$?"
