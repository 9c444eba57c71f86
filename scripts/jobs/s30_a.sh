#!/usr/bin/env bash
# Session 30, first machine session (after the toolchain calls, on a snapshot of 3d32f4b): what session 29
# left staged. The gpu tests of norm.mhc's one-token dispatch (next_session_sel.txt), then bench_norm at
# T = 1 / 2 / 4 / 8 / 64 with the default beside its parts and the decode grid with 8 calls a graph
# (next_session.txt).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_SERIAL=1 TEST_LIMIT=150 BENCH_LIMIT=300 timeout 570 bash scripts/device_snapshot_run.sh \
  scripts/jobs/next_session.txt @scripts/jobs/next_session_sel.txt 2>&1 | tail -40
