#!/usr/bin/env bash
# Staged by session 45 (after the two toolchain calls, on a `git archive` snapshot): s45_a.txt, issue #4's whole
# table with peers, fixed and rotated outputs, plain and as programmatic dependents. JSON comes back in $OUT.
# `bash scripts/jobs/s45_a.sh NAME ...` runs only those jobs of s45_a.txt (one call each of q45_fixed and
# q45_rotated fits a 600 s call; q45_events is short).
set -uo pipefail
names=("$@"); [[ ${#names[@]} -gt 0 ]] || names=(q45_fixed q45_rotated q45_events)
jobs=/tmp/s45_a_jobs.txt; : > "$jobs"
for n in "${names[@]}"; do grep -E "^$n " scripts/jobs/s45_a.txt >> "$jobs"; done
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=520 BENCH_SERIAL=1 bash scripts/device_snapshot_run.sh "$jobs" none 2>&1 | grep -E "^commit|== q" | cut -c1-200
for n in "${names[@]}"; do
  grep -E "^(nvfp4|mxfp8)|MISMATCH" "/tmp/b12x-par/$n.log" | cut -c1-220
  cp "/tmp/b12x-par/$n.json" "${OUT:-/tmp}/" 2>/dev/null
done
true
