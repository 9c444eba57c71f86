#!/usr/bin/env bash
# Session 28, fourth machine session (after the toolchain calls): past the one-wave range, W4A16 NVFP4 at
# M = 1 / 8 with the heuristic's unroll 2 against unroll 1 (B12X_GEMM_DECODE_OPTS), cold weights, graph timer.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
rm -rf /root/snap && mkdir -p /root/snap && tar xf snap.tar -C /root/snap && cd /root/snap || exit 2
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/snap-install.log 2>&1 || { tail -n 20 /tmp/snap-install.log; exit 2; }
args=(--m 1 8 --shapes 13312x2048 14336x4096 16384x2048 --recipes w4a16_nvfp4 --timer graph --cold-weights --no-peers --iters 10)
timeout 240 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/past_u2.json" >"$OUT/past_u2.log" 2>&1
B12X_GEMM_DECODE_OPTS=unroll=1 timeout 240 python3 -m benchmarks.experimental.b12x.bench_gemm "${args[@]}" --json "$OUT/past_u1.json" >"$OUT/past_u1.log" 2>&1
for f in past_u2 past_u1; do
  python3 -c "import json,sys; [print(sys.argv[2], r['label'], round(r['time_us'], 2), r['note']) for r in json.load(open(sys.argv[1]))['rows'] if r['impl'] == 'b12x']" "$OUT/$f.json" "$f"
done
