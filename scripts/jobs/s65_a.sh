#!/usr/bin/env bash
# Session 65's closing tables on an H200 (after the two toolchain calls and `s58_a.sh h200a` / `h200b`; snap.tar at the
# repository root): the rows docs/closing/issue*.md found missing from s58's tables, job lines in s65_close.txt.
#   bash scripts/jobs/s65_a.sh gemm      #6: MXFP8 at M = 1 / 16 (plain, copy rows; M = 16 as a pdl dependent) and
#                                        NVFP4 / MXFP8 at M = 2048 / 4096, peers in the same run
#   bash scripts/jobs/s65_a.sh moe_att   #7: T = 4096 against the bf16 grouped_mm peer; #8: extend against SDPA; then
#                                        #7's E = 128 bound (`s63_a.sh probe`: the one-launch skeleton, the same-size copy)
# #8's decode table with FlashInfer needs its wheel carried first (scripts/jobs/install_flashinfer.sh, two calls), then
# the `att_fi` line of scripts/jobs/s29_fi.txt with `--calls-per-graph 8 --copy-rows`.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
jobs=scripts/jobs/s65_close.txt
nvidia-smi --query-gpu=name --format=csv,noheader
case ${1:-} in
  gemm) BENCH_LIMIT=${BENCH_LIMIT:-170} TAIL=40 bash scripts/jobs/named.sh "$jobs" c65_mxfp8 c65_mxfp8_pdl c65_large ;;
  moe_att)
    BENCH_LIMIT=${BENCH_LIMIT:-170} TAIL=40 bash scripts/jobs/named.sh "$jobs" c65_moe4096 c65_extend
    PROBE_S=150 bash scripts/jobs/s63_a.sh probe ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
