#!/usr/bin/env bash
# Session 46 (after the toolchain calls, on a snapshot), for an H200: Nsight Compute of the NVFP4 default at #4's
# 4096-row shapes (now the CuTe tile `CuteTile(4, 2)`) beside a same-size copy in each report; session 32 profiled
# the Triton dispatch there (70 / 75% of copy). Active cycles per SM, achieved occupancy, DRAM throughput, warp
# states: is the H200's gap to the copy the bytes in flight (latency) or issue? Output: $OUT/ncu_*.csv.
set -uo pipefail
bash scripts/device_snapshot_run.sh - none >/dev/null 2>&1
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy
          --section LaunchStats --section MemoryWorkloadAnalysis)
metrics=sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.max,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for case in "nv4096 --m 4096 --k 4096" "nv7168 --m 4096 --k 7168"; do
  set -- $case; name=$1; shift
  timeout 200 ncu --profile-from-start off --clock-control none --cache-control all "${sections[@]}" \
    --metrics "$metrics" --csv python3 scripts/ncu_quantization.py "$@" --copy >"$OUT/ncu_$name.csv" 2>&1
  echo "ncu $name rc=$? $(grep -c '' "$OUT/ncu_$name.csv") lines"
  grep -E '"(Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Block Limit Registers)"' \
    "$OUT/ncu_$name.csv" | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | cut -c1-160
done
