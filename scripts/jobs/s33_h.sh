#!/usr/bin/env bash
# Session 33, last machine session: the K-major preload group of 1024 columns with fewer values a thread (8 x 512 x 8
# and 4 x 512 x 4, two tiles) bit for bit on every test_gpu_candidates shape, then against the plan at #4's four
# shapes plainly and at the 4096-row shapes as programmatic dependents, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s33_h_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
match=("block_m=8, block_k=512, num_warps=8" "block_m=4, block_k=512, num_warps=4, encode='pairs'")
timeout 200 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --match "${match[@]}" --json "$OUT/nv.json" >"$OUT/nv.txt" 2>&1
echo "bench nv rc=$?"
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "${match[@]}" --json "$OUT/nv_pdl.json" >"$OUT/nv_pdl.txt" 2>&1
echo "bench pdl rc=$?"
