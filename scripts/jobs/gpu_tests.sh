#!/usr/bin/env bash
# Run test paths on the `git archive` snapshot (after the two toolchain calls; snap.tar at the repository root) and
# print one summary: the runner's own lines, the counts over every shard, the commonest error lines, the first
# failures; the shard logs go to $OUT. SHARDS (default 4) and TEST_LIMIT (default 300 s) pass through to the runner.
# scripts/jobs/s43_a.sh runs its tiers through this.
#   bash scripts/jobs/gpu_tests.sh tests/experimental/b12x/gemm/test_decode_stream_gpu.py [more paths]
set -uo pipefail
[[ $# -gt 0 ]] || { echo "gpu_tests.sh: name at least one test path" >&2; exit 2; }
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=${SHARDS:-4} TEST_LIMIT=${TEST_LIMIT:-300} bash scripts/device_snapshot_run.sh - "$@" 2>&1 \
  | grep -E "^commit|^parallel|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped|error)" \
  | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -h "^E .*Error\b" /tmp/b12x-par/shard*.log | cut -c1-120 | sort | uniq -c | sort -rn | head -5
grep -h "^FAILED\|^E  " /tmp/b12x-par/shard*.log | head -20 | cut -c1-240
cp /tmp/b12x-par/shard*.log "${OUT:-/tmp}/" 2>/dev/null
exit 0
