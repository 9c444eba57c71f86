#!/usr/bin/env bash
# Run the named jobs of a job file, one after the other (BENCH_SERIAL), on the `git archive` snapshot
# (after the two toolchain calls); each job's log and JSON go to $OUT, and its last lines print here.
#   bash scripts/jobs/named.sh scripts/jobs/s46_a.txt att46_grid [more names]
set -uo pipefail
file=${1:?usage: named.sh JOBFILE NAME...}; shift
[[ $# -gt 0 ]] || { echo "named.sh: name at least one job of $file" >&2; exit 2; }
jobs=/tmp/named_jobs.txt; : > "$jobs"
for n in "$@"; do grep -qE "^$n " "$file" || { echo "named.sh: no job $n in $file" >&2; exit 2; }
  grep -E "^$n " "$file" >> "$jobs"; done
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=${BENCH_LIMIT:-540} BENCH_SERIAL=1 bash scripts/device_snapshot_run.sh "$jobs" none 2>&1 | grep -E "^commit|== " | cut -c1-200
for n in "$@"; do
  echo "== $n"; grep -vE "^\s*$" "/tmp/b12x-par/$n.log" | tail -${TAIL:-40} | cut -c1-220
  cp "/tmp/b12x-par/$n.json" "/tmp/b12x-par/$n.log" "${OUT:-/tmp}/" 2>/dev/null
done
true
