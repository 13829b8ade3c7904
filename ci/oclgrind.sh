#!/usr/bin/env bash
# Runs every operation on small shapes through `camdelta run` under oclgrind (an OpenCL device simulator that
# checks every memory access) and fails on any report. Two passes per case:
#   1. kernels optimised as a device compiler builds them: --data-races --check-api (bounds checks are always on;
#      an out-of-bounds index into a local or private array shows here);
#   2. kernels built with -cl-opt-disable: --data-races --uninitialized --check-api (oclgrind's uninitialized-value
#      plugin stops at the LLVM `freeze` instructions that optimised division/remainder pairs contain, and then
#      reports false positives downstream).
# The sequential scan runs pass 2 only: its optimised build contains llvm.usub.sat, an intrinsic oclgrind 21.10
# cannot execute (it fails to create the kernel; a simulator gap, not a finding).
# Needs a build in build/ (ci/test.sh makes one) with the cd_gen_inputs helper.
#   bash ci/oclgrind.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
build=${1:-build}
[ -x "$build/camdelta" ] && [ -x "$build/tests/cd_gen_inputs" ] || {
  cmake -S . -B "$build" -DCAMDELTA_WERROR=ON >/dev/null && cmake --build "$build" -j"$(nproc)" || exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CAMDELTA_CACHE=0 # oclgrind builds from source every time anyway
rc=0
n=0
check() { # name, passes ("12" or "2"), gen args..., -- run args...
  local name=$1 passes=$2; shift 2
  local gen=() ; while [ "$1" != "--" ]; do gen+=("$1"); shift; done; shift
  mkdir -p "$work/$name"
  "$build/tests/cd_gen_inputs" "${gen[@]}" "$work/$name" || { echo "oclgrind $name: input generation failed"; rc=1; return; }
  for pass in $(echo "$passes" | fold -w1); do
    local opts=(--data-races --check-api)
    [ $pass = 2 ] && opts=(--data-races --uninitialized --check-api --build-options -cl-opt-disable)
    local log="$work/$name.$pass.log"
    if ! oclgrind "${opts[@]}" --log "$log" "$build/camdelta" run "$@" --quiet --in "$work/$name" \
         --out "$work/$name/out" >"$work/$name.$pass.out" 2>&1; then
      echo "oclgrind $name (pass $pass): camdelta failed"; cat "$work/$name.$pass.out"; rc=1
    fi
    if [ -s "$log" ]; then
      echo "oclgrind $name (pass $pass): $(grep -c -E '^[A-Z]' "$log") report lines"; head -40 "$log"; rc=1
    fi
    n=$((n + 1))
  done
}
start=$(date +%s)
check prep-d16 12 prep 1 9 2 16 -- prep --k-scale 0.3
check prep-d24 12 prep 2 5 1 24 -- prep
check prep-backward-all 12 prep-backward 1 9 2 16 -- prep-backward --all-grads --k-scale 0.3
check prep-backward-d24 12 prep-backward 1 5 2 24 -- prep-backward --all-grads
check prep-backward 12 prep-backward 2 5 1 8 -- prep-backward
# D = 24 and 40: cd_scan_phase_b once computed on uninitialised local padding there (it now zeroes it).
for alg in sequential chunkwise; do
  p=12; [ $alg = sequential ] && p=2
  check scan-$alg $p scan 1 2 16 3 5 -- scan --algorithm $alg --final-state
  check scan-$alg-reverse $p scan 1 1 8 3 4 -- scan --algorithm $alg --final-state --reverse
done
check scan-chunkwise-d24 12 scan 1 1 24 3 5 -- scan --algorithm chunkwise --final-state
check scan-chunkwise-d40 12 scan 1 1 40 2 3 -- scan --algorithm chunkwise
check scan-backward 12 scan-backward 1 2 16 3 5 -- scan-backward
check scan-backward-reverse 12 scan-backward 1 1 8 3 4 -- scan-backward --reverse
# Packed clips, native path (the kernels' CD_PACKED variant): frames of 70, 5 and 1 tokens, so that token tiles past
# a frame's end exist (they leave at once) and chains of 1, 2 and 1 frames.
check scan-packed 12 scan-packed 1 8 1x70,2x5,1x1 -- scan --algorithm chunkwise --final-state
check scan-packed-reverse 12 scan-packed 1 8 1x70,2x5,1x1 -- scan --algorithm chunkwise --final-state --reverse
check scan-backward-packed 12 scan-backward-packed 1 8 1x70,2x5,1x1 -- scan-backward
check scan-backward-packed-reverse 12 scan-backward-packed 1 8 1x70,2x5,1x1 -- scan-backward --reverse
echo "oclgrind: $n runs in $(( $(date +%s) - start )) s, $([ $rc = 0 ] && echo 'no reports' || echo 'REPORTS (see above)')"
exit $rc
