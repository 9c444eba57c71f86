#!/usr/bin/env bash
# Session 35, first machine session (after the toolchain calls and a call that carried .devwheels/fi1 to
# /root/fiw; this call carries .devwheels/fi2, on a snapshot): the staged
# e4m3 -> fp16 conversion probe (F2FP against the integer-pipe rewrite), then #8's decode grid with FlashInfer's
# paged decode as a peer on today's defaults (16-bit KV on the heads_n8 tile), 8 calls a graph.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
bash scripts/jobs/install_flashinfer.sh
bash scripts/device_snapshot_run.sh - none 2>&1 | tail -3 | cut -c1-300
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 120 python3 scripts/probe_e4m3_convert.py --json "$OUT/e4m3.json" >"$OUT/e4m3.txt" 2>&1; echo "probe rc=$?"
cat "$OUT/e4m3.txt"
timeout 420 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --batch 1 8 32 128 \
  --kv-len 1024 8192 32768 --flashinfer-site /root/fi --timer graph --calls-per-graph 8 \
  --json "$OUT/att_fi.json" >"$OUT/att_fi.txt" 2>&1
echo "bench att_fi rc=$?"
tail -c 7000 "$OUT/att_fi.txt"
