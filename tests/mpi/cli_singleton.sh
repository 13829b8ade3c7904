#!/usr/bin/env bash
# A singleton --sequence-parallel run of the tool (no mpirun, Open MPI's default components, the environment of
# ci/test.sh --sanitize: LSAN_OPTIONS with ci/lsan.supp only): it succeeds, exits 0 under AddressSanitizer (the
# allocations Open MPI's plugins keep until exit are suppressed, issue 38), and writes what one device writes.
# Usage: cli_singleton.sh CAMDELTA GEN_INPUTS NPY_TOOL WORKDIR
set -euo pipefail
cli=$1 gen=$2 tool=$3 work=$4
rm -rf "$work" && mkdir -p "$work/in"
"$gen" scan 1 2 16 4 6 "$work/in"
"$cli" run scan --in "$work/in" --out "$work/one" --quiet
"$cli" run scan --in "$work/in" --out "$work/sp" --sequence-parallel --quiet 2>"$work/err.txt" ||
  { cat "$work/err.txt"; echo "cli_singleton: the singleton run failed"; exit 1; }
if grep -q "Sanitizer" "$work/err.txt"; then cat "$work/err.txt"; exit 1; fi
"$tool" cmp "$work/sp" "$work/one" 1e-6 out
echo "cli_singleton: passed"
