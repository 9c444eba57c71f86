#!/usr/bin/env bash
# Session 52's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"):
#   d16:  DECODE16_ONE_WAVE's CTA range, both sides of its lower bound (scripts/jobs/s52_a.txt; ~2 min), then
#         scripts/ab_summary.py (B = unroll 1 + minctas 3; a cell "B-" is the rule winning there);
#   mx:   W4A16 MXFP4 under the NVFP4 wave rules' options and cache hints (~2 min; the prediction is in
#         scripts/jobs/s52_a.txt), then scripts/ab_summary.py for each against the plain run;
#   mxrule: `launch.MXFP4_HINTS` against the default before it (~2 min; B = today's default);
#   fp8h: W8A16 MXFP8 / block-FP8 under NVFP4's cache hints (~2 min; B = the hints);
#   fmx:  the fused kernel with W4A16 MXFP4 weights under MXFP4_HINTS's configs (~2 min; B = the options);
#   mxmul: W4A16 MXFP4 with its FP4 codes placed by a multiply (~1.5 min; B = fp4=mul; prediction in s52_a.txt);
#   moe:  moe.fused_moe's decode experts with the L2 256-byte weight prefetch ("w4p1h256") beside today's "w4p1h";
#   d16c: DECODE16_ONE_WAVE's kernel with clamped loads (fewer in-loop spills; ~1.5 min; B = clamp=true).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
f=scripts/jobs/s52_a.txt
source scripts/jobs/ab.sh  # ab JOB_A JOB_B OPTS_A OPTS_B
case ${1:?usage: s52_a.sh d16|mx|mxrule|fp8h|fmx|mxmul|moe|d16c} in
  d16) ab gemm52_d16p_a gemm52_d16p_b unroll=2,minctas=0 unroll=1,minctas=3 ;;
  mx)
    TAIL=2 bash scripts/jobs/named.sh $f gemm52_mx8_a gemm52_mx16_a >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1 TAIL=2 bash scripts/jobs/named.sh $f gemm52_mx8_u1 >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1,minctas=4 TAIL=2 bash scripts/jobs/named.sh $f gemm52_mx8_m4 >/dev/null
    B12X_GEMM_DECODE_OPTS=unroll=1,minctas=3 TAIL=2 bash scripts/jobs/named.sh $f gemm52_mx16_m3 >/dev/null
    B12X_GEMM_DECODE_OPTS=wcache=na256,acache=el TAIL=2 bash scripts/jobs/named.sh $f gemm52_mx8_h gemm52_mx16_h >/dev/null
    for b in mx8_u1 mx8_m4 mx8_h mx16_m3 mx16_h; do
      a=gemm52_${b%%_*}_a; echo "== $a (A) against gemm52_$b (B)"
      python3 scripts/ab_summary.py /tmp/b12x-par/$a.json /tmp/b12x-par/gemm52_$b.json | tail -n +3
    done ;;
  mxrule)
    for b in mxr8 mxr16; do ab gemm52_${b}_old gemm52_${b}_new wcache=nc,acache=nc,unroll=2,minctas=0 ""; done ;;
  fp8h) ab gemm52_w8_a gemm52_w8_b "" wcache=na256,acache=el ;;
  fmx)
    h=wcache=na256,acache=el
    ab gemm52_fmx1w_a gemm52_fmx1w_b "" $h,unroll=1
    ab gemm52_fmx4w_a gemm52_fmx4w_b "" $h,unroll=1,minctas=4
    for j in fmxh fmxh16 fmxr; do ab gemm52_${j}_a gemm52_${j}_b "" $h; done ;;
  mxmul) ab gemm52_mxmul_a gemm52_mxmul_b "" fp4=mul ;;
  moe) TAIL=${TAIL:-30} bash scripts/jobs/named.sh $f moe52_l2pf128 moe52_l2pf512 ;;
  d16c) ab gemm52_d16c_a gemm52_d16c_b "" clamp=true ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
