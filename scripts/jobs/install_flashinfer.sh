#!/usr/bin/env bash
# FlashInfer 0.7.2.post1 into /root/fi (bench_attention's --flashinfer-site) on the device machine, from the wheel's
# two halves: a call before carried .devwheels/fi1 to /root/fiw (`mkdir -p /root/fiw && cp .devwheels/fi1/*
# /root/fiw/`), this call carries .devwheels/fi2 (the second half and apache-tvm-ffi). Here:
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 -d .devwheels/fi flashinfer-python==0.7.2.post1 'apache-tvm-ffi>=0.1.11,<0.2'
#   mkdir -p .devwheels/fi1 .devwheels/fi2 && split -b 31m .devwheels/fi/flashinfer_python-*.whl .devwheels/fi1/fi.part.
#   mv .devwheels/fi1/fi.part.ab .devwheels/fi2/ && cp .devwheels/fi/apache_tvm_ffi* .devwheels/fi2/
set -uo pipefail
here=$PWD
mkdir -p /root/fiw && cp .devwheels/fi2/* /root/fiw/ && cd /root/fiw \
  && cat fi.part.* >flashinfer_python-0.7.2.post1-py3-none-any.whl && rm -f fi.part.* \
  && python3 -m pip install -q --no-index --no-deps --target /root/fi ./*.whl && echo "flashinfer installed"
cd "$here" || exit 2
