#!/usr/bin/env bash
# Session 37, the next call on the warm machine: the cluster-pairs default's benchmark (s37_a.txt), µs rows only.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=430 bash scripts/device_snapshot_run.sh scripts/jobs/s37_a.txt none 2>&1 | tail -4 | cut -c1-220
grep -E "^decode" /tmp/b12x-par/att_pairs_cap16.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5, $6}'
