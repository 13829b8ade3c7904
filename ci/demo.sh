#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds camdelta and runs the main job:
# `camdelta demo` on the default OpenCL device (PoCL when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target camdelta_cli
./build/camdelta demo "$@"
