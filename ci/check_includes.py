#!/usr/bin/env python3
"""The source folders' boundaries, from the #include lines of src/ and tools/:

  - a private header of the library is included folder-qualified ("runtime/internal.h", from the include root
    src/; ci/qualify_includes.py rewrites unqualified ones);
  - a folder includes another folder's headers only through that folder's interface header (INTERFACE below);
    the public headers of include/ are open to all;
  - no include cycle between headers, and none between folders (src/ and tools/ as folders).

    ci/check_includes.py              check the tree; exit 1 on any finding
    ci/check_includes.py --self-test  plants each kind of fault in a copy of a small tree and checks it is found
"""
import collections
import glob
import os
import re
import shutil
import sys
import tempfile

from cycles import strongly_connected  # ci/cycles.py

# The one header each folder offers the others (folders absent here offer none).
INTERFACE = {
    "runtime": "internal.h",       # contexts, programs, launches, checks, plans, the saved objects
    "options": "options.h",        # the option registry
    "scan": "engine.h",            # the scan engine's compositions, for the operations
    "ops": "branch_common.h",      # the camera branch's pieces its f64 references share
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    files = []
    for top in ("src", "tools"):
        for ext in ("c", "h"):
            files += glob.glob(os.path.join(root, top, "**", "*." + ext), recursive=True)
    return sorted(files)


def folder_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    return rel[1] if rel[0] == "src" else rel[0]


def check(root):
    faults = []
    public = {os.path.basename(h) for h in glob.glob(os.path.join(root, "include", "*.h"))}
    edges = collections.defaultdict(set)  # header or source -> headers it includes (paths relative to root)
    folders = collections.defaultdict(set)
    for f in sources(root):
        rel = os.path.relpath(f, root)
        own = folder_of(root, f)
        in_src = rel.startswith("src" + os.sep)
        for inc in INCLUDE.findall(open(f, encoding="utf-8").read()):
            if inc in public:
                continue
            if in_src:
                if "/" not in inc:
                    faults.append(f"{rel}: #include \"{inc}\" is not folder-qualified (ci/qualify_includes.py)")
                    continue
                target = os.path.join("src", inc)
                if not os.path.exists(os.path.join(root, target)):
                    faults.append(f"{rel}: #include \"{inc}\": no such header under src/")
                    continue
                tfolder, tname = inc.split("/", 1)
                if tfolder != own and INTERFACE.get(tfolder) != tname:
                    offered = f"its interface is {tfolder}/{INTERFACE[tfolder]}" if tfolder in INTERFACE else \
                        "it offers no header to other folders"
                    faults.append(f"{rel}: includes {inc}, a private header of src/{tfolder}/ ({offered})")
            else:  # tools/: its own headers, side by side
                target = os.path.join(os.path.dirname(rel), inc)
                if not os.path.exists(os.path.join(root, target)):
                    faults.append(f"{rel}: #include \"{inc}\": neither a public header nor one of {own}/")
                    continue
            edges[rel].add(target)
            tf = folder_of(root, os.path.join(root, target))
            if tf != own:
                folders[own].add(tf)
    for cyc in cycles(edges):
        faults.append("include cycle: " + " -> ".join(cyc))
    for cyc in cycles(folders):
        faults.append("folder include cycle: " + " -> ".join(cyc))
    return faults


def cycles(edges):
    """One cycle per strongly connected component of more than one node (or a node including itself), closed."""
    out = [c + [c[0]] for c in strongly_connected(edges)]
    return out + [[v, v] for v in sorted(edges) if v in edges[v]]


def self_test():
    base = tempfile.mkdtemp()
    try:
        def tree(files):
            root = os.path.join(base, str(len(os.listdir(base))))
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                open(os.path.join(root, path), "w").write(text)
            return root
        good = {"include/camdelta.h": "",
                "src/runtime/internal.h": '#include "camdelta.h"\n',
                "src/runtime/device.h": '#include "runtime/internal.h"\n',
                "src/runtime/device.c": '#include "runtime/device.h"\n',
                "src/scan/engine.h": '#include "runtime/internal.h"\n',
                "src/scan/units.h": '#include "scan/engine.h"\n',
                "src/ops/prep.c": '#include "scan/engine.h"\n#include "runtime/internal.h"\n',
                "tools/cli.h": '#include "camdelta.h"\n', "tools/main.c": '#include "cli.h"\n'}
        if check(tree(good)):
            print("check_includes self-test: faults found in a good tree:", check(tree(good)), file=sys.stderr)
            return 1
        planted = {  # what to change: a part of the finding expected
            "not folder-qualified": {"src/ops/prep.c": '#include "internal.h"\n'},
            "a private header of src/runtime/": {"src/ops/prep.c": '#include "runtime/device.h"\n'},
            "it offers no header": {"src/scan/units.h": '#include "io/half.h"\n', "src/io/half.h": ""},
            "include cycle: src/runtime/device.h": {"src/runtime/internal.h": '#include "runtime/device.h"\n'},
            "folder include cycle: runtime -> scan": {"src/runtime/device.c": '#include "scan/engine.h"\n'},
            "neither a public header": {"tools/main.c": '#include "internal.h"\n'},
        }
        for want, change in planted.items():
            faults = check(tree({**good, **change}))
            found = [f for f in faults if want in f]
            if not found:
                print(f"check_includes self-test: '{want}' not found: {faults}", file=sys.stderr)
                return 1
            print(f"check_includes self-test: planted, found: {found[0]}")
    finally:
        shutil.rmtree(base)
    print("check_includes self-test: every planted fault found, none in the good tree")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    faults = check(root)
    for f in faults:
        print(f)
    print(f"check_includes: {len(sources(root))} files of src/ and tools/, {len(faults)} findings")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
