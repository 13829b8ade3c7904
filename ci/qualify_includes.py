#!/usr/bin/env python3
"""Rewrites includes of the library's private headers to their folder-qualified form ("runtime/internal.h"), the
include root being src/ (CMake: target_include_directories ... src). Re-runnable: after a merge brings in files
that include "internal.h" or "engine.h" unqualified, run it again (already qualified includes are left alone).

    ci/qualify_includes.py [--check]

Files: every .c and .h under src/, tests/ and fuzz/. A header of src/FOLDER/ is known by its name, which must be
unique across src/ (the script stops on two headers of one name). --check rewrites nothing and exits 1 when a file
would change (ci/check_includes.py checks the rest of the rules)."""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^(\s*#\s*include\s+")([^"/]+\.h)(")', re.M)


def header_folders():
    where = {}
    for h in sorted(glob.glob(os.path.join(ROOT, "src", "*", "*.h"))):
        folder, name = os.path.basename(os.path.dirname(h)), os.path.basename(h)
        if name in where:
            sys.exit(f"qualify_includes: {name} is in src/{where[name]} and src/{folder}: rename one")
        where[name] = folder
    return where


def main(argv):
    check = argv == ["--check"]
    where = header_folders()
    files = []
    for top in ("src", "tests", "fuzz"):
        for ext in ("c", "h"):
            files += glob.glob(os.path.join(ROOT, top, "**", "*." + ext), recursive=True)
    changed = []
    for f in sorted(files):
        text = open(f, encoding="utf-8").read()
        new = INCLUDE.sub(lambda m: m.group(1) + (where[m.group(2)] + "/" if m.group(2) in where else "") +
                          m.group(2) + m.group(3), text)
        if new != text:
            changed.append(os.path.relpath(f, ROOT))
            if not check:
                open(f, "w", encoding="utf-8").write(new)
    for c in changed:
        print(("would qualify: " if check else "qualified: ") + c)
    print(f"qualify_includes: {len(changed)} files {'to change' if check else 'changed'}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
