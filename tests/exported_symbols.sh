#!/bin/sh
# A shared library exports exactly the functions its public headers declare: nothing internal leaks into the
# dynamic symbol table, and no declared function is missing from it.
#   exported_symbols.sh LIBRARY CC "CFLAGS" HEADER...
# The declarations come from the compiler itself (GCC's -aux-info lists every prototype a translation unit sees,
# with the file that declares it); only those of the given headers count.
set -eu
lib=$1 cc=$2 cflags=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for h in "$@"; do printf '#include "%s"\n' "$h"; done >"$tmp/all.c"
# shellcheck disable=SC2086 # CFLAGS is a list of flags
$cc -std=c11 $cflags -fsyntax-only -aux-info "$tmp/aux" "$tmp/all.c"
for h in "$@"; do grep -F "/* $h:" "$tmp/aux" || true; done |
  sed -E 's/^\/\*[^*]*\*\/ *//; s/ *\(.*$//; s/.*[^A-Za-z0-9_]//' | sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$tmp/exported"
[ -s "$tmp/declared" ] || { echo "no declaration found in $*" >&2; exit 1; }
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
  echo "$lib: the exported symbols differ from the public headers' functions (- declared only, + exported only):"
  grep -E '^[-+][^-+]' "$tmp/diff"
  exit 1
fi
echo "$lib: $(wc -l <"$tmp/exported") exported symbols, each declared in $*"
