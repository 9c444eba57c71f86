#!/usr/bin/env bash
# Session 31, first machine session (after the toolchain calls, on a snapshot): the ring candidates of the NVFP4
# quantizer (`NvFp4Config.ring`, cp.async-pipelined persistent tiles) bit for bit on the H200 (test_gpu_candidates),
# then timed against the plan's selection and the same-size copy at #4's four large shapes, plain and as
# programmatic dependents, graph timer, in one process each. Ran on b949f75; the ring configs were removed
# after it (docs/performance.md session 31), so this record does not run on later trees.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
TEST_LIMIT=200 bash scripts/device_snapshot_run.sh - @scripts/jobs/s31_a_sel.txt 2>&1 | tail -5
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD B12X_CACHE_DIR=/tmp/b12x-cache B12X_QUANT_UNVALIDATED_CANDIDATES=1
timeout 240 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 16384 --ks 4096 7168 \
  --timer graph --no-peers --match "ring=3" "ring=4" "ring=6" --json "$OUT/ring.json" >"$OUT/ring.txt" 2>&1
echo "bench rc=$?"
grep -E "nvfp4|copy|ring" "$OUT/ring.txt" | cut -c1-230 | head -40
timeout 150 python3 -m benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms 4096 --ks 4096 7168 \
  --timer graph --no-peers --pdl --match "lut=True, preload=False, pdl=False, ring=4" \
  --json "$OUT/ring_pdl.json" >"$OUT/ring_pdl.txt" 2>&1
echo "bench pdl rc=$?"
grep -E "nvfp4|copy|ring" "$OUT/ring_pdl.txt" | cut -c1-230 | head -20
