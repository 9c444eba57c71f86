#!/usr/bin/env bash
# Session 33, third machine session (after the toolchain calls, on a snapshot): session 32's staged ranking of the
# NVFP4 preload tiles launched as programmatic dependents at the 4096-row shapes (`next_session.txt`'s
# quant_nv4096_pdl), where the plan is closest to #4's 80% (73.8 / 77.0%); graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -2 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 300 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 --timer graph \
  --no-peers --pdl --match "preload=True" --json "$OUT/nv_pdl.json" >"$OUT/nv_pdl.txt" 2>&1
echo "bench rc=$?"
