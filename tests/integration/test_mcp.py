# SPDX-License-Identifier: Apache-2.0
"""`airlock mcp` driven by the official MCP client SDK from npm
(@modelcontextprotocol/sdk, pinned in tests/mcp/package-lock.json, installed by
`make deps`) against a real airlockd with real VMs: each tests/mcp/*.test.mjs
runs under node's test runner as one test here, all against one daemon. The
server runs with a tenant's token on the daemon's TCP listener (AIRLOCK_HOST,
AIRLOCK_TOKEN), so the tests see what that token may do; a sandbox of another
tenant (made over the unix socket) must stay out of its reach."""
import glob
import os
import shutil
import subprocess

import pytest

from apiutil import ListeningDaemon, free_port
from conftest import AIRLOCK, ROOT

MCP_DIR = os.path.join(ROOT, "tests", "mcp")
NODE_TESTS = sorted(glob.glob(os.path.join(MCP_DIR, "*.test.mjs")))
NODE_TIMEOUT_S = 900


class McpDaemon(ListeningDaemon):
    """airlockd on 127.0.0.1:PORT with a token of tenant "mcp", and a sandbox
    of the operator's tenant that the token must not reach."""

    def start(self, *a, **kw):
        super().start(*a, **kw)
        r = self.api.request("POST", "/v1/tokens", body={"tenant": "mcp", "description": "mcp tests"})
        assert r.status == 201, r
        self.token = r.json["token"]
        self.foreign = self.api.create_ok(template="minimal", vcpus=1)["id"]
        return self

    def mcp_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(AIRLOCK_BIN=AIRLOCK, AIRLOCK_HOST=f"tcp://127.0.0.1:{self.port}", AIRLOCK_TOKEN=self.token,
                   AIRLOCK_MCP_FOREIGN=self.foreign)
        return env


@pytest.fixture(scope="module")
def mcpd(tmp_path_factory):
    if not shutil.which("node"):
        pytest.fail("node is missing: run 'make deps'", pytrace=False)
    if not os.path.isdir(os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk")):
        pytest.fail("tests/mcp/node_modules/@modelcontextprotocol/sdk is missing: run 'make deps' "
                    "(npm ci in tests/mcp)", pytrace=False)
    d = McpDaemon(tmp_path_factory.mktemp("airlockd-mcp"), free_port(),
                  extra_args=["--proxy-listen", f"127.0.0.1:{free_port()}"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def test_node_tests_exist():
    assert NODE_TESTS, f"no *.test.mjs in {MCP_DIR}"


@pytest.mark.parametrize("path", NODE_TESTS, ids=[os.path.basename(p).split(".")[0] for p in NODE_TESTS])
def test_mcp_client(mcpd, path):
    r = subprocess.run(["node", "--test", "--test-reporter=spec", path], cwd=MCP_DIR, env=mcpd.mcp_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=NODE_TIMEOUT_S)
    print(r.stdout)
    assert r.returncode == 0, (f"node --test {os.path.basename(path)} failed:\n{r.stdout[-8000:]}\n"
                               f"---- airlockd log ({mcpd.log_path}) ----\n{mcpd.log(tail_lines=150)}")
    # The foreign sandbox is untouched.
    assert mcpd.api.get(mcpd.foreign).json["state"] == "running"
