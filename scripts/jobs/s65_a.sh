#!/usr/bin/env bash
# Session 65's closing tables on an H200 (after the two toolchain calls and `s58_a.sh h200a` / `h200b`; snap.tar at the
# repository root): the rows docs/closing/issue*.md found missing from s58's tables, job lines in s65_close.txt.
#   bash scripts/jobs/s65_a.sh gemm      #6: MXFP8 at M = 1 / 16 (plain, copy rows; M = 16 as a pdl dependent) and
#                                        NVFP4 / MXFP8 at M = 2048 / 4096, peers in the same run
#   bash scripts/jobs/s65_a.sh moe_att   #7: T = 4096 against the bf16 grouped_mm peer; #8: extend against SDPA; then
#                                        #7's E = 128 bound (`s63_a.sh probe`: the one-launch skeleton, the same-size copy)
# #8's tables with FlashInfer need its wheel carried first (scripts/jobs/install_flashinfer.sh, two calls), then
# `s65_a.sh fi bf16` and `fi fp8`: decode (s29_fi.txt's `att_fi` line with --calls-per-graph 8 --copy-rows) and extend, where
# FlashInfer's paged prefill is the peer since session 65 (row "flashinfer prefill", never run on the wheel yet).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
jobs=scripts/jobs/s65_close.txt
nvidia-smi --query-gpu=name --format=csv,noheader
case ${1:-} in
  gemm) BENCH_LIMIT=${BENCH_LIMIT:-170} TAIL=40 bash scripts/jobs/named.sh "$jobs" c65_mxfp8 c65_mxfp8_pdl c65_large ;;
  moe_att)
    BENCH_LIMIT=${BENCH_LIMIT:-170} TAIL=40 bash scripts/jobs/named.sh "$jobs" c65_moe4096 c65_extend
    PROBE_S=150 bash scripts/jobs/s63_a.sh probe ;;
  fi)  # one KV dtype a call (`s65_a.sh fi bf16`, then `fi fp8`): each child JITs FlashInfer once (~26 s)
    kv=${2:?s65_a.sh fi needs the KV dtype: bf16 or fp8}
    m=benchmarks.experimental.b12x.bench_attention
    timeout 200 python3 -m $m --mode extend --kv "$kv" --flashinfer-site /root/fi --timer graph \
      --json "$OUT/fi65_extend_$kv.json" >"$OUT/fi65_extend_$kv.log" 2>&1; echo "extend rc=$?"
    tail -25 "$OUT/fi65_extend_$kv.log" | cut -c1-200
    timeout 330 python3 -m $m --mode decode --kv "$kv" --batch 1 8 32 128 --kv-len 1024 8192 32768 --flashinfer-site \
      /root/fi --timer graph --calls-per-graph 8 --copy-rows --json "$OUT/fi65_decode_$kv.json" \
      >"$OUT/fi65_decode_$kv.log" 2>&1; echo "decode rc=$?"; tail -45 "$OUT/fi65_decode_$kv.log" | cut -c1-200 ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
