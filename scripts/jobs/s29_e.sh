#!/usr/bin/env bash
# Session 29, last machine session (after the toolchain calls, on a snapshot): the new sm_90a norm.mhc default
# (wide pass 2 apart, small-T programmatic dependents, one-token split for one program an SM): its gpu
# tests, then bench_norm at T = 1 / 4 / 64 against its parts (session28, apart_plain, apart_pdl_ctas4).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
printf '%s\n' 'tests/experimental/b12x/norm/test_mhc_gpu.py -k "test_run_pre or test_run_post_pre or test_run_post or functional_form"' \
  'tests/experimental/b12x/norm/test_mhc_gpu.py -k "graph_replay_equals_eager or default_above or bind_does_not"' >.s29e_sel.txt
TEST_LIMIT=85 bash scripts/device_snapshot_run.sh - @.s29e_sel.txt 2>&1 | tail -4
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
timeout 95 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --calls-per-graph 8 --tokens 1 4 64 \
  --ops pre post_pre --variants session28 apart_plain apart_pdl_ctas4 --no-peers --json "$OUT/norm_e.json" >"$OUT/norm_e.log" 2>&1
echo "bench rc=$?"; grep -E "^(pre|post_pre) " "$OUT/norm_e.log" | cut -c1-90
