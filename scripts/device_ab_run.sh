#!/usr/bin/env bash
# Two commits' benchmarks on one machine, interleaved (A B, B A, ...) so that clock and thermal drift fall on
# both sides: the same-device A/B a prediction about a small change needs (e.g. +-1.5%), which rows from different
# sessions or machines cannot give.
#
# Here:       bash scripts/device_ab_run.sh pack OLD NEW    (ab_a.tar / ab_b.tar in the repository root, each
#             with its COMMIT file; untracked, never committed, removed with `rm -f ab_?.tar`)
# On device:  (after the two toolchain calls of ../shared/tools/device-wheels)
#             [ROUNDS=2] [BENCH_LIMIT=300] bash scripts/device_ab_run.sh run JOBS
# JOBS: one benchmark per line, `NAME MODULE_SUFFIX ARGS...` (device_parallel_run.sh's format; no quoting), each
# run ROUNDS times a side (odd rounds A first, even rounds B first) from its own extracted tree (no install:
# PYTHONPATH points at the tree and its `b12x` shim). The JSON reports and logs go to $OUT/ab.tgz; `python3
# scripts/ab_summary.py DIR` (here or there) prints the table. A run that fails is listed after it, and the
# script then exits 1.
set -uo pipefail
cmd=${1:-}; shift || true
here=$PWD
case $cmd in
  pack)
    [[ $# -eq 2 ]] || { echo "usage: $0 pack OLD NEW (two commits)" >&2; exit 2; }
    tmp=$(mktemp -d)
    for side in a b; do
      rev=$([[ $side == a ]] && echo "$1" || echo "$2")
      git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "device_ab_run: $rev is not a commit" >&2; exit 2; }
      git archive "$rev" -o "ab_$side.tar" && git rev-parse --short "$rev" >"$tmp/COMMIT" \
        && tar rf "ab_$side.tar" -C "$tmp" COMMIT || exit 2
      echo "ab_$side.tar: $(cat "$tmp/COMMIT")"
    done
    rm -rf "$tmp" ;;
  run)
    jobs=${1:-}
    [[ -f $jobs ]] || { echo "usage: $0 run JOBS (a file of NAME MODULE_SUFFIX ARGS... lines)" >&2; exit 2; }
    [[ -f ab_a.tar && -f ab_b.tar ]] || { echo "device_ab_run: no ab_a.tar / ab_b.tar here (run '$0 pack' first)" >&2; exit 2; }
    site=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
    OUT=${OUT:-/tmp/b12x-out}; LOG=/tmp/b12x-ab; rm -rf "$LOG" /root/ab; mkdir -p "$OUT" "$LOG"
    trap 'tar czf "$OUT/ab.tgz" -C "$LOG" . 2>/dev/null' EXIT
    for side in a b; do mkdir -p "/root/ab/$side" && tar xf "ab_$side.tar" -C "/root/ab/$side" || exit 2; done
    echo "A $(cat /root/ab/a/COMMIT)  B $(cat /root/ab/b/COMMIT)"
    failed=()
    while read -r name suffix args || [[ -n ${name:-} ]]; do
      [[ -z ${name:-} || $name == \#* ]] && continue
      for r in $(seq 1 "${ROUNDS:-2}"); do
        # odd rounds A then B, even rounds B then A: a drift inside a round does not always favour one side
        sides="a b"; (( r % 2 == 0 )) && sides="b a"
        for side in $sides; do
          tree=/root/ab/$side
          # shellcheck disable=SC2086  # args is the line's argument list
          (cd "$tree" && B12X_GIT_COMMIT=$(cat COMMIT) PYTHONPATH=$tree:$tree/flashinfer/experimental/b12x/_compat:$site \
            timeout "${BENCH_LIMIT:-300}" python3 -m "benchmarks.experimental.b12x.bench_$suffix" $args \
            --json "$LOG/$name.$side.r$r.json" </dev/null >"$LOG/$name.$side.r$r.log" 2>&1)
          rc=$?
          echo "== $name $side r$r: rc=$rc"
          (( rc == 0 )) || failed+=("$name.$side.r$r (rc=$rc, log $name.$side.r$r.log)")
        done
      done
    done <"$jobs"
    python3 "$here/scripts/ab_summary.py" "$LOG" | tee "$LOG/summary.txt"
    if (( ${#failed[@]} )); then
      printf 'device_ab_run: %d runs failed: %s\n' "${#failed[@]}" "${failed[*]}" | tee -a "$LOG/summary.txt" >&2
      exit 1
    fi ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
