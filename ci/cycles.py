#!/usr/bin/env python3
"""Call cycles between source files and between folders, from object files: an edge runs from each object's
undefined symbols to the object that defines them (nm). Fails (exit 1) on any cycle.

    ci/cycles.py OBJECT...          the library's, the MPI component's or the tool's objects (one program's at once)
    ci/cycles.py BUILD_DIR          every object of the library, the MPI component and the tool in that build
    ci/cycles.py --self-test        compiles two files that call each other and checks that the cycle is found
"""
import collections
import glob
import os
import subprocess
import sys
import tempfile

# Checked together: the library with the MPI component (which calls into it), and the tool.
GROUPS = [["camdelta_objects", "camdelta_mpi"], ["camdelta_cli"]]


def source_name(obj):
    return obj.split(".dir/")[-1].replace(".c.o", ".c")


def graph(objs):
    defs, uses = {}, collections.defaultdict(set)
    for o in objs:
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        name = source_name(o)
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRC":
                defs[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                uses[name].add(parts[1])
    edges = collections.defaultdict(set)
    for f, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != f:
                edges[f].add(defs[s])
    return edges


def strongly_connected(edges):
    """Tarjan's algorithm, iterative: the components of more than one node."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check(objs, label):
    edges = graph(objs)
    files = strongly_connected(edges)
    folders = collections.defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if os.path.dirname(a) != os.path.dirname(b):
                folders[os.path.dirname(a)].add(os.path.dirname(b))
    dirs = strongly_connected(folders)
    for c in files:
        print(f"{label}: file cycle: {' '.join(c)}")
    for c in dirs:
        print(f"{label}: folder cycle: {' '.join(c)}")
    print(f"{label}: {len(objs)} objects, {len(files)} file cycles, {len(dirs)} folder cycles")
    return len(files) + len(dirs)


def self_test():
    with tempfile.TemporaryDirectory() as d:
        src = {"a/x.c": "int y(int);\nint x(int n) { return n ? y(n - 1) : 0; }\n",
               "b/y.c": "int x(int);\nint y(int n) { return n ? x(n - 1) : 1; }\n",
               "b/z.c": "int z(void) { return 2; }\n"}
        objs = []
        for name, text in src.items():
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            obj = os.path.join(d, "t.dir", name + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            subprocess.run(["cc", "-c", path, "-o", obj], check=True)
            objs.append(obj)
        found = check(objs, "self-test")
        if found != 2:  # a/x.c <-> b/y.c, and so the folders a <-> b
            print("cycles.py self-test: the cycle between two files was not found", file=sys.stderr)
            return 1
        if check([o for o in objs if not o.endswith("y.c.o")], "self-test (no cycle)"):
            print("cycles.py self-test: a cycle found where there is none", file=sys.stderr)
            return 1
    print("cycles.py self-test: the planted cycle found, none where there is none")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if len(argv) == 1 and os.path.isdir(argv[0]):
        bad = 0
        for group in GROUPS:
            objs = []
            for t in group:
                found = sorted(glob.glob(os.path.join(argv[0], "CMakeFiles", t + ".dir", "**", "*.o"), recursive=True))
                if not found and t != "camdelta_mpi":  # the MPI component is optional
                    print(f"cycles.py: no objects of {t} in {argv[0]} (build it first)", file=sys.stderr)
                    return 2
                objs += found
            bad += check(objs, " + ".join(group))
        return 1 if bad else 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if check(argv, "objects") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
