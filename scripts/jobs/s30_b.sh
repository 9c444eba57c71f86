#!/usr/bin/env bash
# Session 30, second machine session (after the toolchain calls): s30_b.txt's benchmarks on a snapshot, no tests
# (the snapshot changes bench_norm's variant list only against the gpu-tested 3d32f4b).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_SERIAL=1 BENCH_LIMIT=240 timeout 570 bash scripts/device_snapshot_run.sh scripts/jobs/s30_b.txt none 2>&1 | tail -20
