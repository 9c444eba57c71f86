#!/usr/bin/env bash
# Session 31, second machine session (after the toolchain calls): why the ring tiles ran 1.5-1.8x slower than
# the plan. Nsight Compute of the ring 4 tile (8 x 256 x 4) and of the plan's selection (the preload tile) at
# 4096 x 4096: speed of light, memory, warp states, and the L2 / L1 sector counts of the loads. Output:
# $OUT/ncu_*.csv. Then #8's fp8 B = 1 L = 8k / 32k on the 8-warp two-page tile (session 14's best at 32k)
# by split target and stages, with 8 calls a graph, beside both dtypes' heuristic rows.
set -uo pipefail
bash scripts/device_snapshot_run.sh - none >/dev/null 2>&1
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
export B12X_QUANT_UNVALIDATED_CANDIDATES=1
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats
          --section Occupancy --section LaunchStats)
metrics=sm__cycles_active.avg,sm__cycles_elapsed.max,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,dram__bytes_read.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
ring="(8, 256, 4, 'pairs', False, False, 'halves', 1, False, False, 16, False, 0, True, False, False, 4)"
for which in ring plan; do
  cfg=(); [[ $which == ring ]] && cfg=(--config "$ring")
  timeout 120 ncu --profile-from-start off --clock-control none --cache-control all "${sections[@]}" \
    --metrics "$metrics" --csv python3 scripts/ncu_quantization.py --m 4096 --k 4096 "${cfg[@]}" \
    >"$OUT/ncu_$which.csv" 2>&1
  echo "ncu $which rc=$? $(grep -c '' "$OUT/ncu_$which.csv") lines"
done
timeout 300 python3 -m benchmarks.experimental.b12x.bench_attention --mode decode --kv all --shapes 1x8192 1x32768 \
  --decode-configs heuristic 8x32x2fspldk@fp8 8x32x2fspldk:t24@fp8 8x32x2fspldk:t33@fp8 8x32x2fspldk:t48@fp8 \
  8x32x3fspldk@fp8 8x32x2fspldkq@fp8 --timer graph --calls-per-graph 8 --no-peers \
  --json "$OUT/att_b1.json" >"$OUT/att_b1.txt" 2>&1
echo "att rc=$?"
grep -E "paged|ratio|fp8" "$OUT/att_b1.txt" | cut -c1-200 | head -40
