# Sourced by the session job scripts (s52_a.sh .. s55_a.sh): `ab` times two named jobs of the job file $f, each in its
# own process, and prints scripts/ab_summary.py's comparison; `keep` and `rule` turn repeated A/Bs into a pass test.
#   ab JOB_A JOB_B OPTS_A OPTS_B: A under B12X_GEMM_DECODE_OPTS=OPTS_A, then B under OPTS_B, then the comparison
#   abr JOB_A JOB_B RULES_B: A as the tree is, B under B12X_DECODE_RULES=RULES_B (a staged switch's own code path)
#   keep JOB N: keep JOB's A/B reports as JOB_a_rN / JOB_b_rN
#   rule NAME "JOB [JOB...]" ROUNDS [ab_summary --rule options]: the pass test over rounds 1..ROUNDS of the jobs,
#     its verdict in $P/rule_NAME.txt; the reports and the verdict copied to $OUT
# _ab VAR JOB_A JOB_B VALUE_A VALUE_B: A under VAR=VALUE_A, then B under VAR=VALUE_B, then the comparison
P=${P:-/tmp/b12x-par}  # where scripts/jobs/named.sh writes each job's report
_ab() {
  env "$1=$4" TAIL=2 bash scripts/jobs/named.sh "$f" "$2" >/dev/null
  env "$1=$5" TAIL=2 bash scripts/jobs/named.sh "$f" "$3" >/dev/null
  python3 scripts/ab_summary.py "$P/$2.json" "$P/$3.json"
}
ab() { _ab B12X_GEMM_DECODE_OPTS "$@"; }
abr() { _ab B12X_DECODE_RULES "$1" "$2" "" "$3"; }
keep() { for s in a b; do mv "$P/$1_$s.json" "$P/$1_${s}_r$2.json"; done; }
rule() {
  local name=$1 jobs=$2 n=$3 job r reports=()
  shift 3
  for job in $jobs; do
    for r in $(seq 1 "$n"); do reports+=("$P/${job}_a_r$r.json" "$P/${job}_b_r$r.json"); done
  done
  python3 scripts/ab_summary.py --rule "$@" "${reports[@]}" | tee "$P/rule_$name.txt"
  cp "${reports[@]}" "$P/rule_$name.txt" "${OUT:-/tmp}/" 2>/dev/null
}
