#!/usr/bin/env bash
# Session 34, last machine session (after the toolchain calls, on a snapshot): the final tree (the K / V operand
# loads and the softmax step shared by both decode tiles: the same PTX for 48 fingerprinted kernels) through
# the n8 gpu tests and the default-path decode tests.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=240 bash scripts/device_snapshot_run.sh - @scripts/jobs/s34_e_sel.txt 2>&1 | tail -4 | cut -c1-300
