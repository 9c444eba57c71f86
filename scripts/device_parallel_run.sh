#!/usr/bin/env bash
# One device session that uses the machine's cores: the gpu test tier split into shards that run
# side by side (kernel compiles dominate it; the GPU work of each test is small), then benchmarks
# side by side with B12X_BENCH_GPU_LOCK so their compiles overlap while their timed regions take
# turns. Benchmarks never run while tests do: a test's kernels would land inside a timed region.
# Run after the two wheel-install steps of ../shared/tools/device-wheels, from the tree to test
# (a `git archive` snapshot when the checkout holds uncommitted work: AGENTS.md).
#
#   SHARDS=14 TEST_LIMIT=420 BENCH_LIMIT=400 [PARALLEL=N] [BENCH_SERIAL=1] bash scripts/device_parallel_run.sh [JOBS_FILE] [pytest paths...]
#
# pytest paths: what the gpu tier covers (default tests/experimental/b12x; "none" skips the tests;
# "@FILE": each line of FILE is one pytest selection such as `tests/x/test_y.py -k "a and b"`, run side
# by side instead of the sharded tier).
# JOBS_FILE: one benchmark per line, `NAME MODULE_SUFFIX ARGS...` (e.g. `gemm_m1 gemm --m 1 --quick`);
# blank lines and # comments are skipped; "-" or no file: no benchmarks.
# Everything lands in /tmp/b12x-par and comes back as $OUT/results.tgz; a summary goes to stdout.
set -uo pipefail
OUT=${OUT:-/tmp/b12x-out}; LOG=/tmp/b12x-par; mkdir -p "$OUT" "$LOG"
trap 'tar czf "$OUT/results.tgz" -C "$LOG" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 B12X_CACHE_DIR=${B12X_CACHE_DIR:-/tmp/b12x-cache} B12X_BENCH_GPU_LOCK=$LOG/gpu.lock
# gpu tests keep their own cache dirs but share compiled kernels here (tests/experimental/b12x/conftest.py): the
# shards compile a kernel once between them, and scripts/device_cache.sh carries it to the next machine session.
export B12X_TEST_KERNEL_CACHE=${B12X_TEST_KERNEL_CACHE-$B12X_CACHE_DIR}  # set it empty to keep every test apart
jobs_file=${1:--}; shift || true
paths=("$@"); [[ ${#paths[@]} -gt 0 ]] || paths=(tests/experimental/b12x)
python3 -c "import b12x" 2>/dev/null \
  || python3 -m pip install -q --no-deps --no-build-isolation -e . >"$LOG/install.log" 2>&1
echo "commit ${B12X_GIT_COMMIT:-unknown} $(date -u +%FT%TZ)" | tee "$LOG/run.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >>"$LOG/run.txt" 2>&1
# Every GPU of the machine takes work: test shards and selections round robin, benchmarks in one lane
# per GPU (each lane with its own timing lock; BENCH_SERIAL=1 makes each lane one benchmark at a time).
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[[ $ngpu -ge 1 ]] || ngpu=1
echo "gpus $ngpu" | tee -a "$LOG/run.txt"
# At most PARALLEL test processes at once: a shard is at least one file, so a tier of ~50 files once ran ~50
# processes on one GPU, and on an H100's 80 GB (session 43) 86 attention tests failed with CUDA out of memory.
# Default: one process per 5 GiB of the smallest GPU's memory, at most two per CPU core.
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | head -n 1)
max_par=${PARALLEL:-$(( ${mem_mib:-40960} / 5120 ))}
(( max_par > 2 * $(nproc) )) && max_par=$(( 2 * $(nproc) ))
(( max_par >= 1 )) || max_par=1
echo "parallel $max_par" | tee -a "$LOG/run.txt"
throttle() { while (( $(jobs -rp | wc -l) >= max_par )); do wait -n; done; }
status=0
if [[ ${paths[0]} != none ]]; then
  # A machine session keeps /tmp between calls: drop the previous call's test logs, so that the
  # summary and results.tgz hold this call's shards and selections only (stale shard logs of a
  # larger earlier run once read as part of this one).
  rm -f "$LOG"/shard*.log "$LOG"/shard*.txt "$LOG"/sel*.log "$LOG"/sel*.txt "$LOG/collected.txt"
fi

if [[ ${paths[0]} == @* ]]; then
  # Selections: each line of the file is one pytest argument string (paths and -k), run as its own
  # job side by side with the others (a mid-session check of a few variants, not the whole tier).
  n=0
  while read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    throttle
    name=$(printf 'sel%02d' "$n"); n=$((n + 1))
    echo "$line" >"$LOG/$name.txt"
    # shellcheck disable=SC2086  # the line is a list of pytest arguments; eval keeps its quotes
    (export CUDA_VISIBLE_DEVICES=$(( (n - 1) % ngpu ))
     eval "timeout ${TEST_LIMIT:-420} python3 -m pytest $line -m gpu -q -rfEs -p no:cacheprovider --timeout 300" \
       >"$LOG/$name.log" 2>&1
     echo "rc=$?" >>"$LOG/$name.log") &
  done <"${paths[0]#@}"
  wait
  for log in "$LOG"/sel*.log; do
    rc=$(grep -o 'rc=[0-9]*' "$log" | tail -n 1)
    [[ $rc == rc=0 ]] || status=1
    echo "$(basename "$log" .log) [$(cat "${log%.log}.txt")]: $(tail -n 3 "$log" | grep -E 'passed|failed|error|skipped' | tail -n 1) $rc"
    grep -E '^(FAILED|ERROR)' "$log" | head -n 20
  done
elif [[ ${paths[0]} != none ]]; then
  # Shards: each file's gpu tests in collection order, cut into contiguous runs (neighbouring
  # parametrizations share compiled kernels), about SHARDS runs in all.
  python3 -m pytest "${paths[@]}" -m gpu --collect-only -q -p no:cacheprovider 2>/dev/null \
    | grep '::' >"$LOG/collected.txt"
  python3 - "$LOG" "${SHARDS:-14}" <<'EOF'
import collections, math, pathlib, sys
log, shards = pathlib.Path(sys.argv[1]), int(sys.argv[2])
ids = (log / "collected.txt").read_text().split("\n")
by_file = collections.OrderedDict()
for node in filter(None, ids):
    by_file.setdefault(node.split("::")[0], []).append(node)
per = max(1, math.ceil(sum(map(len, by_file.values())) / shards))
# Files whose tests each compile several large kernels (moe's expert GEMMs: session 12's shard of 85
# of them passed 34 in 530 s beside the other shards) go in runs of a quarter of the others' size.
HEAVY = ("moe/test_fused_moe_gpu.py",)
n = 0
for path, nodes in by_file.items():
    step = max(1, per // 4) if path.endswith(HEAVY) else per
    for i in range(0, len(nodes), step):
        (log / f"shard{n:02d}.txt").write_text("\n".join(nodes[i : i + step]) + "\n")
        n += 1
print(f"{sum(map(len, by_file.values()))} gpu tests in {n} shards")
EOF
  i=0
  for shard in "$LOG"/shard*.txt; do
    throttle
    name=$(basename "$shard" .txt)
    (export CUDA_VISIBLE_DEVICES=$((i % ngpu))
     mapfile -t ids <"$shard"
     timeout "${TEST_LIMIT:-420}" python3 -m pytest "${ids[@]}" -m gpu -q -rfEs -p no:cacheprovider \
       --timeout 300 >"$LOG/$name.log" 2>&1
     echo "rc=$?" >>"$LOG/$name.log") &
    i=$((i + 1))
  done
  wait
  for log in "$LOG"/shard*.log; do
    rc=$(grep -o 'rc=[0-9]*' "$log" | tail -n 1)
    [[ $rc == rc=0 ]] || status=1
    echo "$(basename "$log" .log): $(tail -n 3 "$log" | grep -E 'passed|failed|error|skipped' | tail -n 1) $rc"
    grep -E '^(FAILED|ERROR)' "$log" | head -n 20
  done
fi

if [[ $jobs_file != - && -f $jobs_file ]]; then
  run_lane() {  # run_lane GPU: the jobs of lane GPU (every ngpu-th line), on that GPU, under its lock
    local g=$1 k=0 name bench args
    while read -r name bench args; do
      [[ -z $name || $name == \#* ]] && continue
      k=$((k + 1)); (( (k - 1) % ngpu == g )) || continue
      # shellcheck disable=SC2086  # ARGS is a space-separated list on purpose
      (CUDA_VISIBLE_DEVICES=$g B12X_BENCH_GPU_LOCK=$LOG/gpu$g.lock \
         timeout "${BENCH_LIMIT:-400}" python3 -m "benchmarks.experimental.b12x.bench_$bench" \
         --json "$LOG/$name.json" $args >"$LOG/$name.log" 2>&1
       echo "rc=$? gpu=$g" >>"$LOG/$name.log") &
      # BENCH_SERIAL=1: one benchmark at a time in a lane (the lock orders timed regions only; a peer's
      # untimed GPU work, e.g. torch.compile autotuning or priming, can otherwise land in another's
      # timed region)
      [[ ${BENCH_SERIAL:-0} == 1 ]] && wait
    done <"$jobs_file"
    wait
  }
  for ((g = 0; g < ngpu; g++)); do run_lane "$g" & done
  wait
  for log in "$LOG"/*.log; do
    case $(basename "$log") in shard*|sel*|install.log) continue ;; esac
    echo "== $(basename "$log" .log): $(tail -n 1 "$log")"
    grep -E 'sweep .*best|Error|MISS' "$log" | head -n 12
  done
fi
exit $status
