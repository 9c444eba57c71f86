#!/usr/bin/env bash
# Staged by session 37 (run after the two toolchain calls, on a `git archive` snapshot): the attention gpu tier, which
# holds the live small-batch kernel's tests (`-k live_small`, the switch set by the tests) and the groups' (`-k
# groups`), and the demo's (its plans of 5-16 tokens decode as cluster pairs since session 37). ~4-5 min.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=25 TEST_LIMIT=330 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention tests/experimental/b12x/demo 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
