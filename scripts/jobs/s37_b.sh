#!/usr/bin/env bash
# Session 37, the next call on the warm machine: the launch-rows and cluster-pairs benchmarks (s37_a.txt), µs rows.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=480 bash scripts/device_snapshot_run.sh scripts/jobs/s37_a.txt none 2>&1 | tail -5 | cut -c1-220
for f in att_cap16 att_small att_wide; do
  echo "== $f"; grep -E "^decode" /tmp/b12x-par/$f.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5, $6}'
done
