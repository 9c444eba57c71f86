#!/usr/bin/env bash
# Staged by session 51 (any GPU; after the two toolchain calls, from the repository root; ~1 min): Nsight Compute's
# stall reasons for the plain decode kernel at M = 16 4096 x 14336 under its default FP4 placement (shift) and under
# "mul" (`B12X_GEMM_DECODE_OPTS=fp4=mul`), the one case where "mul" loses (+3.0 to +4.3%, five H100 runs) though
# its static instruction mix matches decode8's, which wins (docs/predictions/gemm_decode.md, session 51). The
# same at 4096 x 4096 (one binary; "mul" wins there) as the control. CSVs go to $OUT.
set -uo pipefail
out=${OUT:?set OUT}
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages:$PWD
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats
  --section MemoryWorkloadAnalysis --section Occupancy)
for shape in 4096x14336 4096x4096; do
  for fp4 in shift mul; do
    B12X_GEMM_DECODE_OPTS=fp4=$fp4 timeout 120 ncu --clock-control none --kernel-name regex:"[Dd]ecode" \
      --launch-skip 5 --launch-count 1 "${sections[@]}" --csv --page details \
      python3 -m benchmarks.experimental.b12x.bench_gemm --recipes w4a16_nvfp4 --m 16 --shapes "$shape" --no-peers \
      --iters 3 --warmup 3 --timer events >"$out/ncu51_${shape}_$fp4.csv" 2>"$out/ncu51_${shape}_$fp4.err"
    echo "ncu M=16 $shape $fp4 rc=$? $(wc -l <"$out/ncu51_${shape}_$fp4.csv") lines"
  done
done
exit 0
