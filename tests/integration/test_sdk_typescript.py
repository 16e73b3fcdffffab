# SPDX-License-Identifier: Apache-2.0
"""Airlock's TypeScript SDK (sdk/typescript, `@airlock/sdk`) against a real
airlockd with real VMs: each sdk/typescript/test/*.test.mjs runs under node's
test runner as one test here, all against one daemon with a TCP listener and a
tenant's token (AIRLOCK_HOST, AIRLOCK_TOKEN, as a user sets them) and its unix
socket (AIRLOCK_SOCKET, the operator's). examples/typescript/agent-loop.mjs
runs against it too. The SDK's route table (sdk/typescript/src/routes.js) is
checked against docs/api/openapi.yaml and `airlockd --print-routes`: every
route (minus E2B's, under /e2b/) has an SDK method or an exclusion with a
reason (issue 20)."""
import glob
import json
import os
import shutil
import subprocess

import pytest
import yaml

from apiutil import ListeningDaemon, free_port
from conftest import AIRLOCKD, ROOT

SDK_DIR = os.path.join(ROOT, "sdk", "typescript")
SPEC = os.path.join(ROOT, "docs", "api", "openapi.yaml")
EXAMPLE = os.path.join(ROOT, "examples", "typescript", "agent-loop.mjs")
UNIT_TESTS = [os.path.join(SDK_DIR, "test", n) for n in ("unit.test.mjs", "wire.test.mjs")]
NODE_TESTS = sorted(p for p in glob.glob(os.path.join(SDK_DIR, "test", "*.test.mjs")) if p not in UNIT_TESTS)
NODE_TIMEOUT_S = 900
TENANT = "sdk"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def node():
    n = shutil.which("node")
    if not n:
        pytest.fail("node is missing: run 'make deps'", pytrace=False)
    return n


def run_node(argv, env, cwd=SDK_DIR):
    return subprocess.run([node()] + argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=NODE_TIMEOUT_S)


class SdkDaemon(ListeningDaemon):
    def start(self, *a, **kw):
        super().start(*a, **kw)
        r = self.api.request("POST", "/v1/tokens", body={"tenant": TENANT, "description": "sdk tests"})
        assert r.status == 201, r
        self.token = r.json["token"]
        return self

    @property
    def route_log(self):
        """Routes the node tests called (test/helpers.mjs appends them)."""
        return os.path.join(self.base_dir, "sdk-routes.log")

    def sdk_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(AIRLOCK_HOST=f"tcp://127.0.0.1:{self.port}", AIRLOCK_TOKEN=self.token, AIRLOCK_SOCKET=self.socket,
                   AIRLOCK_SDK_ROUTE_LOG=self.route_log)
        return env


@pytest.fixture(scope="module")
def sdkd(tmp_path_factory):
    node()
    d = SdkDaemon(tmp_path_factory.mktemp("airlockd-sdk-ts"), free_port()).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left: {leftovers}; log:\n{d.log()}"


def check(r, what, d=None):
    print(r.stdout)
    tail = f"\n---- airlockd log ({d.log_path}) ----\n{d.log(tail_lines=150)}" if d else ""
    assert r.returncode == 0, f"{what} failed:\n{r.stdout[-6000:]}{tail}"


def test_node_tests_exist():
    assert NODE_TESTS, f"no *.test.mjs in {SDK_DIR}/test"


def test_unit():
    """The SDK's checks without a daemon: route table, errors, tar, the wire against a scripted server."""
    check(run_node(["--test", "--test-reporter=spec"] + UNIT_TESTS, dict(os.environ)), "unit.test.mjs")


@pytest.mark.parametrize("path", NODE_TESTS, ids=[os.path.basename(p).split(".")[0] for p in NODE_TESTS])
def test_sdk(sdkd, path):
    check(run_node(["--test", "--test-reporter=spec", path], sdkd.sdk_env()), os.path.basename(path), sdkd)


def test_example_agent_loop(sdkd):
    r = run_node([EXAMPLE], sdkd.sdk_env(), cwd=os.path.dirname(EXAMPLE))
    check(r, "examples/typescript/agent-loop.mjs", sdkd)
    assert "agent loop: done" in r.stdout, r.stdout


def test_every_route_was_called(sdkd):
    """After the node tests (they run first, in this file's order): each route of
    the SDK's table was sent to the daemon by some test, through its method."""
    assert os.path.exists(sdkd.route_log), "the node tests recorded no route (test/helpers.mjs)"
    with open(sdkd.route_log) as f:
        called = {line.strip() for line in f if line.strip()}
    missing = sorted(set(sdk_route_table()["ROUTES"]) - called)
    assert not missing, f"routes of sdk/typescript/src/routes.js no test in sdk/typescript/test called: {missing}"


# ---- the spec coverage rule: no route without an SDK method (or a reason) ----

def sdk_route_table():
    script = ("import {ROUTES, EXCLUDED, FOREIGN_PREFIXES} from './src/routes.js';"
              "console.log(JSON.stringify({ROUTES, EXCLUDED, FOREIGN_PREFIXES}));")
    r = subprocess.run([node(), "--input-type=module", "-e", script], cwd=SDK_DIR, check=True,
                       stdout=subprocess.PIPE, text=True)
    return json.loads(r.stdout)


def spec_routes():
    with open(SPEC) as f:
        spec = yaml.safe_load(f)
    return {f"{m.upper()} {p}" for p, item in spec["paths"].items() for m in METHODS if m in item}


def daemon_routes():
    if not os.path.exists(AIRLOCKD):
        pytest.fail(f"{AIRLOCKD} is missing; run 'make all'", pytrace=False)
    out = subprocess.run([AIRLOCKD, "--print-routes"], check=True, stdout=subprocess.PIPE, text=True).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def test_every_route_has_an_sdk_method():
    t = sdk_route_table()
    foreign = tuple(t["FOREIGN_PREFIXES"])
    assert foreign == ("/e2b/",), foreign
    want = {r for r in spec_routes() | daemon_routes() if not r.split(" ", 1)[1].startswith(foreign)}
    missing = sorted(want - set(t["ROUTES"]) - set(t["EXCLUDED"]))
    assert not missing, (f"routes of docs/api/openapi.yaml / airlockd --print-routes without a method in "
                         f"sdk/typescript/src/routes.js (add one, or an EXCLUDED entry with a reason): {missing}")
    for route, why in t["EXCLUDED"].items():
        assert isinstance(why, str) and len(why) > 10, f"{route}: an exclusion needs its reason"


def test_the_route_table_names_only_real_routes():
    t = sdk_route_table()
    known = spec_routes()
    stale = sorted((set(t["ROUTES"]) | set(t["EXCLUDED"])) - known)
    assert not stale, f"sdk/typescript/src/routes.js names routes that docs/api/openapi.yaml does not have: {stale}"
    both = sorted(set(t["ROUTES"]) & set(t["EXCLUDED"]))
    assert not both, f"routed and excluded at once: {both}"
