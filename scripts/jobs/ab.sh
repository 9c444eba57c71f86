# Sourced by the session job scripts (s52_a.sh, s53_a.sh): `ab` times two named jobs of the job file $f, each in its
# own process, and prints scripts/ab_summary.py's comparison.
#   ab JOB_A JOB_B OPTS_A OPTS_B: A under B12X_GEMM_DECODE_OPTS=OPTS_A, then B under OPTS_B, then the comparison
#   abr JOB_A JOB_B RULES_B: A as the tree is, B under B12X_DECODE_RULES=RULES_B (a staged switch's own code path)
# _ab VAR JOB_A JOB_B VALUE_A VALUE_B: A under VAR=VALUE_A, then B under VAR=VALUE_B, then the comparison
_ab() {
  env "$1=$4" TAIL=2 bash scripts/jobs/named.sh "$f" "$2" >/dev/null
  env "$1=$5" TAIL=2 bash scripts/jobs/named.sh "$f" "$3" >/dev/null
  python3 scripts/ab_summary.py "/tmp/b12x-par/$2.json" "/tmp/b12x-par/$3.json"
}
ab() { _ab B12X_GEMM_DECODE_OPTS "$@"; }
abr() { _ab B12X_DECODE_RULES "$1" "$2" "" "$3"; }
