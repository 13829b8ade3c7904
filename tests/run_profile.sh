#!/usr/bin/env bash
# One constrained-device profile (CAMDELTA_DEVICE_LIMITS, set by ctest): every operation on the device against its
# f64 reference with the bounds of docs/math.md §5, at the production head dim and few tokens, through the test programs'
# own checks (one filtered test per program) and the demo (cameras, conv, the whole branch forward and backward).
#   run_profile.sh TESTS_DIR
set -uo pipefail
dir=$1
rc=0
mkdir -p "$CAMDELTA_TEST_TMP"
fail() { # name, log
  echo "profile ${CAMDELTA_DEVICE_LIMITS:-none}: $1 failed:"
  tail -40 "$2"
  rc=1
}
run() { # program, cmocka filter
  CAMDELTA_TEST_FILTER="$2" "$dir/$1" >"$CAMDELTA_TEST_TMP/$1.log" 2>&1 || fail "$1 ($2)" "$CAMDELTA_TEST_TMP/$1.log"
}
"$CAMDELTA_CLI" demo --shape 1,2,112,3,20 >"$CAMDELTA_TEST_TMP/demo.log" 2>&1 || fail demo "$CAMDELTA_TEST_TMP/demo.log"
run test_prep test_prep_profile
run test_prep_backward test_prep_backward_profile
run test_scan test_profile_shapes
run test_scan_backward test_scan_backward_profile
run test_scan_packed test_packed
run test_scan_summary test_device_summaries
exit $rc
