#!/usr/bin/env bash
# Runs every operation (the camera branch's too) on small shapes through `camdelta run` under oclgrind (an OpenCL device simulator that
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
# No loop-budget probe (src/runtime/loops.c): oclgrind has no budget, and its uninitialized-value plugin, once another
# kernel has run in the process, flags values one kernel stored and the next reads (see the branch cases below)
export CAMDELTA_DEVICE_LIMITS=loops=none
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
# A loop budget (Mesa's llvmpipe has one) that splits phase A's frames and phase B's chain over launches; pass 1 only
# (the sums carried from one launch to the next are one kernel's stores read by the next, see above).
CAMDELTA_DEVICE_LIMITS=loops=4000 check scan-chunkwise-split 1 scan 1 1 32 2 300 -- scan --algorithm chunkwise --final-state
check scan-backward 12 scan-backward 1 2 16 3 5 -- scan-backward
check scan-backward-reverse 12 scan-backward 1 1 8 3 4 -- scan-backward --reverse
# Packed clips, native path (the kernels' CD_PACKED variant): frames of 70, 5 and 1 tokens, so that token tiles past
# a frame's end exist (they leave at once) and chains of 1, 2 and 1 frames.
check scan-packed 12 scan-packed 1 8 1x70,2x5,1x1 -- scan --algorithm chunkwise --final-state
check scan-packed-reverse 12 scan-packed 1 8 1x70,2x5,1x1 -- scan --algorithm chunkwise --final-state --reverse
check scan-backward-packed 12 scan-backward-packed 1 8 1x70,2x5,1x1 -- scan-backward
check scan-backward-packed-reverse 12 scan-backward-packed 1 8 1x70,2x5,1x1 -- scan-backward --reverse
# The camera branch (T = 5 frames, chunk size 2 first_chunk_plus_one: the reverse scan is masked at frames 1 and 3 and
# at the one-frame chunk 4), forward and backward, chunkwise (the fused scan pair where the device takes it): pass 1.
check branch-chunkwise 1 branch 1 5 2 3 2 8 -- branch --grid 5,2,3 --chunk-size 2 \
  --chunk-strategy first_chunk_plus_one --algorithm chunkwise
check branch-backward-chunkwise 1 branch 1 5 2 3 2 8 -- branch-backward --grid 5,2,3 --chunk-size 2 \
  --chunk-strategy first_chunk_plus_one --algorithm chunkwise
# A stream over the same frames (blocks 3, 2): the conv over a block continuing the look-back, the pair from a
# carried state, a non-committing step before each commit.
check branch-stream 1 branch 1 5 2 3 2 8 -- branch --grid 5,2,3 --chunk-size 2 \
  --chunk-strategy first_chunk_plus_one --algorithm chunkwise --stream --repeat 1
# The uninitialized-value check (pass 2) on the branch's kernels one operation at a time: the camera matrices and
# RoPE tables, the short conv, the output transform, and the masked reverse scan (beta and decay zero at odd frames,
# as cd_branch_discount hands them over) forward in both algorithms and backward. On the whole branch in one
# process, oclgrind 21.10's plugin flags values that a kernel stored and the next one reads (the states of
# cd_scan_sequential read by cd_scan_phase_c, A_f read by phase B, the backward's chains) once other kernels have
# run in the process: the same kernels on the same bytes report nothing alone, the stored values are defined at the
# store in its own instrumentation, and re-writing the identical bytes through the host between the kernels removes
# every report (the outputs equal PoCL's to 2e-7); so that pass would test the simulator, not camdelta.
check camera 12 branch 1 5 2 3 2 8 -- camera --grid 5,2,3 --head-dim 8
check short-conv 12 branch 1 5 2 3 2 8 -- short-conv --grid 5,2,3 --chunk-size 2
check output-transform 12 branch 1 5 2 3 2 8 -- output-transform
check scan-masked-reverse-sequential 2 scan-masked 1 2 16 5 6 -- scan --reverse --algorithm sequential --final-state
check scan-masked-reverse-chunkwise 12 scan-masked 1 2 16 5 6 -- scan --reverse --algorithm chunkwise --final-state
check scan-backward-masked-reverse 12 scan-backward-masked 1 2 16 5 6 -- scan-backward --reverse
# The CPU forms (a CPU device's defaults; oclgrind's simulator is a GPU device, so they are forced): the prep's
# forward and backward at D = 24 (an 8-channel group across the camera and RoPE halves) with every gradient, the
# scan's chunkwise forward and backward, and the camera branch's backward with all of them. The prep's run pass 1
# only: oclgrind 21.10 itself crashes (SIGSEGV) running cd_prep_cpu under the uninitialized-value plugin with
# -cl-opt-disable, and that plugin stops at `freeze` in the optimised build (a simulator gap, not a finding).
CAMDELTA_PREP_FUSED=3 check prep-cpu 1 prep 2 5 1 24 -- prep
CAMDELTA_PREP_BWD_FUSED=2 check prep-backward-cpu 1 prep-backward 2 11 2 24 -- prep-backward --all-grads
CAMDELTA_SCAN_CPU=1 check scan-chunkwise-cpu 12 scan 1 2 16 3 5 -- scan --algorithm chunkwise --final-state
CAMDELTA_SCAN_CPU=1 check scan-backward-cpu 12 scan-backward 1 1 8 3 4 -- scan-backward --reverse
CAMDELTA_PREP_FUSED=3 CAMDELTA_PREP_BWD_FUSED=2 CAMDELTA_SCAN_CPU=1 CAMDELTA_CONV_FORM=1 CAMDELTA_OUTPUT_FORM=1 \
  check branch-backward-cpu 1 branch 1 5 2 3 2 8 -- \
  branch-backward --grid 5,2,3 --chunk-size 2 --chunk-strategy first_chunk_plus_one --algorithm chunkwise
# The conv's and the output transform's CPU forms (cl/branch_cpu.cl), forced the same way: the conv in both passes,
# the output transform in pass 1 (oclgrind 21.10 crashes running it under the uninitialized-value plugin with
# -cl-opt-disable, as it does on cd_prep_cpu), and a stream over the branch (the conv continuing a block's look-back);
# the branch backward above runs them too.
CAMDELTA_CONV_FORM=1 check short-conv-cpu 12 branch 1 5 2 3 2 8 -- short-conv --grid 5,2,3 --chunk-size 2
CAMDELTA_OUTPUT_FORM=1 check output-transform-cpu 1 branch 1 5 2 3 2 8 -- output-transform
CAMDELTA_CONV_FORM=1 CAMDELTA_OUTPUT_FORM=1 check branch-stream-cpu 1 branch 1 5 2 3 2 8 -- branch --grid 5,2,3 \
  --chunk-size 2 --chunk-strategy first_chunk_plus_one --algorithm chunkwise --stream --repeat 1
echo "oclgrind: $n runs in $(( $(date +%s) - start )) s, $([ $rc = 0 ] && echo 'no reports' || echo 'REPORTS (see above)')"
exit $rc
