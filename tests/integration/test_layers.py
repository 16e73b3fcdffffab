# SPDX-License-Identifier: Apache-2.0
"""The code rules make test checks: the daemon's include rule (src/daemon/layers.mk,
CONTRIBUTING.md "Layers") and the length of functions (scripts/func-lengths.py).

The tree as it is passes; a copy of src/daemon with one include across the rule
fails, naming the file, the line and what the layer may use; and the build's
include paths alone refuse the same include (a layer never sees the headers of
the layers above it)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "scripts", "check-layers.py")
PY = "/usr/bin/python3"


def check(root):
    return subprocess.run([PY, CHECK, "--root", root], capture_output=True, text=True, timeout=60)


@pytest.fixture
def tree(tmp_path):
    """A copy of what check-layers reads."""
    for d in ("src/daemon", "src/common", "src/egress", "include"):
        shutil.copytree(os.path.join(ROOT, d), tmp_path / d)
    return tmp_path


def add_include(path, header):
    text = path.read_text()
    first = text.index("#include")
    path.write_text(text[:first] + '#include "%s"\n' % header + text[first:])
    return text[:first].count("\n") + 1


def test_tree_passes():
    r = check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "include only what their layer may use" in r.stdout


def test_upward_include_is_named(tree):
    # The store including the core's header: upward, refused.
    line = add_include(tree / "src/daemon/store/auth.c", "sandbox.h")
    r = check(str(tree))
    assert r.returncode == 1, r.stdout
    assert ('src/daemon/store/auth.c:%d: #include "sandbox.h": store/ may not include core/ '
            "(it may use: obs model)" % line) in r.stdout, r.stdout
    assert "1 forbidden include(s)" in r.stdout


def test_sideways_include_between_backends_is_named(tree):
    add_include(tree / "src/daemon/vmm/qemu/vmm-qemu.c", "fc-api.h")
    r = check(str(tree))
    assert r.returncode == 1
    assert "vmm/qemu/ may not include vmm/firecracker/" in r.stdout, r.stdout


def test_a_new_backend_folder_needs_no_line_in_the_rule(tree):
    """vmm/* in layers.mk: a third backend's folder is a layer as it is made,
    with what a backend may use, and no more."""
    ch = tree / "src/daemon/vmm/ch"
    ch.mkdir()
    (ch / "vmm-ch.c").write_text('#include "vmm-backend.h"\n#include "vmm.h"\n#include "log.h"\n')
    r = check(str(tree))
    assert r.returncode == 0, r.stdout
    assert "in 14 layers" in r.stdout, r.stdout
    (ch / "vmm-ch-api.c").write_text('#include "vmm-qmp.h"\n#include "sandbox.h"\n')
    r = check(str(tree))
    assert r.returncode == 1
    assert ('src/daemon/vmm/ch/vmm-ch-api.c:1: #include "vmm-qmp.h": vmm/ch/ may not include vmm/qemu/ '
            "(it may use: vmm obs model)") in r.stdout, r.stdout
    assert "vmm/ch/ may not include core/" in r.stdout, r.stdout


def test_path_includes_and_other_components_are_refused(tree):
    add_include(tree / "src/daemon/api/api-routes.c", "../core/sandbox.h")
    add_include(tree / "src/daemon/core/process.c", "egress-policy.h")
    r = check(str(tree))
    assert r.returncode == 1
    assert '"../core/sandbox.h": name the header alone' in r.stdout, r.stdout
    assert ('"egress-policy.h": not a header of core/, its layers, src/common or include/'
            in r.stdout), r.stdout


def test_folder_outside_the_layers_is_refused(tree):
    (tree / "src/daemon/extra").mkdir()
    (tree / "src/daemon/extra/x.c").write_text('#include "util.h"\n')
    r = check(str(tree))
    assert r.returncode == 1
    assert "src/daemon/extra is not a layer in src/daemon/layers.mk" in r.stdout, r.stdout


def test_build_include_paths_refuse_an_upward_include(tmp_path):
    """The compiler, given the store's flags from the Makefile, cannot find a
    core header: the rule holds even without the check."""
    flags = subprocess.run(["make", "-s", "--no-print-directory", "layer-cflags", "LAYER=store"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert "-Isrc/daemon/store" in flags and "-Isrc/daemon/core" not in flags, flags
    ok = tmp_path / "ok.c"
    ok.write_text('#include "store.h"\n#include "log.h"\nint x;\n')
    bad = tmp_path / "bad.c"
    bad.write_text('#include "sandbox.h"\nint x;\n')
    r = subprocess.run(["cc", *flags, "-fsyntax-only", str(ok)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["cc", *flags, "-fsyntax-only", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and "sandbox.h" in r.stderr, r.stderr


FUNC_LENGTHS = os.path.join(ROOT, "scripts", "func-lengths.py")


def c_function(name, body_lines, comment=""):
    body = "".join("\tx += %d;\n" % i for i in range(body_lines))
    return "%sint %s(int x)\n{\n%s\treturn x;\n}\n" % (comment, name, body)


def test_function_length_rule(tmp_path):
    """scripts/func-lengths.py (make check-functions): over 150 lines fails,
    naming the function; a `long:` reason above it lets it through."""
    src = tmp_path / "x.c"
    src.write_text(c_function("short_one", 100) + "\n" + c_function("long_one", 160))
    r = subprocess.run([PY, FUNC_LENGTHS, str(src)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    assert "long_one" in r.stdout and "short_one" not in r.stdout, r.stdout
    assert "1 over 150 lines without a reason" in r.stdout, r.stdout
    src.write_text(c_function("long_one", 160, "/* long: one table of every case, read as one. */\n"))
    r = subprocess.run([PY, FUNC_LENGTHS, str(src)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
    assert "(long: reason given)" in r.stdout, r.stdout
    r = subprocess.run([PY, FUNC_LENGTHS], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
