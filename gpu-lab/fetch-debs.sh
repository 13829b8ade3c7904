#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the packages that gpu-lab/gpu-test.sh unpacks on the lent
# NVIDIA machine, which has no network: OpenCL headers and ICD loader, cmocka, libb2, cJSON. The folder .debs/
# is git-ignored and travels with `carry: [".debs"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
cd .debs
apt-get download libcmocka0 libcmocka-dev opencl-c-headers opencl-clhpp-headers ocl-icd-libopencl1 \
  ocl-icd-opencl-dev libb2-1 libb2-dev libcjson1 libcjson-dev
# Open MPI for the sequence-parallel component and its tests (relocated there with OPAL_PREFIX, see gpu-test.sh)
apt-get download openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7 \
  libevent-2.1-7 libfabric1 libhwloc15 libhwloc-plugins libibverbs1 ibverbs-providers libnl-3-200 libnl-route-3-200 \
  libpmix2 libpsm-infinipath1 libpsm2-2 libucx0 libmunge2 librdmacm1 libnuma1
