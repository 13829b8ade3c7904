#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds camdelta with -Werror and runs the
# whole test suite on the default OpenCL device (PoCL when there is no GPU), then
# again on Mesa's Rusticl (llvmpipe), the second CPU stack installed beside it.
#   bash ci/test.sh              # normal build in build/, PoCL then Rusticl
#   bash ci/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/, PoCL
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
dir=build; extra=()
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  extra=(-DCAMDELTA_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DCAMDELTA_TEST_CACHE="$PWD/build/test-cache")
  # PoCL's compiler keeps allocations until exit; our own leaks are still reported.
  export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp:print_suppressions=0"
  # The sanitizers check camdelta's code, on PoCL only: Mesa's OpenCL library (Rusticl), when installed, leaks at
  # start-up whether or not its devices are enabled, and the leak report would fail every test.
  [ -f /etc/OpenCL/vendors/pocl.icd ] && export OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
cmake -S . -B "$dir" -DCAMDELTA_WERROR=ON "${extra[@]}"
cmake --build "$dir" -j"$(nproc)"
# PoCL compiles each kernel on one core: tests in parallel overlap those compiles (each test has its own temp
# folder; the kernel caches write atomically; MPI tests declare their ranks as PROCESSORS).
if [ "${1:-}" = "--sanitize" ]; then
  # the constrained-device profiles (label profile) are the plans' test, run once in the normal build
  ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" -LE profile
  exit 0
fi
t0=$SECONDS
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
echo "ci/test.sh: the PoCL pass took $((SECONDS - t0)) s"
# The same suite on Rusticl (RUSTICL_ENABLE names the Gallium driver it may use): its kernels report a work-group
# limit of 32, it ends a work-item's loops after 65535 iterations and gives no kernel times (docs/portability.md).
# The profiles emulate other devices on PoCL and are not repeated here; nor is the FMA forms' rerun (label fma: the
# scan takes its CPU forms on Rusticl too, splitting their walks under its loop budget; the work-group forms run here
# in the tests that force them: the budget tests, the kernel-limit test, packed clips);
# nor are the MPI, Python and install tests
# (the same library calls through other front ends) and the native packed-clip test (the scan's units with a packed
# geometry, test_scan_packed covers them here): each of their processes would compile its kernels again on
# llvmpipe, and CI must stay within its time.
RUSTICL_ENABLE=llvmpipe CAMDELTA_DEVICE=rusticl ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" -LE 'profile|fma' \
  -E '^(mpi_|python_|install_|test_scan_packed_native$)'
echo "ci/test.sh: the Rusticl pass took $((SECONDS - t0)) s since the PoCL pass began"
