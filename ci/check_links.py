#!/usr/bin/env python3
"""Every relative link in the repository's Markdown files resolves: the file or folder exists and, for a link to a
heading of a Markdown file (`file.md#anchor`, or `#anchor` within the page), the heading exists (GitHub's anchor
rules). Links to other schemes (https:, mailto:) and links inside code are not checked.

    check_links.py [ROOT]       # the Markdown files git tracks under ROOT (default: the repository; without git,
                                # every *.md outside hidden and build* folders)
    check_links.py --self-test  # shows on a fixture that broken links are found and good ones pass

Exit status 1 when a link is broken, each printed as FILE:LINE: TARGET: why."""
import os
import re
import subprocess
import sys
import tempfile

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def strip_code(line):
    """The line without its `code spans`."""
    return re.sub(r"`+[^`]*`+", "", line)


def anchors(path, cache):
    """GitHub's heading anchors of a Markdown file: lower case, punctuation dropped, spaces to hyphens, repeats
    numbered -1, -2, ..."""
    if path in cache:
        return cache[path]
    seen, out, fenced = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
                continue
            m = None if fenced else re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"`([^`]*)`", r"\1", m.group(1))
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
            slug = "".join(c for c in text.lower() if c.isalnum() or c in " -_").replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    cache[path] = out
    return out


def check_file(path, root, cache):
    problems, fenced = [], False
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for no, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in LINK.finditer(strip_code(line)):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto:, ...
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, root)}:{no}: {target}"
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file or folder")
            elif not os.path.realpath(dest).startswith(os.path.realpath(root) + os.sep):
                problems.append(f"{where}: outside the repository")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest, cache):
                problems.append(f"{where}: no heading with that anchor")
    return problems


def tracked_markdown(root):
    """The Markdown files git tracks; without git (or outside a work tree), every *.md below root except in
    hidden and build* folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"], check=True, capture_output=True)
        return [os.path.join(root, p) for p in out.stdout.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build"))
            files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
        return files


def check(root, files):
    cache, problems = {}, []
    for path in files:
        problems += check_file(path, root, cache)
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs"))
        with open(os.path.join(d, "docs", "a.md"), "w", encoding="utf-8") as f:
            f.write("# Title\n\n## 8.1 Cameras → matrices\n\n## Notes\n\n## Notes\n")
        page = os.path.join(d, "README.md")
        with open(page, "w", encoding="utf-8") as f:
            f.write("# Top\n\n"
                    "[ok](docs/a.md) [ok](docs/a.md#81-cameras--matrices) [ok](docs/a.md#notes-1) [ok](#top)\n"
                    "[ok](docs) [ok](https://example.org/missing) `[not a link](missing.md)`\n"
                    "```\n[in a code block](missing.md)\n```\n"
                    "[bad](docs/b.md)\n[bad](docs/a.md#missing)\n[bad](#nowhere)\n[bad](../outside.md)\n")
        problems = check(d, [page, os.path.join(d, "docs", "a.md")])
        bad = sorted(p.split(": ")[1] for p in problems)
        want = sorted(["docs/b.md", "docs/a.md#missing", "#nowhere", "../outside.md"])
        if bad != want:
            print("check_links.py self-test: expected", want, "got", problems, file=sys.stderr)
            return 1
    print("check_links.py self-test: the 4 broken links found, the good ones passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    files = tracked_markdown(root)
    problems = check(root, files)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"check_links.py: {len(files)} Markdown files, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
