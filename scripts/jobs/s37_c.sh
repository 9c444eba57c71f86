#!/usr/bin/env bash
# Session 37, second machine session (after the two toolchain calls; snapshot by git archive): the pairs-default
# GPU tests (s37_c_sel.txt), then cluster pairs in plans for 32 and 128 requests (s37_c.txt), µs rows.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 BENCH_LIMIT=300 bash scripts/device_snapshot_run.sh scripts/jobs/s37_c.txt @scripts/jobs/s37_c_sel.txt 2>&1 | tail -5 | cut -c1-220
for f in att_cap32 att_cap128; do
  echo "== $f"; grep -E "^decode|MISMATCH" /tmp/b12x-par/$f.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5, $6}'
done
