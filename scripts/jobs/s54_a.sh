#!/usr/bin/env bash
# Session 54's device jobs (after the two toolchain calls; AGENTS.md "GPU runs"). Each rule's A/B runs through
# scripts/jobs/s53_a.sh, its reports are kept as NAME_rN, and `ab_summary.py --rule` writes its verdict to
# /tmp/b12x-par/rule_NAME.txt (and $OUT); `gemm` then applies the flips (scripts/jobs/s54_flip.py) whose rules
# passed to the snapshot and runs the gemm tier on it.
#   t1:   fmxmul once (its first run was session 53's), mxwide twice (~5 min)
#   t2:   d16s twice, then w16 once (its table only; the rule it led to is t3's) (~6 min)
#   t3:   EIGHT_WARP_WAVE's A/B twice (s54_a.txt), then `s53_a.sh fash` (its table only) (~6 min)
#   fsg:  FUSED_SILU_GROUPS' A/B twice (s54_a.txt, B under B12X_DECODE_RULES), staged for session 55 (~3 min)
#   w8b:  EIGHT_WARP_WAVE16's (plain 9..16 tokens) and FUSED_EIGHT_WARP_WAVE's (silu_mul, residual) A/Bs twice (~5 min)
#   gemm: the passing flips on snap.tar, then `s43_a.sh gemm` (~5.5 min)
set -uo pipefail
f=scripts/jobs/s54_a.txt  # this session's jobs (t3, fsg, w8b); t1 / t2 run s53_a.sh's with its own file
source scripts/jobs/ab.sh  # ab / abr / keep / rule, and P (the reports' directory)
case ${1:?usage: s54_a.sh t1|t2|t3|fsg|w8b|gemm} in
  t1)
    bash scripts/jobs/s53_a.sh fmxmul && keep gemm53_fmxmul 1
    # the rule's cells: silu_mul but 9..16 tokens at N >= WIDE_DECODE_N (28672 is the job's one such N)
    rule fmxmul gemm53_fmxmul 1 --only "silu_mul" --except "M=(9|1[0-6]) N=28672 "
    for r in 1 2; do bash scripts/jobs/s53_a.sh mxwide && keep gemm53_mxwide $r; done
    rule mxwide gemm53_mxwide 2 --except "N=20480 "  # 320 CTAs: one wave at unroll 2 already, the job's control
    cp $P/gemm53_*.json "${OUT:-/tmp}/" 2>/dev/null ;;
  t2)
    for r in 1 2; do bash scripts/jobs/s53_a.sh d16s && keep gemm53_d16s $r; done
    rule d16s gemm53_d16s 2
    bash scripts/jobs/s53_a.sh w16
    cp $P/gemm53_*.json "${OUT:-/tmp}/" 2>/dev/null ;;
  t3)
    for r in 1 2; do ab gemm54_w16_a gemm54_w16_b "" warps=8 && keep gemm54_w16 $r; done
    rule w16 gemm54_w16 2 --except "N=4096 K=4096 "  # 128 CTAs: the control
    TAIL=60 bash scripts/jobs/s53_a.sh fash ;;
  fsg)
    for r in 1 2; do abr gemm54_fsg_a gemm54_fsg_b FUSED_SILU_GROUPS=1 && keep gemm54_fsg $r; done
    rule fsg gemm54_fsg 2 --except "N=14336 "  # one group in the plain heuristic: the control
    cp $P/gemm54_*.json "${OUT:-/tmp}/" 2>/dev/null ;;
  w8b)
    for r in 1 2; do abr gemm54_w8p_a gemm54_w8p_b EIGHT_WARP_WAVE16=1 && keep gemm54_w8p $r; done
    rule w8p gemm54_w8p 2 --except "N=4096 K=4096 "  # 128 CTAs: the control
    for r in 1 2; do
      for j in w8f w8r; do abr gemm54_${j}_a gemm54_${j}_b FUSED_EIGHT_WARP_WAVE=1 && keep gemm54_$j $r; done
    done
    rule w8f "gemm54_w8f gemm54_w8r" 2 --except "N=4096 K=4096 "  # both epilogues decide the one fused switch
    cp $P/gemm54_*.json "${OUT:-/tmp}/" 2>/dev/null ;;
  gemm)
    rm -rf /tmp/flip && mkdir -p /tmp/flip && tar xf snap.tar -C /tmp/flip || exit 2
    flips=()
    for name in fmxmul d16s w16 fsg w8p w8f; do  # mxwide landed in a commit (its two runs: t1)
      if grep -q "^rule passed" "$P/rule_$name.txt" 2>/dev/null; then
        flips+=("$name")
      fi
    done
    ((${#flips[@]} == 0)) || python3 scripts/jobs/s54_flip.py /tmp/flip "${flips[@]}" || exit 2
    echo "flips applied: ${flips[*]:-none}"
    if ((${#flips[@]})); then
      printf '%s+%s\n' "$(cat /tmp/flip/COMMIT)" "$(IFS=+; echo "${flips[*]}")" >/tmp/flip/COMMIT
      tar cf snap.tar -C /tmp/flip . || exit 2
    fi
    bash scripts/jobs/s43_a.sh gemm ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
