#!/usr/bin/env bash
# Session 40 (after the two toolchain calls, on a `git archive` snapshot): the gemm gpu tier plus moe pdl (the
# decode K loop now one `DecodeLogic.k_loop` for the plain and fused kernels, PTX-identical on the CPU, moe's expert GEMMs on it too; the residual
# epilogue's warp groups; the ksplit variants' 8-warp halves), then s40_c.txt's sweeps and the GEMM's cluster
# occupancy. `bash scripts/jobs/s40_c.sh tier` (~6 min), `... moe` (the moe gpu tier, ~6 min), then
# `bash scripts/jobs/s40_c.sh bench` (~4 min).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
if [[ ${1:-} == moe ]]; then  # the moe gpu tier: its expert GEMMs' K loop is DecodeLogic.k_loop since session 40
SHARDS=16 TEST_LIMIT=500 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/moe 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
exit 0
fi
if [[ ${1:-} == tier ]]; then
SHARDS=16 TEST_LIMIT=450 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/gemm tests/experimental/b12x/moe/test_fused_moe_pdl_gpu.py 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
mkdir -p "${OUT:-/tmp}/tier" && cp /tmp/b12x-par/shard*.log "${OUT:-/tmp}/tier/" 2>/dev/null
exit 0
fi
BENCH_LIMIT=300 bash scripts/device_snapshot_run.sh scripts/jobs/s40_c.txt none 2>&1 | grep -E "^commit|== gemm" | cut -c1-200
python3 scripts/sweep_summary.py
cp /tmp/b12x-par/gemm_*.json "${OUT:-/tmp}/" 2>/dev/null
PYTHONPATH=$PYTHONPATH:. python3 scripts/cluster_occupancy.py --gemm 4096x14336 2>&1 | tail -13 | cut -c1-400
