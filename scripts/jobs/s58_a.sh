#!/usr/bin/env bash
# Session 58's device job (after the two toolchain calls; snap.tar at the repository root): the norm gpu tier owed on
# e7df4f5 (MhcConfig.pass1_splits, same arguments as c0cb03a), then session 57's #5 table and whole_wave A/B
# (s57_b.sh). On an H200: `s58_a.sh h200a` then `h200b` (every issue's table, scripts/jobs/s58_a.txt), or both in one
# call: `s58_a.sh tables`.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
case ${1:-norm} in
  norm)
    nvidia-smi --query-gpu=name --format=csv,noheader
    bash scripts/jobs/s56_b.sh 2>&1 | tail -8
    bash scripts/jobs/s57_b.sh ;;
  peers)
    TAIL=45 bash scripts/jobs/named.sh scripts/jobs/s54_a.txt gemm54_peers ;;
  h200a)  # #5's table (s57_b's first half), #4's and #6's tables
    nvidia-smi --query-gpu=name --format=csv,noheader
    PEERS_S=100 AB_S=1 bash scripts/jobs/s57_b.sh 2>&1 | grep -v "^ab rc"
    BENCH_LIMIT=170 TAIL=40 bash scripts/jobs/named.sh scripts/jobs/s58_a.txt t58_quant t58_gemm ;;
  h200b)  # #7's and #8's tables
    BENCH_LIMIT=170 TAIL=40 bash scripts/jobs/named.sh scripts/jobs/s58_a.txt t58_moe t58_moe_big t58_att ;;
  tables)  # both in one call: 177 + 197 s on an H100 (session 63); the bench limits allow ~950 s, so on a slow
    # machine run h200a and h200b apart (a call stops at 600 s; what is under $OUT comes back)
    bash "$0" h200a; bash "$0" h200b ;;
  *) sed -n '2,5p' "$0"; exit 2 ;;
esac
