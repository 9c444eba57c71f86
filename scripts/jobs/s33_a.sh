#!/usr/bin/env bash
# Session 33, first machine session (after the toolchain calls, on a snapshot): the NVFP4 TMA tiles
# (`NvFp4Config.tma`, `_kernel_tma.py`) bit for bit on every test_gpu_candidates shape plus live rows, a CUDA graph
# and fp16; then those tiles against the plan at #4's four shapes, plainly and (4096 rows) as programmatic
# dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s33_a_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 200 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --match "tma=3" "tma=4" "tma=6" --json "$OUT/nv.json" >"$OUT/nv.txt" 2>&1
echo "bench nv rc=$?"
timeout 120 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "tma=3" "tma=4" "tma=6" --json "$OUT/nv_pdl.json" >"$OUT/nv_pdl.txt" 2>&1
echo "bench pdl rc=$?"
