#!/usr/bin/env bash
# Session 36 (the mixes rows with hoist / vec and their slot diagnostics; predictions in docs/predictions/norm_mhc.md,
# session 36): session 35's s35_d.sh (the ring probe at H = 7168 and 4096 on the travelled tree, after the two
# toolchain calls), showing the mixes rows and the barrier-only row they add to (as run at f6b0b04, inline).
GREP="copy ceiling|mixes|bt64 s3 barrier lag1 early syncwarp  " exec bash "$(dirname "$0")/s35_d.sh"
