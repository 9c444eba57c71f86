#!/usr/bin/env bash
# Session 63's #7 profile (after the two toolchain calls; snap.tar at the repository root; ~3 min): Nsight Compute on
# one captured moe layer (scripts/ncu_moe_layer.py, staged since session 20, never run), w4a16 at E = 128 T = 1 / 4
# (CASES="128x8x2048x768:1 256x8x4096x2048:1 ..." for others): each kernel's own duration (ncu serializes the graph's
# nodes: no PDL overlap), DRAM bytes, the SM active-cycle spread and occupancy. Their sum against the layer's graph time (`bench_moe --steps`: 18.7 µs at E = 128
# T = 1 on an H100) says how much of a decode layer is launch and dependency gaps, and FC2's duration against its
# +6.6 µs step whether FC2 is slow or waits.
set -uo pipefail
root=$PWD
NCU_SET=spread source scripts/jobs/ncu_lib.sh
for c in ${CASES:-128x8x2048x768:1 128x8x2048x768:4}; do
  NCU_LIMIT=120 ncu_run "moe_${c/:/_t}" scripts/ncu_moe_layer.py --shape "${c%:*}" --tokens "${c#*:}" --replays 1
done
python3 "$root/scripts/jobs/ncu_summary.py" "$OUT"/ncu_moe_*.csv
# Then the launch prefixes of both recipes at E = 512 T = 1, where nvfp4 takes 28% longer than w4a16 on an H100 (47.6
# against 37.0 µs; 15% at E = 128, 4.5% at E = 256; session 63's table): which step holds the difference.
cd /root/snap || exit 2
timeout "${STEPS_S:-150}" python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 \
  --shapes 512x10x4096x1024 128x8x2048x768 --recipes w4a16 nvfp4 --no-peers --steps --json "$OUT/steps63b.json" \
  >"$OUT/steps63b.log" 2>&1
echo "steps rc=$?"; grep -E "b12x" "$OUT/steps63b.log" | cut -c1-150
