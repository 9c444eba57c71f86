#!/usr/bin/env bash
# Session 60's pass-1 fixed-cost probe (after the two toolchain calls; snap.tar at the repository root; ~2 min):
# Nsight Compute on one pre call (default selection, H = 7168) at T = 1024 / 2048 / 8192, every kernel of it: the
# duration, DRAM bytes, the SM active-cycle spread (a tail shows as act_min << act_max against elapsed), occupancy
# and waves, L2 traffic (fn's slices are re-read from L2 by every 64-token block: ~0.75x the residual's DRAM bytes).
# Session 59's per-pass line puts ~10 µs of pass 1 at T = 0 (step 4 of scripts/jobs/next_session.txt); this says
# whether it is fill, tail or something else before anything is built.
set -uo pipefail
root=$PWD
NCU_SET=spread source scripts/jobs/ncu_lib.sh
for t in 1024 2048 8192; do
  NCU_LIMIT=120 ncu_run pre$t scripts/ncu_mhc.py --op pre --tokens "$t" --hidden 7168 --calls 1 --replays 1
done
python3 "$root/scripts/jobs/ncu_summary.py" "$OUT"/ncu_pre*.csv
