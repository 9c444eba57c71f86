#!/usr/bin/env bash
# Session 33, fifth machine session (after the toolchain calls, on a snapshot): how much of the NVFP4 plan's time is
# its encode. `scripts/probe_nvfp4_skeleton.py`: the plan beside skeletons of its memory program (same grid, loads
# and stores, the encode replaced by integer sums; some held to the plan's 7 programs an SM by shared memory) and the
# same-size copy, graph timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -2 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 300 python3 scripts/probe_nvfp4_skeleton.py --shapes 4096x4096 4096x7168 16384x4096 16384x7168 \
  --json "$OUT/skeleton.json" >"$OUT/skeleton.txt" 2>&1
echo "probe rc=$?"
tail -n 40 "$OUT/skeleton.txt"
