#!/usr/bin/env bash
# Compares the PTX of the tensor-core programs (cl/gemm_tc.cl with cl/common.cl, the H200 table's tiles at D = 112
# and 64, both precisions, fixed and packed) between a git revision and the working tree, compiled here by clang's
# NVPTX back end (not the NVIDIA driver's compiler): a kernel edit that should not change the device code can be
# checked without a GPU. Needs clang (Debian clang-15).
#   bash gpu-lab/ptx-diff.sh REV     # prints "same" or "differs" per program; exit status 1 if any differs
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: gpu-lab/ptx-diff.sh REV}
cc=$(command -v clang-15 || command -v clang)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git show "$rev:cl/common.cl" >"$tmp/old.cl" && git show "$rev:cl/gemm_tc.cl" >>"$tmp/old.cl"
cat cl/common.cl cl/gemm_tc.cl >"$tmp/new.cl"
rc=0
for cfg in "GRAM 112 2 2 2 4 32" "GRAM 64 2 2 2 2 32" "APPLY 112 2 1 2 8 16" "APPLY 64 2 2 2 8 16" \
  "FRAMES 112 4 1 1 14 16" "FRAMES 64 4 1 1 8 16"; do
  read -r fam d wm wn mr nr kc <<<"$cfg"
  for split in 0 1; do
    for packed in 0 2; do
      opts="-DCD_$fam -DCD_D=$d -DCD_SPLIT=$split -DCD_VEC=1 -DCD_WM=$wm -DCD_WN=$wn -DCD_MR=$mr -DCD_NR=$nr -DCD_KC=$kc"
      [ "$packed" = 0 ] || opts="$opts -DCD_PACKED=$packed"
      for v in old new; do
        "$cc" -x cl -cl-std=CL1.2 -Xclang -finclude-default-header -fgnu89-inline -target nvptx64-nvidia-nvcl -O2 -S \
          -Wno-pass-failed -Dasm=__asm__ $opts -o "$tmp/$v.ptx" "$tmp/$v.cl"
      done
      name="$fam D=$d split=$split packed=$packed"
      if cmp -s "$tmp/old.ptx" "$tmp/new.ptx"; then echo "same     $name"; else echo "differs  $name"; rc=1; fi
    done
  done
done
exit $rc
