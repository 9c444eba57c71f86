#!/usr/bin/env bash
# Session 36: B = 8 decode with 2- and 4-CTA clusters for both KV dtypes at 1k-8k keys (next_session.txt's
# att_b8_clusters line; predictions in docs/predictions/attention.md, session 36, second run). After the two
# toolchain calls; runs the travelled tree (the commit in COMMIT) on PYTHONPATH, the b12x shim from _compat.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD:$PWD/flashinfer/experimental/b12x/_compat
export B12X_CACHE_DIR=/tmp/b12x-cache
echo "commit $(cat COMMIT 2>/dev/null) $(date -u +%FT%TZ)"
timeout 500 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --shapes 8x1024 8x2048 8x4096 8x8192 --timer graph --calls-per-graph 8 --no-peers --decode-configs heuristic 8x32x2fspldk:c2p@fp8 8x32x2fspldk:c4p@fp8 8x16x2fspldkn:c2p@bf16 4x16x3fspldk:c2p@bf16 --json "$OUT/att_b8.json" >"$OUT/att_b8.txt" 2>&1
echo "bench att rc=$?"
grep -E "^decode|^case" "$OUT/att_b8.txt" | tail -40
