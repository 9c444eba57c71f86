#!/usr/bin/env bash
# Session 35, third machine session (after the two toolchain calls; the travelled tree is the commit in COMMIT,
# installed here so the probe can import the CuTe helpers): the cooperative pre's ring memory program
# (scripts/probe_mhc_ring.py; prediction in docs/predictions/norm_mhc.md, session 35, second step).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
timeout 300 python3 scripts/probe_mhc_ring.py --hidden 7168 --json "$OUT/ring_7168.json" >"$OUT/ring_7168.txt" 2>&1
echo "probe rc=$?"; tail -30 "$OUT/ring_7168.txt"
