#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The daemon's include rule (src/daemon/layers.mk, CONTRIBUTING.md "Layers").

Every `#include "..."` of every source and header under src/daemon must name a
header of its own folder, of src/common, of include/, or of a folder its layer
may use (LAYER_USES_*); never a header of another component's folder.
Prints each include that breaks the rule with what the layer may include, and
exits 1 if there is one; exits 0 with a one-line summary otherwise. The build
enforces the same rule by include paths; this check names the offence.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAEMON = os.path.join(ROOT, "src", "daemon")
USAGE = "usage: check-layers.py [--root TREE]  (TREE: a checkout; default: this one)"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_layers(path):
    """(layers, uses, pattern_of) from layers.mk's simple `NAME := words` lines."""
    vars_ = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if ":=" not in line:
                continue
            name, value = (p.strip() for p in line.split(":=", 1))
            vars_[name] = value.split()
    named = vars_.get("DAEMON_LAYERS")
    if not named:
        sys.exit("check-layers: %s names no DAEMON_LAYERS" % path)
    # "vmm/*": every folder there is a layer of its own, with the pattern's uses.
    layers, pattern_of = [], {}
    for l in named:
        if l.endswith("/*"):
            parent = os.path.join(DAEMON, l[:-2])
            subs = sorted(d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d)))
            for d in subs:
                layers.append(l[:-1] + d)
                pattern_of[l[:-1] + d] = l
        else:
            layers.append(l)
    uses = {l: vars_.get("LAYER_USES_" + pattern_of.get(l, l), []) for l in layers}
    for l, used in uses.items():
        for u in used:
            if u not in uses and u not in named:
                sys.exit("check-layers: LAYER_USES_%s names %s, which is not a layer" % (l, u))
    return layers, uses, pattern_of


def headers_in(folder):
    try:
        return {n for n in os.listdir(folder) if n.endswith(".h")}
    except FileNotFoundError:
        return set()


def main(argv):
    global ROOT, DAEMON
    if argv[:1] == ["--root"] and len(argv) == 2:
        ROOT = os.path.abspath(argv[1])
        DAEMON = os.path.join(ROOT, "src", "daemon")
    elif argv:
        print(USAGE, file=sys.stderr)
        return 2
    layers, uses, pattern_of = read_layers(os.path.join(DAEMON, "layers.mk"))
    owner = {}  # header name -> its layer
    for l in layers:
        for h in headers_in(os.path.join(DAEMON, l)):
            if h in owner:
                print("check-layers: %s is in both %s/ and %s/: header names are unique" % (h, owner[h], l))
                return 1
            owner[h] = l
    common = headers_in(os.path.join(ROOT, "src", "common"))
    listed = set(layers)
    bad = []
    files = 0
    for dirpath, _dirs, names in os.walk(DAEMON):
        rel = os.path.relpath(dirpath, DAEMON)
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, n)
            shown = os.path.relpath(path, ROOT)
            if rel not in listed:
                bad.append("%s: src/daemon/%s is not a layer in src/daemon/layers.mk" % (shown, rel))
                continue
            files += 1
            allowed = set(uses[rel])
            allowed |= {l for l in layers if pattern_of.get(l) in allowed}
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    where = "%s:%d: #include \"%s\"" % (shown, lineno, inc)
                    if "/" in inc and not inc.startswith("airlock/"):
                        bad.append("%s: name the header alone; the layer's include paths find it" % where)
                        continue
                    if inc.startswith("airlock/") and os.path.exists(os.path.join(ROOT, "include", inc)):
                        continue
                    layer = owner.get(inc)
                    if layer == rel or (layer is None and inc in common):
                        continue
                    if layer is not None:
                        if layer in allowed:
                            continue
                        bad.append("%s: %s/ may not include %s/ (it may use: %s)" %
                                   (where, rel, layer, " ".join(uses[rel]) or "nothing but its own folder"))
                        continue
                    bad.append("%s: not a header of %s/, its layers, src/common or include/" % (where, rel))
    for b in bad:
        print(b)
    if bad:
        print("check-layers: %d forbidden include(s) in src/daemon (the rule: src/daemon/layers.mk)" % len(bad))
        return 1
    print("check-layers: %d files in %d layers of src/daemon include only what their layer may use" %
          (files, len(layers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
