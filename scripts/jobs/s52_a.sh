#!/usr/bin/env bash
# Session 52's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"):
#   d16:  DECODE16_ONE_WAVE's CTA range, both sides of its lower bound (scripts/jobs/s52_a.txt; ~2 min), then
#         scripts/ab_summary.py (B = unroll 1 + minctas 3; a cell "B-" is the rule winning there).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
f=scripts/jobs/s52_a.txt
case ${1:?usage: s52_a.sh d16} in
  d16)
    B12X_GEMM_DECODE_OPTS=unroll=2,minctas=0 TAIL=2 bash scripts/jobs/named.sh $f gemm52_d16p_a >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1,minctas=3 TAIL=2 bash scripts/jobs/named.sh $f gemm52_d16p_b >/dev/null
    python3 scripts/ab_summary.py /tmp/b12x-par/gemm52_d16p_a.json /tmp/b12x-par/gemm52_d16p_b.json ;;
  *) sed -n '2,4p' "$0"; exit 2 ;;
esac
