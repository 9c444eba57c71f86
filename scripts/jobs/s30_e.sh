#!/usr/bin/env bash
# Session 30, last machine session (after the toolchain calls, on a snapshot): the T = 4 swap of docs/performance.md
# session 30 (pre wants 112 pass-1 splits, post_pre 224, 1-2 µs apart as programmatic dependents). Nsight Compute
# serializes the kernel nodes of 8 captured calls (scripts/ncu_mhc.py): if the serialized kernel times of the fast
# and slow split match, the cost is in the overlap of the programmatic launch, not in either kernel.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -1
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
for op in pre post_pre; do
  for v in apart_pdl_ctas4 small_pdl_all_ctas1; do  # apart_plain dropped: device time
    timeout 55 ncu --profile-from-start off --clock-control none --graph-profiling node \
      --metrics gpu__time_duration.sum,sm__cycles_active.max,launch__grid_size --csv \
      python3 scripts/ncu_mhc.py --op "$op" --tokens 4 --calls 8 --replays 1 --variant "$v" \
      >"$OUT/ncu_${op}_$v.csv" 2>"$OUT/ncu_${op}_$v.err"
    echo "ncu $op $v rc=$? $(grep -c gpu__time_duration "$OUT/ncu_${op}_$v.csv") rows"
  done
done
