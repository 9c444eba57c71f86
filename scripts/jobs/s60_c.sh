#!/usr/bin/env bash
# Session 60's trimmed job, for a machine session with ~400 s of device time left (after the two toolchain calls;
# snap.tar at the repository root): the norm gpu tier on the snapshot (the plan's compile jobs bounded by max_tokens,
# 88ad2a5), then one timing run of pdl_large against the default (pre and post_pre, T 1024 to 8192, H 7168 / 4096;
# no flip: the rule of docs/predictions/norm_mhc.md wants two runs and its own tier, `s60_a.sh pdl`).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
nvidia-smi --query-gpu=name --format=csv,noheader
tar xOf snap.tar ./COMMIT 2>/dev/null
SHARDS=15 TEST_LIMIT=${TEST_LIMIT:-180} bash scripts/jobs/gpu_tests.sh tests/experimental/b12x/norm
cd /root/snap || exit 2
timeout "${AB_S:-120}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
  --tokens 1024 2048 4096 8192 --hidden 7168 4096 --no-peers --variants pdl_large --json "$OUT/pdl60c.json" \
  >"$OUT/pdl60c.log" 2>&1
echo "ab rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/pdl60c.log" | cut -c1-170
