#!/usr/bin/env bash
# Carry the device's kernel cache from one machine session to the next, so that a tier re-run on unchanged
# kernels skips their compiles (compiles are most of a gpu tier's ~6 minutes; the machine starts bare).
#
# On the device, after a tier:   bash scripts/device_cache.sh save [PATH...]  (parts into $OUT/cache/; PATHs inside the
#                                cache, e.g. 'kernels/attention.*', default all of it)
# Here, after that call:         bash scripts/device_cache.sh keep DIR  (DIR: the call's files_at; into .devcache/)
# On the device, before a tier:  bash scripts/device_cache.sh load      (from .devcache/, carried: carry [".devcache"])
#
# The cache is B12X_CACHE_DIR (/tmp/b12x-cache under device_parallel_run.sh): b12x's CuTe objects and Triton's
# cache, which the gpu tests share there (B12X_TEST_KERNEL_CACHE, tests/experimental/b12x/conftest.py). Every entry is keyed by its sources, the toolchain and the arch (_lib/compile.py), so a stale entry is
# never loaded, only recompiled: carrying an old cache is safe, and only what is unchanged is saved time. Parts
# are at most 15 MiB (a file that comes back is at most 16), 3 of them: 45 MiB beside the ~10 MiB tree fits a call's
# 64 MiB, and 5 of a call's 8 returned files stay free for logs. A larger cache is not saved (it says so and its size:
# save fewer PATHs).
set -euo pipefail
cache=${B12X_CACHE_DIR:-/tmp/b12x-cache}
here=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
part_mib=${CACHE_PART_MIB:-15}
max_parts=${CACHE_MAX_PARTS:-3}
case ${1:-} in
  save)
    [[ -d $cache ]] || { echo "device_cache: no cache at $cache, nothing saved"; exit 0; }
    dest=${OUT:?device_cache save: OUT is not set}/cache
    tmp=$(mktemp -d)
    shift
    paths=$(cd "$cache" && shopt -s nullglob && eval "set -- ${*:-.}" && printf '%s\n' "$@")
    [[ -n $paths ]] || { echo "device_cache: nothing in $cache matches ${*}, nothing saved"; rm -rf "$tmp"; exit 0; }
    mapfile -t paths <<<"$paths"
    tar czf "$tmp/cache.tgz" -C "$cache" --exclude='*.lock' --exclude='*.tmp*' "${paths[@]}"
    size=$(stat -c %s "$tmp/cache.tgz")
    if (( size > part_mib * max_parts * 1048576 )); then
      echo "device_cache: the cache is $(( size / 1048576 )) MiB compressed, over ${max_parts} x ${part_mib} MiB: not saved"
      rm -rf "$tmp"; exit 0
    fi
    mkdir -p "$dest"
    split -b "${part_mib}m" -d -a 1 "$tmp/cache.tgz" "$dest/cache.tgz.part"
    rm -rf "$tmp"
    echo "device_cache: saved $(( size / 1048576 )) MiB in $(ls "$dest" | wc -l) parts"
    ;;
  keep)
    src=${2:?usage: device_cache.sh keep FILES_AT}/cache
    ls "$src"/cache.tgz.part* >/dev/null 2>&1 || { echo "device_cache: no parts under $src"; exit 1; }
    grep -qx '/.devcache/' "$here/.git/info/exclude" 2>/dev/null || echo '/.devcache/' >>"$here/.git/info/exclude"
    rm -rf "$here/.devcache" && mkdir -p "$here/.devcache"
    cp "$src"/cache.tgz.part* "$here/.devcache/"
    cat "$here"/.devcache/cache.tgz.part* | tar tzf - >/dev/null  # a broken transfer fails here, not on the device
    echo "device_cache: kept $(du -sh "$here/.devcache" | cut -f1) in .devcache/ (carry it: carry [\".devcache\"])"
    ;;
  load)
    ls "$here"/.devcache/cache.tgz.part* >/dev/null 2>&1 || { echo "device_cache: no .devcache here, nothing loaded"; exit 0; }
    mkdir -p "$cache"
    cat "$here"/.devcache/cache.tgz.part* | tar xzf - -C "$cache"
    echo "device_cache: loaded $(find "$cache" -type f | wc -l) files into $cache"
    ;;
  *)
    sed -n '2,15p' "$0"; exit 2
    ;;
esac
