#!/usr/bin/env bash
# Session 30, third machine session (after the toolchain calls, on a snapshot): the sm_90a norm.mhc default with
# small_launches (programmatic dependents and split targets by form and T up to 32 / 64 tokens). Its gpu tests
# (the default path at every T of test_mhc_gpu, graph replay included), then bench_norm over T = 1..64 against
# session 29's default, with 8 calls a graph (issue #5's timer) and with one.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
printf '%s\n' 'tests/experimental/b12x/norm/test_mhc_gpu.py -k "test_run_pre or test_run_post_pre or test_run_post or functional_form"' \
  'tests/experimental/b12x/norm/test_mhc_gpu.py -k "graph_replay_equals_eager or default_above or bind_does_not"' >.s30c_sel.txt
TEST_LIMIT=150 bash scripts/device_snapshot_run.sh - @.s30c_sel.txt 2>&1 | tail -4
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
timeout 170 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --calls-per-graph 8 \
  --tokens 1 2 3 4 5 6 7 8 12 16 20 24 32 40 48 64 --ops pre post_pre --variants session29 --no-peers \
  --json "$OUT/norm_c8.json" >"$OUT/norm_c8.log" 2>&1
echo "bench rc=$?"
timeout 100 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --tokens 1 2 4 8 32 64 \
  --ops pre post_pre --variants session29 --no-peers --json "$OUT/norm_c1.json" >"$OUT/norm_c1.log" 2>&1
echo "bench rc=$?"
