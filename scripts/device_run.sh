#!/usr/bin/env bash
# GPU validation run on the device machine (H200): install this tree, run the gpu tier and the
# benchmarks, leave logs and JSON under $OUT. Run after the two wheel-install steps that
# ../shared/tools/device-wheels prints (they put cutlass-dsl and tvm-ffi under /root/site).
#
#   bash scripts/device_run.sh [tests|bench|all] [pytest selection...]
set -uo pipefail
what=${1:-all}; shift || true
# $OUT brings back at most 8 files: logs go to $LOG and travel back as one tarball.
OUT=${OUT:-/tmp/b12x-out}; LOG=/tmp/b12x-logs; mkdir -p "$OUT" "$LOG"
trap 'tar czf "$OUT/results.tgz" -C "$LOG" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT  # a `timeout` kill still packs what was logged
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
export PYTHONUNBUFFERED=1 B12X_CACHE_DIR=/tmp/b12x-cache
if ! python3 -c "import b12x" 2>/dev/null; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG/install.log" 2>&1 \
    || { echo "editable install failed (see install.log); using a path shim"; mkdir -p /root/shim;
         ln -sfn "$PWD/flashinfer/experimental/b12x/_compat/b12x" /root/shim/b12x;
         export PYTHONPATH=$PWD:/root/shim:$PYTHONPATH; }
fi
export B12X_GIT_COMMIT=${B12X_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
echo "commit $B12X_GIT_COMMIT $(date -u +%FT%TZ)" | tee "$LOG/run.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$LOG/run.txt"
python3 -m b12x doctor 2>&1 | tee -a "$LOG/run.txt"
status=0
if [[ $what == tests || $what == all ]]; then
  sel=("$@"); [[ ${#sel[@]} -gt 0 ]] || sel=(tests/experimental/b12x)
  python3 -m pytest "${sel[@]}" -m gpu -q -rfEs -p no:cacheprovider --timeout 600 2>&1 | tee "$LOG/gpu_tests.log"
  status=${PIPESTATUS[0]}
fi
if [[ $what == bench || $what == all ]]; then
  for b in ${B12X_BENCHES:-ceilings spine quantization norm attention}; do
    [[ -f benchmarks/experimental/b12x/bench_$b.py ]] || continue
    echo "== bench_$b"
    python3 -m "benchmarks.experimental.b12x.bench_$b" --json "$LOG/bench_$b.json" ${B12X_BENCH_ARGS:-} 2>&1 \
      | tee "$LOG/bench_$b.log" | tail -n 40
  done
fi
exit $status
