#!/usr/bin/env bash
# Session 58's device job (after the two toolchain calls; snap.tar at the repository root): the norm gpu tier owed on
# e7df4f5 (MhcConfig.pass1_splits, same arguments as c0cb03a), then session 57's #5 table and whole_wave A/B
# (s57_b.sh). `s58_a.sh peers` is the H200-only follow-up: issue #6's peers table on the session's defaults.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
case ${1:-norm} in
  norm)
    nvidia-smi --query-gpu=name --format=csv,noheader
    bash scripts/jobs/s56_b.sh 2>&1 | tail -8
    bash scripts/jobs/s57_b.sh ;;
  peers)
    TAIL=45 bash scripts/jobs/named.sh scripts/jobs/s54_a.txt gemm54_peers ;;
  *) sed -n '2,4p' "$0"; exit 2 ;;
esac
