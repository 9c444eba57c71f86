#!/usr/bin/env bash
# Session 46 (after the toolchain calls, on a snapshot; any GPU): the host cost of eager calls on a GPU host,
# `scripts/probe_host_overhead.py`: the quantizers as in session 45, and attention.paged's bind with and without its
# host read of live values (`check_values`, new in session 46: 61.6 -> 26.1 µs a bind on the CPU machine) and
# bind + run. Output: here and $OUT/probe_host.txt.
set -uo pipefail
bash scripts/device_snapshot_run.sh - none >/dev/null 2>&1
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
timeout 300 python3 scripts/probe_host_overhead.py 2>&1 | grep -v "^\[b12x\]" | tee "${OUT:-/tmp}/probe_host.txt"
