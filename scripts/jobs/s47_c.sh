#!/usr/bin/env bash
# Staged by session 47 (after the two toolchain calls; snap.tar at the repository root, ab tars aside): the preload
# range bench in two processes (s47_a.txt q47_mid / q47_mid2, one after the other), then the gpu tests of this
# session's changes: the moe / block_fp8_linear custom ops, attention's custom op and bad-values replays (the page id
# now clamped at its address, c38d4aa).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
t=tests/experimental/b12x
[[ ${1:-} == tests ]] || TAIL=24 bash scripts/jobs/named.sh scripts/jobs/s47_a.txt q47_mid q47_mid2
bash scripts/jobs/gpu_tests.sh \
  "$t/moe/test_fused_moe_custom_op_gpu.py" "$t/gemm/test_block_fp8_linear_custom_op_gpu.py" \
  "$t/attention/test_paged_custom_op_gpu.py" "$t/attention/test_paged_bad_values_gpu.py"
exit 0
