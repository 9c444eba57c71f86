#!/usr/bin/env bash
# Staged by session 44 (after the two toolchain calls, on a `git archive` snapshot): s44_a.txt, the NVFP4 / MXFP8
# plans and the CuTe 8 x 4 tile beside the same-size copy, with fixed outputs and with outputs rotated like the
# inputs (`bench_quantization --rotate-outputs`), one benchmark at a time (~3 min). The JSON comes back in $OUT.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
BENCH_LIMIT=400 BENCH_SERIAL=1 bash scripts/device_snapshot_run.sh scripts/jobs/s44_a.txt none 2>&1 | grep -E "^commit|== q_" | cut -c1-200
for f in /tmp/b12x-par/q_fixed.log /tmp/b12x-par/q_rotated.log; do grep -E "nvfp4|mxfp8|MISMATCH" "$f" | cut -c1-200 | head -40; done
cp /tmp/b12x-par/q_fixed.json /tmp/b12x-par/q_rotated.json "${OUT:-/tmp}/" 2>/dev/null
python3 scripts/ab_summary.py /tmp/b12x-par/q_fixed.json /tmp/b12x-par/q_rotated.json  # B = rotated outputs
true
