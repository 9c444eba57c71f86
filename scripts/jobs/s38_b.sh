#!/usr/bin/env bash
# Staged by session 37: the next call on the warm machine after s38_a.sh: s38_a.txt's timings (~2-3 min), µs rows.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=400 bash scripts/device_snapshot_run.sh scripts/jobs/s38_a.txt none 2>&1 | grep -E "== att" | cut -c1-200
for f in att_live32_on att_live32_off att_live128_on att_live128_off att_groups att_budget att_grid; do
  echo "== $f"; grep -E "^decode|MISMATCH" /tmp/b12x-par/$f.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5}'
done
