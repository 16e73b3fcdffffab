# SPDX-License-Identifier: Apache-2.0
"""docs/api/openapi.yaml describes exactly the routes of the daemon's route
table (`airlockd --print-routes`), and each operation is complete: a success
response, error responses in the error schema, the parameters its path
names. Needs no VM."""
import os
import re
import subprocess

import pytest
import yaml

from conftest import AIRLOCKD, ROOT

SPEC = os.path.join(ROOT, "docs", "api", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
ERROR_REF = "#/components/schemas/Error"


@pytest.fixture(scope="module")
def spec():
    with open(SPEC) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def routes():
    if not os.path.exists(AIRLOCKD):
        pytest.fail(f"{AIRLOCKD} is missing; run 'make all'", pytrace=False)
    out = subprocess.run([AIRLOCKD, "--print-routes"], check=True, stdout=subprocess.PIPE, text=True).stdout
    found = set()
    for line in out.splitlines():
        method, path = line.split(" ", 1)
        if path.startswith("/e2b/"):
            continue  # E2B's own API (docs/e2b.md), described by E2B's specs, not Airlock's
        found.add((method.upper(), path))
    assert found, "airlockd --print-routes printed nothing"
    return found


def spec_operations(spec):
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item, item[method]


def resolve(spec, obj):
    """Follows a local $ref (one level at a time, until none is left)."""
    while isinstance(obj, dict) and "$ref" in obj:
        ref = obj["$ref"]
        assert ref.startswith("#/"), ref
        node = spec
        for part in ref[2:].split("/"):
            node = node[part]
        obj = node
    return obj


def test_spec_is_openapi_3(spec):
    assert str(spec["openapi"]).startswith("3.0"), spec["openapi"]
    assert spec["info"]["title"] and spec["info"]["version"]
    assert "Error" in spec["components"]["schemas"]


def test_every_route_is_in_the_spec(spec, routes):
    documented = {(m, p) for m, p, _, _ in spec_operations(spec)}
    missing = sorted(routes - documented)
    assert not missing, f"routes of api-routes.c that docs/api/openapi.yaml lacks: {missing}"


def test_every_spec_operation_is_a_route(spec, routes):
    documented = {(m, p) for m, p, _, _ in spec_operations(spec)}
    extra = sorted(documented - routes)
    assert not extra, f"operations in docs/api/openapi.yaml that the daemon does not serve: {extra}"


def test_every_operation_has_a_success_response(spec):
    bad = [f"{m} {p}" for m, p, _, op in spec_operations(spec)
           if not any(str(code).startswith(("1", "2")) for code in op.get("responses", {}))]
    assert not bad, f"operations without a 1xx/2xx response: {bad}"


def test_error_responses_use_the_error_schema(spec):
    bad = []
    for m, p, _, op in spec_operations(spec):
        for code, resp in op.get("responses", {}).items():
            code = str(code)
            if not code[0] in "45":
                continue
            resp = resolve(spec, resp)
            content = resp.get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            # 408 of .../wait is the exception: it answers the process object.
            if m == "GET" and p.endswith("/wait") and code == "408":
                continue
            if schema.get("$ref") != ERROR_REF:
                bad.append(f"{m} {p} {code}")
    assert not bad, f"error responses that do not reference {ERROR_REF}: {bad}"


def test_operation_ids_are_unique(spec):
    ids = [op.get("operationId") for _, _, _, op in spec_operations(spec)]
    assert all(ids), "an operation without an operationId"
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"duplicate operationIds: {dups}"


def test_path_parameters_are_declared(spec):
    bad = []
    for m, p, item, op in spec_operations(spec):
        names = set(re.findall(r"\{([^}]+)\}", p))
        declared = {resolve(spec, prm)["name"] for prm in item.get("parameters", []) + op.get("parameters", [])
                    if resolve(spec, prm)["in"] == "path"}
        if names != declared:
            bad.append(f"{m} {p}: path names {sorted(names)}, declared {sorted(declared)}")
    assert not bad, bad


def test_refs_resolve(spec):
    def walk(node, where):
        if isinstance(node, dict):
            if "$ref" in node:
                try:
                    resolve(spec, node)
                except KeyError:
                    raise AssertionError(f"{where}: dangling $ref {node['$ref']}")
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")
    walk(spec, "")


def test_bearer_auth_is_declared(spec):
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"]["type"] == "http" and schemes["bearer"]["scheme"] == "bearer"
    # The unix socket needs none: an empty requirement is one alternative.
    assert {} in spec["security"] and {"bearer": []} in spec["security"]


def test_upgrade_route_answers_101(spec):
    op = spec["paths"]["/v1/sandboxes/{id}/processes/{pid}/attach"]["get"]
    assert "101" in {str(c) for c in op["responses"]}


def test_admin_only_routes_are_marked(spec):
    """api-routes.c's admin_only column, as x-admin-only: the routes that
    answer 403 over TCP."""
    text = open(os.path.join(ROOT, "src", "daemon", "api", "api-routes.c")).read()
    admin = set()
    for m in re.finditer(r'\{"([A-Z]+)", "([^"]+)",[^}]*,\s*(true|false)\}', text):
        if m.group(3) == "true":
            admin.add((m.group(1), m.group(2)))
    assert admin, "could not read the admin_only column of api-routes.c"
    marked = {(m, p) for m, p, _, op in spec_operations(spec) if op.get("x-admin-only")}
    assert marked == admin, f"x-admin-only {sorted(marked)} != api-routes.c admin_only {sorted(admin)}"
    for m, p in admin:
        op = spec["paths"][p][m.lower()]
        assert "403" in {str(c) for c in op["responses"]}, f"{m} {p} lacks its 403"
