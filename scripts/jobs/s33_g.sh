#!/usr/bin/env bash
# Session 33, last machine session (after the toolchain calls, on a snapshot): the K-major preload tile without the
# lane table at 68 / 64 / 56 registers bit for bit on every test_gpu_candidates shape, then against the plan at #4's
# four shapes plainly and at the 4096-row shapes as programmatic dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s33_g_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
match=("max_regs=0, lut=False, preload=True, pdl=False, k_major=True"
       "max_regs=64, lut=False, preload=True, pdl=False, k_major=True"
       "max_regs=56, lut=False, preload=True, pdl=False, k_major=True")
timeout 200 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --match "${match[@]}" --json "$OUT/nv.json" >"$OUT/nv.txt" 2>&1
echo "bench nv rc=$?"
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "${match[@]}" --json "$OUT/nv_pdl.json" >"$OUT/nv_pdl.txt" 2>&1
echo "bench pdl rc=$?"
