#!/usr/bin/env bash
# Session 27, after device_snapshot_run.sh installed the snapshot in /root/snap: Nsight Compute of the
# NVFP4 quantizer's plan selection at 4096 x 4096 (with a same-byte copy in the bracket) and 16384 x 7168
# (session 26's lead) and a preload tile at 4096 x 4096, then the preload tiles against the lane-table
# tiles (the default large tile among them) and the one-tile programs at the four #4 shapes, graph
# timer, in one process. Output: $OUT/ncu_*.csv, $OUT/sweep.{txt,json}.
set -uo pipefail
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
          --section SchedulerStats --section Occupancy --section LaunchStats)
metrics=sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_elapsed.max
preload="(8, 256, 4, 'pairs', False, False, 'halves', 4, False, True, 0, False, 0, True, True)"
for mk in "4096 4096 default --copy" "16384 7168 default" "4096 4096 preload"; do
  read -r m k which copy <<<"$mk"
  cfg=(); [[ $which == preload ]] && cfg=(--config "$preload")
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control all "${sections[@]}" \
    --metrics "$metrics" --csv python3 scripts/ncu_quantization.py --m "$m" --k "$k" "${cfg[@]}" $copy \
    >"$OUT/ncu_${m}x${k}_$which.csv" 2>&1
  echo "ncu $m x $k $which rc=$? $(grep -c '' "$OUT/ncu_${m}x${k}_$which.csv") lines"
done
B12X_QUANT_UNVALIDATED_CANDIDATES=1 timeout 330 python3 -m benchmarks.experimental.b12x.bench_quantization \
  --op nvfp4 --ms 4096 16384 --ks 4096 7168 --timer graph --no-peers --encode pairs \
  --match "preload=True" "lut=True, preload=False" "k_iters=1, prefetch=False, unroll=False, persistent=0" \
  --json "$OUT/sweep.json" >"$OUT/sweep.txt" 2>&1
echo "sweep rc=$?"
grep -E "nvfp4|copy" "$OUT/sweep.txt" | head -60
