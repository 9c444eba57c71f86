#!/usr/bin/env bash
# Session 64 (after the two toolchain calls; snap.tar at the repository root). `s64_a.sh mul` (~6-8 min): two runs of
# `bench_moe --fp4-mul` (w4a16 and nvfp4, the three shapes, T = 1 / 4 / 16 / 64, graph timer) and the rule of
# docs/predictions/moe.md (session 64) by scripts/jobs/moe_ab.py, then the placement's gpu test (bits equal to shift).
# `s64_a.sh ncu`: session 63's staged profile (scripts/jobs/s63_b.sh). `s64_a.sh t1`: the moe gpu tier on the
# snapshot (T1_DEQUANT on), then nvfp4 at T = 1 with the --decode-dequant rows.
set -uo pipefail
root=$PWD
source scripts/jobs/norm_ab.sh # snap_install
case "${1:-mul}" in
  mul)
    snap_install || exit 2
    for r in 1 2; do
      timeout "${MUL_S:-240}" python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 4 16 64 \
        --recipes w4a16 nvfp4 --no-peers --fp4-mul --json "$OUT/mul64_$r.json" >"$OUT/mul64_$r.log" 2>&1
      echo "mul run $r rc=$?"
    done
    python3 "$root/scripts/jobs/moe_ab.py" mul "$OUT/mul64_1.json" "$OUT/mul64_2.json"
    timeout "${TEST_S:-240}" python3 -m pytest tests/experimental/b12x/moe/test_fused_moe_fp4_mul_gpu.py -q \
      -p no:cacheprovider >"$OUT/mul64_tests.log" 2>&1
    echo "tests rc=$?"; tail -3 "$OUT/mul64_tests.log"
    ;;
  ncu) cd "$root" && bash scripts/jobs/s63_b.sh ;;
  t1)  # the moe gpu tier on T1_DEQUANT (on), then nvfp4 at T = 1 against the dequantized / packed rows (~7 min)
    cd "$root" && TEST_LIMIT="${TEST_S:-330}" bash scripts/jobs/s43_a.sh moe
    snap_install || exit 2
    timeout "${T1_S:-90}" python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 --recipes nvfp4 \
      --no-peers --decode-dequant --json "$OUT/t1_64.json" >"$OUT/t1_64.log" 2>&1
    echo "t1 bench rc=$?"; grep -E "b12x" "$OUT/t1_64.log" | cut -c1-130
    ;;
  short)  # after `mul`'s failed rule, in ~5.5 min: T1_DEQUANT's gpu tests (dequant buckets, larger shapes, buckets by
    # live T), the T = 1 rows, then the multiply by range (--fp4-mul-rule) twice at H = 4096 and its rule
    snap_install || exit 2
    timeout "${TEST_S:-170}" python3 -m pytest -q -p no:cacheprovider -x tests/experimental/b12x/moe/test_fused_moe_dequant_gpu.py \
      "tests/experimental/b12x/moe/test_fused_moe_gpu.py::test_larger_shapes" \
      "tests/experimental/b12x/moe/test_fused_moe_gpu.py::test_default_buckets_by_live_t" >"$OUT/t1_tests.log" 2>&1
    echo "t1 tests rc=$?"; tail -2 "$OUT/t1_tests.log"
    timeout 60 python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 --recipes nvfp4 --no-peers \
      --decode-dequant --json "$OUT/t1_64.json" >"$OUT/t1_64.log" 2>&1
    echo "t1 bench rc=$?"; grep -E "b12x" "$OUT/t1_64.log" | cut -c1-130
    for r in 1 2; do
      timeout "${MUL_S:-110}" python3 -m benchmarks.experimental.b12x.bench_moe --timer graph --tokens 1 4 16 64 \
        --shapes 256x8x4096x2048 512x10x4096x1024 --recipes w4a16 nvfp4 --no-peers --fp4-mul-rule \
        --json "$OUT/mulr64_$r.json" >"$OUT/mulr64_$r.log" 2>&1
      echo "mulr run $r rc=$?"
    done
    python3 "$root/scripts/jobs/moe_ab.py" mulr "$OUT/mulr64_1.json" "$OUT/mulr64_2.json" --mean -0.02 --mean-from 16
    ;;
  *) sed -n "2,7p" "$0"; exit 2 ;;
esac
