#!/usr/bin/env bash
# Session 28, last machine session (after the toolchain calls, on a snapshot): DecodeConfig.minctas's gpu tests,
# the demo block with the gate_up bounded to 3 CTAs an SM (fast+gu3, fast+gu3u1) against fast, then the W4A16
# past-the-range unroll A/B (s28_d.sh's, if time is left).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
printf '%s\n' 'tests/experimental/b12x/gemm/test_decode_fused_gpu.py -k "minctas or test_decode_fused_matches_reference"' >/tmp/s28e_sel.txt
cp /tmp/s28e_sel.txt .s28e_sel.txt
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @.s28e_sel.txt 2>&1 | tail -6
cd /root/snap || exit 2
timeout 200 python3 -m benchmarks.experimental.b12x.bench_block --tokens 1 8 --variant fast fast+gu3 fast+gu3u1 \
  --prefill --no-peers --iters 20 --json "$OUT/block.json" >"$OUT/block.log" 2>&1
grep -E "^decode|fast" "$OUT/block.log" | grep -v "^\[" | head -12
args=(--m 1 8 --shapes 13312x2048 14336x4096 16384x2048 --recipes w4a16_nvfp4 --timer graph --cold-weights --no-peers --iters 10)
timeout 100 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/past_u2.json" >"$OUT/past_u2.log" 2>&1
B12X_GEMM_DECODE_OPTS=unroll=1 timeout 100 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/past_u1.json" >"$OUT/past_u1.log" 2>&1
grep -hE "^w4a16" "$OUT/past_u2.log" "$OUT/past_u1.log"
