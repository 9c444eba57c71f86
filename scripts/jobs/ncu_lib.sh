# Sourced by the Nsight Compute job scripts (after the toolchain calls, on a snapshot): installs the snapshot, enters
# it, and defines `ncu_run NAME SCRIPT ARGS...`, which profiles SCRIPT (one of the scripts/ncu_*.py brackets) with
# the sections and metrics below (NCU_SECTIONS / NCU_METRICS override them) into $OUT/ncu_NAME.csv.
bash scripts/device_snapshot_run.sh - none >/dev/null 2>&1
cd /root/snap || exit 2
export PYTHONPATH=/root/snap:/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages B12X_CACHE_DIR=/tmp/b12x-cache
# NCU_SET=spread (the fixed-cost probes, s60_b.sh / s63_b.sh): each kernel's duration, SM active-cycle spread (min / avg /
# max against elapsed: a tail shows as min << max), DRAM and L2 bytes, with SpeedOfLight, Occupancy and LaunchStats.
if [[ ${NCU_SET:-} == spread ]]; then
  NCU_METRICS=gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max
  NCU_METRICS=$NCU_METRICS,sm__cycles_elapsed.max,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
  NCU_SECTIONS="SpeedOfLight Occupancy LaunchStats"
fi
NCU_SECTIONS=${NCU_SECTIONS:-SpeedOfLight WarpStateStats SchedulerStats Occupancy LaunchStats InstructionStats}
NCU_METRICS=${NCU_METRICS:-sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.max,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active}
ncu_run() {
  local name=$1 s sections=(); shift
  for s in $NCU_SECTIONS; do sections+=(--section "$s"); done
  timeout "${NCU_LIMIT:-150}" ncu --profile-from-start off --clock-control none --cache-control all "${sections[@]}" \
    --metrics "$NCU_METRICS" --csv python3 "$@" >"$OUT/ncu_$name.csv" 2>&1
  echo "ncu $name rc=$? $(grep -c '' "$OUT/ncu_$name.csv") lines $(grep -m1 -E 'bits equal|max \|ours' "$OUT/ncu_$name.csv" | cut -c1-160)"
}
