#!/usr/bin/env bash
# Sessions 60-61's norm.mhc job (after the two toolchain calls; snap.tar at the repository root). The prediction and
# the rule: docs/predictions/norm_mhc.md, session 60 (pdl_large with the mid tiles: failed on an H100 in session 61 at
# T = 128) and session 61 (the large tiles alone). S (default 61) tags the output files and /root/snap$S.tar.
#   pdl:  pdl_large's gpu tests (test_pass2_variants at T = 1000 / 8192, the graph replay), two A/B runs of the default
#         against pdl_large (pre and post_pre, T 1024 to 8192, H 7168 and 4096; the first with every pass alone), one
#         at T 128 / 256 / 512, then the rule; a pass writes LARGE_PDL_90 = True into snap.tar, COMMIT "+pdl" (~8 min)
#   tier: the norm gpu tier on the snapshot `pdl` left in /root/snap$S.tar (else snap.tar) (~2.5 min)
#   walk: the walk at every T (`row_walk`) against the default at T 4096 / 8192 / 16384 and H 4096 / 5120 / 6144 /
#         7168: where a bound by hidden size would fall (H = 4096 walked faster at T = 8192 in four runs, 7168 slower)
#   final: the norm gpu tier on snap.tar, then walk_bounded (session 60's walk bound) against the default (~4 min)
#   mid: pdl_mid_p1 / pdl_mid_p2 / plain_large against the default at T 65 / 96 / 128 (two runs, ~2 min)
#   exit: pdl_at_exit's gpu tests, then pdl_mid_exit (T 65-128) and large_exit (T 1024-8192), two runs (~4 min)
#   table: #5's table with the torch.compile peer (H 7168 / 4096, T 1 to 8192), then the norm gpu tier (~4 min)
set -uo pipefail
S=${S:-61}
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
source scripts/jobs/norm_ab.sh
walk_run() {  # walk_run N: one row_walk run, from the snapshot's root
  timeout "${WALK_S:-200}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
    --tokens 4096 8192 16384 --hidden 4096 5120 6144 7168 --no-peers --variants row_walk --json "$OUT/walk${S}_$1.json" \
    >"$OUT/walk${S}_$1.log" 2>&1
  echo "walk run $1 rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/walk${S}_$1.log" | cut -c1-170
}
case ${1:?usage: s60_a.sh pdl|tier|pdl+tier|walk|final|table|mid|exit} in
  pdl)
    nvidia-smi --query-gpu=name --format=csv,noheader
    t=tests/experimental/b12x/norm/test_mhc_gpu.py
    SHARDS=4 TEST_LIMIT=120 bash scripts/jobs/gpu_tests.sh "$t::test_pass2_variants[1000-4096-pdl_large]" \
      "$t::test_pass2_variants[1000-7168-pdl_large]" "$t::test_pass2_variants[8192-4096-pdl_large]" \
      "$t::test_pass2_variants[8192-7168-pdl_large]" "$t::test_graph_replay_equals_eager[pdl_large]"
    bad=$(grep -hcE "^(FAILED|ERROR) " /tmp/b12x-par/shard*.log | awk '{n+=$1} END{print n+0}')
    npass=$(grep -hoE "[0-9]+ passed" /tmp/b12x-par/shard*.log | awk '{n+=$1} END{print n+0}')
    echo "tests: $npass passed, $bad failed or errored"
    norm_ab "pdl$S" pdl_large
    (cd /root/snap && timeout 100 python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
      --tokens 128 256 512 --hidden 7168 4096 --no-peers --variants pdl_large --json "$OUT/pdl${S}_mid.json" \
      >"$OUT/pdl${S}_mid.log" 2>&1; echo "mid rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/pdl${S}_mid.log" | cut -c1-170)
    verdict=$(python3 - "$OUT/pdl${S}_1.json" "$OUT/pdl${S}_2.json" "$OUT/pdl${S}_mid.json" <<'PY'
import sys
sys.path.insert(0, "scripts/jobs")
from ab_runs import load, mean, rels

runs = load(sys.argv[1:3])
(mid,) = load(sys.argv[3:])
low, high = rels(runs, "pdl_large", tokens=(1024, 2048)), rels(runs, "pdl_large", tokens=(4096, 8192))
short = rels([mid], "pdl_large", tokens=(128, 256, 512))
for name, r in (("T 1024-2048", low), ("T 4096-8192", high), ("T 128-512", short)):
    print(f"{name}: {len(r)} rows, mean {100 * mean(r):+.2f}%, max {100 * max(r, default=0):+.2f}%", file=sys.stderr)
ok = len(low) == 16 and mean(low) <= -0.01 and max(low) <= 0.005
ok = ok and len(high) == 16 and mean(high) <= 0.002 and max(high) <= 0.01
ok = ok and len(short) == 12 and max(short) <= 0.01
print("pass" if ok else "fail")
PY
)
    [[ $bad == 0 && $npass -ge 5 ]] || verdict="held (tests: $npass passed, $bad failed) $verdict"
    echo "pdl rule: $verdict"
    if [[ $verdict == pass ]]; then
      snap_sed pdl flashinfer/experimental/b12x/norm/mhc/_config.py "s/^LARGE_PDL_90 = False$/LARGE_PDL_90 = True/" \
        "^LARGE_PDL_90 = "
    fi
    cp snap.tar /root/snap$S.tar ;;  # the next call's working tree brings the unflipped snap.tar back
  tier)  # on /root/snap$S.tar when `pdl` left one (the same warm machine)
    [[ -f /root/snap$S.tar ]] && cp /root/snap$S.tar snap.tar
    tar xOf snap.tar ./COMMIT 2>/dev/null; bash scripts/jobs/s56_b.sh ;;
  walk)
    nvidia-smi --query-gpu=name --format=csv,noheader
    snap_install || exit 2
    walk_run 1; walk_run 2 ;;
  pdl+tier) bash "$0" pdl; bash "$0" tier ;;  # one call: the tier runs on what the rule left
  mid)  # the mid tiles as dependents one pass at a time (pdl_mid_p1 / p2; plain_large runs the default's kernels
    # at T <= 128: the noise control), two runs, the first with every pass alone; measured only
    snap_install || exit 2
    MID_S=${MID_S:-100} mid_ab mid$S pdl_mid_p1 pdl_mid_p2 plain_large ;;
  exit)  # session 61's pdl_at_exit (staged for session 62): its gpu tests, then pdl_mid_exit at T 65-128 and large_exit
    # at T 1024-8192 against the default, two runs each (docs/predictions/norm_mhc.md, session 61: measured, no flip)
    t=tests/experimental/b12x/norm/test_mhc_gpu.py
    SHARDS=6 TEST_LIMIT=150 bash scripts/jobs/gpu_tests.sh "$t::test_graph_replay_equals_eager[pdl_exit]" \
      $(for h in 4096 7168; do for n in 1 3 64 1000 8192; do echo "$t::test_pass2_variants[$n-$h-pdl_exit]"; done; done)
    snap_install || exit 2
    for r in 1 2; do
      for v in "pdl_mid_exit pdl_mid_p1:65 96 128" "large_exit:1024 2048 4096 8192"; do
        timeout "${EXIT_S:-120}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
          --tokens ${v#*:} --hidden 7168 4096 --no-peers --variants ${v%%:*} --json "$OUT/exit${S}_${v%%[ :]*}_$r.json" \
          >"$OUT/exit${S}_${v%%[ :]*}_$r.log" 2>&1
        echo "exit run $r ${v%%:*} rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/exit${S}_${v%%[ :]*}_$r.log" | cut -c1-150
      done
    done ;;
  table)  # #5's table with the torch.compile peer (pre, post_pre, post; H 7168 / 4096), then the norm gpu tier
    nvidia-smi --query-gpu=name --format=csv,noheader
    (snap_install || exit 2
     timeout "${TABLE_S:-200}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre post \
       --tokens 1 4 64 128 1024 2048 8192 --hidden 7168 4096 --json "$OUT/table$S.json" >"$OUT/table$S.log" 2>&1
     echo "table rc=$?"; grep -E "^(pre|post_pre|post) T" "$OUT/table$S.log" | grep b12x | cut -c1-170)
    rm -f /root/snap$S.tar; bash "$0" tier ;;
  final)  # the norm gpu tier on snap.tar, then the walk's bound by hidden size against session 60's (one run)
    rm -f /root/snap$S.tar; bash "$0" tier
    snap_install || exit 2
    timeout "${WALK_S:-200}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
      --tokens 4096 8192 16384 --hidden 4096 5120 7168 --no-peers --variants walk_bounded --json "$OUT/bound$S.json" \
      >"$OUT/bound$S.log" 2>&1
    echo "bound rc=$?"; grep -E "^(pre|post_pre) T" "$OUT/bound$S.log" | cut -c1-170 ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
