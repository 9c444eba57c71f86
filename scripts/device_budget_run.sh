#!/usr/bin/env bash
# One time-boxed GPU session on the device machine when little device time is left: the gpu tier
# of the given test paths, then each benchmark under its own time limit, all logs under $OUT.
# Run after the two wheel-install steps of ../shared/tools/device-wheels.
#
#   B12X_GIT_COMMIT=<sha> TEST_LIMIT=150 [TEST_LOG=name] [TEST_K=expr] bash scripts/device_budget_run.sh "<test paths>" \
#       "<limit_s> <bench module suffix> <args...>" ["<limit_s> <bench> <args...>" ...]
#
# Example: bash scripts/device_budget_run.sh "tests/experimental/b12x/moe" "60 moe --quick"
set -uo pipefail
# $OUT brings back at most 8 files: everything is written under $LOG and packed into one tarball.
OUT=${OUT:-/tmp/b12x-out}; LOG=/tmp/b12x-budget; mkdir -p "$OUT" "$LOG"
trap 'tar czf "$OUT/results.tgz" -C "$LOG" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 B12X_CACHE_DIR=${B12X_CACHE_DIR:-/tmp/b12x-cache}
python3 -c "import b12x" 2>/dev/null \
  || python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG/install.log" 2>&1
echo "commit ${B12X_GIT_COMMIT:-unknown} $(date -u +%FT%TZ)" | tee "$LOG/run.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >>"$LOG/run.txt" 2>&1
status=0
tests=$1; shift
if [[ -n $tests ]]; then
  kfilter=()
  [[ -n ${TEST_K:-} ]] && kfilter=(-k "$TEST_K")  # TEST_K: a pytest -k expression (spaces allowed)
  # shellcheck disable=SC2086  # the paths are a space-separated list on purpose
  timeout "${TEST_LIMIT:-150}" python3 -m pytest $tests "${kfilter[@]}" -m gpu -v -rfEs -p no:cacheprovider \
    --timeout 300 >"$LOG/${TEST_LOG:-gpu_tests}.log" 2>&1
  status=$?
  grep -E "FAILED|ERROR|passed|failed" "$LOG/${TEST_LOG:-gpu_tests}.log" | tail -n 60
fi
i=0
for spec in "$@"; do
  read -r limit bench args <<<"$spec"
  i=$((i + 1))
  name="bench_${bench}_$i"  # numbered: the same bench may run twice with other arguments
  echo "== bench_$bench $args (limit ${limit} s)"
  # shellcheck disable=SC2086
  timeout "$limit" python3 -m "benchmarks.experimental.b12x.bench_$bench" --json "$LOG/$name.json" $args \
    >"$LOG/$name.log" 2>&1
  echo "rc=$?" >>"$LOG/$name.log"
  grep -v '^\[b12x\]' "$LOG/$name.log" | tail -n 30
done
exit $status
