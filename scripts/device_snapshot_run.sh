#!/usr/bin/env bash
# Run scripts/device_parallel_run.sh on a clean snapshot of a commit, not on the working tree that
# travelled (helpers' uncommitted files must not leak into a validation run; AGENTS.md).
#
# Here:       git rev-parse --short HEAD > COMMIT && git archive HEAD -o snap.tar && tar rf snap.tar COMMIT
# On device:  (after the two toolchain calls of ../shared/tools/device-wheels)
#             [SHARDS=.. TEST_LIMIT=.. BENCH_LIMIT=.. BENCH_SERIAL=1] bash scripts/device_snapshot_run.sh JOBS [paths|@SEL|none]
#
# snap.tar and COMMIT travel to the device as untracked files (so they must not be git-ignored: the
# device copy skips ignored paths) and are never committed. JOBS and @SEL files are read from the
# travelled tree (they may be untracked); everything else
# (code, tests, benchmarks) comes from snap.tar, extracted to /root/snap and installed there.
set -uo pipefail
here=$PWD
[[ -f snap.tar ]] || { echo "device_snapshot_run: no snap.tar in $here (make it with git archive, see the header)" >&2; exit 2; }
rm -rf /root/snap && mkdir -p /root/snap && tar xf snap.tar -C /root/snap || exit 2
jobs=${1:--}; shift || true
[[ $jobs == - ]] || cp "$jobs" /root/snap/.jobs.txt
sel=("$@")
if [[ ${#sel[@]} -gt 0 && ${sel[0]} == @* ]]; then cp "$here/${sel[0]#@}" /root/snap/.sel.txt; sel=(@.sel.txt); fi
cd /root/snap
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/snap-install.log 2>&1 \
  || { tail -n 20 /tmp/snap-install.log; exit 2; }
export B12X_GIT_COMMIT=$(cat COMMIT 2>/dev/null || echo unknown)
bash scripts/device_parallel_run.sh "$([[ $jobs == - ]] && echo - || echo .jobs.txt)" "${sel[@]}"
