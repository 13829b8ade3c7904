#!/usr/bin/env bash
# Installs the built camdelta into a temporary prefix, then builds and runs
# examples/embed.c against it three ways: via find_package(camdelta) (with
# examples/camera_branch.c and examples/stream_rollout.c), via pkg-config and statically. Usage:
# install_consumer.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
flags=${CD_CONSUMER_FLAGS:-}   # e.g. the sanitizer flags the library was built with
rm -rf "$work" && mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/camdelta.h"
test -x "$prefix/bin/camdelta"
libdir=$(dirname "$(find "$prefix" -name 'libcamdelta.so' | head -1)")
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$prefix/bin/camdelta" --version

echo "== find_package(camdelta)"
cmake -S "$src/examples" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="$flags" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/embed"
"$work/cmake-build/camera_branch" # the whole camera branch, forward and backward, against the f64 reference
"$work/cmake-build/stream_rollout" "$work/rollout.cds" # a streamed rollout with a checkpoint (docs/streaming.md)

echo "== pkg-config camdelta"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pkg-config --modversion camdelta
cc $flags -std=c11 -Wall -Wextra -Werror -o "$work/embed-pc" "$src/examples/embed.c" $(pkg-config --cflags --libs camdelta) -lm
"$work/embed-pc"

echo "== static library via pkg-config --static"
cc $flags -std=c11 -o "$work/embed-static" "$src/examples/embed.c" $(pkg-config --cflags camdelta) \
  "$libdir/libcamdelta.a" $(pkg-config --libs-only-l --static camdelta | sed 's/-lcamdelta//') -lm
"$work/embed-static"
