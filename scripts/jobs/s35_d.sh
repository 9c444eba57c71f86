#!/usr/bin/env bash
# Session 35, third machine session (after the two toolchain calls; the travelled tree is the commit in COMMIT,
# on PYTHONPATH so the probe imports its CuTe helpers and the benchmarks): the one-pass pre skeleton
# (scripts/probe_mhc_ring.py; predictions in docs/predictions/norm_mhc.md, session 35), at H = 7168 and 4096.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
for h in 7168 4096; do
  timeout 280 python3 scripts/probe_mhc_ring.py --hidden $h --json "$OUT/ring_$h.json" >"$OUT/ring_$h.txt" 2>&1
  echo "probe H=$h rc=$?"; grep -E "${GREP:-copy ceiling|8192}" "$OUT/ring_$h.txt"
done
