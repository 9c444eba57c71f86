#!/usr/bin/env bash
# Session 29's second machine session (after the two toolchain calls, on a snapshot): the gpu checks of
# _lib/triton_build's per-device loading (both quantizers, moe's routing kernels, the demo glue) and of the
# unchanged sm_90a decode selection (s29_b_sel.txt).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=300 timeout 560 bash scripts/device_snapshot_run.sh - @scripts/jobs/s29_b_sel.txt 2>&1 | tail -12
