#!/usr/bin/env bash
# The scan's FMA (work-group) forms on the test device: the forms every non-NVIDIA GPU takes, which a CPU device
# (PoCL, the CI's) otherwise leaves for the CPU forms (option scan CPU). Runs a subset of the scan programs' own
# checks against their f64 references with CAMDELTA_SCAN_CPU=0: the production head dim, awkward frame sizes and counts, init and
# final states, the backward from saved and recomputed states, and the forward and backward pairs.
#   run_fma_forms.sh TESTS_DIR
set -uo pipefail
dir=$1
rc=0
export CAMDELTA_SCAN_CPU=0
mkdir -p "$CAMDELTA_TEST_TMP"
run() { # program, cmocka filter
  local log="$CAMDELTA_TEST_TMP/$1.log"
  if ! CAMDELTA_TEST_FILTER="$2" "$dir/$1" >"$log" 2>&1; then
    echo "FMA forms: $1 ($2) failed:"
    tail -40 "$log"
    rc=1
  fi
}
run test_scan 'test_profile_shapes'
run test_scan 'test_frame_sizes'
run test_scan 'test_frame_counts'
run test_scan 'test_init_and_final_options'
run test_scan_backward 'test_scan_backward_profile'
run test_scan_backward 'test_scan_backward_from_forward'
run test_scan_pair 'test_small_d8'
run test_scan_pair 'test_d64_d112'
exit $rc
