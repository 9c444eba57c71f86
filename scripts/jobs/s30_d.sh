#!/usr/bin/env bash
# Session 30, fourth machine session (after the toolchain calls, on a snapshot of the final norm.mhc code): the
# whole norm gpu tier in 8 shards, then s30_d.txt's benchmark (programmatic dependents above small T).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=8 BENCH_SERIAL=1 TEST_LIMIT=330 BENCH_LIMIT=150 timeout 570 bash scripts/device_snapshot_run.sh \
  scripts/jobs/s30_d.txt tests/experimental/b12x/norm 2>&1 | tail -14
