# Sourced by the session job scripts (s52_a.sh, s53_a.sh): `ab` times two named jobs of the job file $f, each in its
# own process, and prints scripts/ab_summary.py's comparison.
#   ab JOB_A JOB_B OPTS_A OPTS_B: A under B12X_GEMM_DECODE_OPTS=OPTS_A, then B under OPTS_B, then the comparison
#   abr JOB_A JOB_B RULES_B: A as the tree is, B under B12X_DECODE_RULES=RULES_B (a staged switch's own code path)
ab() {
  B12X_GEMM_DECODE_OPTS=$3 TAIL=2 bash scripts/jobs/named.sh "$f" "$1" >/dev/null
  B12X_GEMM_DECODE_OPTS=$4 TAIL=2 bash scripts/jobs/named.sh "$f" "$2" >/dev/null
  python3 scripts/ab_summary.py "/tmp/b12x-par/$1.json" "/tmp/b12x-par/$2.json"
}
abr() {
  TAIL=2 bash scripts/jobs/named.sh "$f" "$1" >/dev/null
  B12X_DECODE_RULES=$3 TAIL=2 bash scripts/jobs/named.sh "$f" "$2" >/dev/null
  python3 scripts/ab_summary.py "/tmp/b12x-par/$1.json" "/tmp/b12x-par/$2.json"
}
