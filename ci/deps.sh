#!/usr/bin/env bash
# Installs what camdelta needs to build and run on Debian 12 (as root, or via sudo).
set -euo pipefail
# Two OpenCL stacks side by side, as a user's machine has them: PoCL and Mesa's (Rusticl on llvmpipe, and Clover,
# which has no device without a GPU).
pkgs=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-c-headers clinfo pocl-opencl-icd mesa-opencl-icd
      libcmocka-dev libb2-dev libcjson-dev clang libclang-rt-14-dev oclgrind
      libopenmpi-dev openmpi-bin python3 python3-clang-14
      python3-numpy python3-pytest python3-torch)  # the last three: the Python package (python/) and its tests
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
