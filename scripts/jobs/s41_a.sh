#!/usr/bin/env bash
# Staged by session 40 (after the two toolchain calls, on a `git archive` snapshot): the driver's cluster residency
# of the 4-warp group entries, then s41_a.txt's timings (~3 min). Prediction: docs/predictions/attention.md,
# "Session 40: groups on 4-warp tiles".
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
PYTHONPATH=$PYTHONPATH:. python3 scripts/cluster_occupancy.py --entries 4x32x2fspldk:c8sp 4x32x2fspldk:c4sp 8x32x2fspldk:c8sp 2>&1 | tail -3
PYTHONPATH=$PYTHONPATH:. python3 scripts/cluster_occupancy.py --kv-dtype bfloat16 --entries 4x16x2fspldkn:c8sp 2>&1 | tail -1
BENCH_LIMIT=400 bash scripts/device_snapshot_run.sh scripts/jobs/s41_a.txt none 2>&1 | grep -E "^commit|== att|µs|x[0-9]" | cut -c1-220 | head -60
cp /tmp/b12x-par/att_*.json "${OUT:-/tmp}/" 2>/dev/null
# Session 41: the L2-prefetch read times, a printing gpu test until then (~10 s).
PYTHONPATH=$PYTHONPATH:. python3 scripts/probe_l2_prefetch.py --mb 24 64 2>&1 | tail -8
true
