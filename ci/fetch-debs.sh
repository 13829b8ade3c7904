#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the packages that ci/gpu-test.sh unpacks on the lent
# NVIDIA machine, which has no network: OpenCL headers and ICD loader, cmocka, libb2, cJSON. The folder .debs/
# is git-ignored and travels with `carry: [".debs"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
cd .debs
apt-get download libcmocka0 libcmocka-dev opencl-c-headers opencl-clhpp-headers ocl-icd-libopencl1 \
  ocl-icd-opencl-dev libb2-1 libb2-dev libcjson1 libcjson-dev
