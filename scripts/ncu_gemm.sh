#!/usr/bin/env bash
# Nsight Compute on the gemm kernels that bound issue #6's open targets (device machine, Firecracker:
# ncu reads the counters there; AGENTS.md). Run from the repository root after the toolchain steps:
#     bash scripts/ncu_gemm.sh [OUTDIR]        (default $OUT)
# 1. the two-pass path's 16-bit GEMM (`Mma16Gemm`) alone, M = 2048, 7168 x 2048 and 28672 x 4096
#    (scripts/probe_twopass.py launches it; one profiled launch a shape);
# 2. the W4A16 NVFP4 decode kernel at M = 1 and 16, 28672 x 4096 (bench_gemm, no peers, events timer:
#    what session 23's profile ran; the kernel launches outside a CUDA graph).
# Sections: speed of light, warp states (stall reasons), scheduler, instruction mix, memory, occupancy.
set -uo pipefail
out=${1:-${OUT:?give OUTDIR or set OUT}}
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats)
for shape in 7168x2048 28672x4096; do
  timeout 120 ncu --clock-control none --kernel-name regex:Mma16 --launch-skip 2 --launch-count 1 "${sections[@]}" \
    --csv --page details python3 scripts/probe_twopass.py --shapes "$shape" --tiles 128x128x2x2x3p --iters 5 \
    >"$out/ncu_mma16_$shape.csv" 2>"$out/ncu_mma16_$shape.err"
  echo "ncu mma16 $shape rc=$? $(wc -l <"$out/ncu_mma16_$shape.csv") lines"
done
for m in 1 16; do
  timeout 120 ncu --clock-control none --kernel-name regex:"[Dd]ecode" --launch-skip 5 --launch-count 1 "${sections[@]}" \
    --csv --page details python3 -m benchmarks.experimental.b12x.bench_gemm --recipes w4a16_nvfp4 --m "$m" \
    --shapes 28672x4096 --no-peers --iters 3 --warmup 3 --timer events \
    >"$out/ncu_decode_m$m.csv" 2>"$out/ncu_decode_m$m.err"
  echo "ncu decode M=$m rc=$? $(wc -l <"$out/ncu_decode_m$m.csv") lines"
done
