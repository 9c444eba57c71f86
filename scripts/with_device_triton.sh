#!/usr/bin/env bash
# Run a command with the H200's Triton (3.6, the device torch's) in front of this machine's (3.9), so
# compile tests and `scripts/triton_audit.py` see the registers, SASS and layouts the device builds
# (AGENTS.md: the two versions lay out the same kernels differently). The wheel is downloaded once
# into $B12X_DEVICE_TRITON_DIR (default ~/.cache/b12x-triton-3.6) and unzipped there; it carries its
# own ptxas. Example:
#   scripts/with_device_triton.sh python3 -m pytest -m compile tests/experimental/b12x/norm/test_mhc_compile.py -k 90
set -euo pipefail
version=${B12X_DEVICE_TRITON_VERSION:-3.6.0}
dir=${B12X_DEVICE_TRITON_DIR:-$HOME/.cache/b12x-triton-${version%.*}}
if [[ ! -f $dir/triton/__init__.py ]]; then
  mkdir -p "$dir/wheel"
  python3 -m pip download -q --no-deps "triton==$version" -d "$dir/wheel" >&2
  python3 -m zipfile -e "$dir"/wheel/triton-*.whl "$dir"
  chmod +x "$dir"/triton/backends/nvidia/bin/* 2>/dev/null || true
fi
[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" exec "$@"
