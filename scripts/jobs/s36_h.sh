#!/usr/bin/env bash
# Session 36, last device minutes (after the two toolchain calls; snapshot by git archive): the cluster pairs'
# push merge, its GPU tests (s36_h_sel.txt) then its benchmark (s36_h.txt).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=110 BENCH_LIMIT=100 bash scripts/device_snapshot_run.sh scripts/jobs/s36_h.txt @scripts/jobs/s36_h_sel.txt 2>&1 | tail -6 | cut -c1-220
grep -E "^decode" /tmp/b12x-par/att_pairs_push.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5}'
