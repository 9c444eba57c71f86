#!/usr/bin/env bash
# Session 36: the attention gpu tier on the cluster-pairs tree (the kernel sources changed; the PTX of the existing
# configs is byte-identical, checked on the CPU), after the two toolchain calls, on a snapshot by git archive.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=20 TEST_LIMIT=370 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention 2>&1 | tail -6 | cut -c1-300
