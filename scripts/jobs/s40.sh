#!/usr/bin/env bash
# Staged by session 39 (after the two toolchain calls, on a `git archive` snapshot): s40_a.txt (the decode
# probes with "wloads" / "l1act") and s40_b.txt (the fused kernel's warp groups under silu_mul / residual) in one
# call, ~4 min, then each sweep's rows compactly: config fields that differ, µs. Predictions and rules:
# docs/predictions/gemm_decode.md, session 39.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
cat scripts/jobs/s40_a.txt scripts/jobs/s40_b.txt > /tmp/s40_jobs.txt
BENCH_LIMIT=400 bash scripts/device_snapshot_run.sh /tmp/s40_jobs.txt none 2>&1 | grep -E "^commit|== gemm" | cut -c1-200
python3 scripts/sweep_summary.py
# Session 40: the groups' cluster residency (docs/predictions/attention.md, session 39: below 16 clusters of 8 /
# 32 of 4 predicted), fp8 and bf16 tiles.
PYTHONPATH=$PYTHONPATH:. python3 scripts/cluster_occupancy.py 2>&1 | tail -4
PYTHONPATH=$PYTHONPATH:. python3 scripts/cluster_occupancy.py --kv-dtype bfloat16 --entries 8x16x2fspldkn:c2sp 8x16x2fspldkn:c8sp 2>&1 | tail -3
