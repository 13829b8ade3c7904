#!/usr/bin/env bash
# Source checks, after a build (they parse with its compile_commands.json): bash ci/lint.sh [BUILD_DIR]
#  - designated initialisers for every struct of more than four fields in the library and the tool
#    (ci/designated_init.py, libclang); its self-test first shows that it finds what it must;
#  - no call cycle between the source files, nor between the folders, of the library, the MPI component and the
#    tool (ci/cycles.py on the build's objects, with its self-test);
#  - folder-qualified includes, no folder including another's private headers, no include cycle between headers
#    or folders (ci/check_includes.py, with its self-test; ci/qualify_includes.py fixes the qualification);
#  - every relative link in the Markdown files resolves, headings included (ci/check_links.py, with its self-test).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 ci/check_links.py --self-test
/usr/bin/python3 ci/check_links.py
/usr/bin/python3 ci/check_includes.py --self-test
/usr/bin/python3 ci/check_includes.py
build=${1:-build}
[ -f "$build/compile_commands.json" ] || { echo "ci/lint.sh: $build/compile_commands.json missing (configure first)" >&2; exit 1; }
/usr/bin/python3 ci/designated_init.py --self-test
# Pending: files whose initialisers are not designated yet (none now).
pending=()
args=()
for p in "${pending[@]}"; do args+=(--pending "$p"); done
/usr/bin/python3 ci/designated_init.py "$build" "${args[@]}" src tools
/usr/bin/python3 ci/cycles.py --self-test
/usr/bin/python3 ci/cycles.py "$build"
# Vendor paths: inline assembly (NVIDIA PTX) only in the tensor-core kernels, which CAMDELTA_TC=0 turns off, so that
# the portable path is every other kernel (docs/portability.md).
asm=$(grep -l -E '(^|[^a-z_])(asm|__asm__)[[:space:]]*(volatile[[:space:]]*)?\(' cl/*.cl | grep -v '^cl/gemm_tc\.cl$' || true)
if [ -n "$asm" ]; then
  echo "ci/lint.sh: inline assembly outside cl/gemm_tc.cl (the vendor path CAMDELTA_TC=0 turns off): $asm" >&2
  exit 1
fi
echo "vendor paths: inline assembly only in cl/gemm_tc.cl"
