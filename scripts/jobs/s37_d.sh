#!/usr/bin/env bash
# Session 37, third machine session (after the two toolchain calls; snapshot by git archive): the attention gpu tier
# (the live small-batch kernel changed run()), then s37_d.txt's benchmarks, µs rows.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=25 TEST_LIMIT=330 BENCH_LIMIT=200 bash scripts/device_snapshot_run.sh scripts/jobs/s37_d.txt tests/experimental/b12x/attention 2>&1 | grep -E "^commit|passed|failed|error|== att" | grep -vE "^shard[0-9]+: [0-9]+ passed" | tail -12 | cut -c1-220
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
for f in att_live32 att_live128 att_grid; do
  echo "== $f"; grep -E "^decode|MISMATCH" /tmp/b12x-par/$f.log | sed 's/b12x.paged //' | awk '{print $1, $2, $3, $4, $5}'
done
