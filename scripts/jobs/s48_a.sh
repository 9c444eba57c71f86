#!/usr/bin/env bash
# Staged by session 48 (after the two toolchain calls; snap.tar at the repository root). One part a call:
#   tests: the custom-op gpu tests (block_fp8_linear's new quantize_input op, and the other ops' for the plan handle
#          that now survives release and prepare), the extend tests (bind now slices the one-tile count) and the
#          decode GEMM's streaming variants (FP4 placements give one another's bits);
#   fp4:   #6's FP4 placement A/B (s48_b.txt gemm48_fp4: the heuristic against "mul"; any GPU);
#   peers: #6 against cuBLAS / _scaled_mm / int4pack on the current defaults (s48_b.txt gemm50_peers; session 50);
#   fused: the fused decode kernel's FP4 placements with silu_mul / residual, plain and under pdl "wait" and
#          "prefetch" (s48_b.txt gemm50_fused_fp4_*; any GPU);
#   waves: session 51's staged wave experiments (any GPU, ~4 min): decode16's one-wave grids at unroll 1 + minctas 3
#          (fused, plain) and four CTAs an SM at M <= 8 (unroll 1 + minctas 4), each job plainly, then under its
#          B12X_GEMM_DECODE_OPTS, then scripts/ab_summary.py on each pair (B = the options);
#   onewave: the fused kernel's one-wave grids on today's rule (unroll 1, mul; s51_a.txt gemm51_1w / gemm51_1w_res;
#          session 51's H100 figures in docs/performance.md);
#   grid:  #8's decode grid on today's defaults (H200 only: the prediction is in docs/predictions/attention.md);
#   mid:   the NVFP4 preload range in two processes, then session 47's rule on them (H200 only).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
t=tests/experimental/b12x
case ${1:?usage: s48_a.sh tests|fp4|peers|fused|waves|onewave|grid|mid} in
  tests)
    bash scripts/jobs/gpu_tests.sh "$t/gemm/test_block_fp8_linear_custom_op_gpu.py" "$t/gemm/test_custom_op_gpu.py" \
      "$t/moe/test_fused_moe_custom_op_gpu.py" "$t/attention/test_paged_custom_op_gpu.py" \
      "$t/attention/test_paged_extend_gpu.py" "$t/gemm/test_decode_stream_gpu.py" ;;
  fp4) TAIL=${TAIL:-40} bash scripts/jobs/named.sh scripts/jobs/s48_b.txt gemm48_fp4 ;;
  peers) TAIL=${TAIL:-45} bash scripts/jobs/named.sh scripts/jobs/s48_b.txt gemm50_peers ;;
  fused)
    TAIL=${TAIL:-4} bash scripts/jobs/named.sh scripts/jobs/s48_b.txt gemm50_fused_fp4_silu gemm50_fused_fp4_res
    python3 scripts/sweep_summary.py /tmp/b12x-par/gemm50_fused_fp4_{silu,res}.json --fields pdl unroll fp4 ;;
  waves)
    f=scripts/jobs/s51_a.txt
    TAIL=2 bash scripts/jobs/named.sh $f gemm51_1w16 gemm51_1w16p gemm51_4w gemm51_4wf gemm51_4w1 >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1,minctas=3 TAIL=2 bash scripts/jobs/named.sh $f gemm51_1w16_b gemm51_1w16p_b >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1,minctas=4 TAIL=2 bash scripts/jobs/named.sh $f gemm51_4w_b gemm51_4wf_b gemm51_4w1_b \
      >/dev/null
    for j in gemm51_1w16 gemm51_1w16p gemm51_4w gemm51_4wf gemm51_4w1; do
      echo "== $j (A) against ${j}_b (B)"; python3 scripts/ab_summary.py /tmp/b12x-par/$j.json /tmp/b12x-par/${j}_b.json
    done ;;
  onewave)
    TAIL=${TAIL:-4} bash scripts/jobs/named.sh scripts/jobs/s51_a.txt gemm51_1w gemm51_1w_res
    python3 scripts/sweep_summary.py /tmp/b12x-par/gemm51_1w{,_res}.json --fields pdl unroll fp4 ;;
  grid) TAIL=${TAIL:-30} bash scripts/jobs/named.sh scripts/jobs/s46_a.txt att46_grid ;;
  mid)
    TAIL=${TAIL:-24} bash scripts/jobs/named.sh scripts/jobs/s47_a.txt q47_mid q47_mid2
    (cd /root/snap && python3 scripts/preload_range.py /tmp/b12x-par/q47_mid.json /tmp/b12x-par/q47_mid2.json) ;;
esac
exit 0
