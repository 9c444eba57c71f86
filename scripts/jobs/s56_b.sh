#!/usr/bin/env bash
# Session 56's second device job (after the two toolchain calls, on a `git archive` snapshot): the norm gpu tier on the
# final norm.mhc host path (execute's one-run calls pass their tensors straight to the passes; chunked calls walk
# runs), 15 processes, ~3.5 min on an H100.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=${SHARDS:-15} TEST_LIMIT=${TEST_LIMIT:-200} bash scripts/jobs/gpu_tests.sh tests/experimental/b12x/norm
