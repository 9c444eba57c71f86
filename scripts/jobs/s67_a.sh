#!/usr/bin/env bash
# Session 67's device job (after the two toolchain calls; snap.tar at the repository root).
#   bash scripts/jobs/s67_a.sh rest   session 67's leftovers (s67_a_sel.txt: the fixed tensor_fp8_linear capture test,
#                                     the moe tests an H100 tier of 15 processes left out of memory or unreached), at
#                                     PARALLEL=8; ~3-4 min
#   bash scripts/jobs/s67_a.sh w4a8   the GROUPED_W4A8 A/B under s67_b.txt's corrected rule (~2.5 min on an H100)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null
case ${1:-} in
  rest)
    PARALLEL=${PARALLEL:-8} TEST_LIMIT=${TEST_LIMIT:-330} bash scripts/device_snapshot_run.sh - @scripts/jobs/s67_a_sel.txt \
      2>&1 | grep -E "^commit|^sel|FAILED|ERROR|^E  " | cut -c1-240 | head -40
    cp /tmp/b12x-par/sel*.log "${OUT:-/tmp}/" 2>/dev/null ;;
  w4a8) BENCH_LIMIT=${BENCH_LIMIT:-250} TAIL=40 bash scripts/jobs/named.sh scripts/jobs/s67_b.txt m67_w4a8 ;;
  *) sed -n '2,6p' "$0"; exit 2 ;;
esac
