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
