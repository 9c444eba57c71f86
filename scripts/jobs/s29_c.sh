#!/usr/bin/env bash
# Session 29, third machine session (after the toolchain calls, on a snapshot): #5's T = 1 split into kernel
# time and the rest. Nsight Compute's per-node durations of norm.mhc calls captured 8 to a graph
# (scripts/ncu_mhc.py; ncu serializes the nodes) beside bench_norm's per-call graph time of the same calls.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -2
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
timeout 150 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --calls-per-graph 8 --tokens 1 \
  --ops pre post_pre --variants pdl_ctas1 --no-peers --json "$OUT/norm_t1.json" >"$OUT/norm_t1.log" 2>&1
grep -E "^(pre|post_pre) " "$OUT/norm_t1.log" | cut -c1-110
for v in default pdl_ctas1; do
  for op in post_pre pre; do
    extra=(); [[ $v == default ]] || extra=(--variant "$v")
    timeout 120 ncu --profile-from-start off --clock-control none --graph-profiling node \
      --metrics gpu__time_duration.sum,sm__cycles_active.max,launch__grid_size --csv \
      python3 scripts/ncu_mhc.py --op "$op" --tokens 1 --calls 8 --replays 2 "${extra[@]}" \
      >"$OUT/ncu_mhc_${op}_$v.csv" 2>"$OUT/ncu_mhc_${op}_$v.err"
    echo "ncu $op $v rc=$? $(grep -c gpu__time_duration "$OUT/ncu_mhc_${op}_$v.csv") kernels"
  done
done
