#!/usr/bin/env bash
# Session 56's device job (after the two toolchain calls, on a `git archive` snapshot): norm.mhc's two passes in
# token chunks (MhcConfig.chunk_tokens; prediction in docs/predictions/norm_mhc.md, session 56). Its gpu tests first
# (test_pass2_variants' "chunks" / "chunks_post_pre" against the reference at T = 1000 / 8192, the graph replay of
# a chunked call), then bench_norm: the chunk sizes against the default with every pass timed alone (--per-pass),
# then the torch.compile peer beside the default and two chunk sizes (issue #5's table).
#   bash scripts/jobs/s56_a.sh mhc     the gpu tests and the chunk sizes (~5 min; PER_PASS=--per-pass times each pass alone too)
#   bash scripts/jobs/s56_a.sh quick   the bench at two chunk sizes, then the chunk gpu tests (~4.5 min)
#   bash scripts/jobs/s56_a.sh waves   MhcConfig.whole_wave: its gpu tests, then the bench with every pass alone (~3 min)
#   bash scripts/jobs/s56_a.sh peers   the torch.compile peer beside the default and chunk256 / chunk512 (~3 min)
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
b="python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre"
# into the snapshot's tree (extracted and installed here unless device_snapshot_run.sh already did), on PYTHONPATH
snap() {
  cd /root/snap 2>/dev/null || { mkdir -p /root/snap && tar xf snap.tar -C /root/snap && cd /root/snap; } || return 2
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/snap-install.log 2>&1 || tail -5 /tmp/snap-install.log
  export PYTHONPATH=$PYTHONPATH:$PWD
}
case ${1:-} in
  mhc) ;;
  quick)  # the bench first (chunk256 / chunk512, T = 1024 / 8192), then the chunk gpu tests in what time is left
    snap || exit 2
    timeout 150 $b --tokens 1024 8192 --hidden 7168 4096 --no-peers --variants chunk256 chunk512 \
      --json "$OUT/norm56_quick.json" >"$OUT/norm56_quick.log" 2>&1
    echo "quick rc=$?"; grep -vE "^\s*$" "$OUT/norm56_quick.log" | tail -n 45 | cut -c1-180
    timeout ${TEST_S:-120} python3 -m pytest tests/experimental/b12x/norm/test_mhc_gpu.py -q -p no:cacheprovider -x \
      -k "chunks" 2>&1 | tail -5; exit 0 ;;
  waves)  # MhcConfig.whole_wave: its gpu tests, then the bench beside the default with every pass alone
    snap || exit 2
    timeout ${TEST_S:-120} python3 -m pytest tests/experimental/b12x/norm/test_mhc_gpu.py -q -p no:cacheprovider \
      -k "whole_wave" 2>&1 | tail -5
    timeout 300 $b --tokens 1024 2048 4096 8192 --hidden 7168 4096 --no-peers --per-pass --variants ${WAVES:-whole_wave} \
      --json "$OUT/norm56_waves.json" >"$OUT/norm56_waves.log" 2>&1
    echo "waves rc=$?"; grep -vE "^\s*$|prepare" "$OUT/norm56_waves.log" | tail -n 60 | cut -c1-180; exit 0 ;;
  peers)
    cd /root/snap && export PYTHONPATH=$PYTHONPATH:$PWD || exit 2
    timeout 200 $b --tokens 1024 8192 --variants chunk256 chunk512 --json "$OUT/norm56_peers.json" >"$OUT/norm56_peers.log" 2>&1
    echo "peers rc=$?"; grep -E "^\|" "$OUT/norm56_peers.log" | head -40 | cut -c1-200; exit 0 ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
printf '%s\n' 'tests/experimental/b12x/norm/test_mhc_gpu.py -k "chunks"' \
  'tests/experimental/b12x/norm/test_mhc_gpu.py -k "graph_replay"' >.s56_sel.txt
TEST_LIMIT=150 bash scripts/device_snapshot_run.sh - @.s56_sel.txt 2>&1 | grep -E "^commit|^parallel|passed|failed|error" | tail -6
grep -h "^FAILED\|^E  " /tmp/b12x-par/shard*.log 2>/dev/null | head -12 | cut -c1-240
cp /tmp/b12x-par/shard*.log "$OUT/" 2>/dev/null
cd /root/snap || exit 2
export PYTHONPATH=$PYTHONPATH:$PWD
timeout 200 $b --tokens 1024 4096 8192 --hidden 7168 4096 --no-peers ${PER_PASS:-} \
  --variants ${VARIANTS:-chunk256 chunk512 chunk1024} --json "$OUT/norm56_chunks.json" >"$OUT/norm56_chunks.log" 2>&1
echo "chunks rc=$?"; grep -E "^\|" "$OUT/norm56_chunks.log" | head -120 | cut -c1-200
