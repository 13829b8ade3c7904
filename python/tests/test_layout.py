"""The ctypes structs of camdelta/_structs.py against the C headers, as the compiler lays them out.

clang's record-layout dump of a file that includes the wrapped headers gives every field of every camdelta
struct with its offset, and each struct's size and alignment; the test compares them with the ctypes classes
field by field (names, order, offsets), so a field added, removed, renamed or moved on either side fails.
The enum values the package uses are compared with the library's own names for them.
"""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

import camdelta
from camdelta import _structs as S
from camdelta._lib import lib

INCLUDE = os.environ.get("CAMDELTA_INCLUDE_DIR",
                         os.path.join(os.path.dirname(__file__), "..", "..", "include"))


def _header_structs():
    """Names of the struct typedefs with a body in the wrapped headers."""
    names = []
    for h in S.HEADERS:
        with open(os.path.join(INCLUDE, h)) as f:
            names += re.findall(r"typedef\s+struct\s+(camdelta_\w+)\s*\{", f.read())
    return names


def _clang_layouts(names, tmp_path):
    clang = shutil.which(os.environ.get("CAMDELTA_CLANG", "clang"))
    if not clang:
        pytest.skip("clang is needed for the record layouts (Debian package clang)")
    src = tmp_path / "layout.c"
    src.write_text("".join('#include "%s"\n' % h for h in S.HEADERS) +
                   "".join("int sz_%s = (int)sizeof(%s);\n" % (n, n) for n in names))
    res = subprocess.run([clang, "-std=c11", "-fsyntax-only", "-Xclang", "-fdump-record-layouts", "-I", INCLUDE,
                          str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    layouts = {}
    for block in res.stdout.split("*** Dumping AST Record Layout")[1:]:
        lines = [l for l in block.splitlines() if "|" in l]
        head = re.match(r"\s*0 \| (?:struct )?(\w+)$", lines[0])
        if not head or not head.group(1).startswith("camdelta_"):
            continue
        fields = []
        for l in lines[1:]:
            m = re.match(r"\s*(\d+) \|   (\S.*) (\w+)$", l)  # exactly one level in: a direct field
            if m:
                fields.append((m.group(3), int(m.group(1)), m.group(2)))
        size = re.search(r"sizeof=(\d+)", block)
        align = re.search(r"align=(\d+)", block)
        layouts[head.group(1)] = (fields, int(size.group(1)), int(align.group(1)))
    return layouts


def test_every_header_struct_has_a_ctypes_mirror():
    names = _header_structs()
    assert len(names) > 20
    assert sorted(names) == sorted(S.C_NAMES)


def test_struct_layouts_match_the_compiler(tmp_path):
    names = _header_structs()
    layouts = _clang_layouts(names, tmp_path)
    assert sorted(layouts) == sorted(names)
    for name in names:
        fields, size, align = layouts[name]
        cls = S.C_NAMES[name]
        mine = [(f[0], getattr(cls, f[0]).offset) for f in cls._fields_]
        assert mine == [(f[0], f[1]) for f in fields], name
        assert ctypes.sizeof(cls) == size, name
        assert ctypes.alignment(cls) == align, name
        for (fname, _off, ctype), f in zip(fields, cls._fields_):
            # the C type's size where the dump names a plain type the test can size
            if ctype.endswith("*"):
                assert ctypes.sizeof(f[1]) == ctypes.sizeof(ctypes.c_void_p), (name, fname)


def test_enum_values_are_the_librarys():
    names = {}
    for i in range(0, 64):
        n = lib.camdelta_status_name(i).decode()
        if n != "CAMDELTA_ERROR_UNKNOWN":
            names[i] = n
    assert names == S.STATUS_NAMES
    for table, fn in ((S.DTYPES, lib.camdelta_dtype_name), (S.ALGORITHMS, lib.camdelta_scan_algorithm_name),
                      (S.PRECISIONS, lib.camdelta_precision_name),
                      (S.CHUNK_STRATEGIES, lib.camdelta_chunk_strategy_name)):
        seen = {fn(i).decode(): i for i in range(0, 16) if fn(i).decode() != "unknown"}
        assert seen == table


def test_abi_version_is_the_headers():
    with open(os.path.join(INCLUDE, "camdelta.h")) as f:
        text = f.read()
    major = int(re.search(r"#define CAMDELTA_VERSION_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define CAMDELTA_VERSION_MINOR (\d+)", text).group(1))
    assert S.ABI_VERSION == (major, minor)
    assert camdelta.__version__.split(".")[:2] == [str(major), str(minor)]
