#!/usr/bin/env bash
# Session 66's device job (after the two toolchain calls; snap.tar at the repository root).
#   bash scripts/jobs/s66_a.sh staged   sessions 65-66's staged gpu tests (s66_a_sel.txt, side by side); with GATE=1
#                                       then #6's slow compile gate of every gemm variant on the CPU cores (no GPU)
#   bash scripts/jobs/s66_a.sh gate     the compile gate alone
#   bash scripts/jobs/s66_a.sh w4a8     the GROUPED_W4A8 A/B (scripts/jobs/s66_b.txt; its gpu test is in the staged set)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
gate() {  # 252 cases; runs from the snapshot /root/snap that device_snapshot_run.sh installed
  [[ -d /root/snap ]] || { rm -rf /root/snap && mkdir -p /root/snap && tar xf snap.tar -C /root/snap; }
  (cd /root/snap && timeout "${GATE_S:-300}" python3 -m pytest tests/experimental/b12x/gemm/test_compile.py -m slow \
    -k every_variant -n 14 -q -p no:cacheprovider >"${OUT:-/tmp}/gate.log" 2>&1; echo "gate rc=$?")
  tail -4 "${OUT:-/tmp}/gate.log" | cut -c1-240
}
nvidia-smi --query-gpu=name --format=csv,noheader
case ${1:-} in
  staged)
    TEST_LIMIT=${TEST_LIMIT:-330} bash scripts/device_snapshot_run.sh - @scripts/jobs/s66_a_sel.txt 2>&1 \
      | grep -E "^commit|^sel|FAILED|ERROR|^E  " | cut -c1-240 | head -40
    cp /tmp/b12x-par/sel*.log "${OUT:-/tmp}/" 2>/dev/null
    [[ ${GATE:-0} == 1 ]] && gate ;;
  gate) gate ;;
  w4a8)  # the GROUPED_W4A8 A/B (s66_b.txt), then its gpu test; the rule is in s66_b.txt's header
    BENCH_LIMIT=${BENCH_LIMIT:-250} TAIL=40 bash scripts/jobs/named.sh scripts/jobs/s66_b.txt m66_w4a8 m66_w4a8_fp8 ;;
  *) sed -n '2,5p' "$0"; exit 2 ;;
esac
