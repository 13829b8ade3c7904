#!/usr/bin/env python3
"""Prints an OpenCL C file with every kernel but one removed (gpu-lab/gpu-test.sh ptx-prof).

The CUDA driver API refused the PTX of cl/prep.cl, four kernels in one module, with "device kernel image is
invalid" and an empty log, and so did the cubin ptxas made of it; the same file with only the profiled kernel
(cd_prep_regs) loaded and ran (2026-12-04). So ptx-prof builds a module of the one kernel it measures. The likely
cause is a kernel with a local-memory pointer parameter (prep.cl's cd_prep_inv_rms): the one-pass prep backward
kernel that took one itself (since replaced by cl/prep_backward_fused.cl's two passes) failed to load on its own.
Usage: one-kernel.py FILE.cl KERNEL"""
import re
import sys

path, keep = sys.argv[1], sys.argv[2]
src = open(path).read()
out, pos, found = [], 0, False
# a kernel definition starts at column 0 ("kernel" or "__kernel", attributes allowed) and ends at the first "}" in
# column 0 after it (the sources are clang-formatted)
for m in re.finditer(r"^(?:__)?kernel\b(?:\s+__attribute__\(\(.*?\)\))*\s+void\s+(\w+)\s*\(", src, re.M):
    if m.start() < pos:
        continue
    if m.group(1) == keep:
        found = True
        continue
    end = src.find("\n}\n", m.start())
    if end < 0:
        sys.exit(f"{path}: kernel {m.group(1)} has no closing brace in column 0")
    out.append(src[pos:m.start()])
    pos = end + 3
out.append(src[pos:])
if not found:
    sys.exit(f"{path}: no kernel {keep}")
sys.stdout.write("".join(out))
