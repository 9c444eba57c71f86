#!/usr/bin/env bash
# Staged by session 41 (after the two toolchain calls, on a `git archive` snapshot): the attention gpu tier and the
# demo's on the page clamps (`_decode_loads._pt`: every decode / extend kernel's PTX changed), with
# test_paged_bad_values_gpu.py (replays with page ids outside the cache and lengths past the table: no fault), then
# s42_a.txt's att_grid (#8's grid, to set against session 39's in docs/performance.md). ~8 min.
# Prediction: docs/predictions/attention.md, "Session 41: page clamps".
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
if [[ ${1:-} != bench ]]; then
SHARDS=25 TEST_LIMIT=330 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention tests/experimental/b12x/demo 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
mkdir -p "${OUT:-/tmp}/tier_att" && cp /tmp/b12x-par/shard*.log "${OUT:-/tmp}/tier_att/" 2>/dev/null
exit 0
fi
BENCH_LIMIT=300 bash scripts/device_snapshot_run.sh scripts/jobs/s42_a.txt none 2>&1 | grep -E "^commit|== att|µs|x[0-9]" | cut -c1-220 | head -60
cp /tmp/b12x-par/att_*.json "${OUT:-/tmp}/" 2>/dev/null
true
