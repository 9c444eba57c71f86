#!/usr/bin/env bash
# Staged by session 59 for the next machine session (after the two toolchain calls; snap.tar at the repository root):
# measurements that decide two norm.mhc defaults, no flip (write the rules into docs/predictions/norm_mhc.md before
# the run, then add them here in the s59_a.sh pattern):
#   pdl:  bench_norm's `pdl` (every two-pass kernel a programmatic dependent) against the default, two runs, T 1024 to
#         8192, H 7168 / 4096 (session 59's pdl_pf2, pdl with the walk's neutral prefetch, gained pre -2.8 to -5.8% at T <= 2048), plus T = 1 / 8 / 64 once
#   walk: the walk at every T (`row_walk`) against the default at T 4096 / 8192 / 16384 and H 4096 / 5120 / 6144 / 7168:
#         where the walk's bound by hidden size falls (H = 4096 walked faster at T = 8192 in four runs, 7168 slower)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
source scripts/jobs/norm_ab.sh
case ${1:?usage: s60_a.sh pdl|walk} in
  pdl)
    nvidia-smi --query-gpu=name --format=csv,noheader
    norm_ab pdl60 pdl
    cd /root/snap && timeout 120 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
      --tokens 1 8 64 --hidden 7168 4096 --no-peers --variants pdl --json "$OUT/pdl60_small.json" >"$OUT/pdl60_small.log" 2>&1
    echo "small rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/pdl60_small.log" | cut -c1-170 ;;
  walk)
    nvidia-smi --query-gpu=name --format=csv,noheader
    snap_install || exit 2
    for run in 1 2; do
      timeout 200 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre --tokens 4096 8192 16384 \
        --hidden 4096 5120 6144 7168 --no-peers --variants row_walk --json "$OUT/walk60_$run.json" >"$OUT/walk60_$run.log" 2>&1
      echo "walk run $run rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/walk60_$run.log" | cut -c1-170
    done ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
