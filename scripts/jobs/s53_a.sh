#!/usr/bin/env bash
# Session 53's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"):
#   fmxmul: the fused kernel's W4A16 MXFP4 under FP4 placement by a multiply, silu_mul and residual (~2 min; both
#           sides forced: A fp4=shift, B fp4=mul; then the cell that lost at B fp4=mul,minctas=4; s53_a.txt)
#   d16s:   DECODE16_ONE_WAVE's kernel with shared activations (no spills; ~2 min; B = ashare=true,wn=2)
#   mxwide: W4A16 MXFP4's 9..16-token shared-activation tiling unrolled once (one wave; ~1.5 min; B = unroll=1)
#   w16:    the M <= 8 kernel at 16 warps over 133-264 CTAs: unroll 1 or 8 warps, one wave (~2 min; two B's)
#   fash:   the fused kernel's warp groups with shared activations at N >= 16384, 9..16 tokens (~3 min; the sweep's
#           own table: fused_config's choice, the other wn, wn 2 + ashare, plainly and under pdl "wait")
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
f=scripts/jobs/s53_a.txt
source scripts/jobs/ab.sh  # ab JOB_A JOB_B OPTS_A OPTS_B
case ${1:?usage: s53_a.sh fmxmul|d16s|mxwide|w16|fash} in
  fmxmul)
    for j in fmxmul rmxmul; do ab gemm53_${j}_a gemm53_${j}_b fp4=shift fp4=mul; done
    ab gemm53_fmxcliff_a gemm53_fmxcliff_b fp4=shift fp4=mul,minctas=4 ;;
  d16s) ab gemm53_d16s_a gemm53_d16s_b "" ashare=true,wn=2 ;;
  mxwide) ab gemm53_mxwide_a gemm53_mxwide_b "" unroll=1 ;;
  w16)
    ab gemm53_w16_a gemm53_w16_u1 "" unroll=1
    B12X_GEMM_DECODE_OPTS=warps=8 TAIL=2 bash scripts/jobs/named.sh $f gemm53_w16_w8 >/dev/null
    python3 scripts/ab_summary.py /tmp/b12x-par/gemm53_w16_a.json /tmp/b12x-par/gemm53_w16_w8.json ;;
  fash) TAIL=${TAIL:-40} bash scripts/jobs/named.sh $f gemm53_fash_silu gemm53_fash_res ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
