#!/usr/bin/env bash
# Session 36, last machine session (after the two toolchain calls; snapshot by git archive): the cluster pairs'
# gpu tests (s36_f_sel.txt, two selections side by side), then their benchmark (s36_f.txt).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=330 BENCH_LIMIT=240 bash scripts/device_snapshot_run.sh scripts/jobs/s36_f.txt @scripts/jobs/s36_f_sel.txt 2>&1 | tail -45 | cut -c1-220
