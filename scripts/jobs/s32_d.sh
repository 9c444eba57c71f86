#!/usr/bin/env bash
# Session 32, fourth machine session (after the toolchain calls, on a snapshot): Nsight Compute where the two
# closest misses spend their time. #4: the NVFP4 plan at 4096 x 4096 / 4096 x 7168 (70 / 75% of copy) beside
# MXFP8's new sm_90a default at 4096 x 4096 (84.5%) and a same-size copy in each report: active cycles per SM,
# issue, warp states. #8: fp8 KV decode at B = 1 L = 32k on its best entry (8x32x2fspldk, 1.62x bf16, 1.7x needs
# -5%) and the bf16 heuristic: the same sections, to say whether fp8 is issue- or latency-bound there.
# Output: $OUT/ncu_*.csv. (Session 46 moved the ncu preamble to ncu_lib.sh; the profiles are unchanged.)
set -uo pipefail
source scripts/jobs/ncu_lib.sh
ncu_run nv4096 scripts/ncu_quantization.py --m 4096 --k 4096 --copy
ncu_run nv7168 scripts/ncu_quantization.py --m 4096 --k 7168 --copy
ncu_run mx4096 scripts/ncu_quantization.py --op mxfp8 --m 4096 --k 4096 --copy
ncu_run att_fp8 scripts/ncu_attention_decode.py --kv fp8 --batch 1 --kv-len 32768 --config 8x32x2fspldk
ncu_run att_bf16 scripts/ncu_attention_decode.py --kv bf16 --batch 1 --kv-len 32768
