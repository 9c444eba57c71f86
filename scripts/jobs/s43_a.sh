#!/usr/bin/env bash
# Staged by session 43 (after the two toolchain calls, on a `git archive` snapshot): a gpu tier with at most one test
# process per 5 GiB of GPU memory (device_parallel_run.sh's PARALLEL; session 43's H100 run of the attention tier with
# 33 processes at once failed 86 tests, every one CUDA out of memory), then its kernels' cache saved for the next
# machine session (scripts/device_cache.sh; carry [".devcache"] and `bash scripts/device_cache.sh load` first).
#   bash scripts/jobs/s43_a.sh att    the attention + demo tiers (session 41's page clamps; ~6 min)
#   bash scripts/jobs/s43_a.sh moe    the moe tier (sessions 40's DecodeLogic.k_loop in the expert GEMMs; ~6 min on an
#                                     H200; on an H100 at 8 GiB a process run it as `moe_a` then `moe_b`)
#   bash scripts/jobs/s43_a.sh gemm   the gemm tier plus moe pdl (passed on the H100 at 10d07e2: 609 / 609)
#   bash scripts/jobs/s43_a.sh quant  the quantization tier (the CuTe quantizers' default switch, if flipped)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
t=tests/experimental/b12x
case ${1:-} in
  att) paths=("$t/attention" "$t/demo"); keep=("kernels/attention.*" "kernels/demo.*") ;;
  moe|moe_a|moe_b) keep=("kernels/moe.*")
    case $1 in  # moe_a + moe_b = moe, in two calls when one would pass the 600 s call limit at 8 GiB a process
      moe) paths=("$t/moe") ;;
      moe_a) paths=("$t/moe/test_fused_moe_gpu.py") ;;
      moe_b) paths=($(ls "$t"/moe/test_*.py | grep -v /test_fused_moe_gpu.py)) ;;
    esac
    # one process per 8 GiB (not 5): session 67's H100 tier at 15 processes ran 7 tests out of memory when three
    # 512x10x4096x1024 shards met
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
    export PARALLEL=${PARALLEL:-$(( ${mem:-81920} / 8192 ))} ;;
  gemm) paths=("$t/gemm" "$t/moe/test_fused_moe_pdl_gpu.py"); keep=("kernels/gemm.*") ;;
  quant) paths=("$t/quantization"); keep=("kernels/quantization.*") ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
bash scripts/device_cache.sh load
SHARDS=${SHARDS:-25} TEST_LIMIT=${TEST_LIMIT:-420} bash scripts/jobs/gpu_tests.sh "${paths[@]}"
bash scripts/device_cache.sh save || true
[[ -d ${OUT:-/nonexistent}/cache ]] || bash scripts/device_cache.sh save "${keep[@]}" || true
exit 0
