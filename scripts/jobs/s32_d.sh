#!/usr/bin/env bash
# Session 32, fourth machine session (after the toolchain calls, on a snapshot): Nsight Compute where the two
# closest misses spend their time. #4: the NVFP4 plan at 4096 x 4096 / 4096 x 7168 (70 / 75% of copy) beside
# MXFP8's new sm_90a default at 4096 x 4096 (84.5%) and a same-size copy in each report: active cycles per SM,
# issue, warp states. #8: fp8 KV decode at B = 1 L = 32k on its best entry (8x32x2fspldk, 1.62x bf16, 1.7x needs
# -5%) and the bf16 heuristic: the same sections, to say whether fp8 is issue- or latency-bound there.
# Output: $OUT/ncu_*.csv.
set -uo pipefail
bash scripts/device_snapshot_run.sh - none >/dev/null 2>&1
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy
          --section LaunchStats --section InstructionStats)
metrics=sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.max,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
run() {  # name, then the script and its arguments
  local name=$1; shift
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control all "${sections[@]}" \
    --metrics "$metrics" --csv python3 "$@" >"$OUT/ncu_$name.csv" 2>&1
  echo "ncu $name rc=$? $(grep -c '' "$OUT/ncu_$name.csv") lines $(grep -m1 -E 'bits equal|max \|ours' "$OUT/ncu_$name.csv" | cut -c1-160)"
}
run nv4096 scripts/ncu_quantization.py --m 4096 --k 4096 --copy
run nv7168 scripts/ncu_quantization.py --m 4096 --k 7168 --copy
run mx4096 scripts/ncu_quantization.py --op mxfp8 --m 4096 --k 4096 --copy
run att_fp8 scripts/ncu_attention_decode.py --kv fp8 --batch 1 --kv-len 32768 --config 8x32x2fspldk
run att_bf16 scripts/ncu_attention_decode.py --kv bf16 --batch 1 --kv-len 32768
