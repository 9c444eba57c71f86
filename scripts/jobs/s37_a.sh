#!/usr/bin/env bash
# Session 37, second toolchain call's job (snapshot by git archive): the attention gpu tier on the tree with the
# cluster-pairs default (CLUSTER_PAIRS_MAX), 25 shards side by side.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=25 TEST_LIMIT=340 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/attention 2>&1 | tail -12 | cut -c1-260
