#!/usr/bin/env bash
# Session 36, second probe run: the mixes rows' y misses at T = 8192 (H = 7168) told apart (a cancelling value
# rounded another way, or a wrong weight: `mismatch`'s bad_err_over_terms), after the two toolchain calls.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
timeout 280 python3 scripts/probe_mhc_ring.py --hidden 7168 --tokens 8192 --json "$OUT/ring_7168.json" >"$OUT/ring_7168.txt" 2>&1
echo "probe rc=$?"; grep -E "copy ceiling|mixes" "$OUT/ring_7168.txt"
