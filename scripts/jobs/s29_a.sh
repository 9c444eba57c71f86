#!/usr/bin/env bash
# Session 29's machine session, after the two toolchain calls and a call that carried .devwheels/fi1 to
# /root/fiw; this call carries .devwheels/fi2. FlashInfer 0.7.2.post1 goes to /root/fi (the attention bench's
# --flashinfer-site), then the gpu checks of this session's changes (s29_a_sel.txt) on a snapshot, then the
# FlashInfer decode job (s29_fi.txt).
set -uo pipefail
export PYTHONPATH=/root/site:/root/site/nvidia_cutlass_dsl/dsl_packages
mkdir -p /root/fiw && cp .devwheels/fi2/* /root/fiw/ && cd /root/fiw \
  && cat fi.part.* >flashinfer_python-0.7.2.post1-py3-none-any.whl && rm -f fi.part.* \
  && python3 -m pip install -q --no-index --no-deps --target /root/fi ./*.whl && echo "flashinfer installed"
cd - >/dev/null || exit 2
python3 -c "import sys; sys.path.insert(0, '/root/fi'); import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
BENCH_SERIAL=1 TEST_LIMIT=240 BENCH_LIMIT=300 timeout 560 bash scripts/device_snapshot_run.sh scripts/jobs/s29_fi.txt \
  @scripts/jobs/s29_a_sel.txt 2>&1 | tail -40
