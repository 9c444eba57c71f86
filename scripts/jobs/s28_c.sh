#!/usr/bin/env bash
# Session 28, third machine session (after the toolchain calls, on a snapshot): the gemm gpu tier's test_gpu.py,
# then the one-wave unroll-1 rule A/B at the shapes its CTA range covers (new heuristic, then the old unroll 2 via
# B12X_GEMM_DECODE_OPTS), W4A16 NVFP4, cold weights, graph timer.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=${TEST_LIMIT:-300} bash scripts/device_snapshot_run.sh - tests/experimental/b12x/gemm/test_gpu.py 2>&1 | tail -25
cd /root/snap || exit 2
args=(--m 1 8 --shapes 9216x4096 10240x2048 11264x2048 12288x4096 --recipes w4a16_nvfp4 --timer graph --cold-weights --no-peers --iters 10)
timeout 200 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/one_wave_new.json" >"$OUT/one_wave_new.log" 2>&1
B12X_GEMM_DECODE_OPTS=unroll=2 timeout 200 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/one_wave_old.json" >"$OUT/one_wave_old.log" 2>&1
grep -hE "^w4a16" "$OUT/one_wave_new.log" "$OUT/one_wave_old.log"
