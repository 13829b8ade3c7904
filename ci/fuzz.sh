#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/: the .npy reader, the cache-entry reader, the stream image parser and file
# reader, the tool's shape and grid options)
# with clang and runs each for a bounded time on its seed corpus
# (fuzz/corpus/<target>); new inputs go to a scratch folder, never into the tree. Fails on any crash, leak,
# sanitizer report or time-out of one input. Prints each target's execution count.
#   bash ci/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
secs=${1:-60}
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCAMDELTA_FUZZ=ON -DCAMDELTA_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_npy fuzz_cache_entry fuzz_stream_image fuzz_shape_options
# fuzz_shape_options opens one OpenCL context: PoCL only (the other ICDs load and keep drivers whose allocations
# LeakSanitizer cannot name), and the allocations PoCL and LLVM keep until exit suppressed as in the ASan tests.
[ -f /etc/OpenCL/vendors/pocl.icd ] && export OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd
export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp:print_suppressions=0"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch" /tmp/camdelta-fuzz-cache-* /tmp/camdelta-fuzz-stream-*' EXIT
rc=0
for t in npy cache_entry stream_image shape_options; do
  mkdir -p "$scratch/$t"
  log="build-fuzz/fuzz-$t.log"
  if ./build-fuzz/fuzz/fuzz_$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="build-fuzz/crash-$t-" "$scratch/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    echo "fuzz_$t: $(grep -E '^Done [0-9]+ runs' "$log" || echo '?') (corpus $(ls "$scratch/$t" | wc -l) new inputs)"
  else
    echo "fuzz_$t: FAILED (see $log and build-fuzz/crash-$t-*)"; tail -40 "$log"; rc=1
  fi
done
exit $rc
