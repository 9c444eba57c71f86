#!/usr/bin/env bash
# Session 35, FlashInfer's paged decode re-timed on today's defaults (16-bit KV on the heads_n8 tile since session
# 34), #8's grid with 8 calls a graph, one KV dtype a call (KV=bf16 | fp8). The first call (KV=bf16) runs after the
# toolchain calls and a call that carried .devwheels/fi1 to /root/fiw, carries .devwheels/fi2 and installs
# FlashInfer 0.7.2.post1 into /root/fi and the snapshot; the second (KV=fp8) reuses both on the warm machine. Run in
# session 35 without --no-sdpa and a 380 s limit: timed out before FlashInfer finished (docs/performance.md).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
KV=${KV:?KV=bf16 or fp8}
if [[ $KV == bf16 ]]; then
  bash scripts/jobs/install_flashinfer.sh
  bash scripts/device_snapshot_run.sh - none 2>&1 | tail -2 | cut -c1-300
fi
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache
timeout 540 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv "$KV" --batch 1 8 32 128 --no-sdpa \
  --kv-len 1024 8192 32768 --flashinfer-site /root/fi --timer graph --calls-per-graph 8 \
  --json "$OUT/att_fi_$KV.json" >"$OUT/att_fi_$KV.txt" 2>&1
echo "bench att_fi $KV rc=$?"
grep -v "b12x prepare" "$OUT/att_fi_$KV.txt" | tail -c 6000
