#!/usr/bin/env bash
# Source checks, after a build (they parse with its compile_commands.json): bash ci/lint.sh [BUILD_DIR]
#  - designated initialisers for every struct of more than four fields in the library and the tool
#    (ci/designated_init.py, libclang); its self-test first shows that it finds what it must;
#  - every relative link in the Markdown files resolves, headings included (ci/check_links.py, with its self-test).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 ci/check_links.py --self-test
/usr/bin/python3 ci/check_links.py
build=${1:-build}
[ -f "$build/compile_commands.json" ] || { echo "ci/lint.sh: $build/compile_commands.json missing (configure first)" >&2; exit 1; }
/usr/bin/python3 ci/designated_init.py --self-test
# Pending: files whose initialisers are not designated yet (none now).
pending=()
args=()
for p in "${pending[@]}"; do args+=(--pending "$p"); done
/usr/bin/python3 ci/designated_init.py "$build" "${args[@]}" src tools
