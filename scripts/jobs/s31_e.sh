#!/usr/bin/env bash
# Session 31, fifth machine session (after the toolchain calls, on a snapshot): MXFP8's default tile in K-major
# order (`MxFp8Config.k_major`) bit for bit (test_gpu_candidates), the MXFP8 default paths with the new
# K_MAJOR constexpr (test_gpu.py, test_gpu_pdl.py), then the K-major tile against the plan and the same-size
# copy at #4's four shapes, plain and as programmatic dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_e_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op mxfp8 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "k_major=True" --json "$OUT/mx.json" >"$OUT/mx.txt" 2>&1
echo "bench rc=$?"
