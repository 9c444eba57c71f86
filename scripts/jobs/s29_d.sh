#!/usr/bin/env bash
# Session 29, fourth machine session (after the toolchain calls, on a snapshot): the wide pass 2's hoisted
# weight loads and WideConfig.apart: gpu tests, then bench_norm at T = 1 / 4 (8 calls a graph) and ncu's
# per-kernel cycles (docs/predictions/norm_mhc.md, session 29).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
printf '%s\n' 'tests/experimental/b12x/norm/test_mhc_gpu.py -k "wide or pdl_fast or test_run_post_pre or test_run_pre"' \
  'tests/experimental/b12x/norm/test_mhc_gpu.py -k "graph_replay or small_t_variants or tiny_graph"' >.s29d_sel.txt
TEST_LIMIT=160 bash scripts/device_snapshot_run.sh - @.s29d_sel.txt 2>&1 | tail -4
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
timeout 110 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --calls-per-graph 8 --tokens 1 4 \
  --ops pre post_pre --variants apart pdl_ctas1 pdl_ctas1_apart --no-peers --json "$OUT/norm_t1.json" >"$OUT/norm_t1.log" 2>&1
grep -E "^(pre|post_pre) " "$OUT/norm_t1.log" | cut -c1-100
for v in default apart pdl_ctas1_apart; do
  extra=(); [[ $v == default ]] || extra=(--variant "$v")
  timeout 40 ncu --profile-from-start off --clock-control none --cache-control none --graph-profiling node \
    --metrics gpu__time_duration.sum,sm__cycles_active.max,sm__cycles_active.avg --csv \
    python3 scripts/ncu_mhc.py --op post_pre --tokens 1 --calls 8 --replays 2 "${extra[@]}" >"$OUT/nc_$v.csv" 2>&1
  echo "ncu $v rc=$?"
done
