#!/usr/bin/env bash
# Session 64's owed flip (after the two toolchain calls; snap.tar at the repository root; ~7 min on an H100): writes
# `DECODE_FP4_MUL = True` into the snapshot (its second rule passed in session 64: docs/predictions/moe.md), then runs
# the whole moe gpu tier on it (`s43_a.sh moe`). On "0 failed" commit the same one-line flip in
# flashinfer/experimental/b12x/moe/fused_moe/_buckets.py and turn test_fused_moe_fp4_mul.py's test_the_flag_is_off
# into the flag's on-state check.
set -uo pipefail
source scripts/jobs/norm_ab.sh # snap_sed
snap_sed mul64 flashinfer/experimental/b12x/moe/fused_moe/_buckets.py 's/^DECODE_FP4_MUL = False$/DECODE_FP4_MUL = True/' \
  '^DECODE_FP4_MUL' || exit 2
TEST_LIMIT="${TEST_LIMIT:-420}" bash scripts/jobs/s43_a.sh moe
