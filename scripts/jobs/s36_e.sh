#!/usr/bin/env bash
# Session 36: 2-CTA clusters at B = 2 / 4 / 16 for both KV dtypes (next_session.txt's att_cluster_map line, run
# in session 36 with its device time left; docs/predictions/attention.md, session 36, third run). After the two
# toolchain calls; runs the travelled tree (the commit in COMMIT) on PYTHONPATH, the b12x shim from _compat.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD:$PWD/flashinfer/experimental/b12x/_compat
export B12X_CACHE_DIR=/tmp/b12x-cache
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
timeout 500 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --shapes 2x1024 4x1024 4x4096 16x1024 16x2048 16x8192 --timer graph --calls-per-graph 8 --no-peers --decode-configs heuristic 8x32x2fspldk:c2p@fp8 8x16x2fspldkn:c2p@bf16 --json "$OUT/att_map.json" >"$OUT/att_map.txt" 2>&1
echo "bench att rc=$?"
grep -E "^decode|^case" "$OUT/att_map.txt" | tail -40
