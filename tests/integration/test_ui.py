# SPDX-License-Identifier: Apache-2.0
"""The web console (docs/console.md): airlockd serves its static files at /ui
on the TCP listener, with its security headers and strict path checks, and
not on the unix socket; then the console itself, in Debian's chromium driven
by playwright-core (tests/ui/console.test.mjs under node's test runner):
sign in, create a sandbox, a terminal into it, its egress denied live on its
page, delete. AIRLOCK_UI_SCREENSHOTS=DIR also saves screenshots of the main
pages there (tests/ui/screenshots.sh writes docs/img/console-*.png so)."""
import http.client
import os
import shutil
import subprocess

import pytest

from apiutil import ListeningDaemon, free_port
from conftest import BUILD, ROOT

UI_BUILD = os.path.join(BUILD, "ui")
UI_TESTS = os.path.join(ROOT, "tests", "ui")
CHROMIUM = os.environ.get("AIRLOCK_CHROMIUM", "/usr/bin/chromium")
NODE_TIMEOUT_S = 900
UI_FILE_MAX = 16 << 20  # api-ui-path.h


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    if not os.path.isfile(os.path.join(UI_BUILD, "index.html")):
        pytest.fail(f"{UI_BUILD} is missing: run 'make deps-npm ui'", pytrace=False)
    base = tmp_path_factory.mktemp("airlockd-ui")
    # A copy of the console with files it must never serve planted in it.
    ui = os.path.join(base, "ui")
    shutil.copytree(UI_BUILD, ui)
    os.symlink("/etc/passwd", os.path.join(ui, "passwd.txt"))
    os.symlink("/etc", os.path.join(ui, "etc"))
    os.mkfifo(os.path.join(ui, "fifo.txt"))
    os.mkdir(os.path.join(ui, "dir.js"))
    with open(os.path.join(ui, "big.txt"), "wb") as f:
        f.truncate(UI_FILE_MAX + 1)
    with open(os.path.join(ui, ".hidden.txt"), "w") as f:
        f.write("hidden\n")
    with open(os.path.join(ui, "notes.md"), "w") as f:
        f.write("no type\n")
    d = ListeningDaemon(base, free_port(), extra_args=["--ui-dir", ui, "--proxy-listen", f"127.0.0.1:{free_port()}"])
    d.start()
    r = d.api.request("POST", "/v1/tokens", body={"tenant": "ui", "description": "console tests"})
    assert r.status == 201, r
    d.token = r.json["token"]
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def get(d, path, method="GET", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_files_are_served_with_their_headers(console):
    status, h, body = get(console, "/ui/")
    assert status == 200, body
    assert h["content-type"] == "text/html; charset=utf-8"
    assert b'<script type="module" src="app.js">' in body
    with open(os.path.join(UI_BUILD, "index.html"), "rb") as f:
        assert body == f.read()
    assert "default-src 'self'" in h["content-security-policy"]
    assert "frame-ancestors 'none'" in h["content-security-policy"]
    assert h["x-content-type-options"] == "nosniff"
    assert h["x-frame-options"] == "DENY"
    assert h["cache-control"] == "no-cache"
    status, h, body = get(console, "/ui/app.js")
    assert status == 200 and h["content-type"].startswith("text/javascript") and len(body) > 1000
    assert int(h["content-length"]) == len(body)
    status, h, body = get(console, "/ui/app.css", method="HEAD")
    assert status == 200 and h["content-type"].startswith("text/css") and body == b""
    assert int(h["content-length"]) == os.path.getsize(os.path.join(UI_BUILD, "app.css"))


def test_no_token_needed_and_a_bad_one_is_ignored(console):
    status, _, _ = get(console, "/ui/index.html", headers={"Authorization": "Bearer nonsense"})
    assert status == 200
    # The API next to it still wants a token.
    status, _, _ = get(console, "/v1/sandboxes")
    assert status == 401


def test_ui_redirects_to_ui_slash(console):
    status, h, _ = get(console, "/ui")
    assert status == 308 and h["location"] == "/ui/"
    assert h["x-frame-options"] == "DENY"


@pytest.mark.parametrize("path", [
    "/ui/passwd.txt",             # a symlink out of the ui dir
    "/ui/etc/passwd.txt",         # through a symlinked directory
    "/ui/fifo.txt",               # not a regular file (and must not block)
    "/ui/dir.js",                 # a directory
    "/ui/big.txt",                # above the size cap
    "/ui/.hidden.txt",            # hidden
    "/ui/notes.md",               # no known content type
    "/ui/../airlock.db",
    "/ui/%2e%2e/state/airlock.db",
    "/ui/..%2fstate%2fairlock.db",
    "/ui//etc/passwd.txt",
    "/ui/nothing-here.js",
    "/uix/app.js",
])
def test_what_is_never_served(console, path):
    status, h, body = get(console, path)
    assert status in (404, 401), (path, status, body[:200])  # /uix is the API's: no token, 401
    assert b"root:" not in body


def test_only_get_and_head(console):
    status, h, _ = get(console, "/ui/index.html", method="POST")
    assert status == 405
    assert "GET" in h.get("allow", "GET")


def test_not_on_the_unix_socket(console):
    r = console.api.request("GET", "/ui/")
    assert r.status == 404, r
    r = console.api.request("GET", "/ui")
    assert r.status == 404, r


def test_console_in_chromium(console):
    if not shutil.which("node"):
        pytest.fail("node is missing: run 'make deps'", pytrace=False)
    if not os.path.isdir(os.path.join(UI_TESTS, "node_modules", "playwright-core")):
        pytest.fail("tests/ui/node_modules is missing: run 'make deps-npm'", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run 'make deps' (Debian's chromium)", pytrace=False)
    env = dict(os.environ, AIRLOCK_URL=f"http://127.0.0.1:{console.port}", AIRLOCK_TOKEN=console.token,
               AIRLOCK_CHROMIUM=CHROMIUM)
    r = subprocess.run(["node", "--test", "--test-reporter=spec", "console.test.mjs"], cwd=UI_TESTS, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=NODE_TIMEOUT_S)
    print(r.stdout)
    assert r.returncode == 0, (f"node --test console.test.mjs failed:\n{r.stdout[-8000:]}\n"
                               f"---- airlockd log ({console.log_path}) ----\n{console.log(tail_lines=150)}")


def test_default_ui_dir_is_next_to_airlockd(tmp_path):
    """Without --ui-dir, airlockd serves $(BUILD)/ui, next to $(BUILD)/airlockd."""
    d = ListeningDaemon(tmp_path, free_port())
    d.start()
    try:
        status, _, body = get(d, "/ui/")
        assert status == 200, body
        with open(os.path.join(UI_BUILD, "index.html"), "rb") as f:
            assert body == f.read()
        assert f"serves {os.path.realpath(UI_BUILD)}" in d.log()
    finally:
        d.cleanup()
