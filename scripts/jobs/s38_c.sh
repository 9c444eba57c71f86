#!/usr/bin/env bash
# Staged by session 38 (after the two toolchain calls, on a `git archive` snapshot; may follow s38_a / s38_b on the
# warm machine): the ksplit / pdl_wait decode variants' GPU tests (every variant the sweep times, W4A16 NVFP4 at #6's
# four shapes, M = 1 / 3 / 9 / 16; the PLAIN_PDL_GROUPS switch on, eager and a captured chain; the fused kernel
# with 2 warp groups, three epilogues at 28672 x 4096), then s38_c.txt's
# sweep and peers (~5 min in all), µs rows.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
SHARDS=8 TEST_LIMIT=300 BENCH_LIMIT=300 bash scripts/device_snapshot_run.sh scripts/jobs/s38_c.txt tests/experimental/b12x/gemm/test_decode_ksplit.py tests/experimental/b12x/gemm/test_decode_pdl_wait.py tests/experimental/b12x/gemm/test_decode_fused_groups.py 2>&1 | grep -E "^commit|passed|failed|error|== gemm" | grep -vE "^shard[0-9]+: [0-9]+ passed" | tail -12 | cut -c1-220
grep -hE "passed|failed" /tmp/b12x-par/shard*.log | grep -oE "[0-9]+ (passed|failed|skipped)" | awk '{n[$2]+=$1} END{for(k in n) print k, n[k]}'
grep -l "FAILED" /tmp/b12x-par/shard*.log | head -3 | xargs -r grep -h "^FAILED" | head -10 | cut -c1-240
for f in gemm_ksplit gemm_peers; do echo "== $f"; grep -E "sweep|best|µs|us " /tmp/b12x-par/$f.log | head -60 | cut -c1-220; done
