#!/usr/bin/env bash
# Session 58's walk pass 2 job (after the two toolchain calls; snap.tar at the repository root). The prediction and the
# rule: docs/predictions/norm_mhc.md, session 58.
#   ab:   the walk's gpu tests, then two A/B runs of the default against row_walk / row_walk6 (pre and post_pre, T 1024 to
#         8192, H 7168 and 4096; the first with every pass alone), then the rule; when a candidate passes, its tile and
#         last T are written into sm_90a's default (WALK_90 / WALK_MAX_90) in snap.tar, COMMIT gets "+walk" (~4.5 min)
#   tier: the norm gpu tier on snap.tar as it stands (~2 min)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
case ${1:?usage: s58_b.sh ab|tier} in
  ab)
    nvidia-smi --query-gpu=name --format=csv,noheader
    SHARDS=4 TEST_LIMIT=200 bash scripts/jobs/gpu_tests.sh tests/experimental/b12x/norm/test_mhc_gpu.py::test_walk_pass2
    # (session 58 also timed row_walk_il, removed since)
    source scripts/jobs/norm_ab.sh && AB1_S=200 AB2_S=140 norm_ab walk58 row_walk row_walk6
    verdict=$(python3 - "$OUT/walk58_1.json" "$OUT/walk58_2.json" <<'PY'
import sys
sys.path.insert(0, "scripts/jobs")
from ab_runs import load, rels

runs = load(sys.argv[1:])
best = None
for name, stages, walk in (("row_walk", 6, 5), ("row_walk6", 5, 6)):
    n, gains = 0, []
    for T in (1024, 2048, 4096, 8192):
        rel = rels(runs, name, tokens=(T,))
        if len(rel) < 8 or max(rel) > -0.005:
            break
        n, gains = T, gains + rel
        print(f"{name} T={T}: {', '.join(f'{100 * r:+.1f}%' for r in rel)}", file=sys.stderr)
    print(f"{name}: N = {n}", file=sys.stderr)
    if n and (best is None or (n, -sum(gains) / len(gains)) > (best[0], best[1])):
        best = (n, -sum(gains) / len(gains), stages, walk)
print("fail" if best is None else f"pass {best[0]} {best[2]} {best[3]}")
PY
)
    echo "walk rule: $verdict"
    if [[ $verdict == pass* ]]; then
      read -r _ n st w <<<"$verdict"
      snap_sed walk flashinfer/experimental/b12x/norm/mhc/_config.py "s/^WALK_90 = None$/WALK_90 = RowConfig(block_h=1024, block_s=16, num_warps=4, stages=$st, walk=$w)/; s/^WALK_MAX_90 = 4096$/WALK_MAX_90 = $n/" "^WALK_(90|MAX_90) = "
    fi ;;
  tier) cat COMMIT 2>/dev/null; tar xOf snap.tar ./COMMIT 2>/dev/null; bash scripts/jobs/s56_b.sh ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
