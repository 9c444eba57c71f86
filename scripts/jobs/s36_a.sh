#!/usr/bin/env bash
# Session 36 (the mixes rows with hoist / vec and their slot diagnostics; predictions in docs/predictions/norm_mhc.md,
# session 36). As session 35's s35_d.sh (after the two toolchain calls; the travelled tree is the commit in COMMIT,
# on PYTHONPATH so the probe imports its CuTe helpers and the benchmarks): the one-pass pre skeleton
# (scripts/probe_mhc_ring.py), at H = 7168 and 4096.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
for h in 7168 4096; do
  timeout 280 python3 scripts/probe_mhc_ring.py --hidden $h --json "$OUT/ring_$h.json" >"$OUT/ring_$h.txt" 2>&1
  echo "probe H=$h rc=$?"; grep -E "copy ceiling|mixes|bt64 s3 barrier lag1 early syncwarp  " "$OUT/ring_$h.txt"
done
