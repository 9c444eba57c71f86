#!/usr/bin/env bash
# Session 33, sixth machine session (after the toolchain calls, on a snapshot): can producer / consumer warps hide an
# encode-sized ALU load behind the quantizer's loads? `scripts/probe_nvfp4_ws.py`: a Triton pointer kernel (loads, then
# ALU rounds, then a 4:1 fold and stores: the plan's structure) beside a Gluon warp-specialized one (a TMA producer
# warp over a shared-memory ring, four consumer warps), at ALU 0 / 4 / 8 / 12 rounds (3 SASS a word each), graph
# timer, one process.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -2 | cut -c1-200
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 400 python3 scripts/probe_nvfp4_ws.py --shapes 4096x4096 4096x7168 16384x4096 --alu 0 4 8 12 \
  --json "$OUT/ws.json" >"$OUT/ws.txt" 2>&1
echo "probe rc=$?"
tail -n 60 "$OUT/ws.txt" | cut -c1-220
