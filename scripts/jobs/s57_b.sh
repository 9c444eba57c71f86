#!/usr/bin/env bash
# Session 57's short device job (after the two toolchain calls; snap.tar at the repository root, ~2.5 min): issue #5's
# table on the default (whole_wave on; the torch.compile peer in the same run), then a second A/B of whole_wave
# against the split count before it (round_up) with every pass alone. PEERS_T / PEERS_S, AB_T / AB_S and PER_PASS=
# (empty) trim it for a short budget.
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
mkdir -p /root/snap && tar xf snap.tar -C /root/snap && cd /root/snap || exit 2
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/snap-install.log 2>&1 || tail -5 /tmp/snap-install.log
export PYTHONPATH=$PYTHONPATH:$PWD
b="python3 -m benchmarks.experimental.b12x.bench_norm --timer graph"
timeout ${PEERS_S:-100} $b --tokens ${PEERS_T:-1 8 64 1024 8192} --hidden 7168 4096 --json "$OUT/norm57_peers.json" >"$OUT/norm57_peers.log" 2>&1
echo "peers rc=$?"; grep -E "^(pre|post_pre) T=(1|1024|8192) " "$OUT/norm57_peers.log" | cut -c1-150
timeout ${AB_S:-120} $b --ops pre post_pre --tokens ${AB_T:-2048 4096 8192} --hidden 7168 4096 --no-peers ${PER_PASS---per-pass} --variants round_up \
  --json "$OUT/norm57_ab.json" >"$OUT/norm57_ab.log" 2>&1
echo "ab rc=$?"; grep -E "^(pre|post_pre)(\.pass1)? T" "$OUT/norm57_ab.log" | cut -c1-150
