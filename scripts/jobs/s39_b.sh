#!/usr/bin/env bash
# Session 39 (on the warm machine after s39_a.sh, same snapshot): the gemm gpu tier with PLAIN_PDL_GROUPS on (pdl
# "wait" plans with warp groups take the plain kernel with pdl_wait) and the moe pdl tests. ~5 min.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=16 TEST_LIMIT=400 bash scripts/device_snapshot_run.sh - tests/experimental/b12x/gemm tests/experimental/b12x/moe/test_fused_moe_pdl_gpu.py 2>&1 | grep -E "^commit|failed|error" | tail -8 | cut -c1-240
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
