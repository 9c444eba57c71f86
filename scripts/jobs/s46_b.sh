#!/usr/bin/env bash
# Session 46 (after the toolchain calls, on a snapshot), for an H200: Nsight Compute of the NVFP4 default at #4's
# 4096-row shapes (now the CuTe tile `CuteTile(4, 2)`) beside a same-size copy in each report; session 32 profiled
# the Triton dispatch there (70 / 75% of copy, s32_d.sh). Active cycles per SM, achieved occupancy, DRAM
# throughput, warp states: is the H200's gap to the copy the bytes in flight (latency) or issue? Output:
# $OUT/ncu_*.csv, and the headline rows printed.
set -uo pipefail
NCU_SECTIONS="SpeedOfLight WarpStateStats SchedulerStats Occupancy LaunchStats MemoryWorkloadAnalysis"
NCU_METRICS=sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.max,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
NCU_LIMIT=200
source scripts/jobs/ncu_lib.sh
for shape in "4096 4096" "4096 7168"; do
  set -- $shape
  ncu_run "nv$2" scripts/ncu_quantization.py --m "$1" --k "$2" --copy
  grep -E '"(Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread)"' "$OUT/ncu_nv$2.csv" \
    | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | cut -c1-160
done
