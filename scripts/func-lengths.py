#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Lists the C functions of src/ longer than a bound (default 150 lines).

A function is what clang-format lays out in this tree: a definition whose
opening brace stands alone in column 0 and ends at the next `}` in column 0.
A function may be longer when the comment above it says why: a line of that
comment holding `long:` (e.g. `long: one table of every option`) lets it
through. Exits 1 when a function is over the bound without one.
usage: func-lengths.py [--max N] [--all] [paths...]
"""
import os
import re
import sys

NAME_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            # the signature: back to the line starting in column 0 with a name and (
            j = i - 1
            while j > 0 and (lines[j].startswith((" ", "\t")) or not lines[j]):
                j -= 1
            m = NAME_RE.search(lines[j])
            name = m.group(1) if m else "?"
            k = i + 1
            while k < len(lines) and lines[k] != "}" and not lines[k].startswith("};"):
                k += 1
            # the comment above the signature
            c = j - 1
            comment = []
            while c >= 0 and (lines[c].startswith(("/*", " *")) or lines[c].startswith("//")):
                comment.append(lines[c])
                c -= 1
            excused = any("long:" in l for l in comment)
            yield name, j + 1, k - j + 1, excused
            i = k
        i += 1


def main(argv):
    bound = 150
    show_all = False
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--max":
            bound = int(next(it))
        elif a == "--all":
            show_all = True
        else:
            paths.append(a)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not paths:
        paths = [os.path.join(root, "src")]
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, _ds, fs in os.walk(p):
                files += [os.path.join(d, f) for f in fs if f.endswith(".c")]
        else:
            files.append(p)
    rows = []
    for f in sorted(files):
        for name, line, n, excused in functions(f):
            rows.append((n, os.path.relpath(f, root), line, name, excused))
    rows.sort(reverse=True)
    over = [r for r in rows if r[0] > bound and not r[4]]
    for n, f, line, name, excused in (rows[:20] if show_all else [r for r in rows if r[0] > bound]):
        print("%5d  %s:%d  %s%s" % (n, f, line, name, "  (long: reason given)" if excused else ""))
    print("func-lengths: %d functions, %d over %d lines without a reason" % (len(rows), len(over), bound))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
