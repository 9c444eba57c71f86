#!/usr/bin/env bash
# A/B of two trees' NVFP4 quantizer in one machine session, before anything else runs on it: each
# tree from its own `git archive` (old.tar, snap.tar), run from its directory on PYTHONPATH (no
# install), --no-peers at M >= 4096 (MS, default "4096 16384"), in alternation (ROUNDS, default "1 2"). Output: $OUT/ab_{old,new}_{1,2}.{txt,json}.
set -uo pipefail
site=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
for t in old new; do
  rm -rf /root/ab_$t && mkdir -p /root/ab_$t
  tar xf "$([[ $t == old ]] && echo old.tar || echo snap.tar)" -C /root/ab_$t
done
for i in ${ROUNDS:-1 2}; do
  for t in old new; do
    (cd /root/ab_$t || exit 2
     export PYTHONPATH=/root/ab_$t:/root/ab_$t/flashinfer/experimental/b12x/_compat:$site  # the tree, its b12x package
     python3 -c "import flashinfer; print('$t', flashinfer.__file__)"
     B12X_CACHE_DIR=/tmp/ab-cache-$t timeout 150 python3 -m \
      benchmarks.experimental.b12x.bench_quantization --op nvfp4 --ms ${MS:-4096 16384} --ks 4096 7168 --timer graph \
      --no-peers --json "$OUT/ab_${t}_$i.json" >"$OUT/ab_${t}_$i.txt" 2>&1; echo "$t $i rc=$?")
  done
done
for f in "$OUT"/ab_*.txt; do echo "== $f"; grep -E "nvfp4" "$f" | head -8; done
