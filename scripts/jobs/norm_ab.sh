# Sourced by the norm.mhc A/B jobs (s58_b.sh, s59_a.sh), after the toolchain calls, from the repository root with
# snap.tar there. `norm_ab NAME VARIANT...` installs the snapshot (/root/snap, editable), then times bench_norm's
# default against the variants twice (pre and post_pre, T 1024 to 8192, H 7168 and 4096, graph timer; the first run
# with --per-pass), writing $OUT/NAME_1.json / NAME_2.json and their logs, prints the call rows, and returns to the
# repository root. AB1_S / AB2_S: the two runs' time limits (default 200 / 150 s). scripts/jobs/ab_runs.py reads the
# JSON back for the rules.
# `snap_install`: snap.tar extracted to /root/snap, installed editable, on PYTHONPATH; leaves the shell in /root/snap.
snap_install() {
  mkdir -p /root/snap && tar xf snap.tar -C /root/snap && cd /root/snap || return 2
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/snap-install.log 2>&1 || tail -5 /tmp/snap-install.log
  export PYTHONPATH=$PYTHONPATH:$PWD
}

norm_ab() {
  local name=$1 root=$PWD
  shift
  snap_install || return 2
  local b="python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre"
  b="$b --tokens 1024 2048 4096 8192 --hidden 7168 4096 --no-peers --variants $*"
  timeout "${AB1_S:-200}" $b --per-pass --json "$OUT/${name}_1.json" >"$OUT/${name}_1.log" 2>&1; echo "ab1 rc=$?"
  grep -E "^(pre|post_pre)(\.pass1|\.split)? T" "$OUT/${name}_1.log" | cut -c1-170
  timeout "${AB2_S:-150}" $b --json "$OUT/${name}_2.json" >"$OUT/${name}_2.log" 2>&1; echo "ab2 rc=$?"
  grep -E "^(pre|post_pre) T" "$OUT/${name}_2.log" | cut -c1-170
  cd "$root" || return 2
}

# `snap_sed TAG FILE EXPR SHOW`: apply the sed EXPR to FILE (a path inside the snapshot) in snap.tar, print FILE's lines
# matching SHOW, and append "+TAG" to the snapshot's COMMIT (a rule's flip, which the tier then runs on).
snap_sed() {
  rm -rf /tmp/wk && mkdir -p /tmp/wk && tar xf snap.tar -C /tmp/wk && sed -i "$3" "/tmp/wk/$2" || return 2
  grep -E "$4" "/tmp/wk/$2" && echo "$(cat /tmp/wk/COMMIT)+$1" >/tmp/wk/COMMIT && tar cf snap.tar -C /tmp/wk .
}

# `mid_ab NAME VARIANT...`: from the installed snapshot (snap_install), two runs of the variants against the default at
# T = 65 / 96 / 128 (pre and post_pre, H 7168 and 4096, graph timer; the first with every pass alone), writing
# $OUT/NAME_1.json / NAME_2.json and their logs; prints the call rows. MID_S: each run's time limit (default 120 s).
mid_ab() {
  local name=$1 r pp
  shift
  for r in 1 2; do
    pp=$([[ $r == 1 ]] && echo --per-pass)
    timeout "${MID_S:-120}" python3 -m benchmarks.experimental.b12x.bench_norm --timer graph --ops pre post_pre \
      --tokens 65 96 128 --hidden 7168 4096 --no-peers $pp --variants "$@" --json "$OUT/${name}_$r.json" \
      >"$OUT/${name}_$r.log" 2>&1
    echo "$name run $r rc=$?"; grep -E "^(pre|post_pre)(\.pass1)? T" "$OUT/${name}_$r.log" | cut -c1-150
  done
}
