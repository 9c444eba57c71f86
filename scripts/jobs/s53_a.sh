#!/usr/bin/env bash
# Session 53's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"):
#   fmxmul: the fused kernel's W4A16 MXFP4 under FP4 placement by a multiply, silu_mul and residual (~2 min; both
#           sides forced: A fp4=shift, B fp4=mul; prediction in scripts/jobs/s53_a.txt)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
f=scripts/jobs/s53_a.txt
source scripts/jobs/ab.sh  # ab JOB_A JOB_B OPTS_A OPTS_B
case ${1:?usage: s53_a.sh fmxmul} in
  fmxmul) for j in fmxmul rmxmul; do ab gemm53_${j}_a gemm53_${j}_b fp4=shift fp4=mul; done ;;
  *) sed -n '2,4p' "$0"; exit 2 ;;
esac
