#!/usr/bin/env bash
# Session 35, second machine session (after the two toolchain calls; the travelled tree is the commit in COMMIT):
# the cooperative one-pass skeleton for #5 (scripts/probe_group_barrier.py; prediction in
# docs/predictions/norm_mhc.md, session 35) at H = 7168 and 4096.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for h in 7168 4096; do
  timeout 240 python3 scripts/probe_group_barrier.py --hidden $h --json "$OUT/coop_$h.json" >"$OUT/coop_$h.txt" 2>&1
  echo "probe H=$h rc=$?"; cat "$OUT/coop_$h.txt" | tail -25
done
