#!/usr/bin/env bash
# Installs the built camdelta (with camdelta_mpi) into a temporary prefix, builds examples/mpi against it with
# find_package(camdelta) and camdelta::camdelta_mpi, and runs it on 2 ranks.
# Usage: install_consumer_mpi.sh BUILD_DIR SOURCE_DIR WORK_DIR MPIEXEC [mpirun flags...]
set -euo pipefail
build=$1 src=$2 work=$3 mpiexec=$4
shift 4
flags=${CD_CONSUMER_FLAGS:-}
rm -rf "$work" && mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/camdelta_mpi.h"
libdir=$(dirname "$(find "$prefix" -name 'libcamdelta_mpi.so' | head -1)")
test -f "$libdir/cmake/camdelta/camdeltaMpiTargets.cmake"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake -S "$src/examples/mpi" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="$flags" >/dev/null
cmake --build "$work/build" >/dev/null
"$mpiexec" -np 2 "$@" "$work/build/sequence_parallel"
