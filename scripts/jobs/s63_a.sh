#!/usr/bin/env bash
# Session 63's #7 probe (after the two toolchain calls; snap.tar at the repository root, ~3 min): the memory skeleton
# of a fused decode MoE launch (scripts/probe_moe_micro.py: its --check first, then E = 128 at T = 1 / 4) beside the
# default layer's launch prefixes on the same machine (`bench_moe --steps`). The prediction and the rule:
# docs/predictions/moe.md, session 63. `s63_a.sh probe`: the probe alone.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
source scripts/jobs/norm_ab.sh
nvidia-smi --query-gpu=name --format=csv,noheader
snap_install || exit 2
timeout 120 python3 scripts/probe_moe_micro.py --check 2>&1 | tail -4
timeout "${PROBE_S:-200}" python3 scripts/probe_moe_micro.py --tokens 1 4 --json "$OUT/micro63.json" >"$OUT/micro63.log" 2>&1
echo "probe rc=$?"; grep -E "^T=" "$OUT/micro63.log" | cut -c1-110
[[ ${1:-} == probe ]] && exit 0
timeout "${STEPS_S:-200}" python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 4 \
  --shapes 128x8x2048x768 --recipes w4a16 --no-peers --steps --json "$OUT/steps63.json" >"$OUT/steps63.log" 2>&1
echo "steps rc=$?"; grep -E "b12x" "$OUT/steps63.log" | cut -c1-150
