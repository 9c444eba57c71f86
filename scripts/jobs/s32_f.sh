#!/usr/bin/env bash
# Session 32, last machine session (after the toolchain calls, on a snapshot): test_gpu_candidates' MXFP8 cases as
# collected for the device's arch (the arch filter added after s32_b), then session 32's staged sweep of every NVFP4
# "pairs" candidate at the 4096-row shapes, launched plainly (`next_session.txt`'s quant_nv4096 without its --pdl).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s32_f_sel.txt 2>&1 | tail -3 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 330 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 --timer graph \
  --no-peers --encode pairs --json "$OUT/nv_pairs.json" >"$OUT/nv_pairs.txt" 2>&1
echo "bench rc=$?"
