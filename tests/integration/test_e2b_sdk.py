# SPDX-License-Identifier: Apache-2.0
"""E2B's official JavaScript SDK (npm `e2b`, the version pinned in
tests/e2b/package-lock.json, installed by `make deps`), unmodified, against a
real airlockd with real VMs: each tests/e2b/*.test.mjs runs under node's test
runner as one test here, all against one daemon (with its ports proxy, for
getHost), with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set
(docs/e2b.md)."""
import glob
import os
import shutil
import subprocess

import pytest

from e2butil import E2B_DIR, e2b_daemon_start, e2b_daemon_stop

NODE_TESTS = sorted(glob.glob(os.path.join(E2B_DIR, "*.test.mjs")))
NODE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def e2b(tmp_path_factory):
    if not shutil.which("node"):
        pytest.fail("node is missing: run 'make deps'", pytrace=False)
    if not os.path.isdir(os.path.join(E2B_DIR, "node_modules", "e2b")):
        pytest.fail("tests/e2b/node_modules/e2b is missing: run 'make deps' (npm ci in tests/e2b)", pytrace=False)
    d = e2b_daemon_start(tmp_path_factory, proxy=True)  # ports.test.mjs: getHost
    yield d
    e2b_daemon_stop(d)


def test_node_tests_exist():
    assert NODE_TESTS, f"no *.test.mjs in {E2B_DIR}"


@pytest.mark.parametrize("path", NODE_TESTS, ids=[os.path.basename(p).split(".")[0] for p in NODE_TESTS])
def test_sdk(e2b, path):
    r = subprocess.run(["node", "--test", "--test-reporter=spec", path], cwd=E2B_DIR, env=e2b.sdk_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=NODE_TIMEOUT_S)
    print(r.stdout)
    assert r.returncode == 0, (f"node --test {os.path.basename(path)} failed:\n{r.stdout[-6000:]}\n"
                               f"---- airlockd log ({e2b.log_path}) ----\n{e2b.log(tail_lines=150)}")
