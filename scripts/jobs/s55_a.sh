#!/usr/bin/env bash
# Session 55's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"); each A/B's reports are kept as
# NAME_rN and `ab_summary.py --rule`'s verdict goes to /tmp/b12x-par/rule_NAME.txt (and $OUT).
#   fsg2: FUSED_SILU_GROUPS (on) against the switch off, once: the confirmation of its 8-warp rule (~2 min)
#   fmul: MXFP4 fused silu_mul "shift" against "mul" on the 8-warp grouped grids, twice (~2 min)
#   fsg4: FUSED_SILU_GROUPS4's A/B (NVFP4's 4-warp groups), twice (~2 min)
#   gemm: `s43_a.sh gemm` on snap.tar, then the demo's gpu files (~6 min)
set -uo pipefail
f=scripts/jobs/s55_a.txt
source scripts/jobs/ab.sh  # ab / abr / _ab / keep / rule, and P (the reports' directory)
case ${1:?usage: s55_a.sh fsg2|fmul|fsg4|gemm} in
  fsg2)
    _ab B12X_DECODE_RULES gemm55_fsg_a gemm55_fsg_b FUSED_SILU_GROUPS=0 "" && keep gemm55_fsg 1
    rule fsg2 gemm55_fsg 1 --only "N=16384 " ;;
  fmul)
    for r in 1 2; do ab gemm55_fmul_a gemm55_fmul_b "" fp4=mul && keep gemm55_fmul $r; done
    rule fmul gemm55_fmul 2 ;;
  fsg4)
    for r in 1 2; do abr gemm55_fsg4_a gemm55_fsg4_b FUSED_SILU_GROUPS4=1 && keep gemm55_fsg4 $r; done
    rule fsg4 gemm55_fsg4 2 --except "N=36864 " ;;
  gemm)
    bash scripts/jobs/s43_a.sh gemm
    SHARDS=10 TEST_LIMIT=300 bash scripts/jobs/gpu_tests.sh tests/experimental/b12x/demo ;;
  *) sed -n '2,7p' "$0"; exit 2 ;;
esac
