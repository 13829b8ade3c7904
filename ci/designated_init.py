#!/usr/bin/python3
"""Fails on a positional initialiser of a struct with more than four fields.

A struct filled by position silently swaps two same-typed members when the struct is reordered; from five fields
on, the project fills structs with designated initialisers (`{.B = 1, .q = q}`). This check parses every
translation unit of a build's compile_commands.json with libclang (Debian: python3-clang-14) and reports each
initialiser list of a struct type with more than four fields that has an element without a designator. The zero
idiom `{0}` (and `{}`) is allowed; initialisers that come from a macro's expansion are judged where the macro is
defined, not at each use.

  ci/designated_init.py BUILD_DIR [--pending FILE ...] [PATH_PREFIX ...]
      checks the files under the prefixes (default: src tools). A pending file's findings are listed but do not
      fail the check; a pending file without findings does (the list only shrinks).
  ci/designated_init.py --self-test
      shows that the check finds what it must, and only that
"""
import json
import os
import sys
import tempfile

import clang.cindex as ci

MAX_POSITIONAL_FIELDS = 4


def field_count(record_type):
    decl = record_type.get_declaration()
    if decl.kind != ci.CursorKind.STRUCT_DECL:
        return 0
    return sum(1 for c in decl.get_children() if c.kind == ci.CursorKind.FIELD_DECL)


def elements(tokens):
    """The top-level elements of an initialiser list's tokens ({ ... }), each a list of token spellings."""
    out, cur, depth = [], [], 0
    for t in tokens[1:-1]:
        s = t.spelling
        if s in "([{":
            depth += 1
        elif s in ")]}":
            depth -= 1
        if s == "," and depth == 0:
            out.append(cur)
            cur = []
        else:
            cur.append(s)
    if cur:
        out.append(cur)
    return out


def positional(cursor):
    """The first element without a designator, or None."""
    tokens = list(cursor.get_tokens())
    if not tokens or tokens[0].spelling != "{" or tokens[-1].spelling != "}":
        return None  # a macro's expansion (its text is not this list's)
    elems = elements(tokens)
    if not elems or elems == [["0"]]:
        return None
    for e in elems:
        if e[0] != ".":
            return " ".join(e)
    return None


def check_tu(tu, keep, seen, findings):
    for c in tu.cursor.walk_preorder():
        if c.kind != ci.CursorKind.INIT_LIST_EXPR:
            continue
        loc = c.location
        if not loc.file:
            continue
        path = os.path.realpath(loc.file.name)
        if not keep(path):
            continue
        key = (path, loc.offset)
        if key in seen:
            continue
        seen.add(key)
        t = c.type.get_canonical()
        if t.kind != ci.TypeKind.RECORD:
            continue
        n = field_count(t)
        if n <= MAX_POSITIONAL_FIELDS:
            continue
        first = positional(c)
        if first is not None:
            findings.append((path, loc.line, loc.column, t.spelling, n, first))


def parse(index, path, args):
    tu = index.parse(path, args=args, options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise SystemExit("%s: libclang cannot parse it: %s" % (path, errors[0]))
    return tu


def command_args(entry):
    """The compiler's arguments of a compile_commands.json entry, without the compiler, the output and the source."""
    argv = entry["arguments"] if "arguments" in entry else entry["command"].split()
    out, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a == entry["file"] or a.startswith("-fsanitize") or a.startswith("-Werror"):
            continue
        out.append(a)
    return out


def run(build_dir, prefixes, pending, root):
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    roots = [os.path.realpath(os.path.join(root, p)) + os.sep for p in prefixes]

    def keep(path):
        return any(path.startswith(r) for r in roots)

    index = ci.Index.create()
    seen, findings, files = set(), [], 0
    for e in entries:
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if not keep(src):
            continue
        files += 1
        os.chdir(e["directory"])
        check_tu(parse(index, src, command_args(e)), keep, seen, findings)
    failures, waiting = 0, {p: 0 for p in pending}
    for path, line, col, name, n, first in sorted(findings):
        rel = os.path.relpath(path, root)
        tag = ""
        if rel in waiting:
            waiting[rel] += 1
            tag = " [pending]"
        else:
            failures += 1
        print("%s:%d:%d: %s (%d fields) initialised by position (first element without a designator: %s)%s" %
              (rel, line, col, name, n, first, tag))
    for rel, count in sorted(waiting.items()):
        if not count:
            print("%s: on the pending list without a positional initialiser: take it off the list" % rel)
            failures += 1
    print("designated_init: %d translation units, %d positional initialisers of structs with more than %d fields, "
          "%d of them in the %d pending files" %
          (files, len(findings), MAX_POSITIONAL_FIELDS, sum(waiting.values()), len(waiting)))
    return 1 if failures else 0


SELF_TEST = r"""
typedef struct five { int a, b, c, d, e; } five;
typedef struct four { int a, b, c, d; } four;
typedef struct outer { five in; int x, y, z, w; } outer;
#define FIVE_ZERO {0}
five bad1(void) { five x = {1, 2, 3, 4, 5}; return x; }                   /* BAD */
five bad2(void) { return (five){1, 2, 3, 4, 5}; }                          /* BAD */
five bad3(void) { five x = {.a = 1, 2}; return x; }                        /* BAD */
outer bad4(void) { outer o = {.in = {1, 2, 3, 4, 5}, .x = 1}; return o; }  /* BAD */
outer bad5(void) { outer o = {{.a = 1}, 1, 2, 3, 4}; return o; }           /* BAD */
five good1(void) { five x = {.a = 1, .e = 5}; return x; }
five good2(void) { five x = {0}; five y = FIVE_ZERO; return x.a ? x : y; }
four good3(void) { four x = {1, 2, 3, 4}; return x; }
outer good4(void) { outer o = {.in = {.a = 1, .b = 2}, .x = 1, .w = 4}; return o; }
void good5(five *p) { *p = (five){.c = 3}; }
"""


def self_test():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fixture.c")
        with open(path, "w") as f:
            f.write(SELF_TEST)
        index = ci.Index.create()
        findings = []
        check_tu(parse(index, path, ["-std=c11"]), lambda p: p == os.path.realpath(path), set(), findings)
        want = sorted(i + 1 for i, line in enumerate(SELF_TEST.split("\n")) if "/* BAD */" in line)
        got = sorted(line for _, line, _, _, _, _ in findings)
        if got != want:
            print("designated_init self-test: expected findings on lines %s, got %s" % (want, got))
            return 1
        print("designated_init self-test: the %d positional initialisers found, none of the designated ones" %
              len(want))
        return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    args, prefixes, pending = sys.argv[2:], [], []
    while args:
        a = args.pop(0)
        if a == "--pending" and args:
            pending.append(os.path.normpath(args.pop(0)))
        else:
            prefixes.append(a)
    sys.exit(run(os.path.realpath(sys.argv[1]), prefixes or ["src", "tools"], pending, root))
