#!/usr/bin/env bash
# Session 39 (after the two toolchain calls, on a `git archive` snapshot): the attention gpu tier and the demo's
# with the live small-batch kernel on by default (LIVE_SMALL_BATCH = 16) and the references taking heads a few at a
# time (s38_a's four long gqa8 extend cases ran out of memory beside 24 other shards). ~5 min.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=25 TEST_LIMIT=330 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention tests/experimental/b12x/demo 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
