#!/usr/bin/env bash
# Session 62's norm.mhc job (after the two toolchain calls; snap.tar at the repository root). The prediction and the
# rule: docs/predictions/norm_mhc.md, session 62 (pre_mid as a dependent released at exit, MID_PRE_EXIT_90).
#   mid:  two runs of pdl_mid_exit / mid_exit2 / row_mid_exit against the default at T 65 / 96 / 128, H 7168 / 4096
#         (pre and post_pre, graph timer, the first with every pass alone), then the rule on pdl_mid_exit; a pass
#         writes MID_PRE_EXIT_90 = True into snap.tar, COMMIT "+midx", and leaves it in /root/snap62.tar (~2 min)
#   tier: the norm gpu tier on /root/snap62.tar when `mid` left one, else snap.tar (~3 min)
#   mid+tier: both in one call
set -uo pipefail
export S=62 PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
source scripts/jobs/norm_ab.sh
case ${1:?usage: s62_a.sh mid|tier|mid+tier} in
  mid)
    nvidia-smi --query-gpu=name --format=csv,noheader
    root=$PWD
    snap_install || exit 2
    mid_ab midx62 pdl_mid_exit mid_exit2 row_mid_exit
    cd "$root" || exit 2
    verdict=$(python3 - "$OUT/midx62_1.json" "$OUT/midx62_2.json" <<'PY'
import sys
sys.path.insert(0, "scripts/jobs")
from ab_runs import load, mean, rels

runs = load(sys.argv[1:3])
tok = (65, 96, 128)
rows, post = rels(runs, "pdl_mid_exit", tokens=tok), rels(runs, "pdl_mid_exit", cases=("post_pre",), tokens=tok)
for name in ("pdl_mid_exit", "mid_exit2", "row_mid_exit"):
    for case in ("pre", "post_pre"):
        r = rels(runs, name, cases=(case,), tokens=tok)
        print(f"{name} {case}: {len(r)} rows, mean {100 * mean(r):+.2f}%, min {100 * min(r, default=0):+.2f}%, "
              f"max {100 * max(r, default=0):+.2f}%", file=sys.stderr)  # fmt: skip
ok = len(rows) == 24 and mean(rows) <= -0.005 and mean(post) <= -0.01 and max(rows) <= 0.025
print("pass" if ok else "fail")
PY
)
    echo "mid rule: $verdict"
    if [[ $verdict == pass ]]; then
      snap_sed midx flashinfer/experimental/b12x/norm/mhc/_config.py \
        "s/^MID_PRE_EXIT_90 = False$/MID_PRE_EXIT_90 = True/" "^MID_PRE_EXIT_90 = "
    fi
    cp snap.tar /root/snap$S.tar ;;
  tier) bash scripts/jobs/s60_a.sh tier ;;
  mid+tier) bash "$0" mid; bash "$0" tier ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
