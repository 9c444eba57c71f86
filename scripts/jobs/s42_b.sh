#!/usr/bin/env bash
# Staged by session 42 (after the two toolchain calls, on a `git archive` snapshot): the CuTe NVFP4 quantizer's gpu
# tests (test_gpu_nvfp4_cute.py: bits against the oracle over M 1..4097, K 32..16384, both dtypes, tiles, PDL,
# graphs, a mixed dispatch) and test_gpu_mxfp8_cute.py; `... bench`: s42_b.txt's benchmark of its tiles beside the plan's
# selection (~4 min); `... bench2`: s42_c.txt's remaining M and fp16.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
if [[ ${1:-} != bench* ]]; then
SHARDS=4 TEST_LIMIT=300 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/quantization/test_gpu_nvfp4_cute.py tests/experimental/b12x/quantization/test_gpu_mxfp8_cute.py 2>&1 | grep -E "^commit|passed|failed|error" | tail -8 | cut -c1-240
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED\|^E " | head -20 | cut -c1-300
mkdir -p "${OUT:-/tmp}/tier_cute" && cp /tmp/b12x-par/shard*.log "${OUT:-/tmp}/tier_cute/" 2>/dev/null
exit 0
fi
jobs=scripts/jobs/s42_b.txt; [[ ${1:-} == bench2 ]] && jobs=scripts/jobs/s42_c.txt; [[ ${1:-} == bench_min ]] && jobs=scripts/jobs/s42_d.txt
BENCH_LIMIT=400 BENCH_SERIAL=1 bash scripts/device_snapshot_run.sh $jobs none 2>&1 | grep -E "^commit|== q_" | cut -c1-200
for f in /tmp/b12x-par/q_*.log; do grep -E "nvfp4|mxfp8|copy|MISMATCH" "$f" | cut -c1-200 | head -60; done
cp /tmp/b12x-par/q_*.json "${OUT:-/tmp}/" 2>/dev/null
true
